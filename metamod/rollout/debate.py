"""The round-synchronous debate engine: N agents, up to ``max_rounds`` rounds, one batched call per backend per round.

Questions are processed in chunks of ``batch_questions``. Within a chunk, at round ``t`` every active (question,
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

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from metamod.llm.budget import TOO_LONG
from metamod.rollout.debaters import DebateRequest, DebaterGroup
from metamod.rollout.stats import EtaTally
from metamod.rollout.trace_schema import SCHEMA_VERSION
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer, is_equivalent

logger = logging.getLogger(__name__)

StopHook = Callable[[int, list[dict]], list[bool]]


class DebateItem(NamedTuple):
    """An example with its position in the task's stream (kept in traces as ``index``) and its task name."""

    example: Example
    index: int
    task: str


@dataclass
class DebateStats:
    """Counters filled in by :func:`run_debates` (pass one in to read them while or after streaming).

    Attributes:
        calls: batched calls per debater group (``"backend:model"`` label).
        questions: debates finished.
        debate_rounds: (question, round) pairs run.
        responses: debater responses produced.
        prompt_tokens / completion_tokens: token totals reported by the debaters.
        trimmed: prompts shortened to fit the context.
        too_long: prompts that could not fit it even then (not sent; the response is empty, its answer None).
        eta: eta per round and coverage (:class:`~metamod.rollout.stats.EtaTally`, keyed by (id, position)).
        correct_by_round / responses_by_round: agent answers equivalent to gold / all answers, per round.
        stop_reasons: finished debates per stop reason.
        elapsed_s: wall time spent inside the engine.
    """

    calls: dict[str, int] = field(default_factory=dict)
    questions: int = 0
    debate_rounds: int = 0
    responses: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    trimmed: int = 0
    too_long: int = 0
    eta: EtaTally = field(default_factory=EtaTally)
    correct_by_round: list[int] = field(default_factory=list)
    responses_by_round: list[int] = field(default_factory=list)
    stop_reasons: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    def _grow(self, t: int) -> None:
        for series in (self.correct_by_round, self.responses_by_round):
            while len(series) <= t:
                series.append(0)

    def add_trace(self, trace: dict[str, Any], grades: dict | None = None) -> None:
        """Count a finished trace as the engine counted it while running it (everything but calls and time):
        what ``summary.json`` is rebuilt from, over the whole traces file, after a resumed run.

        >>> from metamod.rollout.traces import example_trace
        >>> stats = DebateStats(); stats.add_trace(example_trace())
        >>> stats.questions, stats.responses, stats.correct_by_round, stats.eta.eta_rate_by_round()
        (1, 2, [1], [1.0])
        """
        grades = {} if grades is None else grades
        self.questions += 1
        self.stop_reasons[trace["stop_reason"]] = self.stop_reasons.get(trace["stop_reason"], 0) + 1
        for rnd in trace["rounds"]:
            t = rnd["round"]
            self._grow(t)
            self.debate_rounds += 1
            self.eta.add((trace["id"], trace.get("index")), t, rnd["eta"])
            for response in rnd["responses"]:
                key = (response.get("answer"), trace["gold"], trace.get("kind"), _hashable(trace.get("choices")))
                if key not in grades:
                    answer = response.get("answer")
                    grades[key] = answer is not None and is_equivalent(
                        answer, trace["gold"], trace.get("kind"), trace.get("choices")
                    )
                self.responses += 1
                self.prompt_tokens += int(response.get("prompt_tokens") or 0)
                self.completion_tokens += int(response.get("completion_tokens") or 0)
                self.trimmed += int(bool(response.get("trimmed")))
                self.too_long += int(bool(response.get("prompt_too_long")))
                self.correct_by_round[t] += int(grades[key])
                self.responses_by_round[t] += 1

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: totals, throughput, eta rate and agent accuracy per round, coverage."""

        def rate(num: int, den: int) -> float | None:
            return round(num / den, 4) if den else None

        elapsed = max(self.elapsed_s, 1e-9)
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
            "questions_per_s": round(self.questions / elapsed, 2),
            "debate_rounds_per_s": round(self.debate_rounds / elapsed, 2),
            "tokens_per_s": round((self.prompt_tokens + self.completion_tokens) / elapsed, 1),
            "eta_rate_by_round": self.eta.eta_rate_by_round(),
            "agent_accuracy_by_round": [
                rate(c, n) for c, n in zip(self.correct_by_round, self.responses_by_round, strict=True)
            ],
            "coverage": self.eta.coverage(),
            "stop_reasons": dict(self.stop_reasons),
        }


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _group_labels(groups: list[DebaterGroup]) -> list[str]:
    labels: list[str] = []
    for group in groups:
        label = f"{group.backend}:{group.model}"
        if label in labels:
            label = f"{label}#{sum(1 for lab in labels if lab.startswith(label))}"
        labels.append(label)
    return labels


def as_item(obj: Example | DebateItem, position: int, task: str | None) -> DebateItem:
    """An engine input as a :class:`DebateItem` (shared by the debate and MRO engines)."""
    if isinstance(obj, DebateItem):
        return obj
    if isinstance(obj, Example):
        return DebateItem(obj, position, task or str(obj.meta.get("task", "unknown")))
    raise TypeError(f"run_debates expects Example or DebateItem items, got {type(obj).__name__} at position {position}")


def _new_trace(item: DebateItem, agents: list[dict]) -> dict:
    ex = item.example
    return {
        "schema_version": SCHEMA_VERSION,
        "id": ex.id,
        "index": item.index,
        "task": item.task,
        "question": ex.prompt_text(),
        "gold": ex.gold,
        "kind": ex.kind,
        "choices": list(ex.choices) if ex.choices else None,
        "meta": dict(ex.meta),
        "simulated": False,
        "agents": agents,
        "rounds": [],
        "num_rounds": 0,
        "stop_reason": None,
    }


def chunked(items: Iterable[DebateItem], size: int) -> Iterator[list[DebateItem]]:
    """Consecutive lists of ``size`` items (the last one shorter), pulled lazily so memory stays flat."""
    chunk: list[DebateItem] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run_debates(
    examples: Iterable[Example | DebateItem],
    debaters: Sequence[DebaterGroup],
    *,
    max_rounds: int = 5,
    stop_hook: StopHook | None = None,
    batch_questions: int = 256,
    task: str | None = None,
    stats: DebateStats | None = None,
    progress: bool = True,
    total: int | None = None,
) -> Iterator[dict]:
    """Run debates and yield one finished trace dict (schema version 1) per question, in input order.

    Args:
        examples: ``Example`` objects (or :class:`DebateItem` with an explicit stream index and task name).
        debaters: one debater group per agent (N = ``len(debaters)`` >= 2; agent i is served by ``debaters[i]``).
            Agents that share a group object are batched together: one ``respond`` call per group per round.
        max_rounds: T_max, the number of rounds (round indices 0 .. max_rounds-1).
        stop_hook: ``stop_hook(round_index, debates) -> list[bool]``, called after every round with the in-progress
            trace dicts of all active debates (also after the last round, so a decision layer sees it);
            ``True`` ends that debate with ``stop_reason="hook"`` (after the last round it ends as ``"max_rounds"``).
        batch_questions: questions per chunk (bounds memory; traces are yielded after each chunk).
        task: task name for plain ``Example`` items (default: ``example.meta["task"]`` or ``"unknown"``).
        stats: a :class:`DebateStats` to fill in (one is created and logged otherwise).
        progress: show a tqdm bar with questions/s and tokens/s.
        total: number of questions, for the progress bar.

    Yields:
        Trace dicts (see docs/contracts.md), ``index`` = position of the example in the stream.

    Raises:
        ValueError: for fewer than 2 agents, ``max_rounds < 1``, a debater returning the wrong number of responses
            or a stop hook returning the wrong number of decisions.
    """
    if len(debaters) < 2:
        raise ValueError(f"a debate needs at least 2 agents, got {len(debaters)}")
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    if batch_questions < 1:
        raise ValueError(f"batch_questions must be >= 1, got {batch_questions}")
    stats = stats if stats is not None else DebateStats()
    groups: list[DebaterGroup] = []
    agent_group: list[int] = []
    for group in debaters:
        for g_index, known in enumerate(groups):
            if known is group:
                agent_group.append(g_index)
                break
        else:
            groups.append(group)
            agent_group.append(len(groups) - 1)
    labels = _group_labels(groups)
    for label in labels:
        stats.calls.setdefault(label, 0)
    agents = [
        {
            "index": i,
            "backend": debaters[i].backend,
            "model": debaters[i].model,
            "settings": debaters[i].agent_settings(i),
        }
        for i in range(len(debaters))
    ]
    simulated = any(getattr(g, "simulated", False) for g in groups)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="q", desc="debates", dynamic_ncols=True)
    started = time.perf_counter()
    items = (as_item(obj, position, task) for position, obj in enumerate(examples))
    try:
        for chunk in chunked(items, batch_questions):
            yield from _run_chunk(
                chunk,
                debaters,
                groups,
                agent_group,
                labels,
                agents,
                simulated,
                max_rounds=max_rounds,
                stop_hook=stop_hook,
                stats=stats,
                bar=bar,
                started=started,
            )
    finally:
        stats.elapsed_s += time.perf_counter() - started
        if bar is not None:
            bar.close()
        summary = stats.summary()
        logger.info(
            "debates: %d questions, %d debate-rounds, %d tokens, %.1f q/s; eta rate by round %s; coverage %s",
            summary["questions"],
            summary["debate_rounds"],
            summary["prompt_tokens"] + summary["completion_tokens"],
            summary["questions_per_s"],
            summary["eta_rate_by_round"],
            summary["coverage"],
        )


def _run_chunk(
    chunk: list[DebateItem],
    debaters: Sequence[DebaterGroup],
    groups: list[DebaterGroup],
    agent_group: list[int],
    labels: list[str],
    agents: list[dict],
    simulated: bool,
    *,
    max_rounds: int,
    stop_hook: StopHook | None,
    stats: DebateStats,
    bar: Any,
    started: float,
) -> Iterator[dict]:
    num_agents = len(debaters)
    traces = [_new_trace(item, agents) for item in chunk]
    for trace in traces:
        trace["simulated"] = simulated
    previous: list[list[str] | None] = [None] * len(chunk)
    grade_cache: dict[tuple, bool] = {}
    chunk_tokens = 0  # for the progress bar until the chunk's traces are counted
    active = list(range(len(chunk)))
    for t in range(max_rounds):
        if not active:
            break
        per_group: list[list[tuple[int, int, DebateRequest]]] = [[] for _ in groups]
        for d in active:
            prev = previous[d]
            for agent in range(num_agents):
                peers = [a for a in range(num_agents) if a != agent]
                request = DebateRequest(
                    example=chunk[d].example,
                    agent=agent,
                    round=t,
                    own_previous=prev[agent] if prev else None,
                    peer_previous=[prev[a] for a in peers] if prev else [],
                    peer_agents=peers if prev else [],
                )
                per_group[agent_group[agent]].append((d, agent, request))
        responses: dict[tuple[int, int], Any] = {}
        for g_index, entries in enumerate(per_group):
            if not entries:
                continue
            generations = groups[g_index].respond([req for _, _, req in entries])
            stats.calls[labels[g_index]] += 1
            if len(generations) != len(entries):
                raise ValueError(
                    f"debater group {labels[g_index]} returned {len(generations)} responses for {len(entries)} requests"
                )
            for (d, agent, _), gen in zip(entries, generations, strict=True):
                responses[(d, agent)] = gen
        for d in active:
            ex = chunk[d].example
            round_responses, eta = [], 0
            for agent in range(num_agents):
                gen = responses[(d, agent)]
                answer = extract_answer(gen.text)
                key = (answer, ex.gold, ex.kind, ex.choices)
                if key not in grade_cache:
                    grade_cache[key] = answer is not None and is_equivalent(answer, ex.gold, ex.kind, ex.choices)
                correct = grade_cache[key]
                eta = eta or int(correct)
                trimmed = bool(getattr(gen, "trimmed", False))
                response = {
                    "agent": agent,
                    "text": gen.text,
                    "answer": answer,
                    "prompt_tokens": int(gen.prompt_tokens),
                    "completion_tokens": int(gen.completion_tokens),
                    "trimmed": trimmed,
                }
                if getattr(gen, "finish_reason", None) == TOO_LONG:  # not sent: metamod.llm.budget
                    response["prompt_too_long"] = True
                round_responses.append(response)
                chunk_tokens += int(gen.prompt_tokens) + int(gen.completion_tokens)
            trace = traces[d]
            trace["rounds"].append({"round": t, "eta": eta, "responses": round_responses})
            trace["num_rounds"] = t + 1
            previous[d] = [r["text"] for r in round_responses]
        stopped: set[int] = set()
        if stop_hook is not None:
            decisions = list(stop_hook(t, [traces[d] for d in active]))
            if len(decisions) != len(active):
                raise ValueError(f"stop_hook returned {len(decisions)} decisions for {len(active)} active debates")
            for d, stop in zip(active, decisions, strict=True):
                if stop and t < max_rounds - 1:  # at the last round the debate ends anyway: "max_rounds"
                    traces[d]["stop_reason"] = "hook"
                    stopped.add(d)
        active = [d for d in active if d not in stopped]
        if bar is not None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            done = stats.prompt_tokens + stats.completion_tokens + chunk_tokens
            bar.set_postfix(round=t, tok_s=f"{done / elapsed:.0f}")
    for trace in traces:
        if trace["stop_reason"] is None:
            trace["stop_reason"] = "max_rounds"
        stats.add_trace(trace, grade_cache)  # the one way a trace is counted (a resumed file is counted the same)
    if bar is not None:
        bar.update(len(chunk))
    yield from traces
