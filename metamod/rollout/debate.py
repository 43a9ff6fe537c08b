"""The round-synchronous debate loop: N agents, up to ``max_rounds`` rounds, one batched call per backend per round.

:class:`DebateLoop` runs on the loop engine (:mod:`metamod.rollout.engine`), its rounds being the engine's steps:
questions are processed in chunks of ``batch_questions``. Within a chunk, at round ``t`` every active (question,
agent) request of one debater group goes out in ONE ``group.respond`` call (so one ``generator.chat`` call for an
LLM group). After each round the answers are extracted with the shared grader's ``extract_answer`` and ``eta_t``
(some agent's answer is equivalent to gold) is computed with ``is_equivalent``; then the optional stop hook may
end any debate. Finished traces are yielded chunk by chunk, so memory stays flat and traces stream to disk.

>>> from metamod.tasks.base import Example
>>> from metamod.rollout.simulated import SimulatedDebaters
>>> sim = SimulatedDebaters()
>>> ex = Example(id="q1", question="What is 2 + 2?", gold="4", kind="math", meta={"steps": ["2 + 2 = 4"]})
>>> stats = DebateStats()
>>> traces = list(run_debates([ex], [sim, sim], max_rounds=3, stats=stats, progress=False))
>>> traces[0]["num_rounds"], len(traces[0]["rounds"][0]["responses"]), stats.calls
(3, 2, {'sim:simulated-debater-v1': 3})
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from metamod.llm.budget import TOO_LONG
from metamod.rollout.debaters import DebateRequest, DebaterGroup
from metamod.rollout.engine import Grader, LoopItem, LoopStats, new_trace, run_loop
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

StopHook = Callable[[int, list[dict]], list[bool]]

#: T_max when a config sets none (Meta-Moderator runs its debates for up to 5 rounds)
DEFAULT_MAX_ROUNDS = 5


def max_rounds_field() -> Any:
    """The ``max_rounds`` option, declared ONCE for every command that runs debates (``RolloutConfig``,
    ``EvalConfig``); its value reaches :func:`run_debates` and, in eval, ``LayerContext.max_rounds``."""
    return field(
        default=DEFAULT_MAX_ROUNDS,
        metadata={"help": "T_max, the debate budget in rounds (rounds 0..T_max-1; a moderator's last is forced)."},
    )


def check_max_rounds(value: Any) -> int:
    """``value`` when it is a valid ``max_rounds``, else a one-line :class:`~metamod.errors.ConfigError`.

    >>> check_max_rounds(3)
    3
    >>> check_max_rounds(0)
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: max_rounds must be >= 1, got 0
    """
    from metamod.errors import ConfigError

    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"max_rounds must be >= 1, got {value!r}")
    return value


@dataclass
class DebateStats(LoopStats):
    """Counters filled in by :func:`run_debates` (pass one in to read them while or after streaming); the shared
    ones (calls per debater group, questions, eta by round, ``statuses``: stop reasons, elapsed_s) are
    :class:`~metamod.rollout.engine.LoopStats`'.

    Attributes:
        debate_rounds: (question, round) pairs run.
        responses: debater responses produced.
        prompt_tokens / completion_tokens: token totals reported by the debaters.
        trimmed: prompts shortened to fit the context.
        too_long: prompts that could not fit it even then (not sent; the response is empty, its answer None).
        correct_by_round / responses_by_round: agent answers equivalent to gold / all answers, per round.
    """

    debate_rounds: int = 0
    responses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trimmed: int = 0
    too_long: int = 0
    correct_by_round: list[int] = field(default_factory=list)
    responses_by_round: list[int] = field(default_factory=list)

    status_field = "stop_reason"

    def add_trace(self, trace: dict[str, Any], grade: Grader | None = None) -> None:
        """Count a finished debate trace (``grade``: a memoised grader to share between calls).

        >>> from metamod.rollout.traces import example_trace
        >>> stats = DebateStats(); stats.add_trace(example_trace())
        >>> stats.questions, stats.responses, stats.correct_by_round, stats.eta.eta_rate_by_round()
        (1, 2, [1], [1.0])
        """
        super().add_trace(trace)
        grade = grade if grade is not None else Grader()
        for rnd in trace["rounds"]:
            t = rnd["round"]
            for series in (self.correct_by_round, self.responses_by_round):
                series.extend([0] * (t + 1 - len(series)))
            self.debate_rounds += 1
            self.eta.add((trace["id"], trace.get("index")), t, rnd["eta"])
            for response in rnd["responses"]:
                self.responses += 1
                self.prompt_tokens += int(response.get("prompt_tokens") or 0)
                self.completion_tokens += int(response.get("completion_tokens") or 0)
                self.trimmed += int(bool(response.get("trimmed")))
                self.too_long += int(bool(response.get("prompt_too_long")))
                correct = grade(response.get("answer"), trace["gold"], trace.get("kind"), trace.get("choices"))
                self.correct_by_round[t] += int(correct)
                self.responses_by_round[t] += 1

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: totals, throughput, eta rate and agent accuracy per round, coverage."""
        tokens = self.prompt_tokens + self.completion_tokens
        return {
            "questions": self.questions,
            "debate_rounds": self.debate_rounds,
            "responses": self.responses,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "trimmed_prompts": self.trimmed,
            "prompts_too_long": self.too_long,
            "calls_per_backend": dict(self.calls),
            "elapsed_s": round(self.elapsed_s, 3),
            "questions_per_s": self.per_s(self.questions, 2),
            "debate_rounds_per_s": self.per_s(self.debate_rounds, 2),
            "tokens_per_s": self.per_s(tokens, 1),
            "eta_rate_by_round": self.eta.eta_rate_by_round(),
            "agent_accuracy_by_round": [
                round(c / n, 4) if n else None
                for c, n in zip(self.correct_by_round, self.responses_by_round, strict=True)
            ],
            "coverage": self.eta.coverage(),
            "stop_reasons": dict(self.statuses),
        }

    def log_line(self) -> str:
        s = self.summary()
        return (
            f"debates: {s['questions']} questions, {s['debate_rounds']} debate-rounds, "
            f"{s['prompt_tokens'] + s['completion_tokens']} tokens, {s['questions_per_s']:.1f} q/s; "
            f"eta rate by round {s['eta_rate_by_round']}; coverage {s['coverage']}"
        )


class DebateLoop:
    """Debate rounds as engine steps (see the module docstring; :func:`run_debates` documents the arguments)."""

    name = "debates"

    def __init__(
        self, debaters: Sequence[DebaterGroup], *, max_rounds: int, stop_hook: StopHook | None, stats: DebateStats
    ) -> None:
        if len(debaters) < 2:
            raise ValueError(f"a debate needs at least 2 agents, got {len(debaters)}")
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
        self.steps, self.stop_hook, self.stats, self.tokens = range(max_rounds), stop_hook, stats, 0
        self.groups = list({id(group): group for group in debaters}.values())  # distinct group objects, in order
        # agent -> index of its group: agents sharing a group object share its batched call
        self.agent_group = [next(g for g, group in enumerate(self.groups) if group is d) for d in debaters]
        self.labels: list[str] = []  # "backend:model", "#k" added to the k-th repeat
        for group in self.groups:
            label = f"{group.backend}:{group.model}"
            self.labels.append(
                f"{label}#{sum(lab.startswith(label) for lab in self.labels)}" if label in self.labels else label
            )
            stats.calls.setdefault(self.labels[-1], 0)
        self.agents = [
            {"index": i, "backend": d.backend, "model": d.model, "settings": d.agent_settings(i)}
            for i, d in enumerate(debaters)
        ]
        self.simulated = any(getattr(g, "simulated", False) for g in self.groups)

    def start(self, chunk: list[LoopItem], grade: Grader) -> None:
        self.chunk, self.grade = chunk, grade
        self.traces = [
            new_trace(item, self.simulated, agents=self.agents, rounds=[], num_rounds=0, stop_reason=None)
            for item in chunk
        ]
        self.previous: list[list[str] | None] = [None] * len(chunk)

    def step(self, t: int, active: list[int]) -> list[int]:
        num_agents = len(self.agents)
        per_group: list[list[tuple[int, int, DebateRequest]]] = [[] for _ in self.groups]
        for d in active:
            prev = self.previous[d]
            for agent in range(num_agents):
                peers = [a for a in range(num_agents) if a != agent]
                request = DebateRequest(
                    example=self.chunk[d].example,
                    agent=agent,
                    round=t,
                    own_previous=prev[agent] if prev else None,
                    peer_previous=[prev[a] for a in peers] if prev else [],
                    peer_agents=peers if prev else [],
                )
                per_group[self.agent_group[agent]].append((d, agent, request))
        responses: dict[tuple[int, int], Any] = {}
        for g_index, entries in enumerate(per_group):
            if not entries:
                continue
            generations = self.stats.call(
                self.labels[g_index], self.groups[g_index].respond, [req for _, _, req in entries]
            )
            for (d, agent, _), gen in zip(entries, generations, strict=True):
                responses[(d, agent)] = gen
        for d in active:
            ex = self.chunk[d].example
            round_responses, eta = [], 0
            for agent in range(num_agents):
                gen = responses[(d, agent)]
                answer = extract_answer(gen.text)
                correct = self.grade(answer, ex.gold, ex.kind, ex.choices)  # every answer: add_trace reuses it
                eta = eta or int(correct)
                response = {
                    "agent": agent,
                    "text": gen.text,
                    "answer": answer,
                    "prompt_tokens": int(gen.prompt_tokens),
                    "completion_tokens": int(gen.completion_tokens),
                    "trimmed": bool(getattr(gen, "trimmed", False)),
                }
                if getattr(gen, "finish_reason", None) == TOO_LONG:  # not sent: metamod.llm.budget
                    response["prompt_too_long"] = True
                round_responses.append(response)
                self.tokens += int(gen.prompt_tokens) + int(gen.completion_tokens)
            trace = self.traces[d]
            trace["rounds"].append({"round": t, "eta": eta, "responses": round_responses})
            trace["num_rounds"] = t + 1
            self.previous[d] = [r["text"] for r in round_responses]
        if self.stop_hook is None:
            return active
        decisions = list(self.stop_hook(t, [self.traces[d] for d in active]))
        if len(decisions) != len(active):
            raise ValueError(f"stop_hook returned {len(decisions)} decisions for {len(active)} active debates")
        for d, stop in zip(active, decisions, strict=True):
            if stop and t < self.steps[-1]:  # at the last round the debate ends anyway: "max_rounds"
                self.traces[d]["stop_reason"] = "hook"
        return [d for d in active if self.traces[d]["stop_reason"] is None]

    def finish(self) -> list[dict]:
        for trace in self.traces:
            trace["stop_reason"] = trace["stop_reason"] or "max_rounds"
        return self.traces


def run_debates(
    examples: Iterable[Example | LoopItem],
    debaters: Sequence[DebaterGroup],
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    stop_hook: StopHook | None = None,
    batch_questions: int = 256,
    task: str | None = None,
    stats: DebateStats | None = None,
    progress: bool = True,
    total: int | None = None,
) -> Iterator[dict]:
    """Run debates and yield one finished trace dict (schema version 1) per question, in input order.

    Args:
        examples, batch_questions, task, total, progress: as in :func:`~metamod.rollout.engine.run_loop` (the bar
            shows questions/s and tokens/s).
        debaters: one debater group per agent (N = ``len(debaters)`` >= 2; agent i is served by ``debaters[i]``).
            Agents that share a group object are batched together: one ``respond`` call per group per round.
        max_rounds: T_max, the number of rounds (round indices 0 .. max_rounds-1).
        stop_hook: ``stop_hook(round_index, debates) -> list[bool]``, called after every round with the in-progress
            trace dicts of all active debates (also after the last round, so a decision layer sees it);
            ``True`` ends that debate with ``stop_reason="hook"`` (after the last round it ends as ``"max_rounds"``).
        stats: a :class:`DebateStats` to fill in (one is created otherwise; it is logged at the end).

    Yields:
        Trace dicts (see docs/contracts.md), ``index`` = position of the example in the stream.

    Raises:
        ValueError: for fewer than 2 agents, ``max_rounds < 1``, a debater returning the wrong number of responses
            or a stop hook returning the wrong number of decisions.
    """
    loop = DebateLoop(debaters, max_rounds=max_rounds, stop_hook=stop_hook, stats=stats or DebateStats())
    yield from run_loop(examples, loop, batch_questions=batch_questions, task=task, progress=progress, total=total)
