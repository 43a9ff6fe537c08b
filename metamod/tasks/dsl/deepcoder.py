"""The DeepCoder DSL (Balog et al. 2016): straight-line programs over integers and lists of integers.

A program declares its inputs, then assigns one function call per line; its output is the last variable::

    a <- [int]
    b <- int
    c <- SORT a
    d <- TAKE b c

Syntax
    * One assignment per line; lines may also be separated by ``;`` or `` | ``. ``#`` starts a comment.
      The arrow may be written ``<-``, ``←`` or ``=``.
    * Variables are identifiers (``a``, ``b``, ``x1`` ...), each assigned once and defined before use.
    * Input declarations (``v <- int`` or ``v <- [int]``) come first; at least one, at most :data:`MAX_INPUTS`.
    * A statement is ``FUNCTION [LAMBDA] ARG ...``; function names are case-insensitive (written upper case).
      There are no integer literals: every argument is a variable.

First-order functions (``n`` an int, ``xs``/``ys`` lists):
    ``HEAD xs``, ``LAST xs``, ``TAKE n xs`` (``xs[:n]``), ``DROP n xs`` (``xs[n:]``), ``ACCESS n xs`` (``xs[n]``,
    0-based), ``MINIMUM xs``, ``MAXIMUM xs``, ``REVERSE xs``, ``SORT xs`` (ascending), ``SUM xs``.
Higher-order functions (the lambda comes first):
    ``MAP f xs``, ``FILTER p xs``, ``COUNT p xs``, ``ZIPWITH g xs ys`` (stops at the shorter list), ``SCANL1 g xs``
    (running fold: ``[x0, g(x0, x1), g(g(x0, x1), x2), ...]``).
Lambdas
    int -> int ``f``: ``(+1) (-1) (*2) (/2) (*(-1)) (**2) (*3) (/3) (*4) (/4)``;
    int -> bool ``p``: ``(>0) (<0) (%2==0) (%2==1)``; int -> int -> int ``g``: ``(+) (-) (*) MIN MAX``.

Conventions (the Python definitions of the paper's Appendix F, as also used by google-research's reimplementation;
checked in ``tests/test_dsl.py``):
    * Division ``(/2) (/3) (/4)`` is floor division, rounding toward negative infinity: ``-3 (/2)`` is ``-2``.
      (Microsoft's DeepCoder-Utils truncates toward zero instead, which differs only for negative numbers.)
    * ``(%2==1)`` uses the mathematical remainder, so it holds for every odd number, negative ones included.
    * ``TAKE``/``DROP`` follow Python slicing, also for a negative ``n`` (``TAKE -1 xs`` drops the last element).
    * NULL: ``HEAD``/``LAST``/``MINIMUM``/``MAXIMUM`` of an empty list and ``ACCESS`` out of range have no value;
      the run then fails with :class:`DSLError` (the paper discards such examples). The sampler
      (:mod:`metamod.tasks.dsl.sampling`) never returns inputs that reach a NULL.
    * Every int lies in ``[-256, 255]``. With ``overflow="error"`` (the default, the paper's convention) a value
      outside it makes the run fail; ``overflow="clamp"`` clips each computed value into the range instead.
      Inputs must lie in the range in both modes. Sampled inputs never overflow, so both modes agree on them.

>>> prog = parse("a <- [int] | b <- int | c <- SORT a | d <- TAKE b c")
>>> run(prog, ([5, -1, 3, 0], 2))
[-1, 0]
>>> run("x <- [int]\\ny <- MAP (/2) x\\nz <- SCANL1 (+) y", ([-3, 4, 5],))
[-2, 0, 2]
>>> run("x <- [int]; y <- HEAD x", ([],))
Traceback (most recent call last):
...
metamod.tasks.dsl.base.DSLError: y <- HEAD: HEAD of an empty list has no value (NULL)
>>> parse("a <- [int]\\nb <- TAKE a")
Traceback (most recent call last):
...
metamod.tasks.dsl.base.DSLError: line 2: TAKE takes 2 arguments (int, [int]), got 1
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from metamod.tasks.dsl.base import DEFAULT_MAX_STEPS, DSLError, StepBudget

__all__ = ["name", "Program", "Line", "parse", "run", "to_text", "describe"]

name = "deepcoder"

INT_MIN, INT_MAX = -256, 255
INT, LIST = "int", "[int]"
#: Most inputs, statements, list elements and program characters the interpreter accepts.
MAX_INPUTS = 5
MAX_LINES = 40
MAX_LIST_LEN = 100
MAX_PROGRAM_CHARS = 10_000
OVERFLOW_MODES = ("error", "clamp")


def _floor_div(d: int) -> Callable[[int], int]:
    return lambda x: x // d


#: int -> int lambdas, int -> bool predicates and int -> int -> int operators, by canonical token.
INT_LAMBDAS: dict[str, Callable[[int], int]] = {
    "(+1)": lambda x: x + 1,
    "(-1)": lambda x: x - 1,
    "(*2)": lambda x: x * 2,
    "(/2)": _floor_div(2),
    "(*(-1))": lambda x: -x,
    "(**2)": lambda x: x * x,
    "(*3)": lambda x: x * 3,
    "(/3)": _floor_div(3),
    "(*4)": lambda x: x * 4,
    "(/4)": _floor_div(4),
}
PREDICATES: dict[str, Callable[[int], bool]] = {
    "(>0)": lambda x: x > 0,
    "(<0)": lambda x: x < 0,
    "(%2==0)": lambda x: x % 2 == 0,
    "(%2==1)": lambda x: x % 2 == 1,
}
OPERATORS: dict[str, Callable[[int, int], int]] = {
    "(+)": lambda x, y: x + y,
    "(-)": lambda x, y: x - y,
    "(*)": lambda x, y: x * y,
    "MIN": min,
    "MAX": max,
}
_LAMBDA_ALIASES = {"(*-1)": "(*(-1))", "(MIN)": "MIN", "(MAX)": "MAX", "(NEG)": "(*(-1))", "(^2)": "(**2)"}
LAMBDAS_BY_KIND = {"f": INT_LAMBDAS, "p": PREDICATES, "g": OPERATORS}
_KIND_WORDS = {"f": "an int -> int lambda", "p": "an int -> bool predicate", "g": "an int -> int -> int operator"}


@dataclass(frozen=True)
class _Spec:
    args: tuple[str, ...]
    out: str
    lam: str | None = None  # "f", "p", "g" or None (first-order)


FUNCTIONS: dict[str, _Spec] = {
    "HEAD": _Spec((LIST,), INT),
    "LAST": _Spec((LIST,), INT),
    "TAKE": _Spec((INT, LIST), LIST),
    "DROP": _Spec((INT, LIST), LIST),
    "ACCESS": _Spec((INT, LIST), INT),
    "MINIMUM": _Spec((LIST,), INT),
    "MAXIMUM": _Spec((LIST,), INT),
    "REVERSE": _Spec((LIST,), LIST),
    "SORT": _Spec((LIST,), LIST),
    "SUM": _Spec((LIST,), INT),
    "MAP": _Spec((LIST,), LIST, "f"),
    "FILTER": _Spec((LIST,), LIST, "p"),
    "COUNT": _Spec((LIST,), INT, "p"),
    "ZIPWITH": _Spec((LIST, LIST), LIST, "g"),
    "SCANL1": _Spec((LIST,), LIST, "g"),
}
_RESERVED = set(FUNCTIONS) | {"INT", "MIN", "MAX"}


@dataclass(frozen=True)
class Line:
    """One statement ``var <- fn [lam] args...``."""

    var: str
    fn: str
    lam: str | None
    args: tuple[str, ...]


@dataclass(frozen=True)
class Program:
    """A checked DeepCoder program: typed input declarations, then statements; the output is the last one."""

    inputs: tuple[tuple[str, str], ...]
    lines: tuple[Line, ...]

    def __post_init__(self) -> None:
        _check(self.inputs, self.lines, None)

    @property
    def input_types(self) -> tuple[str, ...]:
        """The type (``int`` or ``[int]``) of each input, in order."""
        return tuple(t for _, t in self.inputs)

    @property
    def output_type(self) -> str:
        """The type of the program's result."""
        return FUNCTIONS[self.lines[-1].fn].out

    def __str__(self) -> str:
        return to_text(self)


# ------------------------------------------------------------------------------------------------ parsing

_VAR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,30}")
_ASSIGN_RE = re.compile(r"\s*([^\s<←=:]+)\s*(?:<-|←|:=|=)\s*(.*)", re.DOTALL)
_RHS_TOKEN_RE = re.compile(r"\s*(\((?:[^()]|\([^()]*\))*\)|\[\s*int\s*\]|[^\s()\[\]]+)")


def _where(lineno: int | None, line: Line | None = None) -> str:
    if lineno is not None:
        return f"line {lineno}"
    return f"statement {line.var!r}" if line is not None else "program"


def _check(inputs: Sequence[tuple[str, str]], lines: Sequence[Line], linenos: Sequence[int] | None) -> None:
    """Raise :class:`DSLError` unless the declarations and statements form a well-typed program."""
    if not (
        isinstance(inputs, tuple)
        and isinstance(lines, tuple)
        and all(isinstance(d, tuple) and len(d) == 2 for d in inputs)
        and all(
            isinstance(x, Line)
            and isinstance(x.fn, str)
            and (x.lam is None or isinstance(x.lam, str))
            and isinstance(x.args, tuple)
            and all(isinstance(a, str) for a in x.args)
            for x in lines
        )
    ):
        raise DSLError("a Program needs a tuple of (name, type) inputs and a tuple of Line statements")
    if not inputs:
        raise DSLError("the program declares no inputs; start with e.g. 'a <- [int]'")
    if len(inputs) > MAX_INPUTS:
        raise DSLError(f"the program declares {len(inputs)} inputs; at most {MAX_INPUTS} are allowed")
    if not lines:
        raise DSLError("the program has no statements after its inputs; add e.g. 'b <- SORT a'")
    if len(lines) > MAX_LINES:
        raise DSLError(f"the program has {len(lines)} statements; at most {MAX_LINES} are allowed")
    types: dict[str, str] = {}
    for var, typ in inputs:
        if typ not in (INT, LIST):
            raise DSLError(f"input {var!r} has type {typ!r}; expected 'int' or '[int]'")
        _define(types, var, typ, linenos[len(types)] if linenos else None)
    for i, line in enumerate(lines):
        where = _where(linenos[len(inputs) + i] if linenos else None, line)
        spec = FUNCTIONS.get(line.fn)
        if spec is None:
            raise DSLError(f"{where}: unknown function {line.fn!r}; expected one of {', '.join(FUNCTIONS)}")
        if spec.lam is None and line.lam is not None:
            raise DSLError(f"{where}: {line.fn} takes no lambda, got {line.lam!r}")
        if spec.lam is not None and line.lam not in LAMBDAS_BY_KIND[spec.lam]:
            choices = " ".join(LAMBDAS_BY_KIND[spec.lam])
            got = "nothing" if line.lam is None else repr(line.lam)
            raise DSLError(f"{where}: {line.fn} needs {_KIND_WORDS[spec.lam]} first, one of {choices}; got {got}")
        if len(line.args) != len(spec.args):
            raise DSLError(
                f"{where}: {line.fn} takes {len(spec.args)} argument{'s' * (len(spec.args) > 1)} "
                f"({', '.join(spec.args)}), got {len(line.args)}"
            )
        for k, (arg, want) in enumerate(zip(line.args, spec.args, strict=True), start=1):
            if arg not in types:
                hint = " (DeepCoder has no literals; every argument is a variable)" if _is_number(arg) else ""
                raise DSLError(f"{where}: undefined variable {arg!r}{hint}")
            if types[arg] != want:
                raise DSLError(f"{where}: argument {k} of {line.fn} must be {want}, but {arg!r} is {types[arg]}")
        _define(types, line.var, spec.out, linenos[len(inputs) + i] if linenos else None)


def _is_number(token: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", token) is not None


def _define(types: dict[str, str], var: str, typ: str, lineno: int | None) -> None:
    where = _where(lineno)
    if not isinstance(var, str) or not _VAR_RE.fullmatch(var) or var.upper() in _RESERVED:
        raise DSLError(f"{where}: {var!r} is not a valid variable name (use e.g. 'a', 'b', 'x1')")
    if var in types:
        raise DSLError(f"{where}: variable {var!r} is already defined")
    types[var] = typ


def _lambda_token(token: str) -> str | None:
    """The canonical lambda token for ``token`` (spaces removed, aliases resolved), or None if it is no lambda."""
    key = re.sub(r"\s+", "", token).upper()
    key = _LAMBDA_ALIASES.get(key, key)
    for table in LAMBDAS_BY_KIND.values():
        if key in table:
            return key
    return None


def parse(text: str | Program) -> Program:
    """The program written in ``text`` (a :class:`Program` is returned as is).

    Args:
        text: Program source, see the module docstring.

    Returns:
        The checked :class:`Program`.

    Raises:
        DSLError: With a one-line message naming the line and the bad token.

    >>> parse("a <- [int]\\nb <- MAP (* 2) a").lines
    (Line(var='b', fn='MAP', lam='(*2)', args=('a',)),)
    >>> parse("a <- [int]\\nb <- FOO a")
    Traceback (most recent call last):
    ...
    metamod.tasks.dsl.base.DSLError: line 2: unknown function 'FOO'; expected one of HEAD, LAST, TAKE, DROP, ACCESS, MINIMUM, MAXIMUM, REVERSE, SORT, SUM, MAP, FILTER, COUNT, ZIPWITH, SCANL1
    """
    if isinstance(text, Program):
        return text
    if not isinstance(text, str):
        raise DSLError(f"a DeepCoder program must be text, got {type(text).__name__}")
    if len(text) > MAX_PROGRAM_CHARS:
        raise DSLError(f"the program has {len(text)} characters; at most {MAX_PROGRAM_CHARS} are allowed")
    inputs: list[tuple[str, str]] = []
    lines: list[Line] = []
    linenos: list[int] = []
    for lineno, raw in enumerate(re.split(r"[\n;|]", text), start=1):
        stmt = raw.split("#", 1)[0].strip()
        if not stmt:
            continue
        if len(inputs) + len(lines) >= MAX_INPUTS + MAX_LINES:
            raise DSLError(f"line {lineno}: the program is too long (at most {MAX_LINES} statements)")
        match = _ASSIGN_RE.fullmatch(stmt)
        if match is None:
            raise DSLError(f"line {lineno}: expected 'variable <- FUNCTION args', got {stmt[:60]!r}")
        var, rhs = match.group(1), match.group(2).strip()
        tokens = _tokens(rhs, lineno)
        if not tokens:
            raise DSLError(f"line {lineno}: nothing after the arrow in {stmt[:60]!r}")
        decl = re.sub(r"\s+", "", tokens[0]).lower()
        if decl in (INT, LIST) and len(tokens) == 1:
            if lines:
                raise DSLError(f"line {lineno}: input {var!r} is declared after a statement; declare inputs first")
            inputs.append((var, decl))
        else:
            fn = tokens[0].upper()
            if fn not in FUNCTIONS:
                raise DSLError(f"line {lineno}: unknown function {tokens[0]!r}; expected one of {', '.join(FUNCTIONS)}")
            rest = tokens[1:]
            lam = _lambda_token(rest[0]) if rest else None
            if lam is None and rest and rest[0].startswith("("):
                raise DSLError(f"line {lineno}: unknown lambda {rest[0]!r}")
            if lam is not None:
                rest = rest[1:]
            lines.append(Line(var, fn, lam, tuple(rest)))
        linenos.append(lineno)
    _check(tuple(inputs), tuple(lines), linenos)
    return Program(tuple(inputs), tuple(lines))


def _tokens(rhs: str, lineno: int) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(rhs):
        if rhs[pos:].strip() == "":
            break
        match = _RHS_TOKEN_RE.match(rhs, pos)
        if match is None:
            raise DSLError(f"line {lineno}: unexpected {rhs[pos:].strip()[:20]!r} at column {pos + 1} of {rhs[:60]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def to_text(program: Program | str) -> str:
    """The canonical source of ``program`` (one line per declaration or statement); :func:`parse` reads it back.

    Args:
        program: A :class:`Program` or program text.

    Returns:
        The program text.

    >>> to_text("a <- [int]; b <- map (*2) a")
    'a <- [int]\\nb <- MAP (*2) a'
    """
    prog = parse(program)
    out = [f"{var} <- {typ}" for var, typ in prog.inputs]
    for line in prog.lines:
        parts = [line.fn] + ([line.lam] if line.lam else []) + list(line.args)
        out.append(f"{line.var} <- {' '.join(parts)}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- execution


def _check_input(value: Any, typ: str, var: str) -> int | list[int]:
    if typ == INT:
        if type(value) is not int:
            raise DSLError(f"input {var!r} must be an int, got {type(value).__name__}")
        if not INT_MIN <= value <= INT_MAX:
            raise DSLError(f"input {var!r} = {value} is outside the DeepCoder range [{INT_MIN}, {INT_MAX}]")
        return value
    if not isinstance(value, list | tuple):
        raise DSLError(f"input {var!r} must be a list of ints, got {type(value).__name__}")
    if len(value) > MAX_LIST_LEN:
        raise DSLError(f"input {var!r} has {len(value)} elements; at most {MAX_LIST_LEN} are allowed")
    for x in value:
        if type(x) is not int:
            raise DSLError(f"input {var!r} must hold only ints, got a {type(x).__name__}")
        if not INT_MIN <= x <= INT_MAX:
            raise DSLError(f"input {var!r} holds {x}, outside the DeepCoder range [{INT_MIN}, {INT_MAX}]")
    return list(value)


def run(
    program: Program | str,
    inputs: Sequence[Any],
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    overflow: str = "error",
) -> int | list[int]:
    """The output of ``program`` on ``inputs``.

    Args:
        program: A :class:`Program` or its text.
        inputs: One value per declared input, in order: an int or a list of ints, each in ``[-256, 255]``.
        max_steps: Step budget (one step per list element an operation walks).
        overflow: ``"error"`` (a value outside ``[-256, 255]`` fails the run) or ``"clamp"`` (clip it).

    Returns:
        The last statement's value: an int or a list of ints.

    Raises:
        DSLError: Bad program, wrong inputs, NULL, overflow (in ``"error"`` mode) or budget exceeded.

    >>> run("a <- [int]\\nb <- MAP (**2) a", ([20],))
    Traceback (most recent call last):
    ...
    metamod.tasks.dsl.base.DSLError: b <- MAP: value 400 is outside the DeepCoder range [-256, 255]
    >>> run("a <- [int]\\nb <- MAP (**2) a", ([20, -3],), overflow="clamp")
    [255, 9]
    """
    if overflow not in OVERFLOW_MODES:
        raise DSLError(f"overflow must be one of {', '.join(OVERFLOW_MODES)}, got {overflow!r}")
    prog = parse(program)
    if not isinstance(inputs, list | tuple):
        raise DSLError(f"inputs must be a tuple with one value per input, got {type(inputs).__name__}")
    if len(inputs) != len(prog.inputs):
        want = ", ".join(f"{v}: {t}" for v, t in prog.inputs)
        raise DSLError(f"the program takes {len(prog.inputs)} input(s) ({want}), got {len(inputs)}")
    env: dict[str, Any] = {
        var: _check_input(value, typ, var) for (var, typ), value in zip(prog.inputs, inputs, strict=True)
    }
    budget = StepBudget(max_steps)
    for line in prog.lines:
        env[line.var] = _apply(line, [env[a] for a in line.args], budget, overflow == "clamp")
    return env[prog.lines[-1].var]


def _apply(line: Line, args: list[Any], budget: StepBudget, clamp: bool) -> int | list[int]:
    where = f"{line.var} <- {line.fn}"

    def fix(v: int) -> int:
        if INT_MIN <= v <= INT_MAX:
            return v
        if clamp:
            return min(max(v, INT_MIN), INT_MAX)
        raise DSLError(f"{where}: value {v} is outside the DeepCoder range [{INT_MIN}, {INT_MAX}]")

    def null(what: str) -> DSLError:
        return DSLError(f"{where}: {what} has no value (NULL)")

    fn = line.fn
    xs = args[-1] if fn not in ("ZIPWITH",) else args[0]
    budget.spend(len(xs) if isinstance(xs, list) else 1)
    if fn in ("HEAD", "LAST", "MINIMUM", "MAXIMUM"):
        if not xs:
            raise null(f"{fn} of an empty list")
        return {"HEAD": xs[0], "LAST": xs[-1], "MINIMUM": min(xs), "MAXIMUM": max(xs)}[fn]
    if fn == "TAKE":
        return xs[: args[0]]
    if fn == "DROP":
        return xs[args[0] :]
    if fn == "ACCESS":
        n = args[0]
        if not 0 <= n < len(xs):
            raise null(f"ACCESS {n} of a list of length {len(xs)}")
        return xs[n]
    if fn == "REVERSE":
        return xs[::-1]
    if fn == "SORT":
        budget.spend(len(xs) * max(1, len(xs).bit_length()))
        return sorted(xs)
    if fn == "SUM":
        return fix(sum(xs))
    if fn == "MAP":
        f = INT_LAMBDAS[line.lam or ""]
        return [fix(f(x)) for x in xs]
    if fn == "FILTER":
        return [x for x in xs if PREDICATES[line.lam or ""](x)]
    if fn == "COUNT":
        return sum(1 for x in xs if PREDICATES[line.lam or ""](x))
    g = OPERATORS[line.lam or ""]
    if fn == "ZIPWITH":
        return [fix(g(x, y)) for x, y in zip(args[0], args[1], strict=False)]  # stops at the shorter list
    out: list[int] = []  # SCANL1
    for x in xs:
        out.append(x if not out else fix(g(out[-1], x)))
    return out


def describe() -> str:
    """A short summary of the DSL to show a model.

    Returns:
        Several lines of plain text.

    >>> "SCANL1" in describe() and "floor" in describe()
    True
    """
    return (
        "DeepCoder DSL: a program lists its inputs ('a <- [int]' or 'b <- int'), then one assignment per line\n"
        "'v <- FUNCTION [lambda] args'; arguments are earlier variables; the output is the last variable.\n"
        "First-order: HEAD xs, LAST xs, TAKE n xs (xs[:n]), DROP n xs (xs[n:]), ACCESS n xs (xs[n], 0-based),\n"
        "MINIMUM xs, MAXIMUM xs, REVERSE xs, SORT xs (ascending), SUM xs.\n"
        "Higher-order: MAP f xs, FILTER p xs, COUNT p xs, ZIPWITH g xs ys (to the shorter length),\n"
        "SCANL1 g xs (running fold: [x0, g(x0,x1), g(g(x0,x1),x2), ...]).\n"
        "f: (+1) (-1) (*2) (/2) (*(-1)) (**2) (*3) (/3) (*4) (/4)   p: (>0) (<0) (%2==0) (%2==1)\n"
        "g: (+) (-) (*) MIN MAX. Division is floor division (-3 /2 = -2). Ints stay in [-256, 255];\n"
        "HEAD/LAST/MINIMUM/MAXIMUM of [] and ACCESS out of range have no value.\n"
        "Example:\na <- [int]\nb <- int\nc <- SORT a\nd <- TAKE b c"
    )
