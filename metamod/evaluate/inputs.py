"""What ``metamod eval`` reads before it runs: the questions per task, the reusable debate traces, and the check
that debates cached in an output folder were made by this config's debaters.

Every failure is a one-line error naming the task, question, file line or folder.

>>> from metamod.rollout.traces import example_trace
>>> example_from_trace(example_trace("q")).id
'q'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metamod.errors import InputError
from metamod.tasks.base import Example

from .config import EvalConfig


def example_from_trace(trace: dict[str, Any]) -> Example:
    """The :class:`Example` a trace was made from (the options the trace's question shows are split off again).

    >>> from metamod.rollout.traces import example_trace
    >>> example_from_trace(example_trace("q")).prompt_text()
    'What is 2 + 2?'
    """
    ex = Example.from_dict(trace)
    if ex.choices:
        suffix = Example(id=ex.id, question="", gold=ex.gold, kind=ex.kind, choices=ex.choices).prompt_text()
        if ex.question.endswith(suffix):
            ex = Example(
                id=ex.id,
                question=ex.question[: -len(suffix)],
                gold=ex.gold,
                kind=ex.kind,
                choices=ex.choices,
                meta=ex.meta,
            )
    return ex


def check_examples(task: str, examples: list[Example], source: str) -> None:
    """Refuse a task without questions, a question without a gold answer, or a question id used twice."""
    if not examples:
        raise ValueError(f"task {task!r} has no questions in {source}")
    seen: set[str] = set()
    for ex in examples:
        if not isinstance(ex.gold, str) or not ex.gold.strip():
            raise ValueError(
                f"task {task!r}, question {ex.id!r} in {source} has no gold answer; evaluation needs "
                "gold answers (use a split with answers)"
            )
        if ex.id in seen:
            raise ValueError(f"task {task!r}: question id {ex.id!r} appears twice in {source}")
        seen.add(ex.id)


def load_inputs(config: EvalConfig) -> tuple[dict[str, list[Example]], dict[tuple[str, str], dict]]:
    """Questions per task, and the reusable full-length traces by ``(task, id)`` when ``config.traces`` is set.

    Raises:
        ValueError: a task without gold answers, duplicate ids, or no question for a task.
    """
    examples: dict[str, list[Example]] = {}
    reused: dict[tuple[str, str], dict] = {}
    if config.traces:
        from metamod.rollout.traces import read_traces

        for number, trace in enumerate(read_traces(config.traces), start=1):
            if trace.get("loop", "debate") != "debate":
                raise InputError(
                    f"{config.traces}:{number}: trace {trace['id']!r} is an MRO trace; `traces` replays debate "
                    "traces (the MRO methods run their own loops: leave traces unset)"
                )
            if config.tasks and trace["task"] not in config.tasks:
                continue
            examples.setdefault(trace["task"], []).append(example_from_trace(trace))
            reused[(trace["task"], trace["id"])] = trace
        for task in config.tasks:
            if task not in examples:
                raise ValueError(f"traces file {config.traces!r} has no debate for task {task!r}")
    else:
        for task in config.tasks:
            examples[task] = list(config.task_config(task).load().examples())
    for task, exs in examples.items():
        check_examples(task, exs, config.traces or f"task {task!r}")
    if config.question_order_seed is not None:
        import random

        for task, exs in examples.items():
            random.Random(f"{config.question_order_seed}:{task}").shuffle(exs)
    return examples, reused


def check_cached_traces(traces: dict[str, dict], debaters: list[Any] | None, path: Path) -> None:
    """Refuse to resume from debates made by other debaters (settings, models or number of agents differ)."""
    if not traces or debaters is None:
        return
    expected = json.loads(
        json.dumps(
            [
                {"index": i, "backend": d.backend, "model": d.model, "settings": d.agent_settings(i)}
                for i, d in enumerate(debaters)
            ],
            default=str,
        )
    )
    for trace in traces.values():
        if trace["agents"] != expected:
            raise ValueError(
                f"{path} holds debates (e.g. {trace['id']!r}) made by other debaters than this config's "
                f"({trace['agents']} vs {expected}); use a new output_dir or resume: false"
            )
