"""``TaskConfig`` (how one task is read) and the one task-selection shape of rollout and eval.

``metamod rollout`` and ``metamod eval`` select tasks alike: ``tasks`` (names, or ``name@variant`` labels),
``task_options`` (``{entry: {TaskConfig field: value}}``) and ``limit``; :func:`check_task_selection` checks them
and :func:`task_config_for` builds each entry's :class:`TaskConfig`. Every field except ``task`` carries a ``task_``
prefix, so a key reads the same in every config and document.

>>> cfg = TaskConfig(task="arith", task_limit=2, task_seed=5, task_levels=[1, 2])
>>> cfg.options()
{'limit': 2, 'seed': 5, 'levels': [1, 2]}
>>> [ex.id for ex in cfg.load().examples()]
['arith-5-0', 'arith-5-1']
>>> TaskConfig(task="gsm8k", task_levels=[1])
Traceback (most recent call last):
...
ValueError: task_levels is not an option of task 'gsm8k'; its options are: answer_column, choices_column, data_files, id_column, limit, question_column, seed, split, subset
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_PREFIX = "task_"


@dataclass
class TaskConfig:
    """Which benchmark to use and how to read it (see docs/tasks.md)."""

    task: str = field(
        default="arith",
        metadata={
            "help": "Task name: arith, gsm8k, math500, amc, strategyqa, mmlu, theoremqa, game24, local, the code "
            "reasoning tasks (cruxeval_o/_i, livecodebench_o/_i, list_function, mini_arc, robustfill, deepcoder, "
            "synthetic_code) or another key of metamod.tasks.TASKS (see docs/tasks.md)."
        },
    )
    task_split: str | None = field(
        default=None,
        metadata={
            "help": "Split: hub split to load (gsm8k/math500/strategyqa/mmlu/theoremqa and the code benchmarks "
            "default test, amc and game24 hub train), or train/test for arith, generated game24 and synthetic_code "
            "(disjoint streams). None: the task's default."
        },
    )
    task_data_files: str | None = field(
        default=None,
        metadata={
            "help": "Local .jsonl/.json/.parquet/.csv file to read instead of the Hugging Face hub "
            "(required for local)."
        },
    )
    task_subset: str | None = field(
        default=None, metadata={"help": "Hub config name (default: main for gsm8k, all for mmlu)."}
    )
    task_question_column: str | None = field(
        default=None, metadata={"help": "Column holding the question (default: the dataset's own, e.g. problem)."}
    )
    task_answer_column: str | None = field(
        default=None, metadata={"help": "Column holding the gold answer (default: the dataset's own, e.g. answer)."}
    )
    task_choices_column: str | None = field(
        default=None, metadata={"help": "Column holding the list of options (mmlu, or local with kind mc)."}
    )
    task_id_column: str | None = field(
        default=None,
        metadata={"help": "Column holding a stable row id (None: the dataset's own, else <task>-<split>-<row>)."},
    )
    task_kind: str | None = field(
        default=None, metadata={"help": "local only: answer kind, one of math, mc, yesno, text, approx, game24."}
    )
    task_source: str | None = field(
        default=None,
        metadata={
            "help": "game24 only: generated (offline seeded puzzles), hub (test-time-compute/game-of-24) or file "
            "(task_data_files). None: file when task_data_files is set, else generated."
        },
    )
    task_include_images: bool | None = field(
        default=None,
        metadata={
            "help": "theoremqa and physreason: keep the questions/problems that come with a picture or figure, asked "
            "as text only (None: the default, true for both: theoremqa keeps all 800; false leaves them out and logs "
            "the count)."
        },
    )
    task_selection: str | None = field(
        default=None,
        metadata={
            "help": "Which rows of a benchmark to keep. game24 (hub/file): tot_hard (default: the 100 puzzles at "
            "ranks 901-1000 of the Tree-of-Thoughts list) or all; livecodebench_o/_i: all (default: 479 rows) or "
            "rhda102 (the 102 problems of RHDA's LiveCodeBench file, contests after 2023-10-01). See docs/tasks.md."
        },
    )
    task_limit: int | None = field(
        default=None,
        metadata={
            "help": "Number of items: a seeded random subsample (the whole set when smaller); for arith the "
            "first N of the stream. None: all (arith: task_num_examples)."
        },
    )
    task_seed: int = field(default=0, metadata={"help": "Subsample seed (arith: generator seed)."})
    task_levels: list[int] | None = field(
        default=None,
        metadata={"help": "arith and synthetic_code: difficulty levels to mix uniformly, from 1..5 (None: all)."},
    )
    task_num_examples: int | None = field(
        default=None,
        metadata={"help": "arith, generated game24 and synthetic_code: length of the generated stream (None: 1000)."},
    )
    task_variant: str | None = field(
        default=None, metadata={"help": "physreason only: full (1,200 problems) or mini (200)."}
    )
    task_sub_questions: str | None = field(
        default=None, metadata={"help": "physreason only: all (one question per sub-question) or last."}
    )
    task_use_captions: bool | None = field(
        default=None, metadata={"help": "physreason only: append the problem's image captions to the question."}
    )
    task_min_difficulty: float | None = field(
        default=None, metadata={"help": "omni_math only: keep problems with difficulty >= this value."}
    )
    task_max_difficulty: float | None = field(
        default=None, metadata={"help": "omni_math only: keep problems with difficulty <= this value."}
    )
    task_require_gold: bool | None = field(
        default=None, metadata={"help": "numina_math / camel_physics: drop rows without a gold answer."}
    )
    task_boxed_gold: bool | None = field(
        default=None, metadata={"help": "camel_physics only: read the gold from the answer's last \\boxed{}."}
    )
    task_path: str | None = field(
        default=None,
        metadata={
            "help": "Code tasks: Hugging Face dataset id to load instead of the default (cruxeval_*: "
            "cruxeval-org/cruxeval, livecodebench_*: livecodebench/execution-v2; the induction sets have no hub "
            "default and need task_data_files or this)."
        },
    )
    task_code_column: str | None = field(
        default=None, metadata={"help": "cruxeval_*/livecodebench_* only: column with the function source (code)."}
    )
    task_input_column: str | None = field(
        default=None,
        metadata={"help": "cruxeval_*/livecodebench_* only: column with the input (an argument list or a call)."},
    )
    task_output_column: str | None = field(
        default=None, metadata={"help": "cruxeval_*/livecodebench_* only: column with the output literal (output)."}
    )
    task_entry_column: str | None = field(
        default=None,
        metadata={
            "help": "cruxeval_*/livecodebench_* only: column with the function name (livecodebench: function_name; "
            "None: f, or the name in a call input)."
        },
    )
    task_grade_pairs: str | None = field(
        default=None,
        metadata={
            "help": "Induction tasks (list_function, mini_arc, robustfill, deepcoder, synthetic_code): grade a "
            "proposed function on all pairs, visible and hidden (all, the default: MARCO's accuracy and problem "
            "accuracy count every pair) or on the hidden pairs only (hidden). Hidden-pair metrics are reported "
            "either way."
        },
    )
    task_subtask: str | None = field(
        default=None,
        metadata={"help": "synthetic_code only: deduction (default), abduction or induction."},
    )
    task_language: str | None = field(
        default=None,
        metadata={"help": "synthetic_code only: python (default), or robustfill/deepcoder for DSL induction problems."},
    )
    task_pairs: int | None = field(
        default=None,
        metadata={"help": "synthetic_code induction only: input/output pairs per problem, half visible (default 6)."},
    )

    def __post_init__(self) -> None:
        from metamod.registry import resolve
        from metamod.tasks import TASKS, task_options

        if self.task_limit is not None and self.task_limit < 1:
            raise ValueError(f"task_limit must be a positive integer or None (all items), got {self.task_limit}")
        task_class = resolve(TASKS, self.task, what="task")
        valid = task_options(task_class)
        for option in self.options():
            if option not in valid:
                raise ValueError(
                    f"{_PREFIX}{option} is not an option of task {self.task!r}; its options are: {', '.join(valid)}"
                )

    def options(self) -> dict[str, Any]:
        """The options that were set, without the ``task_`` prefix (ready for :func:`metamod.tasks.load_task`)."""
        options = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "task" or value is None or (f.name == "task_seed" and value == 0):
                continue
            options[f.name.removeprefix(_PREFIX)] = value
        return options

    def load(self):
        """Build the task (see :func:`metamod.tasks.load_task`)."""
        from metamod.tasks import load_task

        return load_task(self.task, **self.options())


def check_task_selection(tasks: list[str], task_options: Any, limit: int | None) -> None:
    """The checks of the one task-selection shape that rollout and eval share: ``tasks`` (names, or
    ``name@variant`` labels), ``task_options`` (``{entry: {TaskConfig field: value}}``) and ``limit``.

    Raises:
        KeyError: an entry that names no task (the message lists the valid ones).
        ConfigError: a repeated entry, options for an entry not in ``tasks``, a non-mapping or unknown field, or a
            ``limit`` below 1. (A bad option value fails when the entry's :class:`TaskConfig` is built.)

    >>> check_task_selection(["arith"], {"gsm8k": {"task_limit": 5}}, None)
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: task_options has options for 'gsm8k', which is not in tasks ['arith']
    """
    from metamod.config import check_fields
    from metamod.errors import ConfigError

    if not isinstance(tasks, list) or not all(isinstance(t, str) and t for t in tasks):
        raise ConfigError(f"tasks must be a list of task names (e.g. [arith, gsm8k]), got {tasks!r}")
    from metamod.registry import resolve
    from metamod.tasks import TASKS

    for entry in tasks:  # an unknown name first: it fails naming the valid tasks, before its options are read
        resolve(TASKS, entry.partition("@")[0], what="task")
    repeated = sorted({t for t in tasks if tasks.count(t) > 1})
    if repeated:
        raise ConfigError(
            f"tasks {tasks} repeats {repeated}; expected each entry once (name@variant gives one task a second label)"
        )
    if not isinstance(task_options, dict):
        raise ConfigError(f"task_options must be a mapping of task entry to TaskConfig fields, got {task_options!r}")
    for task, options in task_options.items():
        if task not in tasks:
            raise ConfigError(f"task_options has options for {task!r}, which is not in tasks {tasks}")
        check_fields(f"task_options[{task!r}]", options, TaskConfig, exclude=("task",))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be >= 1 or None, got {limit!r}")


def task_config_for(entry: str, task_options: dict[str, dict] | None = None, limit: int | None = None) -> TaskConfig:
    """The :class:`TaskConfig` of one task entry (``limit``, when set, overrides its ``task_limit``).

    An entry ``name@variant`` (e.g. ``synthetic_code@induction``) is task ``name`` under its own label, so one task
    can run with several option sets (``task_options`` keyed by the full entry); traces, samples and tables carry
    the full entry.

    >>> task_config_for("arith@easy", {"arith@easy": {"task_levels": [1]}}, limit=5).options()
    {'limit': 5, 'levels': [1]}
    """
    from metamod.errors import ConfigError

    options = dict((task_options or {}).get(entry, {}))
    if limit is not None:
        options["task_limit"] = limit
    try:
        return TaskConfig(task=entry.partition("@")[0], **options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"task_options[{entry!r}]: {err}") from err


def task_file_signatures(task_configs: list[TaskConfig]) -> dict[str, str]:
    """``{absolute path: content signature}`` of the local data files the tasks read (``task_data_files``, and a
    ``task_path`` that is a local file or folder); Hub datasets have none.

    >>> task_file_signatures([TaskConfig(task="arith")])
    {}
    """
    from metamod.files import path_signature

    out = {}
    for task_config in task_configs:
        for path in (task_config.task_data_files, task_config.task_path):
            signature = path_signature(path) if path else None
            if signature is not None:
                out[str(Path(path).expanduser().absolute())] = signature
    return out


def fingerprint_task_selection(settings: dict[str, Any], task_configs: dict[str, TaskConfig]) -> None:
    """Put a run's task selection into its fingerprinted ``settings``, in place: each entry's full
    :class:`TaskConfig` (``task_configs``) in place of ``task_options`` and ``limit``, and ``task_file_signatures``
    where the tasks read local files (an edited file makes other questions and golds).

    >>> settings = {"task_options": {}, "limit": 2}
    >>> fingerprint_task_selection(settings, {"arith": TaskConfig(task="arith", task_limit=2)})
    >>> sorted(settings), settings["task_configs"]["arith"]["task_limit"]
    (['task_configs'], 2)
    """
    del settings["task_options"], settings["limit"]
    settings["task_configs"] = {entry: dataclasses.asdict(tc) for entry, tc in task_configs.items()}
    task_files = task_file_signatures(list(task_configs.values()))
    if task_files:
        settings["task_file_signatures"] = task_files
