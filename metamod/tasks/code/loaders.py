"""Code-reasoning benchmarks: CRUXEval and LiveCodeBench (deduction ``*_o``, abduction ``*_i``) and the induction
sets ListFunction, MiniARC, RobustFill and DeepCoder.

Every task reads a Hugging Face dataset (``path``, with the paper's dataset as default where one is published) or
a local ``data_files`` export (``.jsonl``/``.json``/``.parquet``/``.csv``), and yields
:class:`~metamod.tasks.base.Example` objects whose ``meta["code"]`` holds the visible problem
(:class:`~metamod.tasks.code.problem.CodeProblem`) and whose gold is self-contained (see
:mod:`metamod.tasks.code.grading`). Rows that cannot be read (an input or output that is not a literal, a call
that does not fit the function's signature, too few pairs) are skipped and logged, never fatal.

Row layouts (docs/tasks.md, "Code reasoning"):

* execution rows (CRUXEval, LiveCodeBench): ``code``, ``input``, ``output``, an id and, for LiveCodeBench,
  ``function_name``. A CRUXEval ``input`` is an argument list (``"'abc', 2"``); a LiveCodeBench ``input`` is a call
  (``"minSum(nums1 = [2, 0], nums2 = [1])"``) whose keyword arguments are placed by the function's signature.
* induction rows: ``{"id", "pairs": [[input_src, output_src], ...], "program"?}`` (the first half, rounded up, is
  visible; the rest hidden), or ``{"train": [...], "test": [...]}`` (train visible, test hidden) where each side is a
  list of ``[input, output]`` / ``{"input", "output"}`` pairs, or column-wise ``{"inputs": [...], "outputs": [...],
  "program"?}``. In pair lists a string is literal source (``"[1, 2]"``); in column-wise lists every entry is a
  value (a string is a string), and DeepCoder-style ``{"x0": [...], "x1": [...]}`` inputs give one argument per
  name. A DSL row may omit the outputs when it gives the program: they are computed with the interpreter.
"""

from __future__ import annotations

import ast
import datetime as dt
import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any

from metamod.tasks.base import Example
from metamod.tasks.benchmarks import TableTask, as_text
from metamod.tasks.code.extract import LiteralError, literal_repr, parse_args, parse_literal, positional_args
from metamod.tasks.code.problem import CodeProblem, abduction_gold, deduction_gold, induction_gold
from metamod.tasks.sources import Table, load_hub_table, read_table

logger = logging.getLogger(__name__)

#: Which pairs an induction answer is graded on (``all``, the default, follows MARCO).
GRADE_PAIRS = ("all", "hidden")

#: Imports LiveCodeBench solutions rely on without writing them (``List``, ``inf``, ``Counter``, ...): run before
#: the function, never shown as part of it.
LIVECODEBENCH_PRELUDE = """\
import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re, string
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from copy import deepcopy
from functools import cache, lru_cache, partial, reduce
from heapq import heapify, heappop, heappush, heappushpop, heapreplace, nlargest, nsmallest
from itertools import accumulate, chain, combinations, count, cycle, groupby, islice, pairwise, permutations
from itertools import product, repeat, zip_longest
from math import ceil, comb, factorial, floor, gcd, inf, isqrt, lcm, log, log2, log10, prod, sqrt
from operator import itemgetter
from string import ascii_letters, ascii_lowercase, ascii_uppercase, digits
from typing import Any, Dict, List, Optional, Set, Tuple"""


#: Which rows of ``livecodebench/execution-v2`` (479) the LiveCodeBench tasks keep: ``all``, or ``rhda102``.
LIVECODEBENCH_SELECTIONS = ("all", "rhda102")
#: The ``id`` of each of the 102 rows in RHDA's LiveCodeBench file (``data/deductive/livecodebench.jsonl`` of
#: TnTWoW/code_reasoning, written by its ``data/download_livecodebench.py``): execution-v2 rows ``sample_244`` ..
#: ``sample_301`` and ``sample_435`` .. ``sample_478``, the problems of contests held after
#: :data:`RHDA102_AFTER` (2023-10-08 to 2023-11-25). MARCO's LiveCodeBench scores are all multiples of 1/102.
RHDA102_IDS = frozenset(f"sample_{n}" for n in itertools.chain(range(244, 302), range(435, 479)))
#: RHDA's rule: keep the execution-v2 rows whose ``contest_date`` is later than this day (its midnight).
RHDA102_AFTER = dt.date(2023, 10, 1)


def contest_day(value: Any) -> dt.date | None:
    """The day of a LiveCodeBench ``contest_date`` cell (a datetime on the hub, ISO text in exports), else ``None``.

    >>> contest_day("2023-10-08T00:00:00"), contest_day(dt.datetime(2023, 11, 25, 19, 30)), contest_day("soon")
    (datetime.date(2023, 10, 8), datetime.date(2023, 11, 25), None)
    """
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = as_text(value)
    try:
        return dt.date.fromisoformat(text[:10]) if text else None
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------- questions


def render_question(problem: CodeProblem) -> str:
    """A plain-text rendering of a code problem (what non-code methods see as ``example.question``).

    >>> p = CodeProblem("deduction", "f", "def f(x):\\n    return x + 3", input="4")
    >>> print(render_question(p))
    Here is a Python function:
    <BLANKLINE>
    ```python
    def f(x):
        return x + 3
    ```
    <BLANKLINE>
    What does `f(4)` return? Answer with the returned value as a Python literal.
    """
    entry = problem.entry
    if problem.subtask == "induction":
        shown = "\n".join(f"{entry}({inp}) == {out}" for inp, out in problem.visible)
        lines = [f"An unknown function `{entry}` gives these outputs:", "", shown, ""]
        ask = f"Write a Python function `{entry}` that computes the output for any such input."
        if problem.language != "python":
            ask += f" A program in the {_DSL_TITLES.get(problem.language, problem.language)} DSL is accepted too."
        return "\n".join([*lines, ask])
    head = f"Here is a Python function:\n\n```python\n{problem.function.rstrip()}\n```\n\n"
    if problem.subtask == "deduction":
        return (
            head + f"What does `{entry}({problem.input})` return? Answer with the returned value as a Python literal."
        )
    return head + (
        f"Find an input for which `{entry}` returns `{problem.output}`. Answer with the arguments as Python "
        f"literals, written as the call `{entry}(...)`."
    )


_DSL_TITLES = {"robustfill": "RobustFill", "deepcoder": "DeepCoder"}


def code_example(example_id: str, problem: CodeProblem, gold: str, **meta: Any) -> Example:
    """Build a code :class:`~metamod.tasks.base.Example`: question rendered, problem in ``meta["code"]``.

    Args:
        example_id: the stable id.
        problem: the visible problem.
        gold: the self-contained gold (see :mod:`metamod.tasks.code.grading`).
        **meta: more ``meta`` entries (source, split, row, level, ...).

    Returns:
        The example.
    """
    return Example(
        id=example_id,
        question=render_question(problem),
        gold=gold,
        kind=problem.kind,
        meta={**meta, "code": problem.to_meta()},
    )


# --------------------------------------------------------------------------------------------- deduction / abduction


def _call_arguments(call_src: str) -> tuple[str | None, str] | None:
    """``(function name, argument text)`` of a call written as ``name(args)``; ``None`` when it is not one."""
    try:
        node = ast.parse(call_src.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    parts = [ast.get_source_segment(call_src.strip(), arg) or "" for arg in node.args]
    parts += [f"{kw.arg}={ast.get_source_segment(call_src.strip(), kw.value) or ''}" for kw in node.keywords]
    if any(kw.arg is None for kw in node.keywords):
        return None
    return node.func.id, ", ".join(parts)


class CodeExecutionTask(TableTask):
    """Execution problems from a table (``code``, ``input``, ``output``): deduction or abduction.

    Args:
        path: the Hugging Face dataset id (default: the benchmark's own).
        split: the hub split (default ``test``); ``a+b`` joins splits.
        data_files: a local export with the same columns, used instead of the hub.
        subset: the hub config name.
        code_column / input_column / output_column / entry_column / id_column: column names when they differ
            from the dataset's own (``entry_column=None``: the entry is ``f``, or the name in a call input; without
            the default ``id`` column, ids are ``<task>-<split>-<row>``).
        limit / seed: a seeded random subsample (the whole set when smaller).
    """

    kind = "code_output"
    subtask = "deduction"
    dataset = ""
    default_split = "test"
    code_column, input_column, output_column = "code", "input", "output"
    entry_column: str | None = None
    id_column: str | None = "id"
    prelude = ""
    meta_columns: tuple[str, ...] = ()

    def __init__(
        self,
        path: str | None = None,
        split: str | None = None,
        data_files: str | None = None,
        subset: str | None = None,
        code_column: str | None = None,
        input_column: str | None = None,
        output_column: str | None = None,
        entry_column: str | None = None,
        id_column: str | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if path is not None:
            self.hub_path = path
        self.code_column = code_column or self.code_column
        self.input_column = input_column or self.input_column
        self.output_column = output_column or self.output_column
        self.entry_column = entry_column or self.entry_column
        self._id_required = id_column is not None  # the default id column may be absent: rows are numbered then
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=self.code_column,
            answer_column=self.output_column,
            id_column=id_column,
            subset=subset,
            limit=limit,
            seed=seed,
        )

    def _required_columns(self) -> dict[str, str | None]:
        return {
            "code_column": self.code_column,
            "input_column": self.input_column,
            "output_column": self.output_column,
            "entry_column": self.entry_column,
            "id_column": self.id_column if self._id_required else None,
        }

    def _row_id(self, index: int) -> str:
        if self.id_column is not None and self.id_column not in self._table:
            split, row = self._row_origin(index)
            return f"{self.name}-{split}-{row}"
        row_id = super()._row_id(index)
        return row_id if row_id.startswith(f"{self.name}-") else f"{self.name}-{row_id}"

    def _problem(self, index: int) -> tuple[CodeProblem, str] | None:
        """The visible problem and the gold of row ``index`` (``None`` when the row cannot be read)."""
        table = self._table
        code = as_text(table[self.code_column][index])
        inp = as_text(table[self.input_column][index])
        out = as_text(table[self.output_column][index])
        if code is None or inp is None or out is None:
            return None
        entry = as_text(table[self.entry_column][index]) if self.entry_column else None
        call = _call_arguments(inp) if not _is_args(inp) else None
        if call is not None:  # LiveCodeBench writes the whole call: "name(a = 1, b = [2])"
            entry = entry or call[0]
            inp = call[1]
        entry = entry or "f"
        try:
            keywords = parse_args(inp)[1]
            args = positional_args(inp, code, entry)
            gold_output = deduction_gold(out)
        except LiteralError:
            return None
        inp = args if keywords else inp.strip()  # keyword arguments become positional ones
        if self.subtask == "deduction":
            problem = CodeProblem("deduction", entry, code, input=inp, dataset=self.dataset, prelude=self.prelude)
            return problem, gold_output
        problem = CodeProblem("abduction", entry, code, output=gold_output, dataset=self.dataset, prelude=self.prelude)
        return problem, abduction_gold(code, entry, gold_output, inp, self.prelude)

    def _build(self, index: int) -> Example | None:
        built = self._problem(index)
        if built is None:
            return None
        problem, gold = built
        split, row = self._row_origin(index)
        meta: dict[str, Any] = {"source": self.source, "split": split, "row": row}
        for column in self.meta_columns:
            value = self._table[column][index] if column in self._table else None
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                meta[column] = value if isinstance(value, int | float | str | bool) else str(value)
        return code_example(self._row_id(index), problem, gold, **meta)


def _is_args(text: str) -> bool:
    try:
        parse_args(text)
    except LiteralError:
        return False
    return True


class CRUXEvalOTask(CodeExecutionTask):
    """CRUXEval-O (deduction): predict ``f(input)``. Hub ``cruxeval-org/cruxeval``, split ``test``, 800 rows with
    columns ``code``, ``input``, ``output``, ``id`` (``sample_0``...); ids ``cruxeval_o-sample_0``."""

    name, kind, subtask, dataset = "cruxeval_o", "code_output", "deduction", "cruxeval"
    hub_path = "cruxeval-org/cruxeval"


class CRUXEvalITask(CodeExecutionTask):
    """CRUXEval-I (abduction): find an input with ``f(input) == output``. Same source as :class:`CRUXEvalOTask`."""

    name, kind, subtask, dataset = "cruxeval_i", "code_input", "abduction", "cruxeval"
    hub_path = "cruxeval-org/cruxeval"


class LiveCodeBenchOTask(CodeExecutionTask):
    """LiveCodeBench-O (deduction). Hub ``livecodebench/execution-v2``, split ``test`` (479 rows): ``code``,
    ``input`` (a call, ``name(a = 1)``), ``output``, ``function_name``, ``id`` (``sample_0``...), ``question_id``,
    ``contest_id``, ``contest_date``, ``difficulty``, ``numsteps``, ``problem_id``. The functions run after
    :data:`LIVECODEBENCH_PRELUDE` (the imports the solutions assume).

    Args:
        selection: ``all`` (default: every row) or ``rhda102``: the 102 rows of RHDA's LiveCodeBench file
            (:data:`RHDA102_IDS`, picked by the ``id`` column), which MARCO's numbers fit; see docs/tasks.md.
        Other arguments: as :class:`CodeExecutionTask`.
    """

    name, kind, subtask, dataset = "livecodebench_o", "code_output", "deduction", "livecodebench"
    hub_path = "livecodebench/execution-v2"
    entry_column = "function_name"
    prelude = LIVECODEBENCH_PRELUDE
    meta_columns = ("difficulty", "question_id", "contest_id", "contest_date", "numsteps")

    def __init__(
        self,
        path: str | None = None,
        split: str | None = None,
        data_files: str | None = None,
        subset: str | None = None,
        code_column: str | None = None,
        input_column: str | None = None,
        output_column: str | None = None,
        entry_column: str | None = None,
        id_column: str | None = None,
        selection: str = "all",
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if selection not in LIVECODEBENCH_SELECTIONS:
            raise ValueError(
                f"{self.name}: selection must be one of {', '.join(LIVECODEBENCH_SELECTIONS)}, got {selection!r}"
            )
        self.selection = selection
        super().__init__(
            path=path,
            split=split,
            data_files=data_files,
            subset=subset,
            code_column=code_column,
            input_column=input_column,
            output_column=output_column,
            entry_column=entry_column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    def _required_columns(self) -> dict[str, str | None]:
        columns = super()._required_columns()
        if self.selection == "rhda102":  # the selection picks rows by their execution-v2 id
            columns["id_column"] = self.id_column
        return columns

    def _keep(self, index: int) -> bool:
        return self.selection == "all" or as_text(self._table[self.id_column][index]) in RHDA102_IDS

    def _load(self) -> tuple[Table, list[int]]:
        first = self._table is None
        table, valid = super()._load()
        if first and self.selection == "rhda102":
            rows = self._num_rows()
            kept = sum(1 for index in range(rows) if self._keep(index))
            days = [contest_day(value) for value in table.get("contest_date", [])]
            after = sum(1 for day in days if day is not None and day > RHDA102_AFTER)
            logger.info(
                "%s: selection='rhda102' kept %d of %d rows (RHDA's 102 ids); %d rows have a contest_date after %s",
                self.source,
                kept,
                rows,
                after,
                RHDA102_AFTER,
            )
            if self.data_files is None and (kept != len(RHDA102_IDS) or (days and after != kept)):
                logger.warning(
                    "%s: expected the %d rows of RHDA's file, all dated after %s; found %d selected rows and %d "
                    "rows after that date: the hub split may differ from the one RHDA downloaded",
                    self.source,
                    len(RHDA102_IDS),
                    RHDA102_AFTER,
                    kept,
                    after,
                )
        return table, valid


class LiveCodeBenchITask(LiveCodeBenchOTask):
    """LiveCodeBench-I (abduction): find an input with ``name(input) == output``. Same source as
    :class:`LiveCodeBenchOTask`."""

    name, kind, subtask = "livecodebench_i", "code_input", "abduction"


# --------------------------------------------------------------------------------------------- induction


class _RowError(ValueError):
    """A row of an induction file that cannot be read (the reason is logged)."""


def _source(value: Any, *, is_value: bool, what: str) -> str:
    """Literal source for a pair entry: a string is source unless ``is_value``; other JSON values are values."""
    if isinstance(value, str) and not is_value:
        try:
            parse_args(value) if what == "input" else parse_literal(value)
        except LiteralError as err:
            raise _RowError(f"{what} {value[:60]!r} is not literal source ({err})") from None
        return value.strip()
    if value is None:
        raise _RowError(f"missing {what}")
    return literal_repr(value)


def _pair_list(items: Any) -> list[tuple[Any, Any]]:
    """``[(input, output), ...]`` from a list of ``[in, out]`` or ``{"input", "output"}`` entries (raw values)."""
    pairs = []
    for item in items:
        if isinstance(item, dict):
            pairs.append((item.get("input"), item.get("output")))
        elif isinstance(item, list | tuple) and len(item) == 2:
            pairs.append((item[0], item[1]))
        else:
            raise _RowError(f"pair {item!r:.60} is neither [input, output] nor {{'input', 'output'}}")
    return pairs


def _columnwise(side: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """Argument sources and raw outputs (``None`` when absent) of a column-wise ``{"inputs", "outputs"}`` side."""
    inputs = side.get("inputs")
    if isinstance(inputs, dict):  # DeepCoder: {"x0": [per example], "x1": [...]}
        names = list(inputs)
        counts = {len(inputs[name]) for name in names}
        if len(counts) != 1:
            raise _RowError("input columns have different lengths")
        args = [", ".join(literal_repr(inputs[name][i]) for name in names) for i in range(counts.pop())]
    elif isinstance(inputs, list):
        args = [literal_repr(value) for value in inputs]
    else:
        raise _RowError("'inputs' must be a list, or a mapping of input name to a list")
    outputs = side.get("outputs")
    if outputs is None:
        return args, [None] * len(args)
    if not isinstance(outputs, list) or len(outputs) != len(args):
        raise _RowError("'outputs' must be a list as long as the inputs")
    return args, [_Value(value) for value in outputs]


class _Value:
    """A raw JSON value (column-wise rows), as opposed to literal source."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class InductionTask(TableTask):
    """Programming by example: infer a function from visible input/output pairs; graded on every pair (MARCO).

    Args:
        path: a Hugging Face dataset id with the same row layout (default: none is published; use ``data_files``).
        split: the hub split (default ``test``).
        data_files: a local ``.jsonl``/``.json`` file (layouts in the module docstring and docs/tasks.md).
        subset: the hub config name.
        id_column: the field holding a row id (default: ``id``, ``idx`` or ``index`` when present, else the row
            number).
        grade_pairs: ``all`` (default: grade on the visible and the hidden pairs, as MARCO's induction "accuracy"
            and "problem accuracy" count every pair) or ``hidden`` (the hidden pairs only). Either way the gold
            marks which graded pairs were visible, so the hidden-pair numbers are reported too.
        limit / seed: a seeded random subsample.
    """

    kind = "code_function"
    name = "induction"
    dataset = ""
    language = "python"
    default_split = "test"
    data_hint = "the benchmark's export"

    def __init__(
        self,
        path: str | None = None,
        split: str | None = None,
        data_files: str | None = None,
        subset: str | None = None,
        id_column: str | None = None,
        grade_pairs: str = "all",
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if grade_pairs not in GRADE_PAIRS:
            raise ValueError(f"{self.name}: grade_pairs must be one of {', '.join(GRADE_PAIRS)}, got {grade_pairs!r}")
        if path is None and data_files is None:
            raise ValueError(
                f"{self.name}: data_files is required (a .jsonl/.json file, e.g. {self.data_hint}), or path=<a hub "
                f"dataset with the same rows>; see docs/tasks.md, 'Code reasoning'"
            )
        self.hub_path = path
        self.grade_pairs = grade_pairs
        super().__init__(split=split, data_files=data_files, id_column=id_column, subset=subset, limit=limit, seed=seed)

    def _read_source(self) -> Table:
        if self.data_files is not None:
            return read_table(self.data_files)
        return load_hub_table(self.hub_path, self.subset, self.split)

    def _required_columns(self) -> dict[str, str | None]:
        return {"id_column": self.id_column}

    def _num_rows(self) -> int:
        return max((len(values) for values in self._table.values()), default=0) if self._table else 0

    def _row(self, index: int) -> dict[str, Any]:
        return {column: values[index] for column, values in self._table.items() if index < len(values)}

    def _row_id(self, index: int) -> str:
        row = self._row(index)
        column = self.id_column or next((c for c in ("id", "idx", "index") if row.get(c) is not None), None)
        value = as_text(row.get(column)) if column else None
        if value is None:
            split, number = self._row_origin(index)
            return f"{self.name}-{split}-{number}"
        return value if value.startswith(f"{self.name}-") else f"{self.name}-{value}"

    def _pairs(self, row: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str | None]:
        """``(visible, hidden, reference program)`` of a row; raises :class:`_RowError`."""
        program = row.get("program") or row.get("reference")
        if row.get("train") is not None and row.get("test") is not None:
            sides = []
            for key in ("train", "test"):
                side = row[key]
                if isinstance(side, dict):
                    program = program or side.get("program")
                    sides.append(self._complete(*_columnwise(side), program))
                elif isinstance(side, list):
                    sides.append(self._sources(_pair_list(side)))
                else:
                    raise _RowError(f"{key!r} must be a list of pairs or an {{'inputs', 'outputs'}} mapping")
            visible, hidden = sides
        elif row.get("pairs") is not None:
            pairs = self._sources(_pair_list(row["pairs"]))
            cut = math.ceil(len(pairs) / 2)
            visible, hidden = pairs[:cut], pairs[cut:]
        elif row.get("inputs") is not None:
            pairs = self._complete(*_columnwise(row), program)
            cut = math.ceil(len(pairs) / 2)
            visible, hidden = pairs[:cut], pairs[cut:]
        else:
            raise _RowError("no 'pairs', 'train'/'test' or 'inputs' field")
        if not visible or not hidden:
            raise _RowError(f"needs at least one visible and one hidden pair, got {len(visible)} and {len(hidden)}")
        return visible, hidden, str(program) if program is not None else None

    def _sources(self, pairs: Sequence[tuple[Any, Any]]) -> list[tuple[str, str]]:
        return [(_source(i, is_value=False, what="input"), _source(o, is_value=False, what="output")) for i, o in pairs]

    def _complete(self, args: list[str], outputs: list[Any], program: Any) -> list[tuple[str, str]]:
        """Pairs from argument sources and raw outputs, computing missing outputs with the DSL interpreter."""
        pairs = []
        for arg, out in zip(args, outputs, strict=True):
            if out is None:
                out_src = self._computed_output(arg, program)
            else:
                out_src = literal_repr(out.value)
            pairs.append((arg, out_src))
        return pairs

    def _computed_output(self, arg: str, program: Any) -> str:
        if self.language == "python" or program is None:
            raise _RowError("an output is missing (and there is no DSL program to compute it)")
        from metamod.tasks.dsl import DSLS, DSLError

        dsl = DSLS[self.language]
        try:
            values, _ = parse_args(arg)
            return literal_repr(dsl.run(dsl.parse(str(program)), tuple(values)))
        except (DSLError, LiteralError) as err:
            raise _RowError(f"could not compute an output with the {self.language} interpreter: {err}") from None

    def _build(self, index: int) -> Example | None:
        row = self._row(index)
        try:
            visible, hidden, program = self._pairs(row)
        except _RowError as err:
            logger.debug("%s row %d: %s", self.source, index, err)
            return None
        tests = hidden if self.grade_pairs == "hidden" else visible + hidden
        shown = 0 if self.grade_pairs == "hidden" else len(visible)
        level = row.get("level")
        problem = CodeProblem(
            "induction",
            "f",
            None,
            visible=tuple(visible),
            language=self.language,
            dataset=self.dataset,
            level=level if isinstance(level, int) and not isinstance(level, bool) else None,
        )
        gold = induction_gold(tests, "f", self.language, program, visible=shown)
        split, number = self._row_origin(index)
        return code_example(
            self._row_id(index), problem, gold, source=self.source, split=split, row=number, hidden_pairs=len(hidden)
        )


class ListFunctionTask(InductionTask):
    """ListFunction (Rule 2020): lists of ints to lists of ints, 250 concepts. No hub copy is published; the paper's
    export is e.g. ``data/list_function.jsonl`` of linlu-qiu/lm-inductive-reasoning (``train``/``test`` lists of
    ``{"input": "[3, 4]", "output": "[1]"}``)."""

    name, dataset = "list_function", "list_function"
    data_hint = "list_function.jsonl with train/test pairs"


class MiniARCTask(InductionTask):
    """MiniARC (Kim et al. 2022): 5x5 grids (lists of lists of ints). No hub copy is published; e.g.
    ``data/miniarc.jsonl`` of linlu-qiu/lm-inductive-reasoning (``train``/``test`` lists of ``{"input", "output"}``
    grids)."""

    name, dataset = "mini_arc", "mini_arc"
    data_hint = "miniarc.jsonl with train/test grid pairs"


class RobustFillTask(InductionTask):
    """RobustFill (Devlin et al. 2017): string-to-string programs in the RobustFill DSL. No hub copy is published;
    e.g. ``data/inductive/Final_Robustfill.jsonl`` of TnTWoW/code_reasoning (column-wise ``train``/``test``)."""

    name, dataset, language = "robustfill", "robustfill", "robustfill"
    data_hint = "Final_Robustfill.jsonl"


class DeepCoderTask(InductionTask):
    """DeepCoder (Balog et al. 2016): integer-list programs in the DeepCoder DSL. No hub copy is published; e.g.
    ``data/inductive/Final_Deepcoder.jsonl`` of TnTWoW/code_reasoning (column-wise ``train``/``test`` with
    ``{"x0": [...], ...}`` inputs)."""

    name, dataset, language = "deepcoder", "deepcoder", "deepcoder"
    data_hint = "Final_Deepcoder.jsonl"
