"""``synthetic_code``: an offline, seeded stream of code-reasoning problems (deduction, abduction, induction).

A Python problem is a function ``f`` composed of small operations on an int, a list of ints or a string: integer
arithmetic, conditionals, list map/filter/slice/sum/sort/reverse, string case/replace/split/join/slicing and small
loops. Each operation carries its source text and an equivalent Python callable, so outputs are computed by
calling the callables, never by running the generated source (tests check the two agree, in the sandbox). The
level (1..5) is the number of composed operations, and higher levels draw from harder families (conditionals at
3, loops at 4 and 5, bigger inputs); level 1 is one operation on a small input (``return x + 3`` with ``x = 4``).

Induction problems can also be DSL programs (``language="robustfill"`` or ``"deepcoder"``), drawn with
:mod:`metamod.tasks.dsl`'s samplers and run with its interpreters.

Degenerate items are redrawn: constant functions (the same output on every probe input), an output equal to its
input, huge values, and functions that fail on their input. Train and test streams never share a function: a
function belongs to the split picked by a hash of its source.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from metamod.tasks.base import SPLITS, Example, GeneratedTask, split_of
from metamod.tasks.code.extract import literal_repr
from metamod.tasks.code.loaders import GRADE_PAIRS, code_example
from metamod.tasks.code.problem import CodeProblem, abduction_gold, deduction_gold, induction_gold

logger = logging.getLogger(__name__)

LEVELS = (1, 2, 3, 4, 5)
SUBTASKS = ("deduction", "abduction", "induction")
LANGUAGES = ("python", "robustfill", "deepcoder")
#: How many extra inputs probe a function for constant output.
PROBES = 6
#: Largest absolute int and longest list/string a generated value may have.
MAX_INT = 10**6
MAX_LEN = 40
_MAX_DRAWS = 200

WORDS = (
    "apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean", "delta", "ember", "frost",
    "grape", "honey", "island", "jelly", "koala", "lunar", "mango", "noble", "orbit", "pearl", "quilt", "robin",
    "solar", "tulip", "umbra", "vivid", "wheat", "yacht", "zebra", "bread", "candle", "dream", "eagle", "forest",
)  # fmt: skip
VOWELS = "aeiou"


class _Reject(Exception):
    """The drawn function or input is unusable (out of range, degenerate); draw again."""


@dataclass(frozen=True)
class Op:
    """One composable operation: its source (an expression of ``x``, or statements rebinding ``x``) and callable.

    Attributes:
        name: the family name (``add``, ``map_mul``, ``loop_prefix``, ...).
        in_type / out_type: ``int``, ``list`` or ``str``.
        expr: the expression computing the new ``x`` (``None`` for statement ops).
        lines: statement lines rebinding ``x`` (unindented), for loops and ``if`` blocks.
        fn: the Python callable with the same meaning.
    """

    name: str
    in_type: str
    out_type: str
    expr: str | None
    lines: tuple[str, ...]
    fn: Callable[[Any], Any]


def _expr(name: str, in_type: str, out_type: str, expr: str, fn: Callable[[Any], Any]) -> Op:
    return Op(name, in_type, out_type, expr, (), fn)


def _stmt(name: str, in_type: str, out_type: str, lines: Sequence[str], fn: Callable[[Any], Any]) -> Op:
    return Op(name, in_type, out_type, None, tuple(lines), fn)


def _bounded_range(n: int) -> range:
    if not -1 <= n <= 200:
        raise _Reject(f"range({n}) too long")
    return range(n)


# --------------------------------------------------------------------------------------------- op families
# Each factory draws its constants from ``rng`` and returns an Op; ``level`` scales the constants.


def _int_ops(rng: random.Random, level: int) -> list[Callable[[], Op]]:
    k = rng.randint(1, 9 if level < 3 else 12)
    d = rng.randint(2, 5)
    t = rng.randint(0, 10 * level)
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    simple = [
        lambda: _expr("add", "int", "int", f"x + {k}", lambda x: x + k),
        lambda: _expr("sub", "int", "int", f"x - {k}", lambda x: x - k),
        lambda: _expr("mul", "int", "int", f"x * {d}", lambda x: x * d),
    ]
    if level == 1:
        return simple
    basic = [
        lambda: _expr("floordiv", "int", "int", f"x // {d}", lambda x: x // d),
        lambda: _expr("mod", "int", "int", f"x % {d + 1}", lambda x: x % (d + 1)),
        lambda: _expr("square", "int", "int", "x * x", lambda x: x * x),
        lambda: _expr("absdiff", "int", "int", f"abs(x - {t})", lambda x: abs(x - t)),
        lambda: _expr("max", "int", "int", f"max(x, {t})", lambda x: max(x, t)),
        lambda: _expr("to_str", "int", "str", "str(x)", str),
        lambda: _expr(
            "range_list", "int", "list", f"list(range({k % 4}, x))", lambda x: list(_bounded_range(x))[k % 4 :]
        ),
    ]
    if level == 2:
        return simple + basic
    harder = [
        lambda: _expr(
            "cond_expr", "int", "int", f"x + {a} if x > {t} else x - {b}", lambda x: x + a if x > t else x - b
        ),
        lambda: _stmt(
            "if_parity",
            "int",
            "int",
            ["if x % 2 == 0:", "    x = x // 2", "else:", f"    x = x * 3 + {a}"],
            lambda x: x // 2 if x % 2 == 0 else x * 3 + a,
        ),
    ]
    loops = [
        lambda: _stmt(
            "loop_sum",
            "int",
            "int",
            ["total = 0", "for i in range(x):", f"    total += i * {d}", "x = total"],
            lambda x: sum(i * d for i in _bounded_range(x)),
        ),
        lambda: _stmt(
            "loop_halve",
            "int",
            "int",
            ["steps = 0", "while x > 1:", "    x = x // 2", "    steps += 1", "x = steps"],
            lambda x: max(0, x.bit_length() - 1) if x > 1 else 0,
        ),
        lambda: _stmt(
            "loop_digits",
            "int",
            "int",
            ["s = 0", "for ch in str(abs(x)):", "    s += int(ch)", "x = s"],
            lambda x: sum(int(ch) for ch in str(abs(x))),
        ),
    ]
    return simple + basic + harder + (loops if level >= 4 else [])


def _list_ops(rng: random.Random, level: int) -> list[Callable[[], Op]]:
    k = rng.randint(1, 9)
    d = rng.randint(2, 4)
    t = rng.randint(0, 6)
    i, j = rng.randint(0, 2), rng.randint(1, 3)
    simple = [
        lambda: _expr("reverse", "list", "list", "x[::-1]", lambda x: x[::-1]),
        lambda: _expr("sorted", "list", "list", "sorted(x)", sorted),
        lambda: _expr("sum", "list", "int", "sum(x)", sum),
        lambda: _expr("len", "list", "int", "len(x)", len),
        lambda: _expr("append", "list", "list", f"x + [{k}]", lambda x: x + [k]),
    ]
    if level == 1:
        return simple
    basic = [
        lambda: _expr("map_add", "list", "list", f"[v + {k} for v in x]", lambda x: [v + k for v in x]),
        lambda: _expr("map_mul", "list", "list", f"[v * {d} for v in x]", lambda x: [v * d for v in x]),
        lambda: _expr(
            "filter_even", "list", "list", "[v for v in x if v % 2 == 0]", lambda x: [v for v in x if v % 2 == 0]
        ),
        lambda: _expr("filter_gt", "list", "list", f"[v for v in x if v > {t}]", lambda x: [v for v in x if v > t]),
        lambda: _expr("slice_from", "list", "list", f"x[{i}:]", lambda x: x[i:]),
        lambda: _expr("slice_to", "list", "list", f"x[:{j + 1}]", lambda x: x[: j + 1]),
        lambda: _expr("step", "list", "list", "x[::2]", lambda x: x[::2]),
        lambda: _expr("sorted_desc", "list", "list", "sorted(x, reverse=True)", lambda x: sorted(x, reverse=True)),
        lambda: _expr("max", "list", "int", "max(x)", lambda x: max(x) if x else _fail("max of []")),
        lambda: _expr("first", "list", "int", "x[0]", lambda x: x[0] if x else _fail("x[0] of []")),
        lambda: _expr("join", "list", "str", "'-'.join(str(v) for v in x)", lambda x: "-".join(str(v) for v in x)),
    ]
    if level == 2:
        return simple + basic
    harder = [
        lambda: _expr(
            "map_cond",
            "list",
            "list",
            f"[v * {d} if v % 2 else v // 2 for v in x]",
            lambda x: [v * d if v % 2 else v // 2 for v in x],
        ),
        lambda: _expr(
            "diffs",
            "list",
            "list",
            "[x[i + 1] - x[i] for i in range(len(x) - 1)]",
            lambda x: [x[n + 1] - x[n] for n in range(len(x) - 1)],
        ),
        lambda: _expr(
            "count_gt", "list", "int", f"len([v for v in x if v > {t}])", lambda x: len([v for v in x if v > t])
        ),
        lambda: _stmt(
            "if_len",
            "list",
            "list",
            [f"if len(x) > {j + 1}:", f"    x = x[:{j + 1}]", "else:", f"    x = x + [{k}]"],
            lambda x: x[: j + 1] if len(x) > j + 1 else x + [k],
        ),
    ]
    loops = [
        lambda: _stmt(
            "loop_prefix",
            "list",
            "list",
            ["acc = []", "s = 0", "for v in x:", "    s += v", "    acc.append(s)", "x = acc"],
            lambda x: [sum(x[: n + 1]) for n in range(len(x))],
        ),
        lambda: _stmt(
            "loop_count",
            "list",
            "int",
            ["count = 0", "for v in x:", f"    if v % {d} == 0:", "        count += 1", "x = count"],
            lambda x: sum(1 for v in x if v % d == 0),
        ),
        lambda: _stmt(
            "loop_dedup",
            "list",
            "list",
            ["seen = []", "for v in x:", "    if v not in seen:", "        seen.append(v)", "x = seen"],
            lambda x: list(dict.fromkeys(x)),
        ),
    ]
    return simple + basic + harder + (loops if level >= 4 else [])


def _str_ops(rng: random.Random, level: int) -> list[Callable[[], Op]]:
    c = rng.choice(VOWELS)
    r = rng.choice("xyz*")
    suffix = rng.choice(("!", "ab", "-x", "ing"))
    i = rng.randint(1, 3)
    simple = [
        lambda: _expr("upper", "str", "str", "x.upper()", str.upper),
        lambda: _expr("reverse", "str", "str", "x[::-1]", lambda x: x[::-1]),
        lambda: _expr("concat", "str", "str", f"x + {suffix!r}", lambda x: x + suffix),
        lambda: _expr("len", "str", "int", "len(x)", len),
    ]
    if level == 1:
        return simple
    basic = [
        lambda: _expr("replace", "str", "str", f"x.replace({c!r}, {r!r})", lambda x: x.replace(c, r)),
        lambda: _expr("slice_from", "str", "str", f"x[{i}:]", lambda x: x[i:]),
        lambda: _expr("slice_to", "str", "str", f"x[:{i + 1}]", lambda x: x[: i + 1]),
        lambda: _expr("capitalize", "str", "str", "x.capitalize()", str.capitalize),
        lambda: _expr("count", "str", "int", f"x.count({c!r})", lambda x: x.count(c)),
        lambda: _expr("double", "str", "str", "x + x[::-1]", lambda x: x + x[::-1]),
        lambda: _expr("swapcase", "str", "str", "x.swapcase()", str.swapcase),
    ]
    if level == 2:
        return simple + basic
    harder = [
        lambda: _expr("join_words", "str", "str", "'_'.join(x.split())", lambda x: "_".join(x.split())),
        lambda: _expr("reverse_words", "str", "str", "' '.join(x.split()[::-1])", lambda x: " ".join(x.split()[::-1])),
        lambda: _expr("word_lens", "str", "list", "[len(w) for w in x.split()]", lambda x: [len(w) for w in x.split()]),
        lambda: _stmt(
            "if_start",
            "str",
            "str",
            [f"if x.startswith({c!r}):", "    x = x.upper()", "else:", f"    x = x + {suffix!r}"],
            lambda x: x.upper() if x.startswith(c) else x + suffix,
        ),
    ]
    loops = [
        lambda: _stmt(
            "loop_vowels",
            "str",
            "str",
            ["out = ''", "for ch in x:", f"    if ch in {VOWELS!r}:", "        out += ch.upper()", "    else:",
             "        out += ch", "x = out"],
            lambda x: "".join(ch.upper() if ch in VOWELS else ch for ch in x),
        ),
        lambda: _stmt(
            "loop_drop",
            "str",
            "str",
            ["out = ''", "for ch in x:", f"    if ch != {c!r}:", "        out += ch", "x = out"],
            lambda x: "".join(ch for ch in x if ch != c),
        ),
        lambda: _stmt(
            "loop_codes",
            "str",
            "list",
            ["codes = []", "for ch in x:", "    if ch.isalpha():", "        codes.append(ord(ch) - ord('a'))",
             "x = codes"],
            lambda x: [ord(ch) - ord("a") for ch in x if ch.isalpha()],
        ),
    ]  # fmt: skip
    return simple + basic + harder + (loops if level >= 4 else [])


def _fail(reason: str) -> Any:
    raise _Reject(reason)


_FAMILIES = {"int": _int_ops, "list": _list_ops, "str": _str_ops}


# --------------------------------------------------------------------------------------------- functions and inputs


@dataclass(frozen=True)
class PythonFunction:
    """A generated function: its source and the composed callable (``call(x)``)."""

    source: str
    ops: tuple[Op, ...]
    in_type: str

    def call(self, value: Any) -> Any:
        """Apply the ops' callables in order (raises :class:`_Reject` on out-of-range values)."""
        for op in self.ops:
            try:
                value = op.fn(value)
            except _Reject:
                raise
            except (ArithmeticError, IndexError, ValueError, TypeError) as err:
                raise _Reject(f"{op.name}: {err}") from None
            _check_size(value)
        return value


def _check_size(value: Any) -> None:
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise _Reject("int too large")
    if isinstance(value, list | str) and len(value) > MAX_LEN:
        raise _Reject("value too long")


def render(ops: Sequence[Op]) -> str:
    """The source of ``def f(x)`` applying ``ops`` in order.

    >>> print(render([_expr("add", "int", "int", "x + 3", lambda x: x + 3)]))
    def f(x):
        return x + 3
    """
    lines = ["def f(x):"]
    for index, op in enumerate(ops):
        last = index == len(ops) - 1
        if op.expr is not None:
            lines.append(f"    return {op.expr}" if last else f"    x = {op.expr}")
        else:
            lines.extend(f"    {line}" for line in op.lines)
            if last:
                lines.append("    return x")
    return "\n".join(lines)


def draw_function(rng: random.Random, level: int) -> PythonFunction:
    """Compose ``level`` ops (level 1: one simple op), starting from a random input type."""
    in_type = rng.choice(("int", "int", "list", "str")) if level <= 2 else rng.choice(("int", "list", "str"))
    current, ops = in_type, []
    for step in range(level):
        factories = _FAMILIES[current](rng, level)
        if step == 0 and level >= 4:  # the top levels always contain a loop or an if block when one fits
            statements = [factory for factory in factories if factory().expr is None]
            factories = statements or factories
        op = rng.choice(factories)()
        if ops and op.name == ops[-1].name:
            op = rng.choice(factories)()
        ops.append(op)
        current = op.out_type
    if level >= 4 and all(op.expr is not None for op in ops):
        raise _Reject("no statement op")
    return PythonFunction(render(ops), tuple(ops), in_type)


def draw_input(rng: random.Random, in_type: str, level: int) -> Any:
    """A small random input of ``in_type`` (sizes grow with the level)."""
    if in_type == "int":
        return rng.randint(0, 12) if level == 1 else rng.randint(-10, 10 * level + 10)
    if in_type == "list":
        size = rng.randint(2, 3 + level)
        low, high = (0, 9) if level <= 2 else (-5, 20)
        return [rng.randint(low, high) for _ in range(size)]
    words = rng.randint(1, 1 if level == 1 else min(3, level))
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return text


def _probe(function: PythonFunction, rng: random.Random, level: int, value: Any) -> Any:
    """The output for ``value``, after checking the function is not constant on other inputs."""
    output = function.call(value)
    outputs = {literal_repr(output)}
    for _ in range(PROBES):
        try:
            outputs.add(literal_repr(function.call(draw_input(rng, function.in_type, level))))
        except _Reject:
            continue
    if len(outputs) < 2:
        raise _Reject("constant function")
    if output == value:
        raise _Reject("output equals input")
    return output


# --------------------------------------------------------------------------------------------- problems


def python_problem(
    rng: random.Random, subtask: str, level: int, pairs: int = 6, grade_pairs: str = "all"
) -> tuple[CodeProblem, str, str] | None:
    """One Python problem: ``(problem, gold, split key)``, or ``None`` when the draw was degenerate."""
    try:
        function = draw_function(rng, level)
        if subtask != "induction":
            value = draw_input(rng, function.in_type, level)
            output = _probe(function, rng, level, value)
            inp, out = literal_repr(value), literal_repr(output)
            if subtask == "deduction":
                problem = CodeProblem("deduction", "f", function.source, input=inp, dataset="synthetic", level=level)
                return problem, deduction_gold(out), function.source
            problem = CodeProblem("abduction", "f", function.source, output=out, dataset="synthetic", level=level)
            return problem, abduction_gold(function.source, "f", out, inp), function.source
        examples, seen = [], set()
        for _ in range(pairs * 6):
            value = draw_input(rng, function.in_type, level)
            key = literal_repr(value)
            if key in seen:
                continue
            try:
                output = function.call(value)
            except _Reject:
                continue
            seen.add(key)
            examples.append((key, literal_repr(output), value == output))
            if len(examples) == pairs:
                break
    except _Reject:
        return None
    return _induction(examples, pairs, "python", function.source, level, grade_pairs)


def _induction(
    examples: list[tuple[str, str, bool]], pairs: int, language: str, reference: str, level: int, grade_pairs: str
) -> tuple[CodeProblem, str, str] | None:
    if len(examples) < pairs or len({out for _, out, _ in examples}) < 2 or all(same for *_, same in examples):
        return None
    cut = math.ceil(pairs / 2)
    visible = tuple((i, o) for i, o, _ in examples[:cut])
    hidden = [(i, o) for i, o, _ in examples[cut:]]
    problem = CodeProblem("induction", "f", None, visible=visible, language=language, dataset="synthetic", level=level)
    key = reference if language == "python" else f"{language}:{reference}"
    if grade_pairs == "hidden":
        return problem, induction_gold(hidden, "f", language, reference, visible=0), key
    return problem, induction_gold([*visible, *hidden], "f", language, reference, visible=len(visible)), key


def dsl_problem(
    rng: random.Random, language: str, level: int, pairs: int = 6, grade_pairs: str = "all"
) -> tuple[CodeProblem, str, str] | None:
    """One DSL induction problem drawn with :mod:`metamod.tasks.dsl` (``None`` when degenerate)."""
    from metamod.tasks.dsl import DSLS, DSLError

    dsl = DSLS[language]
    try:
        program = dsl.sample_program(rng, level)
        inputs = dsl.sample_inputs(rng, program, pairs)
        examples = []
        for args in inputs:
            output = dsl.run(program, tuple(args))
            examples.append((", ".join(literal_repr(a) for a in args), literal_repr(output), (output,) == tuple(args)))
    except DSLError:
        return None
    return _induction(examples, pairs, language, dsl.to_text(program), level, grade_pairs)


class SyntheticCodeTask(GeneratedTask):
    """Seeded code-reasoning problems generated on the fly (no download).

    Args:
        subtask: ``deduction`` (predict the output), ``abduction`` (predict an input) or ``induction``.
        levels: difficulty levels 1..5 to mix uniformly (default: all).
        num_examples: length of the stream.
        seed: generator seed; the same seed gives the same problems in the same order.
        split: ``train`` or ``test``; the two streams never share a function.
        language: ``python`` (default), or ``robustfill`` / ``deepcoder`` for DSL induction problems.
        pairs: input/output pairs per induction problem (half of them, rounded up, visible; default 6).
        grade_pairs: induction: ``all`` (default: every pair is graded, as MARCO counts them) or ``hidden`` (the
            hidden pairs only); the gold marks the visible ones either way (hidden-pair metrics).
        limit: default cap on the number of examples.

    >>> task = SyntheticCodeTask(subtask="deduction", num_examples=2, seed=1, levels=[1])
    >>> [ex.id for ex in task.examples()], task.kind
    (['synthetic_code-deduction-train-1-0', 'synthetic_code-deduction-train-1-1'], 'code_output')
    >>> ex = next(SyntheticCodeTask(subtask="induction", seed=2, levels=[2]).examples())
    >>> len(ex.meta["code"]["visible"]), ex.meta["code"]["level"], ex.kind
    (3, 2, 'code_function')
    """

    name = "synthetic_code"

    def __init__(
        self,
        subtask: str = "deduction",
        levels: Sequence[int] | None = None,
        num_examples: int = 1000,
        seed: int = 0,
        split: str = "train",
        language: str = "python",
        pairs: int = 6,
        grade_pairs: str = "all",
        limit: int | None = None,
    ) -> None:
        if subtask not in SUBTASKS:
            raise ValueError(f"synthetic_code: subtask must be one of {', '.join(SUBTASKS)}, got {subtask!r}")
        levels = tuple(LEVELS if levels is None else (int(level) for level in levels))
        if not levels or any(level not in LEVELS for level in levels):
            raise ValueError(f"synthetic_code: levels must be a non-empty subset of {list(LEVELS)}, got {list(levels)}")
        if not isinstance(num_examples, int) or num_examples < 1:
            raise ValueError(f"synthetic_code: num_examples must be a positive integer, got {num_examples!r}")
        if split not in SPLITS:
            raise ValueError(f"synthetic_code: split must be one of {SPLITS}, got {split!r}")
        if language not in LANGUAGES:
            raise ValueError(f"synthetic_code: language must be one of {', '.join(LANGUAGES)}, got {language!r}")
        if language != "python" and subtask != "induction":
            raise ValueError(f"synthetic_code: language={language!r} needs subtask='induction' (DSL programs only)")
        if not isinstance(pairs, int) or pairs < 2:
            raise ValueError(f"synthetic_code: pairs must be an integer >= 2, got {pairs!r}")
        if grade_pairs not in GRADE_PAIRS:
            raise ValueError(
                f"synthetic_code: grade_pairs must be one of {', '.join(GRADE_PAIRS)}, got {grade_pairs!r}"
            )
        if limit is not None and limit < 1:
            raise ValueError(f"synthetic_code: limit must be a positive integer or None, got {limit!r}")
        self.subtask, self.levels, self.num_examples, self.seed = subtask, levels, num_examples, seed
        self.split, self.language, self.pairs, self.limit = split, language, pairs, limit
        self.grade_pairs = grade_pairs
        self.kind = {"deduction": "code_output", "abduction": "code_input", "induction": "code_function"}[subtask]

    def __repr__(self) -> str:
        return (
            f"SyntheticCodeTask(subtask={self.subtask!r}, levels={list(self.levels)}, seed={self.seed}, "
            f"split={self.split!r}, language={self.language!r})"
        )

    def examples(self, limit: int | None = None, seed: int | None = None) -> Iterator[Example]:
        """Stream examples lazily.

        Args:
            limit: at most this many (default: the task's ``limit``, else ``num_examples``).
            seed: overrides the task's generator seed.

        Returns:
            An iterator of :class:`~metamod.tasks.base.Example`.
        """
        seed, total = self._draw_plan(limit, seed)
        prefix = f"{self.name}-{self.subtask}-{self.split}-{seed}"
        if self.language != "python":
            prefix = f"{self.name}-{self.language}-{self.split}-{seed}"
        stream = f"metamod-synthetic-code/{self.subtask}/{self.language}/{seed}"
        for count in range(total):
            level = random.Random(f"{stream}/level/{count}").choice(self.levels)
            for attempt in range(_MAX_DRAWS):
                rng = random.Random(f"{stream}/{count}/{attempt}")
                if self.language == "python":
                    built = python_problem(rng, self.subtask, level, self.pairs, self.grade_pairs)
                else:
                    built = dsl_problem(rng, self.language, level, self.pairs, self.grade_pairs)
                if built is not None and split_of(built[2]) == self.split:
                    break
            else:
                raise RuntimeError(f"synthetic_code: no usable level-{level} problem in {_MAX_DRAWS} draws")
            problem, gold, _ = built
            yield code_example(f"{prefix}-{count}", problem, gold, level=level, split=self.split, source="synthetic")
