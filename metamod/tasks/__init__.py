"""Benchmark tasks and the shared grader.

``TASKS`` maps a task name to its class; :func:`load_task` builds one with checked options, and every task streams
:class:`~metamod.tasks.base.Example` objects from ``examples(limit=None, seed=None)``. :class:`TaskConfig` is the
dataclass that command configs embed to pick a task.

>>> sorted(TASKS)
['aime25', 'amc', 'arith', 'camel_physics', 'cruxeval_i', 'cruxeval_o', 'deepcoder', 'game24', 'gsm8k', 'list_function', 'livecodebench_i', 'livecodebench_o', 'local', 'math500', 'mini_arc', 'mmlu', 'numina_math', 'omni_math', 'physreason', 'robustfill', 'strategyqa', 'synthetic_code', 'theoremqa']
>>> task = load_task("arith", num_examples=2, seed=3, levels=[1])
>>> task.name, task.kind, [ex.id for ex in task.examples()]
('arith', 'math', ['arith-3-0', 'arith-3-1'])
>>> load_task("arith", level=2)
Traceback (most recent call last):
...
ValueError: Unknown option(s) ['level'] for task 'arith'. Valid options: levels, limit, num_examples, seed, split
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from metamod.registry import resolve
from metamod.tasks.arith import ArithTask
from metamod.tasks.base import ANSWER_KINDS, Example
from metamod.tasks.benchmarks import (
    AMCTask,
    GSM8KTask,
    LocalTask,
    Math500Task,
    MMLUTask,
    StrategyQATask,
    TableTask,
)
from metamod.tasks.code.loaders import (
    CRUXEvalITask,
    CRUXEvalOTask,
    DeepCoderTask,
    ListFunctionTask,
    LiveCodeBenchITask,
    LiveCodeBenchOTask,
    MiniARCTask,
    RobustFillTask,
)
from metamod.tasks.config import TaskConfig
from metamod.tasks.game24 import Game24Task
from metamod.tasks.physreason import PhysReasonTask
from metamod.tasks.reasoning_benchmarks import (
    AIME25Task,
    CamelPhysicsTask,
    NuminaMathTask,
    OmniMathTask,
)
from metamod.tasks.synthetic_code import SyntheticCodeTask
from metamod.tasks.theoremqa import TheoremQATask

__all__ = [
    "ANSWER_KINDS",
    "TASKS",
    "Example",
    "TableTask",
    "Task",
    "TaskConfig",
    "task_options",
    "load_task",
]


@runtime_checkable
class Task(Protocol):
    """What every task offers: a ``name``, an answer ``kind`` and a lazy stream of examples."""

    name: str
    kind: str

    def examples(self, limit: int | None = None, seed: int | None = None) -> Iterator[Example]: ...


#: task name -> task class
TASKS: dict[str, type] = {
    "arith": ArithTask,
    "gsm8k": GSM8KTask,
    "math500": Math500Task,
    "amc": AMCTask,
    "strategyqa": StrategyQATask,
    "mmlu": MMLUTask,
    "theoremqa": TheoremQATask,
    "game24": Game24Task,
    "local": LocalTask,
    # the Bayesian Cheatsheet paper's benchmarks and mining corpora (metamod/tasks/reasoning_benchmarks.py)
    "aime25": AIME25Task,
    "omni_math": OmniMathTask,
    "physreason": PhysReasonTask,
    "numina_math": NuminaMathTask,
    "camel_physics": CamelPhysicsTask,
    # code reasoning (MARCO): deduction *_o, abduction *_i, induction (metamod/tasks/code/loaders.py, synthetic_code.py)
    "cruxeval_o": CRUXEvalOTask,
    "cruxeval_i": CRUXEvalITask,
    "livecodebench_o": LiveCodeBenchOTask,
    "livecodebench_i": LiveCodeBenchITask,
    "list_function": ListFunctionTask,
    "mini_arc": MiniARCTask,
    "robustfill": RobustFillTask,
    "deepcoder": DeepCoderTask,
    "synthetic_code": SyntheticCodeTask,
}


def task_options(task_class: type) -> list[str]:
    """The option names a task class accepts (its constructor's keyword arguments), sorted.

    >>> task_options(TASKS["gsm8k"])
    ['answer_column', 'choices_column', 'data_files', 'id_column', 'limit', 'question_column', 'seed', 'split', 'subset']
    """
    params = inspect.signature(task_class.__init__).parameters
    return sorted(name for name in params if name != "self")


def load_task(name: str, /, **options: Any) -> Task:
    """Build a task by name with checked options.

    Args:
        name: a key of :data:`TASKS` (or a dotted path ``package.module:Class`` to a task class).
        **options: the task's constructor options (see :func:`task_options`).

    Returns:
        The task instance.

    Raises:
        KeyError: for an unknown task name (listing the tasks).
        ValueError: for an option the task does not take (listing the valid ones), or a bad value.
    """
    task_class = resolve(TASKS, name, what="task")
    valid = task_options(task_class)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"Unknown option(s) {unknown} for task {name!r}. Valid options: {', '.join(valid)}")
    return task_class(**options)
