"""Game of 24: combine four numbers with ``+ - * /`` and parentheses to make 24, each number used exactly once.

Three pieces live here:

* :func:`check_expression`, the safe checker the shared grader uses for kind ``game24``. It parses the answer with
  :func:`ast.parse` (never ``eval``/``exec``/``compile`` to code) and walks a whitelist of nodes: non-negative
  integer literals, binary ``+ - * /`` and parentheses. Values are exact :class:`fractions.Fraction` arithmetic.
  Anything else (names, calls, attributes, ``**``, ``//``, ``%``, unary signs, comparisons, strings, floats, huge
  literals or inputs, deep nesting) is ``False``, never an exception.
* :func:`solve`, a small exact solver (memoised per multiset of numbers), used to keep generated puzzles solvable
  and to give each one a reference solution and a difficulty proxy.
* :class:`Game24Task`, registered as ``game24``: an offline seeded stream of solvable puzzles by default, or the
  puzzles of a local file / Hugging Face dataset (``test-time-compute/game-of-24``, the Tree-of-Thoughts list), by
  default only the 100 hard puzzles at ranks 901-1000 of that list (the set Tree-of-Thoughts and MC2 evaluate on).

Unary minus (and plus) is rejected: the puzzle allows only the four binary operations on the given numbers, so
``-4 + 28`` style answers that bring in a negated number are not solutions. Literals must be written as integers
(``8``, not ``8.0``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import logging
import random
import re
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

from metamod.tasks.base import Example
from metamod.tasks.benchmarks import TableTask, as_text
from metamod.tasks.sources import Table

logger = logging.getLogger(__name__)

#: The value every solution must reach.
TARGET = 24
#: Longest answer text the checker reads; longer ones are wrong without parsing.
MAX_EXPRESSION_CHARS = 200
#: Largest integer literal the checker accepts.
MAX_LITERAL = 10**6
#: The numbers the generator draws from (inclusive), four per puzzle.
NUMBER_RANGE = (1, 13)
NUMBERS_PER_PUZZLE = 4
#: Hugging Face id of the Tree-of-Thoughts puzzle list (1,362 puzzles, split ``train``, column ``Puzzles``).
HUB_PATH = "test-time-compute/game-of-24"
SOURCES = ("generated", "hub", "file")
SPLITS = ("train", "test")
#: Which rows of a puzzle table (hub or file) become examples: ``tot_hard`` = ranks :data:`TOT_HARD_RANKS`, ``all``.
SELECTIONS = ("tot_hard", "all")
#: The first and last rank (inclusive) of the Tree-of-Thoughts test puzzles: ``data[900:1000]`` of its ``24.csv``.
TOT_HARD_RANKS = (901, 1000)
#: The column of the Tree-of-Thoughts list holding each puzzle's rank (1 = solved fastest by people).
RANK_COLUMN = "Rank"

#: Surface forms rewritten before parsing (LaTeX and typographic operators, brackets used as parentheses).
_SURFACE = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\times", "*"),
    ("\\cdot", "*"),
    ("\\div", "/"),
    ("\\{", "("),
    ("\\}", ")"),
    ("×", "*"),
    ("✕", "*"),
    ("⋅", "*"),
    ("·", "*"),
    ("∗", "*"),
    ("÷", "/"),
    ("∕", "/"),
    ("−", "-"),
    ("–", "-"),
    ("—", "-"),
    ("[", "("),
    ("]", ")"),
    ("{", "("),
    ("}", ")"),
)
_MATH_WRAP_RE = re.compile(r"^\s*(?:\$\$?|\\\(|\\\[)(.*?)(?:\$\$?|\\\)|\\\])\s*$", re.DOTALL)
_TIMES_LETTER_RE = re.compile(r"(?<=[\d)])\s*[xX]\s*(?=[\d(])")
_ALLOWED_CHARS_RE = re.compile(r"[0-9\s+\-*/()=]+")
_PUZZLE_RE = re.compile(r"\s*[0-9]{1,7}(?:\s*[\s,]\s*[0-9]{1,7})*\s*")
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class _Rejected(Exception):
    """An expression outside the whitelist."""


# --------------------------------------------------------------------------------------------- checking


def _surface(expression: str) -> str | None:
    """The answer text rewritten to plain ``+ - * / ( )`` syntax, or ``None`` when it holds anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        return None
    text = expression.strip()
    wrapped = _MATH_WRAP_RE.match(text)
    if wrapped:
        text = wrapped.group(1).strip()
    text = text.rstrip(".").rstrip()
    for old, new in _SURFACE:
        text = text.replace(old, new)
    text = _TIMES_LETTER_RE.sub("*", text)
    if not _ALLOWED_CHARS_RE.fullmatch(text):
        return None
    return text


def _parse(expression: Any) -> list[ast.expr] | None:
    """The syntax trees of an answer's ``=``-separated parts (``(8 - 4) * (7 - 1) = 4 * 6 = 24`` has three).

    Parsed as Python syntax but not yet checked against the whitelist; ``None`` when a part does not parse.
    """
    if not isinstance(expression, str):
        return None
    text = _surface(expression)
    if text is None:
        return None
    try:
        return [ast.parse(part.strip(), mode="eval").body for part in text.split("=")]
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _walk(node: ast.AST, literals: list[int]) -> Fraction | None:
    """Evaluate a whitelisted tree exactly, collecting its literals; ``None`` after a division by zero.

    Raises:
        _Rejected: for any node outside the whitelist (or a literal that is not a small non-negative integer).
    """
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is not int or not 0 <= value <= MAX_LITERAL:
            raise _Rejected(repr(value))
        literals.append(value)
        return Fraction(value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left = _walk(node.left, literals)
        right = _walk(node.right, literals)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        return None if right == 0 else left / right
    raise _Rejected(type(node).__name__)


def _evaluate(expression: Any) -> tuple[ast.expr, Fraction | None, list[int]] | None:
    """``(tree, value, literals)`` of the first part of a whitelisted answer, else ``None``.

    The value is ``None`` after a division by zero. Later ``=`` parts (a worked chain, or ``= 24``) may use any
    numbers but must all have the first part's value, else the answer is rejected.
    """
    trees = _parse(expression)
    if trees is None:
        return None
    literals: list[int] = []
    try:
        value = _walk(trees[0], literals)
        if any(value is None or _walk(tree, []) != value for tree in trees[1:]):
            return None
    except (_Rejected, RecursionError, MemoryError):
        return None
    return trees[0], value, literals


def _as_numbers(numbers: Any) -> list[int] | None:
    if isinstance(numbers, str | bytes) or not isinstance(numbers, Sequence):
        return None
    if not all(type(n) is int for n in numbers):
        return None
    return sorted(numbers)


def check_expression(expression: str, numbers: Sequence[int], target: int = TARGET) -> bool:
    """Whether ``expression`` solves the puzzle: it uses each of ``numbers`` exactly once and equals ``target``.

    Allowed: integer literals (0 to :data:`MAX_LITERAL`), binary ``+ - * /`` and parentheses; ``×``/``x``/``\\times``
    /``\\cdot`` for ``*``, ``÷``/``\\div`` for ``/``, ``−`` for ``-``, square or curly brackets for parentheses,
    surrounding ``$...$``, and a trailing ``= 24`` or worked chain (``(8 - 4) * (7 - 1) = 4 * 6 = 24``: every later
    ``=`` part must have the first part's value; the first part is the answer). Everything else, and any text over
    :data:`MAX_EXPRESSION_CHARS` characters, is ``False``; so is a division by zero. The checker never raises.

    Args:
        expression: the answer, e.g. ``"(8 - 4) * (7 - 1)"`` (non-strings give ``False``).
        numbers: the puzzle's numbers, e.g. ``[1, 4, 7, 8]`` (a multiset: repeats must be used as often).
        target: the value to reach.

    Returns:
        ``True`` only for a valid solution.

    >>> check_expression("(8 - 4) * (7 - 1)", [4, 7, 8, 1]), check_expression("8 / (3 - 8 / 3)", [3, 3, 8, 8])
    (True, True)
    >>> check_expression("(8 − 4) × (7 − 1) = 24", [1, 4, 7, 8]), check_expression(r"$6 \\times 4 \\div 1 \\times 1$", [1, 1, 4, 6])
    (True, True)
    >>> check_expression("8 * 3", [8, 3, 1, 1]), check_expression("(8 - 4) * (7 - 1)", [8, 4, 7, 2])
    (False, False)
    >>> check_expression("__import__('os').system('x')", [1, 2, 3, 4]), check_expression("2 ** 3 * 3", [2, 3, 3])
    (False, False)
    """
    wanted = _as_numbers(numbers)
    if wanted is None:
        return False
    evaluated = _evaluate(expression)
    if evaluated is None:
        return False
    _, value, literals = evaluated
    return value is not None and sorted(literals) == wanted and value == target


def canonical_expression(expression: str) -> str | None:
    """A canonical spelling of a whitelisted expression (redundant parentheses and spacing normalised), else ``None``.

    Used to group votes: the same expression written differently gets the same key; operands in another order
    (``(7 - 1) * (8 - 4)``) are a different expression. It does not check the value or the numbers.

    Args:
        expression: the answer text.

    Returns:
        The canonical string, or ``None`` when the text is not a ``+ - * /`` expression over integer literals.

    >>> canonical_expression("((8-4))×(7 -1) = 24"), canonical_expression("8/(3-8/3)")
    ('(8 - 4) * (7 - 1)', '8 / (3 - 8 / 3)')
    >>> canonical_expression("8 ** 2") is None, canonical_expression("") is None
    (True, True)
    """
    evaluated = _evaluate(expression)
    if evaluated is None:
        return None
    try:
        return ast.unparse(evaluated[0])
    except (RecursionError, MemoryError, ValueError):
        return None


def puzzle_numbers(gold: Any) -> tuple[int, ...] | None:
    """The numbers of a puzzle from its gold: ``"4 7 8 8"`` / ``"4, 7, 8, 8"``, or an expression over them.

    >>> puzzle_numbers("4 7 8 8"), puzzle_numbers("1,1,4,6"), puzzle_numbers("(8 - 4) * (7 - 1)")
    ((4, 7, 8, 8), (1, 1, 4, 6), (1, 4, 7, 8))
    >>> puzzle_numbers("four sevens") is None, puzzle_numbers(None) is None
    (True, True)
    """
    if not isinstance(gold, str) or len(gold) > MAX_EXPRESSION_CHARS:
        return None
    if _PUZZLE_RE.fullmatch(gold):
        return tuple(sorted(int(n) for n in re.findall(r"\d+", gold)))
    evaluated = _evaluate(gold)
    if evaluated is None or not evaluated[2]:
        return None
    return tuple(sorted(evaluated[2]))


# --------------------------------------------------------------------------------------------- solving


def _combine(a: tuple[float, str], b: tuple[float, str]) -> Iterator[tuple[float, str]]:
    """Every value reachable from two items with one operation (commutative operands in a fixed order)."""
    (va, ea), (vb, eb) = a, b
    first, second = (ea, eb) if ea <= eb else (eb, ea)
    yield va + vb, f"({first} + {second})"
    yield va * vb, f"({first} * {second})"
    yield va - vb, f"({ea} - {eb})"
    yield vb - va, f"({eb} - {ea})"
    if vb != 0:
        yield va / vb, f"({ea} / {eb})"
    if va != 0:
        yield vb / va, f"({eb} / {ea})"


def _splits(numbers: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The distinct ways to split a sorted multiset into two non-empty sorted parts (unordered)."""
    pairs: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for mask in range(1, 2 ** len(numbers) - 1):
        left = tuple(n for k, n in enumerate(numbers) if mask >> k & 1)
        right = tuple(n for k, n in enumerate(numbers) if not mask >> k & 1)
        pairs.add((min(left, right), max(left, right)))
    return sorted(pairs)


def _reach(numbers: tuple[int, ...]) -> dict[float, list]:
    """Every value a sorted multiset reaches: ``{rounded value: [value, one expression, number of trees]}``.

    Floats keep the search fast; values equal to 9 decimals are merged, and every expression that is used (a
    solution or a near miss) is re-checked exactly. Trees count ``a + b`` and ``b + a`` (also ``*``) once.
    """
    if len(numbers) == 1:
        return {float(numbers[0]): [float(numbers[0]), str(numbers[0]), 1]}
    merged: dict[float, list] = {}
    for left, right in _splits(numbers):
        for va, ea, ca in _values(left):
            for vb, eb, cb in _values(right):
                for value, expression in _combine((va, ea), (vb, eb)):
                    entry = merged.setdefault(round(value, 9), [value, expression, 0])
                    entry[2] += ca * cb
    return merged


@functools.lru_cache(maxsize=1024)
def _values(numbers: tuple[int, ...]) -> tuple[tuple[float, str, int], ...]:
    """:func:`_reach` of a part of a puzzle (memoised: parts are shared by many puzzles)."""
    return tuple((value, expression, count) for value, expression, count in _reach(numbers).values())


def _spell(operation: int, ea: str, eb: str) -> str:
    """The expression of operation ``operation`` (the order of :func:`_combine`) on two sub-expressions."""
    first, second = (ea, eb) if ea <= eb else (eb, ea)
    return (
        f"({first} + {second})",
        f"({first} * {second})",
        f"({ea} - {eb})",
        f"({eb} - {ea})",
        f"({ea} / {eb})",
        f"({eb} / {ea})",
    )[operation]


@functools.lru_cache(maxsize=4096)
def _solve_all(numbers: tuple[int, ...]) -> tuple[str | None, int, tuple[str, ...]]:
    """(one solution, number of solution trees, the three nearest misses) for a sorted multiset.

    The last operation is tried on plain floats; an expression is written only for a hit or a near miss, and the
    returned ones are checked exactly (the solution: the shortest hit that passes :func:`check_expression`).
    """
    hits: dict[str, int] = {}
    near: dict[float, str] = {}
    for left, right in _splits(numbers) if len(numbers) > 1 else ():
        right_values = _values(right)
        for va, ea, ca in _values(left):
            for vb, eb, cb in right_values:
                results = (va + vb, va * vb, va - vb, vb - va, va / vb if vb else None, vb / va if va else None)
                for operation, value in enumerate(results):
                    if value is None or not -5 < value - TARGET < 5:
                        continue
                    expression = _spell(operation, ea, eb)
                    if abs(value - TARGET) < 1e-6:
                        hits[expression] = hits.get(expression, 0) + ca * cb
                    else:
                        near.setdefault(round(value, 9), expression)
    if len(numbers) == 1 and numbers[0] == TARGET:
        hits[str(TARGET)] = 1
    solution = next(
        (e for e in sorted(hits, key=lambda e: (len(e), e)) if check_expression(e, numbers)),
        None,
    )
    wrong: list[str] = []
    for value in sorted(near, key=lambda v: (abs(v - TARGET), not v.is_integer(), v)):
        evaluated = _evaluate(near[value])
        if evaluated is not None and evaluated[1] is not None and evaluated[1] != TARGET:
            wrong.append(canonical_expression(near[value]) or near[value])
        if len(wrong) == 3:
            break
    trees = sum(hits.values()) if solution is not None else 0
    return (canonical_expression(solution) if solution else None), trees, tuple(wrong)


def _key(numbers: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(int(n) for n in numbers))


def solve(numbers: Sequence[int]) -> str | None:
    """One solution expression for the puzzle (deterministic), or ``None`` when there is none.

    Exact: candidates found with floats are re-checked with :func:`check_expression`. Memoised per multiset.

    Args:
        numbers: the puzzle's numbers (any order).

    Returns:
        An expression that :func:`check_expression` accepts, or ``None``.

    >>> solve([4, 7, 8, 8])
    '(7 - 8 + 4) * 8'
    >>> solve([3, 3, 8, 8]), solve([1, 1, 1, 1])
    ('8 / (3 - 8 / 3)', None)
    """
    return _solve_all(_key(numbers))[0]


def count_solutions(numbers: Sequence[int]) -> int:
    """How many expression trees make 24 (``a + b`` and ``b + a`` counted once): a rough difficulty proxy.

    Puzzles with few solutions are the hard ones.

    >>> count_solutions([1, 1, 1, 1]), count_solutions([3, 3, 8, 8]) < count_solutions([1, 2, 3, 4])
    (0, True)
    """
    return _solve_all(_key(numbers))[1]


def near_misses(numbers: Sequence[int]) -> tuple[str, ...]:
    """Up to three expressions that use every number once but miss 24 by the least (plausible wrong answers).

    >>> [check_expression(e, [4, 7, 8, 8]) for e in near_misses([4, 7, 8, 8])]
    [False, False, False]
    """
    return _solve_all(_key(numbers))[2]


# --------------------------------------------------------------------------------------------- the task


def question_text(numbers: Sequence[int]) -> str:
    """The question shown to models for a puzzle.

    >>> print(question_text([4, 7, 8, 8]))
    Use the numbers 4, 7, 8 and 8 to make 24. Combine them with addition, subtraction, multiplication, division and parentheses, using every number exactly once (no other numbers, no exponents, no joining digits). Give the arithmetic expression that equals 24 as your answer, for example (1 + 2) * 8 for the numbers 1, 2 and 8.
    """
    listed = ", ".join(str(n) for n in numbers[:-1]) + f" and {numbers[-1]}"
    return (
        f"Use the numbers {listed} to make {TARGET}. Combine them with addition, subtraction, multiplication, "
        "division and parentheses, using every number exactly once (no other numbers, no exponents, no joining "
        f"digits). Give the arithmetic expression that equals {TARGET} as your answer, for example (1 + 2) * 8 for "
        "the numbers 1, 2 and 8."
    )


def _split_of(numbers: tuple[int, ...]) -> str:
    """The generator split a puzzle belongs to (a hash of its sorted numbers; about one puzzle in five is test)."""
    digest = hashlib.blake2b(" ".join(map(str, numbers)).encode("utf-8"), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") % 5 == 0 else "train"


class Game24Task(TableTask):
    """Game-of-24 puzzles: generated offline (default), or read from a local file or the Hugging Face hub.

    Every example has kind ``game24``, ``gold`` = the puzzle's numbers, sorted and space-separated (``"4 7 8 8"``:
    any valid expression is correct, so the grader checks the answer against the numbers), and ``meta`` with
    ``numbers`` (the puzzle in its own order), ``solution`` (one reference expression, never in the question),
    ``num_solutions`` (distinct solutions found by :func:`solutions`, a difficulty proxy) and ``distractors`` (three
    near-miss expressions, the simulated debaters' wrong answers).

    Args:
        source: ``generated`` (an offline seeded stream of solvable puzzles), ``hub`` (:data:`HUB_PATH`) or
            ``file`` (``data_files``). Default: ``file`` when ``data_files`` is given, else ``generated``.
        data_files: a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file with one puzzle per row.
        split: generated: ``train`` (default) or ``test``, disjoint by a hash of the numbers; hub: the split to load
            (default ``train``, the only one); file: names the ids only.
        question_column: the column holding the puzzle, four numbers separated by spaces or commas (default
            ``Puzzles``, as in the Tree-of-Thoughts ``24.csv``). Rows that are not four numbers, or that have no
            solution, are skipped and counted.
        id_column: a column holding stable row ids (default: ids ``game24-<split>-<row>``).
        num_examples: generated only: length of the stream (default 1000).
        selection: file/hub only: ``tot_hard`` (default) keeps the rows ranked 901-1000 (:func:`puzzle_ranks`), the
            100 hard puzzles Tree-of-Thoughts evaluates on; ``all`` keeps every row.
        limit: the number of examples (generated: the first ``limit`` of the stream; file/hub: a seeded subsample
            of the selected rows, e.g. ``selection="all", limit=100`` for 100 random puzzles of the whole list).
        seed: generator seed (generated) or subsample seed (file/hub).
    """

    name, kind = "game24", "game24"
    hub_path, default_split = HUB_PATH, "train"
    question_column = answer_column = "Puzzles"
    meta_columns = ("Rank", "Solved rate")

    def __init__(
        self,
        source: str | None = None,
        data_files: str | None = None,
        split: str | None = None,
        question_column: str | None = None,
        id_column: str | None = None,
        num_examples: int | None = None,
        selection: str | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        source = source or ("file" if data_files is not None else "generated")
        if source not in SOURCES:
            raise ValueError(f"game24: source must be one of {', '.join(SOURCES)}, got {source!r}")
        if (source == "file") != (data_files is not None):
            raise ValueError(
                f"game24: source={source!r} and data_files={data_files!r} do not fit; data_files goes with "
                "source='file' (the default when data_files is given)"
            )
        if source != "generated" and num_examples is not None:
            raise ValueError(f"game24: num_examples is for source='generated' only (got source={source!r})")
        if num_examples is not None and (not isinstance(num_examples, int) or num_examples < 1):
            raise ValueError(f"game24: num_examples must be a positive integer, got {num_examples!r}")
        if source == "generated" and split is not None and split not in SPLITS:
            raise ValueError(f"game24: split must be one of {', '.join(SPLITS)} for generated puzzles, got {split!r}")
        if source == "generated" and selection is not None:
            raise ValueError(
                f"game24: selection is for a puzzle table (source='hub' or 'file'), got selection={selection!r} with "
                "source='generated'"
            )
        if selection is not None and selection not in SELECTIONS:
            raise ValueError(f"game24: selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
        self.mode = source
        self.selection = None if source == "generated" else selection or "tot_hard"
        self._ranks: list[int | None] | None = None
        self.num_examples = 1000 if num_examples is None else num_examples
        column = question_column or type(self).question_column
        super().__init__(
            split=split,
            data_files=data_files,
            question_column=column,
            answer_column=column,
            id_column=id_column,
            limit=limit,
            seed=seed,
        )

    @property
    def source(self) -> str:
        if self.mode == "generated":
            return f"generated[{self.split}, seed={self.seed}]"
        return super().source

    # -- rows of a file or the hub ------------------------------------------------------------------------------

    def _keep(self, index: int) -> bool:
        if self.selection != "tot_hard":
            return True
        if self._ranks is None:
            self._ranks = puzzle_ranks(self._table, self._num_rows())
        low, high = TOT_HARD_RANKS
        rank = self._ranks[index]
        return rank is not None and low <= rank <= high

    def _load(self) -> tuple[Table, list[int]]:
        first = self._table is None
        table, valid = super()._load()
        if first and self.selection == "tot_hard":
            kept = sum(1 for index in range(self._num_rows()) if self._keep(index))
            low, high = TOT_HARD_RANKS
            how = f"column {RANK_COLUMN!r}" if RANK_COLUMN in table else "row order (no Rank column)"
            if kept == 0:
                self._table = self._valid = None  # a later call fails the same way
                raise ValueError(
                    f"game24: {self.source} has no puzzle at ranks {low}-{high} (ranks read from the {how}); the "
                    "default selection='tot_hard' keeps only those, selection='all' keeps every row"
                )
            logger.info(
                "%s: kept the %d puzzles at ranks %d-%d of %d rows (ranks from the %s; selection='all' keeps all)",
                self.source,
                kept,
                low,
                high,
                self._num_rows(),
                how,
            )
        return table, valid

    def parse_gold(self, value: Any, choices: tuple[str, ...] | None) -> str | None:
        numbers = _puzzle_cell(value)
        return " ".join(map(str, sorted(numbers))) if numbers is not None and solve(numbers) else None

    def _build(self, index: int) -> Example | None:
        example = super()._build(index)
        if example is None:
            return None
        numbers = _puzzle_cell(self._table[self.question_column][index])
        meta = {key: value for key, value in example.meta.items() if key not in self.meta_columns}
        for column, key in (("Rank", "rank"), ("Solved rate", "solved_rate")):
            if column in example.meta:
                meta[key] = example.meta[column]
        return _example(example.id, numbers, meta)

    # -- the generated stream -----------------------------------------------------------------------------------

    def _generate(self, count: int, seed: int) -> Iterator[Example]:
        """Draw puzzles with a seeded RNG, keeping solvable ones of this split, each once until all are used."""
        rng = random.Random(f"game24|{seed}")
        low, high = NUMBER_RANGE
        candidates = _split_size(self.split)
        used: set[tuple[int, ...]] = set()
        unsolvable: set[tuple[int, ...]] = set()
        prefix = "game24" if self.split == "train" else "game24-test"
        index = 0
        while index < count:
            numbers = tuple(rng.randint(low, high) for _ in range(NUMBERS_PER_PUZZLE))
            key = tuple(sorted(numbers))
            if key in unsolvable or _split_of(key) != self.split:
                continue
            if solve(key) is None:
                unsolvable.add(key)
                continue
            if key in used:
                if len(used) + len(unsolvable) < candidates:
                    continue  # an unused puzzle is left: keep drawing
                logger.info("game24: all %d %s puzzles used; the stream repeats them from here", len(used), self.split)
                used.clear()
            used.add(key)
            yield _example(f"{prefix}-{seed}-{index}", numbers, {"source": self.source, "split": self.split})
            index += 1

    def __len__(self) -> int:
        if self.mode == "generated":
            return self.num_examples if self.limit is None else min(self.limit, self.num_examples)
        return super().__len__()

    def examples(self, limit: int | None = None, seed: int | None = None) -> Iterator[Example]:
        """Stream the examples (generated: ``limit`` caps the stream, ``seed`` picks it; file/hub: as TableTask).

        Args:
            limit: how many examples (default: the task's ``limit``; generated: else ``num_examples``).
            seed: generator or subsample seed (default: the task's ``seed``).

        Returns:
            An iterator of :class:`~metamod.tasks.base.Example`.
        """
        if self.mode != "generated":
            return super().examples(limit=limit, seed=seed)
        limit = self.limit if limit is None else limit
        count = self.num_examples if limit is None else limit
        return self._generate(count, self.seed if seed is None else seed)


def puzzle_ranks(table: Table, num_rows: int) -> list[int | None]:
    """The Tree-of-Thoughts rank of each row of a puzzle table.

    ToT's ``24.csv`` (and its hub copy) lists the 1,362 puzzles sorted by ``Rank``: 1 is the puzzle people solved
    fastest, 1,362 the slowest, and row ``i`` (from 0) has rank ``i + 1``. ToT evaluates on ``data[900:1000]``, i.e.
    ranks 901-1000. A table with a ``Rank`` column is read by that column (an unreadable cell gives ``None``: the
    row is never in a rank range); a table without one is taken to be in the list's order, so row ``i`` has rank
    ``i + 1``.

    >>> puzzle_ranks({"Rank": [901, "1000", "x"], "Puzzles": ["1 2 3 4"] * 3}, 3)
    [901, 1000, None]
    >>> puzzle_ranks({"Puzzles": ["1 1 4 6", "1 1 11 11"]}, 2)
    [1, 2]
    """
    if RANK_COLUMN not in table:
        return list(range(1, num_rows + 1))
    ranks: list[int | None] = []
    for value in table[RANK_COLUMN][:num_rows]:
        text = as_text(value)
        if isinstance(value, bool) or text is None:
            ranks.append(None)
            continue
        try:
            number = float(text)
        except ValueError:
            ranks.append(None)
            continue
        ranks.append(int(number) if number.is_integer() else None)
    return ranks


def _puzzle_cell(value: Any) -> tuple[int, ...] | None:
    """Four numbers from a puzzle cell (``"1 1 4 6"``, ``"1,1,4,6"`` or a list), else ``None``."""
    if isinstance(value, list | tuple):
        numbers = tuple(value) if all(type(n) is int for n in value) else None
    else:
        text = as_text(value)
        numbers = tuple(int(n) for n in text.replace(",", " ").split()) if text and _PUZZLE_RE.fullmatch(text) else None
    if numbers is None or len(numbers) != NUMBERS_PER_PUZZLE or not all(0 <= n <= MAX_LITERAL for n in numbers):
        return None
    return numbers


def _example(example_id: str, numbers: tuple[int, ...], meta: dict[str, Any]) -> Example:
    meta = {
        **meta,
        "numbers": list(numbers),
        "solution": solve(numbers),
        "num_solutions": count_solutions(numbers),
        "distractors": list(near_misses(numbers)),
    }
    gold = " ".join(map(str, sorted(numbers)))
    return Example(id=example_id, question=question_text(numbers), gold=gold, kind="game24", meta=meta)


@functools.lru_cache(maxsize=2)
def _split_size(split: str) -> int:
    """How many puzzles (multisets of four numbers from NUMBER_RANGE, solvable or not) belong to ``split``."""
    low, high = NUMBER_RANGE
    puzzles = itertools.combinations_with_replacement(range(low, high + 1), NUMBERS_PER_PUZZLE)
    return sum(1 for key in puzzles if _split_of(key) == split)
