"""The code-reasoning problem: :class:`CodeProblem` (the visible part, ``example.meta["code"]``) and the gold
builders of the three code answer kinds (see :mod:`metamod.tasks.code.grading` for how they are graded)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from metamod.tasks.code.extract import SUBTASKS, parse_literal

#: The answer kinds of the code subtasks.
KIND_OF_SUBTASK = {"deduction": "code_output", "abduction": "code_input", "induction": "code_function"}
CODE_KINDS = tuple(KIND_OF_SUBTASK.values())
SUBTASK_OF_KIND = {kind: subtask for subtask, kind in KIND_OF_SUBTASK.items()}
#: Languages a code problem's function/program may be written in.
LANGUAGES = ("python", "robustfill", "deepcoder")


# --------------------------------------------------------------------------------------------- the problem


@dataclass(frozen=True)
class CodeProblem:
    """The visible part of a code-reasoning problem (``example.meta["code"]``): never the answer.

    Attributes:
        subtask: ``deduction`` (predict the output), ``abduction`` (predict an input) or ``induction`` (infer the
            function from pairs).
        entry: the function's name (``"f"`` for CRUXEval, the LeetCode name for LiveCodeBench).
        function: the function's source (deduction/abduction), ``None`` for induction.
        input: the argument list as literal source (deduction), else ``None``.
        output: the output as literal source (abduction), else ``None``.
        visible: the ``(input_src, output_src)`` pairs the agent may see (induction), else ``()``.
        language: ``python``, ``robustfill`` or ``deepcoder``.
        dataset: where it comes from (``cruxeval``, ``livecodebench``, ``synthetic``, ...).
        level: a difficulty level when the dataset has one, else ``None``.
        prelude: source run before ``function`` (imports a dataset assumes), ``""`` when none.

    >>> p = CodeProblem("deduction", "f", "def f(x):\\n    return x + 3", input="4", dataset="synthetic", level=1)
    >>> p.subtask, p.kind, p.to_meta()["visible"]
    ('deduction', 'code_output', [])
    >>> CodeProblem("deduction", "f", None, input="4")
    Traceback (most recent call last):
    ...
    ValueError: code problem (deduction): function is required (the source defining 'f')
    """

    subtask: str
    entry: str
    function: str | None
    input: str | None = None
    output: str | None = None
    visible: tuple[tuple[str, str], ...] = ()
    language: str = "python"
    dataset: str = ""
    level: int | None = None
    prelude: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        where = f"code problem ({self.subtask})"
        if self.subtask not in SUBTASKS:
            raise ValueError(f"code problem: subtask must be one of {', '.join(SUBTASKS)}, got {self.subtask!r}")
        if self.language not in LANGUAGES:
            raise ValueError(f"{where}: language must be one of {', '.join(LANGUAGES)}, got {self.language!r}")
        if not isinstance(self.entry, str) or not self.entry.isidentifier():
            raise ValueError(f"{where}: entry must be a Python identifier, got {self.entry!r}")
        if self.subtask != "induction" and not self.function:
            raise ValueError(f"{where}: function is required (the source defining {self.entry!r})")
        if self.subtask == "deduction" and self.input is None:
            raise ValueError(f"{where}: input is required (the argument list as literal source)")
        if self.subtask == "abduction" and self.output is None:
            raise ValueError(f"{where}: output is required (the output as literal source)")
        visible = tuple((str(pair[0]), str(pair[1])) for pair in self.visible)
        if self.subtask == "induction" and not visible:
            raise ValueError(f"{where}: visible must hold at least one [input_src, output_src] pair")
        object.__setattr__(self, "visible", visible)

    @property
    def kind(self) -> str:
        """The answer kind of the problem (``code_output``, ``code_input`` or ``code_function``)."""
        return KIND_OF_SUBTASK[self.subtask]

    @property
    def runnable(self) -> str:
        """The prelude and the function, as one source to run."""
        return f"{self.prelude.rstrip()}\n\n{self.function or ''}" if self.prelude else self.function or ""

    def to_meta(self) -> dict[str, Any]:
        """The ``example.meta["code"]`` mapping (the keys of Contract 2, plus ``prelude`` when there is one)."""
        meta = {
            "subtask": self.subtask,
            "entry": self.entry,
            "function": self.function,
            "input": self.input,
            "output": self.output,
            "visible": [list(pair) for pair in self.visible],
            "language": self.language,
            "dataset": self.dataset,
            "level": self.level,
        }
        if self.prelude:
            meta["prelude"] = self.prelude
        meta.update(self.extra)
        return meta


_PROBLEM_KEYS = ("subtask", "entry", "function", "input", "output", "visible", "language", "dataset", "level")


def code_problem(example: Any) -> CodeProblem:
    """The :class:`CodeProblem` of an example (an :class:`~metamod.tasks.base.Example` or its ``meta["code"]``).

    Args:
        example: an example of a code task, or the ``meta["code"]`` mapping itself.

    Returns:
        The checked problem.

    Raises:
        ValueError: when the example has no ``meta["code"]`` or it is malformed.
    """
    meta = example if isinstance(example, dict) else getattr(example, "meta", None)
    if isinstance(meta, dict) and "code" in meta and isinstance(meta["code"], dict):
        meta = meta["code"]
    if not isinstance(meta, dict) or "subtask" not in meta:
        name = getattr(example, "id", "the example")
        raise ValueError(f"{name}: no meta['code'] problem (expected a code-reasoning example)")
    extra = {key: value for key, value in meta.items() if key not in (*_PROBLEM_KEYS, "prelude")}
    return CodeProblem(
        subtask=meta["subtask"],
        entry=meta.get("entry") or "f",
        function=meta.get("function"),
        input=meta.get("input"),
        output=meta.get("output"),
        visible=tuple(tuple(pair) for pair in meta.get("visible") or ()),
        language=meta.get("language") or "python",
        dataset=meta.get("dataset") or "",
        level=meta.get("level"),
        prelude=meta.get("prelude") or "",
        extra=extra,
    )


# --------------------------------------------------------------------------------------------- golds


def deduction_gold(output_src: str) -> str:
    """The ``code_output`` gold: the output literal source, checked to parse.

    >>> deduction_gold(" [1, 2] ")
    '[1, 2]'
    """
    parse_literal(output_src)
    return output_src.strip()


def abduction_gold(function: str, entry: str, output: str, input: str, prelude: str = "") -> str:
    """The ``code_input`` gold JSON (``prelude`` only when non-empty).

    >>> abduction_gold("def f(x):\\n    return x + 1", "f", "5", "4")
    '{"function": "def f(x):\\\\n    return x + 1", "entry": "f", "output": "5", "input": "4"}'
    """
    gold = {"function": function, "entry": entry, "output": output.strip(), "input": input.strip()}
    if prelude:
        gold["prelude"] = prelude
    return json.dumps(gold)


def induction_gold(
    tests: list[tuple[str, str]], entry: str, language: str, reference: str | None, visible: int | None = None
) -> str:
    """The ``code_function`` gold JSON.

    Args:
        tests: the graded pairs, the visible ones (if graded) first.
        entry: the function name.
        language: ``python`` or a DSL.
        reference: the reference program, or ``None``.
        visible: how many leading pairs of ``tests`` the agent was shown (``0``: every graded pair is hidden);
            ``None`` leaves the key out (the hidden-pair counts of a grade are then unknown).

    >>> induction_gold([("[1]", "[2]")], "f", "python", None)
    '{"tests": [["[1]", "[2]"]], "entry": "f", "language": "python", "reference": null}'
    >>> json.loads(induction_gold([("1", "2"), ("2", "3")], "f", "python", None, visible=1))["visible"]
    1
    """
    if language not in LANGUAGES:
        raise ValueError(f"induction gold: language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    pairs = [[str(i), str(o)] for i, o in tests]
    gold: dict[str, Any] = {"tests": pairs, "entry": entry, "language": language, "reference": reference}
    if visible is not None:
        if not isinstance(visible, int) or isinstance(visible, bool) or not 0 <= visible <= len(pairs):
            raise ValueError(f"induction gold: visible must be an integer in 0..{len(pairs)}, got {visible!r}")
        gold["visible"] = visible
    return json.dumps(gold)
