"""The loop engine's contract (metamod/rollout/engine.py) on a toy loop: chunks, the step budget, counting, streaming."""

import pytest

from metamod.rollout.engine import Grader, LoopItem, LoopStats, run_loop
from metamod.tasks.base import Example


class Stats(LoopStats):
    def summary(self):
        return {"questions": self.questions, "statuses": dict(self.statuses)}

    def log_line(self):
        return f"toy: {self.questions} questions"


class Toy:
    """Question ``i`` needs ``i`` steps; every step is one batched call over the active positions."""

    name, steps, tokens = "toy", range(1, 4), 0

    def __init__(self):
        self.stats, self.calls, self.graders = Stats(), [], []

    def start(self, chunk, grade):
        self.traces = [{"id": item.example.id, "index": item.index, "steps": 0, "status": None} for item in chunk]
        self.graders.append(grade)

    def step(self, t, active):
        self.calls.append((t, [self.traces[d]["id"] for d in active]))
        for d in active:
            self.traces[d]["steps"] = t
        return [d for d in active if int(self.traces[d]["id"]) > t]

    def finish(self):
        for trace in self.traces:
            trace["status"] = "done" if int(trace["id"]) <= trace["steps"] else "budget"
        return self.traces


def examples(n, pulled=None):
    for i in range(n):
        if pulled is not None:
            pulled.append(i)
        yield Example(id=str(i), question="?", gold="4", kind="math")


def test_chunks_steps_budget_and_counting():
    loop = Toy()
    traces = list(run_loop(examples(5), loop, batch_questions=3, progress=False))
    assert [(t["index"], t["steps"]) for t in traces] == [(0, 1), (1, 1), (2, 2), (3, 3), (4, 3)]
    # one call per step over the active positions; a chunk stops stepping once nothing is active
    assert loop.calls == [(1, ["0", "1", "2"]), (2, ["2"]), (1, ["3", "4"]), (2, ["3", "4"]), (3, ["3", "4"])]
    assert loop.stats.summary() == {"questions": 5, "statuses": {"done": 4, "budget": 1}}
    assert loop.stats.elapsed_s > 0 and len({id(g) for g in loop.graders}) == 2  # a fresh grader per chunk


def test_streams_chunk_by_chunk_and_keeps_given_items():
    pulled = []
    items = (LoopItem(ex, 10 + i, "toy") for i, ex in enumerate(examples(4, pulled)))
    stream = run_loop(items, Toy(), batch_questions=2, progress=False)
    first = next(stream)
    assert pulled == [0, 1] and first["index"] == 10
    assert [t["index"] for t in stream] == [11, 12, 13]


def test_argument_checks():
    with pytest.raises(ValueError, match="batch_questions must be >= 1"):
        list(run_loop(examples(1), Toy(), batch_questions=0, progress=False))
    with pytest.raises(TypeError, match="Example or LoopItem items, got str at position 1"):
        list(run_loop([next(examples(1)), "q"], Toy(), progress=False))


def test_grader_memoises_by_question_or_by_a_given_key():
    grade = Grader()
    assert grade("4", "4", "math") and not grade("5", "4", "math") and not grade(None, "4", "math")
    assert grade("(B)", "B", "mc", ["x", "y"]) and ("(B)", "B", "mc", ("x", "y")) in grade.cache
    assert grade("5", "4", "math", key=("5", "q1")) is False and grade("4", "4", "math", key=("5", "q1")) is False
