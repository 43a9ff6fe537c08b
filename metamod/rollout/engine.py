"""The one loop engine, chunked, streaming and step-synchronous, that the debate, MRO and MARCO loops run on.

A loop (:class:`Loop`) says what one step does; :func:`run_loop` does the rest. It pulls the items lazily,
``batch_questions`` at a time, and for each chunk calls ``loop.start(chunk, grade)``, then ``loop.step(t, active)``
for each ``t`` of ``loop.steps`` while some question is active (a step makes one batched call per backend or role
over the active questions and returns those still active), then ``loop.finish()`` for the chunk's traces, which
``loop.stats`` counts (:meth:`LoopStats.add_trace`) before they are yielded in input order. Timing, the progress bar
and the closing log line live here only. The loops: :class:`~metamod.rollout.debate.DebateLoop`,
:class:`~metamod.rollout.mro.loop.MROLoop` and :class:`~metamod.rollout.marco.MarcoLoop`.

>>> class Countdown:  # a toy loop: question i needs i steps
...     name, steps, stats, tokens = "countdown", range(1, 4), None, 0
...     def start(self, chunk, grade):
...         self.traces = [{"id": item.example.id, "steps": 0} for item in chunk]
...     def step(self, t, active):
...         for d in active: self.traces[d]["steps"] = t
...         return [d for d in active if int(self.traces[d]["id"]) > t]
...     def finish(self):
...         return self.traces
>>> examples = [Example(id=str(i), question="?", gold="", kind="math") for i in range(5)]
>>> [t["steps"] for t in run_loop(examples, Countdown(), batch_questions=2, progress=False)]
[1, 1, 2, 3, 3]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, ClassVar, NamedTuple, Protocol

from metamod.rollout.stats import EtaTally
from metamod.rollout.trace_schema import SCHEMA_VERSION
from metamod.tasks.base import Example
from metamod.tasks.grading import is_equivalent

logger = logging.getLogger(__name__)


class LoopItem(NamedTuple):
    """An example with its position in the task's stream (kept in traces as ``index``) and its task name."""

    example: Example
    index: int
    task: str


def as_item(obj: Example | LoopItem, position: int, task: str | None) -> LoopItem:
    """An engine input as a :class:`LoopItem` (a plain ``Example`` gets ``task`` or its ``meta["task"]``)."""
    if isinstance(obj, LoopItem):
        return obj
    if isinstance(obj, Example):
        return LoopItem(obj, position, task or str(obj.meta.get("task", "unknown")))
    raise TypeError(f"a loop expects Example or LoopItem items, got {type(obj).__name__} at position {position}")


def new_trace(item: LoopItem, simulated: bool, head: dict[str, Any] | None = None, **body: Any) -> dict[str, Any]:
    """A trace: the block every trace starts with (docs/contracts.md; ``head`` goes after ``schema_version``), then
    ``body``.

    >>> item = LoopItem(Example(id="q1", question="2 + 2?", gold="4", kind="math"), 7, "arith")
    >>> list(new_trace(item, False, {"loop": "mro"}, history=[]))[:4], new_trace(item, True)["index"]
    (['schema_version', 'loop', 'id', 'index'], 7)
    """
    ex = item.example
    return {
        "schema_version": SCHEMA_VERSION,
        **(head or {}),
        "id": ex.id,
        "index": item.index,
        "task": item.task,
        "question": ex.prompt_text(),
        "gold": ex.gold,
        "kind": ex.kind,
        "choices": list(ex.choices) if ex.choices else None,
        "meta": dict(ex.meta),
        "simulated": simulated,
        **body,
    }


class Grader:
    """The shared grader's ``is_equivalent``, memoised (one per chunk): each distinct answer to a question is graded
    once. The key is ``(answer, gold, kind, choices)`` unless the caller names one.

    >>> grade = Grader()
    >>> grade("4", "4", "math"), grade("4.0", "4", "math"), grade(None, "4", "math"), len(grade.cache)
    (True, True, False, 3)
    """

    def __init__(self) -> None:
        self.cache: dict[Hashable, bool] = {}

    def __call__(self, answer: str | None, gold: str, kind: str, choices: Any = None, key: Any = None) -> bool:
        if key is None:
            key = (answer, gold, kind, tuple(choices) if isinstance(choices, list) else choices)
        if key not in self.cache:
            self.cache[key] = answer is not None and is_equivalent(answer, gold, kind, choices)
        return self.cache[key]


@dataclass
class LoopStats:
    """What every loop counts; a loop's stats add their own counters, ``add_trace``, ``summary`` and ``log_line``.

    Attributes:
        calls: batched calls per backend or role (counted by the loop as it makes them).
        questions: traces finished.
        eta: eta per step and coverage (:class:`~metamod.rollout.stats.EtaTally`, keyed by (id, index)).
        statuses: finished traces per terminal status (the trace's ``status_field``).
        elapsed_s: wall time spent inside the engine.
    """

    calls: dict[str, int] = field(default_factory=dict)
    questions: int = 0
    eta: EtaTally = field(default_factory=EtaTally)
    statuses: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    status_field: ClassVar[str] = "status"

    def add_trace(self, trace: dict[str, Any], grade: Grader | None = None) -> None:
        """Count a finished trace as the engine counted it while running it (everything but calls and time): what
        ``summary.json`` is rebuilt from, over the whole traces file, after a resumed run."""
        self.questions += 1
        status = trace[self.status_field]
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def call(self, label: str, batched: Callable[[list], list], requests: list) -> list:
        """``batched(requests)``, one batched call counted under ``label``, checked to give one output per request."""
        outputs = batched(requests)
        self.calls[label] = self.calls.get(label, 0) + 1
        if len(outputs) != len(requests):
            raise ValueError(f"{label} returned {len(outputs)} outputs for {len(requests)} requests")
        return outputs

    def per_s(self, count: float, digits: int) -> float:
        """``count`` per second of :attr:`elapsed_s`, rounded."""
        return round(count / max(self.elapsed_s, 1e-9), digits)

    def summary(self) -> dict[str, Any]:  # JSON-ready: each loop's keys, in its order
        raise NotImplementedError

    def log_line(self) -> str:  # the line logged when a run ends
        raise NotImplementedError


class Loop(Protocol):
    """A loop as the engine drives it; ``start`` / ``step`` / ``finish`` run one chunk at a time."""

    name: str  #: the progress bar's label
    steps: range  #: the step indices, in order (the budget)
    stats: LoopStats | None  #: counts the finished traces (``None``: not counted, no closing log line)
    tokens: int  #: tokens generated so far (for the progress bar)

    def start(self, chunk: list[LoopItem], grade: Grader) -> None:
        """Begin a chunk (every question active); ``grade`` is its memoised grader."""

    def step(self, t: int, active: list[int]) -> list[int]:
        """Run step ``t`` for the chunk positions ``active``; return those still active."""

    def finish(self) -> list[dict[str, Any]]:
        """End the chunk; its traces, in chunk order."""


def run_loop(
    examples: Iterable[Example | LoopItem],
    loop: Loop,
    *,
    batch_questions: int = 256,
    task: str | None = None,
    progress: bool = True,
    total: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Run ``loop`` over ``examples`` and yield one finished trace per question, in input order.

    Args:
        examples: ``Example`` objects (or :class:`LoopItem` with an explicit stream index and task name).
        loop: the loop (see the module docstring).
        batch_questions: questions per chunk (bounds memory; traces are yielded after each chunk).
        task: task name for plain ``Example`` items (default: ``example.meta["task"]`` or ``"unknown"``).
        progress: show a tqdm bar with questions/s, the step and tokens/s.
        total: number of questions, for the progress bar.

    Raises:
        ValueError: for ``batch_questions < 1``.
    """
    if batch_questions < 1:
        raise ValueError(f"batch_questions must be >= 1, got {batch_questions}")
    from tqdm.auto import tqdm

    stats, bar = loop.stats, tqdm(total=total, unit="q", desc=loop.name, dynamic_ncols=True, disable=not progress)
    started = time.perf_counter()
    items = (as_item(obj, position, task) for position, obj in enumerate(examples))
    try:
        for chunk in iter(lambda: list(islice(items, batch_questions)), []):  # pulled lazily: memory stays flat
            grade = Grader()
            loop.start(chunk, grade)
            active = list(range(len(chunk)))
            for t in loop.steps:
                if not active:
                    break
                active = loop.step(t, active)
                bar.set_postfix(step=t, tok_s=f"{loop.tokens / max(time.perf_counter() - started, 1e-9):.0f}")
            traces = loop.finish()
            if stats is not None:
                for trace in traces:
                    stats.add_trace(trace, grade)  # the one way a trace is counted (a resumed file is counted the same)
            bar.update(len(chunk))
            yield from traces
    finally:
        elapsed = time.perf_counter() - started
        bar.close()
        if stats is not None:
            stats.elapsed_s += elapsed
            logger.info("%s", stats.log_line())
