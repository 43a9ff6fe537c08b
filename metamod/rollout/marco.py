"""The MARCO loop: M agents, up to T proposal-feedback iterations per problem, cross-referencing, meta-reflection.

For every problem of a batch (the batch goes out together, one batched call per iteration, like the debate
engine):

1. **Iteration 1.** Each agent ``j`` gets the problem (:func:`~metamod.rollout.coding.agents.problem_prompt`), the
   memory's guidance (role ``debater``, ``agent=j``, ``step=0``: the condensed knowledge of ``memory: marco``) and
   proposes an answer (``marco_propose``).
2. **Interpreter feedback.** Each proposal is checked against what the problem shows
   (:func:`~metamod.rollout.coding.agents.check_proposals`, sandboxed): induction runs the proposed function on the
   visible pairs, abduction runs the given function on the proposed input, deduction checks the value parses
   (``deduction_check: format``; ``oracle`` compares with the real output and leaks the answer). The agent is told
   the verdict only (``feedback: binary``, the paper's setting) or also which checks failed (``rich``).
3. **Iteration t > 1** (for problems no proposal has passed yet): each agent continues its own conversation (its
   earlier proposals and verdicts) with its verdict and, with ``cross_reference``, every peer's lesson from
   iteration ``t - 1``: the peer's extracted core answer (the function, or the value) and the peer's verdict
   (``marco_peer_lesson``).
4. **Stop** as soon as a proposal passes every visible check (``stop_on_pass``), else after ``iterations``. The final
   answer is taken from the last iteration's proposals: those that passed, else those passing the most checks; the
   most common answer among them (by :func:`metamod.tasks.grading.normalize_answer`), ties to the lower agent.
5. **Meta-reflection** (``meta_reflection``, when the method has a memory): each agent, in its own conversation,
   reads its final verdict and writes one takeaway (``marco_summarise``); the trace's ``takeaways`` go to the
   memory's ``observe``.

Every proposal is also graded against the gold (``correct``; ``eta`` per iteration: some proposal right) for the
trace only; no model sees a gold. The trace records every proposal, its text, extracted answer, interpreter
verdict and the lessons shown.

>>> s = MarcoSettings(agents=3, iterations=2)
>>> s.agents, s.iterations, s.cross_reference, s.feedback
(3, 2, True, 'binary')
>>> MarcoSettings(feedback="loud")
Traceback (most recent call last):
...
ValueError: feedback must be one of ('binary', 'rich'), got 'loud'
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from metamod.memory.base import ask_guidance
from metamod.prompts import render
from metamod.rollout.coding.agents import CodeAgent, answer_format, check_proposals, feedback_text, problem_prompt
from metamod.rollout.coding.turn import DEDUCTION_CHECKS, FEEDBACK_MODES, CodeTurn, code_meta, subtask_of
from metamod.rollout.engine import Grader, LoopItem, run_loop
from metamod.tasks.base import Example
from metamod.tasks.grading import is_equivalent, normalize_answer

logger = logging.getLogger(__name__)


@dataclass
class MarcoSettings:
    """Settings of the MARCO loop (``method_options: {marco: {...}}``; docs/marco.md)."""

    agents: int = field(default=2, metadata={"help": "M: agents solving each problem."})
    iterations: int = field(default=2, metadata={"help": "T: proposal-feedback iterations per problem."})
    cross_reference: bool = field(
        default=True, metadata={"help": "Show each agent its peers' lessons from the previous iteration."}
    )
    meta_reflection: bool = field(
        default=True, metadata={"help": "After each problem, each agent writes a takeaway for the memory."}
    )
    feedback: str = field(
        default="binary",
        metadata={"help": f"One of {FEEDBACK_MODES}: the verdict only, or also which checks failed and why."},
    )
    deduction_check: str = field(
        default="format",
        metadata={
            "help": f"One of {DEDUCTION_CHECKS}: deduction feedback from the value parsing, or from the real "
            "output (oracle: leaks the answer, for ablations only)."
        },
    )
    stop_on_pass: bool = field(
        default=True, metadata={"help": "Stop a problem once a proposal passes every visible check."}
    )
    propose_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of a proposal (None: the agent's max_tokens)."}
    )
    summarise_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of a takeaway (None: the agent's max_tokens)."}
    )
    max_failures_shown: int = field(default=3, metadata={"help": "rich feedback: failed checks listed at most."})

    def __post_init__(self) -> None:
        if self.agents < 1:
            raise ValueError(f"agents must be >= 1, got {self.agents}")
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")
        if self.feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, got {self.feedback!r}")
        if self.deduction_check not in DEDUCTION_CHECKS:
            raise ValueError(f"deduction_check must be one of {DEDUCTION_CHECKS}, got {self.deduction_check!r}")
        for name in ("propose_max_tokens", "summarise_max_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        if self.max_failures_shown < 1:
            raise ValueError(f"max_failures_shown must be >= 1, got {self.max_failures_shown}")


def _feedback_record(feedback: Any) -> dict[str, Any]:
    return {
        "passed": bool(feedback.passed),
        "n_passed": int(feedback.n_passed),
        "n_total": int(feedback.n_total),
        "failures": [str(f) for f in (feedback.failures or [])][:5],
        "error": None if feedback.error is None else str(feedback.error)[:300],
    }


def _grade_all(examples: Sequence[Example], answers: Sequence[str | None]) -> list[bool]:
    """Gold grading of every proposal (for the trace's eta), parallel: code kinds run sandboxes."""

    def one(i: int) -> bool:
        answer = answers[i]
        return answer is not None and bool(is_equivalent(answer, examples[i].gold, examples[i].kind))

    if len(examples) <= 1:
        return [one(i) for i in range(len(examples))]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, range(len(examples))))


def _extract(example: Example, text: str) -> str | None:
    """The answer of a response, read the way the problem's sub-task, entry and language need."""
    from metamod.tasks.code.grading import extract_code_answer

    meta = code_meta(example)
    return extract_code_answer(
        text, meta["subtask"], entry=meta.get("entry") or "f", language=meta.get("language") or "python"
    )


def choose_final(example: Example, proposals: Sequence[dict[str, Any]]) -> tuple[str | None, int | None]:
    """The final answer from one iteration's proposals (see the module docstring, step 4) and its agent.

    >>> from metamod.tasks.base import Example
    >>> ex = Example(id="q", question="?", gold="4", kind="math")
    >>> props = [{"agent": 0, "answer": "5", "feedback": {"passed": False, "n_passed": 0}},
    ...          {"agent": 1, "answer": "4", "feedback": {"passed": True, "n_passed": 1}},
    ...          {"agent": 2, "answer": "4.0", "feedback": {"passed": True, "n_passed": 1}}]
    >>> choose_final(ex, props)
    ('4', 1)
    """
    answered = [p for p in proposals if p["answer"] is not None]
    if not answered:
        return None, None
    passed = [p for p in answered if p["feedback"]["passed"]]
    if passed:
        pool = passed
    else:
        best = max(p["feedback"]["n_passed"] for p in answered)
        pool = [p for p in answered if p["feedback"]["n_passed"] == best]
    keys = [normalize_answer(p["answer"], example.kind) or p["answer"].strip() for p in pool]
    counts = Counter(keys)
    top = max(counts.values())
    for p, key in zip(pool, keys, strict=True):  # pool is in agent order: ties go to the lower agent
        if counts[key] == top:
            return p["answer"], p["agent"]
    return None, None  # pragma: no cover - unreachable


@dataclass
class _AgentState:
    conversation: list[dict[str, str]]
    guidance_items: int


class MarcoLoop:
    """MARCO iterations (1-based) as engine steps (see the module docstring; :func:`run_marco` documents the
    arguments)."""

    name, stats = "marco", None

    def __init__(self, agent: CodeAgent, settings: MarcoSettings, *, memory: Any, method: str) -> None:
        self.agent, self.settings, self.memory, self.method = agent, settings, memory, method
        self.steps, self.tokens = range(1, settings.iterations + 1), 0

    def start(self, chunk: list[LoopItem], grade: Grader) -> None:
        self.examples = [item.example for item in chunk]
        self.states = [[self._agent(ex, j) for j in range(self.settings.agents)] for ex in self.examples]
        self.token_counts = [
            {stage: {"prompt": 0, "completion": 0} for stage in ("propose", "summarise")} for _ in chunk
        ]
        self.iterations: list[list[dict[str, Any]]] = [[] for _ in chunk]

    def _agent(self, ex: Example, j: int) -> _AgentState:
        """Agent ``j`` on ``ex`` before iteration 1: the problem and the memory's guidance."""
        guidance = ask_guidance(self.memory, ex, "debater", agent=j, step=0, method=self.method)
        prompt = render("marco_propose", problem=problem_prompt(ex), answer_format=answer_format(ex))
        return _AgentState([{"role": "user", "content": guidance.prepend_to(prompt)}], len(guidance.item_ids))

    def step(self, t: int, active: list[int]) -> list[int]:
        settings, examples, states, iterations = self.settings, self.examples, self.states, self.iterations
        slots = [(q, j) for q in active for j in range(settings.agents)]
        conversations, turns = [], []
        for q, j in slots:
            st = states[q][j]
            peers = 0
            if t > 1:
                previous = iterations[q][-1]["proposals"]
                own = previous[j]
                lessons = [
                    render(
                        "marco_peer_lesson",
                        agent=p["agent"] + 1,
                        core=p["answer"] if p["answer"] is not None else "(no answer)",
                        feedback=p["feedback_text"],
                    )
                    for p in (previous if settings.cross_reference else [])
                    if p["agent"] != j
                ]
                peers = len(lessons)
                peer_block = ("\n" + "\n\n".join(lessons) + "\n") if lessons else ""
                st.conversation.append(
                    {
                        "role": "user",
                        "content": render(
                            "marco_revise",
                            feedback=own["feedback_text"],
                            peer_lessons=peer_block,
                            answer_format=answer_format(examples[q]),
                        ),
                    }
                )
            conversations.append(list(st.conversation))
            failed = t > 1 and not iterations[q][-1]["proposals"][j]["feedback"]["passed"]
            stage = "propose" if t == 1 else "revise"
            turns.append(CodeTurn(examples[q], j, t, stage, peers, st.guidance_items, failed))
        generations = self.agent.chat(conversations, turns, max_tokens=settings.propose_max_tokens)
        answers = [_extract(examples[q], g.text) for g, (q, _) in zip(generations, slots, strict=True)]
        slot_examples = [examples[q] for q, _ in slots]
        feedbacks = check_proposals(slot_examples, answers, deduction_check=settings.deduction_check)
        correct = _grade_all(slot_examples, answers)
        by_question: dict[int, list[dict[str, Any]]] = {}
        for (q, j), turn, g, answer, fb, ok in zip(slots, turns, generations, answers, feedbacks, correct, strict=True):
            states[q][j].conversation.append({"role": "assistant", "content": g.text})
            self.token_counts[q]["propose"]["prompt"] += int(g.prompt_tokens)
            self.token_counts[q]["propose"]["completion"] += int(g.completion_tokens)
            self.tokens += int(g.prompt_tokens) + int(g.completion_tokens)
            record = {
                "agent": j,
                "text": g.text,
                "answer": answer,
                "feedback": _feedback_record(fb),
                "feedback_text": feedback_text(fb, settings.feedback, settings.max_failures_shown),
                "correct": bool(ok),
                "prompt_tokens": int(g.prompt_tokens),
                "completion_tokens": int(g.completion_tokens),
                "peer_lessons": turn.peer_lessons,
            }
            by_question.setdefault(q, []).append(record)
        still = []
        for q in active:
            proposals = by_question[q]
            iterations[q].append(
                {"iteration": t, "proposals": proposals, "eta": int(any(p["correct"] for p in proposals))}
            )
            passed = any(p["feedback"]["passed"] for p in proposals)
            if not (settings.stop_on_pass and passed) and t < settings.iterations:
                still.append(q)
        return still

    def finish(self) -> list[dict[str, Any]]:
        settings, examples, iterations, tokens = self.settings, self.examples, self.iterations, self.token_counts
        takeaways = self._reflect() if self.memory is not None and settings.meta_reflection else None
        traces = []
        for q, ex in enumerate(examples):
            last = iterations[q][-1]["proposals"]
            final, final_agent = choose_final(ex, last)
            passed = any(p["feedback"]["passed"] for p in last)
            traces.append(
                {
                    "id": ex.id,
                    "method": self.method,
                    "simulated": self.agent.is_simulated,
                    "subtask": subtask_of(ex),
                    "settings": asdict(settings),
                    "guidance_items": [st.guidance_items for st in self.states[q]],
                    "iterations": iterations[q],
                    "num_iterations": len(iterations[q]),
                    "stopped_early": passed and len(iterations[q]) < settings.iterations,
                    "passed_visible": passed,
                    "final_answer": final,
                    "final_agent": final_agent,
                    "takeaways": takeaways[q] if takeaways else [],
                    "tokens": tokens[q],
                }
            )
        return traces

    def _reflect(self) -> list[list[dict[str, Any]]]:
        """Each agent's takeaway from its own path and final binary verdict: one batched call for the chunk."""
        slots, conversations, turns = [], [], []
        for q, ex in enumerate(self.examples):
            last = self.iterations[q][-1]
            for j, st in enumerate(self.states[q]):
                verdict = feedback_text(SimpleNamespace(**last["proposals"][j]["feedback"]), "binary")
                conversations.append(
                    [*st.conversation, {"role": "user", "content": render("marco_summarise", feedback=verdict)}]
                )
                turns.append(CodeTurn(ex, j, last["iteration"], "summarise"))
                slots.append((q, j))
        generations = self.agent.chat(conversations, turns, max_tokens=self.settings.summarise_max_tokens)
        out: list[list[dict[str, Any]]] = [[] for _ in self.examples]
        for (q, j), g in zip(slots, generations, strict=True):
            self.token_counts[q]["summarise"]["prompt"] += int(g.prompt_tokens)
            self.token_counts[q]["summarise"]["completion"] += int(g.completion_tokens)
            out[q].append({"agent": j, "text": g.text.strip()})
        return out


def run_marco(
    examples: Sequence[Example],
    agent: CodeAgent,
    settings: MarcoSettings | None = None,
    *,
    memory: Any = None,
    method: str = "marco",
) -> list[dict[str, Any]]:
    """Run MARCO on a batch of problems; one trace per problem, in order (see the module docstring).

    The batch is one chunk of :func:`~metamod.rollout.engine.run_loop`: each batched call covers all of it.

    Args:
        examples: code-reasoning problems (``meta["code"]``).
        agent: the agents' model (:class:`~metamod.rollout.coding.agents.CodeAgent`), shared by the M agents.
        settings: the loop's settings.
        memory: the method's memory (guidance at iteration 1; takeaways are written only when there is one).
        method: the method name (memory requests and traces).

    Returns:
        The traces (dicts, JSON-ready).
    """
    loop = MarcoLoop(agent, settings or MarcoSettings(), memory=memory, method=method)
    return list(run_loop(examples, loop, batch_questions=max(len(examples), 1), progress=False))
