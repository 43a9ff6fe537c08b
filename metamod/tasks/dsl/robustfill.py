"""The RobustFill DSL (Devlin et al. 2017): string transformations written as a concatenation of expressions.

A program maps one input string to one output string::

    Concat(GetToken(Word, 1), ConstStr(" "), ToCase(AllCaps, GetToken(Word, -1)))

turns ``"Hello big World"`` into ``"Hello WORLD"``.

Syntax
    * ``Concat(e1, e2, ...)`` at the top (a single bare expression is read as ``Concat(e)``); the output is the
      parts joined. Names are case-insensitive (written in the canonical spelling below).
    * Every function except ``ConstStr`` takes an optional last argument, the expression whose output it reads;
      without it, it reads the input string. ``ToCase(Lower, GetToken(Word, 2))`` lower-cases the second word.
      ``Compose(n, e)`` is accepted as another way to write that: ``Compose(ToCase(Lower), GetToken(Word, 2))``.
    * Strings are quoted with ``"`` (or ``'``); ``\\"``, ``\\\\``, ``\\n`` and ``\\t`` are the escapes.
    * Integers: positions and indices are 1-based from the start and negative from the end (``-1`` is the last
      one); zero is not allowed. Counts are >= 1.

Expressions (``s`` the string read, ``r`` a regex: a token type or a quoted single character)
    ``ConstStr("text")``                 the text itself
    ``SubStr(k1, k2)``                   the characters at positions k1..k2, both included, cut to the string
    ``GetSpan(r1, i1, b1, r2, i2, b2)``  from boundary b1 (``Start``/``End``) of the i1-th match of r1 to boundary
                                         b2 of the i2-th match of r2
    ``GetToken(t, i)``                   the i-th match of type t
    ``ToCase(c)``                        case c: ``Proper`` (each letter run capitalised), ``AllCaps``, ``Lower``
    ``Replace(d1, d2)``                  every character d1 replaced by d2
    ``Trim()``                           leading and trailing whitespace removed
    ``GetUpto(r)``                       from the start up to the end of the first match of r
    ``GetFrom(r)``                       from the end of the first match of r to the end
    ``GetFirst(t, i)``                   the first i matches of t, concatenated
    ``GetAll(t)``                        all matches of t, concatenated (empty when there are none)

Token types: ``Number`` ``[0-9]+``, ``Word`` ``[A-Za-z]+``, ``Alphanum`` ``[A-Za-z0-9]+``, ``AllCaps`` ``[A-Z]+``,
``ProperCase`` ``[A-Z][a-z]+``, ``Lower`` ``[a-z]+``, ``Digit`` ``[0-9]``, ``Char`` ``[A-Za-z0-9]`` (one letter or
digit). A quoted character as a regex matches that character.

Failure convention: a match that does not exist (``GetToken(Word, 3)`` of a two-word string, ``GetUpto("@")``
without an ``@``, too few matches for ``GetFirst``) and a ``GetSpan`` that ends before it starts make the run fail
with :class:`DSLError`; the sampler (:mod:`metamod.tasks.dsl.sampling`) only returns inputs on which the program
runs.

>>> run('Concat(GetToken(Word, 1), ConstStr(" "), ToCase(AllCaps, GetToken(Word, -1)))', ("Hello big World",))
'Hello WORLD'
>>> run("GetSpan(ProperCase, 1, Start, Number, -1, End)", ("id: Ann 12 and 345 x",))
'Ann 12 and 345'
>>> run("GetToken(Word, 3)", ("two words",))
Traceback (most recent call last):
...
metamod.tasks.dsl.base.DSLError: GetToken(Word, 3): 'two words' has 2 Word matches, so match 3 does not exist
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from metamod.tasks.dsl.base import DEFAULT_MAX_STEPS, DSLError, StepBudget

__all__ = ["name", "Program", "Expr", "parse", "run", "to_text", "describe"]

name = "robustfill"

TYPES: dict[str, str] = {
    "Number": r"[0-9]+",
    "Word": r"[A-Za-z]+",
    "Alphanum": r"[A-Za-z0-9]+",
    "AllCaps": r"[A-Z]+",
    "ProperCase": r"[A-Z][a-z]+",
    "Lower": r"[a-z]+",
    "Digit": r"[0-9]",
    "Char": r"[A-Za-z0-9]",
}
_TYPE_RES = {t: re.compile(p) for t, p in TYPES.items()}
CASES = ("Proper", "AllCaps", "Lower")
BOUNDS = ("Start", "End")
#: Delimiter characters the sampler draws (the parser accepts any single character).
DELIMITERS = "&,.?!@()[]%{}/:;$#\"' "
#: Limits on program text, parts, nesting, constants, the input and every intermediate string.
MAX_PROGRAM_CHARS = 10_000
MAX_PARTS = 30
MAX_DEPTH = 10
MAX_CONST_CHARS = 50
MAX_POSITION = 100
MAX_INPUT_CHARS = 1_000
MAX_STRING_CHARS = 10_000

#: Parameter kinds per function, and whether it takes the optional source argument.
SIGNATURES: dict[str, tuple[tuple[str, ...], bool]] = {
    "ConstStr": (("text",), False),
    "SubStr": (("pos", "pos"), True),
    "GetSpan": (("regex", "index", "bound", "regex", "index", "bound"), True),
    "GetToken": (("type", "index"), True),
    "ToCase": (("case",), True),
    "Replace": (("char", "char"), True),
    "Trim": ((), True),
    "GetUpto": (("regex",), True),
    "GetFrom": (("regex",), True),
    "GetFirst": (("type", "count"), True),
    "GetAll": (("type",), True),
}
NESTINGS = ("GetToken", "ToCase", "Replace", "Trim", "GetUpto", "GetFrom", "GetFirst", "GetAll")
_FUNCS = {f.upper(): f for f in (*SIGNATURES, "Compose", "Concat")}
_NAMES = {
    "type": {**{t.upper(): t for t in TYPES}, "PROPCASE": "ProperCase", "PROPER": "ProperCase", "ALNUM": "Alphanum"},
    "case": {**{c.upper(): c for c in CASES}, "UPPER": "AllCaps", "PROPERCASE": "Proper", "TITLE": "Proper"},
    "bound": {b.upper(): b for b in BOUNDS},
}
_KIND_WORDS = {
    "pos": "a non-zero position",
    "index": "a non-zero index",
    "count": "a count >= 1",
    "type": "a token type (" + ", ".join(TYPES) + ")",
    "regex": "a token type or a quoted single character",
    "case": "a case (" + ", ".join(CASES) + ")",
    "bound": "a boundary (Start or End)",
    "char": "a quoted single character",
    "text": f'a quoted string of 1..{MAX_CONST_CHARS} characters, e.g. " "',
}


@dataclass(frozen=True)
class Expr:
    """One function call: its name, its parameters, and the expression it reads (None: the input string)."""

    fn: str
    params: tuple[int | str, ...]
    source: Expr | None = None


@dataclass(frozen=True)
class Program:
    """A checked RobustFill program: the concatenation of its parts."""

    parts: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.parts, tuple) or not self.parts:
            raise DSLError("a program needs at least one expression, e.g. Concat(GetToken(Word, 1))")
        if len(self.parts) > MAX_PARTS:
            raise DSLError(f"the program concatenates {len(self.parts)} expressions; at most {MAX_PARTS} are allowed")
        for part in self.parts:
            _check_chain(part)

    def __str__(self) -> str:
        return to_text(self)


def _chain(expr: Expr) -> list[Expr]:
    """``expr`` and the expressions it reads from, outermost first."""
    out = [expr]
    while out[-1].source is not None and len(out) <= MAX_DEPTH:
        out.append(out[-1].source)  # type: ignore[arg-type]
    return out


def _check_chain(expr: Any) -> None:
    chain = _chain(expr) if isinstance(expr, Expr) else [expr]
    if len(chain) > MAX_DEPTH:
        raise DSLError(f"an expression nests more than {MAX_DEPTH} functions deep")
    for node in chain:
        if not isinstance(node, Expr) or node.fn not in SIGNATURES or not isinstance(node.params, tuple):
            raise DSLError(f"not a RobustFill expression: {node!r:.80}")
        kinds, takes_source = SIGNATURES[node.fn]
        if len(node.params) != len(kinds) or (node.source is not None and not takes_source):
            raise DSLError(f"{node.fn} takes {len(kinds)} parameters ({', '.join(kinds) or 'none'})")
        for kind, value in zip(kinds, node.params, strict=True):
            _check_param(node.fn, kind, value)


def _check_param(fn: str, kind: str, value: Any) -> None:
    ok: bool
    if kind in ("pos", "index"):
        ok = type(value) is int and value != 0 and -MAX_POSITION <= value <= MAX_POSITION
    elif kind == "count":
        ok = type(value) is int and 1 <= value <= MAX_POSITION
    elif kind in _NAMES:
        ok = value in _NAMES[kind].values()
    elif kind == "regex":
        ok = isinstance(value, str) and (value in TYPES or len(value) == 1)
    elif kind == "char":
        ok = isinstance(value, str) and len(value) == 1
    else:  # text
        ok = isinstance(value, str) and 1 <= len(value) <= MAX_CONST_CHARS
    if not ok:
        limit = f" in -{MAX_POSITION}..{MAX_POSITION}" if kind in ("pos", "index") else ""
        raise DSLError(f"{fn}: expected {_KIND_WORDS[kind]}{limit}, got {value!r:.60}")


# ------------------------------------------------------------------------------------------------ parsing

_TOKEN_RE = re.compile(
    r"""\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>[-+]?[0-9]+)|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
    r"""|(?P<punct>[(),]))""",
    re.DOTALL,
)
_ESCAPES = {"n": "\n", "t": "\t"}


@dataclass(frozen=True)
class _Tok:
    kind: str  # name, int, str, punct, end
    text: str
    pos: int  # 1-based character position
    value: Any = None


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            toks.append(_Tok("end", "end of text", pos + 1))
            return toks
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            if text[pos] in "\"'":
                raise DSLError(f"unterminated string starting at position {pos + 1}")
            raise DSLError(f"unexpected character {text[pos]!r} at position {pos + 1}")
        kind = match.lastgroup or "punct"
        raw = match.group(kind)
        value: Any = raw
        if kind == "int":
            if len(raw.lstrip("+-")) > 6:
                raise DSLError(f"number {raw[:12]!r}... at position {pos + 1} is too large")
            value = int(raw)
        elif kind == "str":
            value = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), raw[1:-1], flags=re.DOTALL)
        toks.append(_Tok(kind, raw, pos + 1, value))
        pos = match.end()


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def expect(self, punct: str, context: str) -> None:
        tok = self.take()
        if tok.text != punct or tok.kind != "punct":
            raise DSLError(f"expected {punct!r} {context} at position {tok.pos}, got {_show(tok)}")

    def program(self) -> Program:
        first = self.peek()
        if first.kind == "name" and first.text.upper() == "CONCAT":
            self.take()
            self.expect("(", "after Concat")
            parts = [self.expr(1)]
            while self.peek().text == ",":
                self.take()
                if len(parts) >= MAX_PARTS:
                    raise DSLError(f"Concat has more than {MAX_PARTS} parts (position {self.peek().pos})")
                parts.append(self.expr(1))
            self.expect(")", "to close Concat")
        else:
            parts = [self.expr(1)]
        end = self.take()
        if end.kind != "end":
            raise DSLError(f"unexpected {_show(end)} at position {end.pos} after the end of the program")
        return Program(tuple(parts))

    def expr(self, depth: int) -> Expr:
        tok = self.take()
        if depth > MAX_DEPTH:
            raise DSLError(f"expressions nest more than {MAX_DEPTH} deep (position {tok.pos})")
        fn = _FUNCS.get(tok.text.upper()) if tok.kind == "name" else None
        if fn is None:
            if tok.kind != "name":
                raise DSLError(f"expected a function name at position {tok.pos}, got {_show(tok)}")
            raise DSLError(
                f"unknown function {tok.text!r:.40} at position {tok.pos}; expected one of {', '.join(SIGNATURES)}, Compose"
            )
        if fn == "Concat":
            raise DSLError(f"Concat may only be the outermost function (position {tok.pos})")
        self.expect("(", f"after {fn}")
        if fn == "Compose":
            outer = self.expr(depth + 1)
            self.expect(",", "between the two arguments of Compose")
            inner = self.expr(depth + 1)
            self.expect(")", "to close Compose")
            return _compose(outer, inner, tok.pos)
        kinds, takes_source = SIGNATURES[fn]
        usage = f"{fn} takes {len(kinds)} parameter{'s' * (len(kinds) != 1)} ({', '.join(kinds) or 'none'})"
        usage += " and an optional source expression" if takes_source else ""
        params: list[int | str] = []
        for k, kind in enumerate(kinds):
            if k:
                nxt = self.peek()
                if nxt.text == ")":
                    raise DSLError(f"{usage}; got {k} at position {nxt.pos}")
                self.expect(",", f"between the parameters of {fn}")
            params.append(self.param(fn, kind))
        source = None
        nxt = self.peek()
        if not kinds and takes_source and nxt.kind == "name":  # Trim(SubStr(1, 3)): no comma before the source
            source = self.expr(depth + 1)
        elif nxt.text == "," and nxt.kind == "punct":
            self.take()
            arg = self.peek()
            if not takes_source or arg.kind != "name":
                raise DSLError(f"{usage}; got an extra argument {_show(arg)} at position {arg.pos}")
            source = self.expr(depth + 1)
        close = self.peek()
        if close.text != ")":
            raise DSLError(f"{usage}; expected ')' at position {close.pos}, got {_show(close)}")
        self.take()
        return Expr(fn, tuple(params), source)

    def param(self, fn: str, kind: str) -> int | str:
        tok = self.take()
        value: Any = tok.value
        if kind in _NAMES or (kind == "regex" and tok.kind == "name"):
            table = _NAMES["type" if kind == "regex" else kind]
            value = table.get(tok.text.upper()) if tok.kind == "name" else None
            if value is None:
                raise DSLError(f"{fn}: expected {_KIND_WORDS[kind]} at position {tok.pos}, got {_show(tok)}")
            return value
        want = "int" if kind in ("pos", "index", "count") else "str"
        if tok.kind != want:
            raise DSLError(f"{fn}: expected {_KIND_WORDS[kind]} at position {tok.pos}, got {_show(tok)}")
        try:
            _check_param(fn, kind, value)
        except DSLError as err:
            raise DSLError(f"{err} at position {tok.pos}") from None
        return value


def _show(tok: _Tok) -> str:
    return tok.text if tok.kind == "end" else repr(tok.text[:40])


def _compose(outer: Expr, inner: Expr, pos: int) -> Expr:
    """``outer`` reading ``inner`` instead of the input: ``inner`` becomes the source of ``outer``'s innermost call."""
    chain = _chain(outer)
    if chain[-1].fn == "ConstStr":
        raise DSLError(f"Compose at position {pos}: its first argument never reads its input (it ends in ConstStr)")
    node = replace(chain[-1], source=inner)
    for parent in reversed(chain[:-1]):
        node = replace(parent, source=node)
    if len(_chain(node)) > MAX_DEPTH:
        raise DSLError(f"Compose at position {pos}: expressions nest more than {MAX_DEPTH} deep")
    return node


def parse(text: str | Program) -> Program:
    """The program written in ``text`` (a :class:`Program` is returned as is).

    Args:
        text: Program source, see the module docstring.

    Returns:
        The checked :class:`Program`.

    Raises:
        DSLError: With a one-line message naming the bad token and its character position.

    >>> parse('Compose(ToCase(Lower), GetToken(Word, 2))') == parse('ToCase(Lower, GetToken(Word, 2))')
    True
    >>> parse("Concat(GetToken(Word))")
    Traceback (most recent call last):
    ...
    metamod.tasks.dsl.base.DSLError: GetToken takes 2 parameters (type, index) and an optional source expression; got 1 at position 21
    """
    if isinstance(text, Program):
        return text
    if not isinstance(text, str):
        raise DSLError(f"a RobustFill program must be text, got {type(text).__name__}")
    if len(text) > MAX_PROGRAM_CHARS:
        raise DSLError(f"the program has {len(text)} characters; at most {MAX_PROGRAM_CHARS} are allowed")
    return _Parser(text).program()


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _expr_text(expr: Expr, with_source: bool = True) -> str:
    kinds, _ = SIGNATURES[expr.fn]
    args = [
        str(v) if k in ("pos", "index", "count") or k in _NAMES or (k == "regex" and v in TYPES) else _quote(str(v))
        for k, v in zip(kinds, expr.params, strict=True)
    ]
    if with_source and expr.source is not None:
        args.append(_expr_text(expr.source))
    return f"{expr.fn}({', '.join(args)})"


def to_text(program: Program | str) -> str:
    """The canonical source of ``program``; :func:`parse` reads it back to an equal program.

    Args:
        program: A :class:`Program` or program text.

    Returns:
        The program text, always ``Concat(...)``.

    >>> to_text("compose(tocase(upper), getfrom(' '))")
    'Concat(ToCase(AllCaps, GetFrom(" ")))'
    """
    return "Concat(" + ", ".join(_expr_text(p) for p in parse(program).parts) + ")"


# ---------------------------------------------------------------------------------------------- execution


def _spans(regex: str, s: str, budget: StepBudget) -> list[tuple[int, int]]:
    budget.spend(len(s))
    if regex in _TYPE_RES:
        return [m.span() for m in _TYPE_RES[regex].finditer(s)]
    return [(i, i + 1) for i, c in enumerate(s) if c == regex]


def _nth(spans: list[tuple[int, int]], i: int, regex: str, s: str, where: str) -> tuple[int, int]:
    k = i - 1 if i > 0 else len(spans) + i
    if not 0 <= k < len(spans):
        what = regex if regex in TYPES else repr(regex)
        raise DSLError(f"{where}: {s!r:.60} has {len(spans)} {what} matches, so match {i} does not exist")
    return spans[k]


def _apply(node: Expr, s: str, budget: StepBudget) -> str:
    fn, p = node.fn, node.params
    where = _expr_text(node, with_source=False)
    budget.spend(len(s))
    if fn == "ConstStr":
        return str(p[0])
    if fn == "SubStr":
        n = len(s)
        start = p[0] - 1 if p[0] > 0 else n + p[0]  # type: ignore[operator]
        end = p[1] - 1 if p[1] > 0 else n + p[1]  # type: ignore[operator]
        start, end = max(start, 0), min(end, n - 1)
        return s[start : end + 1] if start <= end else ""
    if fn == "GetSpan":
        m1 = _nth(_spans(str(p[0]), s, budget), int(p[1]), str(p[0]), s, where)
        m2 = _nth(_spans(str(p[3]), s, budget), int(p[4]), str(p[3]), s, where)
        a = m1[0] if p[2] == "Start" else m1[1]
        b = m2[0] if p[5] == "Start" else m2[1]
        if a > b:
            raise DSLError(f"{where}: on {s!r:.60} the span would end (at {b}) before it starts (at {a})")
        return s[a:b]
    if fn in ("GetToken", "GetFirst", "GetAll"):
        spans = _spans(str(p[0]), s, budget)
        if fn == "GetToken":
            a, b = _nth(spans, int(p[1]), str(p[0]), s, where)
            return s[a:b]
        if fn == "GetFirst":
            if len(spans) < int(p[1]):
                raise DSLError(f"{where}: {s!r:.60} has only {len(spans)} {p[0]} matches, fewer than {p[1]}")
            spans = spans[: int(p[1])]
        return "".join(s[a:b] for a, b in spans)
    if fn == "ToCase":
        return s.title() if p[0] == "Proper" else s.upper() if p[0] == "AllCaps" else s.lower()
    if fn == "Replace":
        return s.replace(str(p[0]), str(p[1]))
    if fn == "Trim":
        return s.strip()
    spans = _spans(str(p[0]), s, budget)  # GetUpto, GetFrom
    if not spans:
        what = p[0] if p[0] in TYPES else repr(p[0])
        raise DSLError(f"{where}: {s!r:.60} has no {what} match")
    return s[: spans[0][1]] if fn == "GetUpto" else s[spans[0][1] :]


def _eval(expr: Expr, s: str, budget: StepBudget) -> str:
    value = s
    for node in reversed(_chain(expr)):
        value = _apply(node, value, budget)
        if len(value) > MAX_STRING_CHARS:
            raise DSLError(f"an intermediate string is longer than {MAX_STRING_CHARS} characters")
    return value


def run(program: Program | str, inputs: Sequence[Any], *, max_steps: int = DEFAULT_MAX_STEPS) -> str:
    """The output string of ``program`` on the one input string in ``inputs``.

    Args:
        program: A :class:`Program` or its text.
        inputs: A one-element tuple holding the input string (at most 1,000 characters).
        max_steps: Step budget (one step per character a function reads).

    Returns:
        The concatenated output.

    Raises:
        DSLError: Bad program or input, a missing match, or the budget exceeded.

    >>> run("Concat(GetFirst(ProperCase, 2), ConstStr('.'), GetAll(Digit))", ("Ada Byron King 1815-52",))
    'AdaByron.181552'
    """
    prog = parse(program)
    if isinstance(inputs, str):
        raise DSLError("inputs must be a one-element tuple holding the input string, got a bare str")
    if not isinstance(inputs, list | tuple) or len(inputs) != 1 or not isinstance(inputs[0], str):
        raise DSLError(f"inputs must be a one-element tuple holding the input string, got {inputs!r:.80}")
    s = inputs[0]
    if len(s) > MAX_INPUT_CHARS:
        raise DSLError(f"the input has {len(s)} characters; at most {MAX_INPUT_CHARS} are allowed")
    budget = StepBudget(max_steps)
    out = "".join(_eval(part, s, budget) for part in prog.parts)
    if len(out) > MAX_STRING_CHARS:
        raise DSLError(f"the output is longer than {MAX_STRING_CHARS} characters")
    return out


def describe() -> str:
    """A short summary of the DSL to show a model.

    Returns:
        Several lines of plain text.

    >>> "GetSpan" in describe() and "1-based" in describe()
    True
    """
    return (
        "RobustFill DSL: a program Concat(e1, e2, ...) maps one input string to the concatenation of its parts.\n"
        "Each function but ConstStr takes an optional last argument, the expression it reads (default: the input);\n"
        "Compose(n, e) means the same as n with e as that argument.\n"
        'ConstStr("text"); SubStr(k1, k2): characters k1..k2 inclusive; GetSpan(r1, i1, b1, r2, i2, b2): from\n'
        "boundary b1 (Start/End) of the i1-th match of r1 to boundary b2 of the i2-th match of r2;\n"
        "GetToken(t, i): i-th match of t; GetFirst(t, i): first i matches joined; GetAll(t): all matches joined;\n"
        "GetUpto(r): up to the end of the first match of r; GetFrom(r): after the first match of r;\n"
        'ToCase(Proper|AllCaps|Lower); Replace("d1", "d2"): every d1 becomes d2; Trim(): strip outer whitespace.\n'
        "Types t: Number [0-9]+, Word [A-Za-z]+, Alphanum [A-Za-z0-9]+, AllCaps [A-Z]+, ProperCase [A-Z][a-z]+,\n"
        'Lower [a-z]+, Digit [0-9], Char [A-Za-z0-9]; a regex r is a type or a quoted character such as "@".\n'
        "Positions and indices are 1-based, negative ones count from the end (-1 = last); a missing match fails.\n"
        'Example: Concat(GetToken(Word, 1), ConstStr(" "), ToCase(AllCaps, GetToken(Word, -1)))\n'
        '  maps "Hello big World" to "Hello WORLD".'
    )
