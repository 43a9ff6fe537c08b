"""Seeded random programs and inputs for both DSLs (reached through ``DSLS[name].sample_program`` / ``sample_inputs``).

Everything random comes from the ``random.Random`` passed in, so the same seed gives the same programs and inputs.
Levels 1..5 grow the programs: DeepCoder gets ``level`` statements; RobustFill gets ``level`` concatenated parts,
composed up to 1 (levels 1-2), 2 (levels 3-4) or 3 (level 5) functions deep. A sampled program is kept only when,
on freshly sampled inputs, it runs, its outputs take at least three distinct values and it does not just return one
of its inputs; a RobustFill program also needs every part to vary and every function in it to change what it reads
on at least one sample.

>>> rng = random.Random(7)
>>> prog = deepcoder_program(rng, 3)
>>> len(prog.lines), len(deepcoder_inputs(rng, prog, 5))
(3, 5)
>>> len(robustfill_program(random.Random(7), 2).parts)
2
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from metamod.tasks.dsl import deepcoder as dc
from metamod.tasks.dsl import robustfill as rf
from metamod.tasks.dsl.base import DSLError

__all__ = ["deepcoder_program", "deepcoder_inputs", "robustfill_program", "robustfill_inputs"]

#: Longest list and largest int input the DeepCoder sampler draws.
SAMPLE_MAX_LEN = 10
_ATTEMPTS = 500


def _check_level(level: Any) -> int:
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 5:
        raise DSLError(f"level must be an int in 1..5, got {level!r}")
    return level


def _check_n(n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 100:
        raise DSLError(f"n must be an int in 1..100, got {n!r}")
    return n


def _collect(
    draw: Callable[[], tuple[Any, ...]],
    execute: Callable[[tuple[Any, ...]], Any],
    n: int,
    tries: int,
    give_up_after: int | None = None,
) -> list[tuple[tuple[Any, ...], str]]:
    """Up to ``n`` distinct (inputs, repr(output)) pairs that run, with two distinct outputs when the draws allow."""
    found: dict[str, tuple[tuple[Any, ...], str]] = {}
    failures = 0
    for _ in range(tries):
        if len(found) >= n and (n == 1 or len({out for _, out in found.values()}) >= 2):
            break
        args = draw()
        key = repr(args)
        if key in found:
            continue
        try:
            found[key] = (args, repr(execute(args)))
        except DSLError:
            failures += 1
            if give_up_after is not None and not found and failures >= give_up_after:
                break
    items = list(found.values())
    picked = items[:n]
    if len(picked) == n >= 2 and len({out for _, out in picked}) < 2:
        other = next((item for item in items[n:] if item[1] != picked[0][1]), None)
        if other is not None:
            picked[-1] = other
    return picked


# --------------------------------------------------------------------------------------------- DeepCoder

_SIGNATURES = ((dc.LIST,), (dc.LIST,), (dc.LIST, dc.INT), (dc.LIST, dc.LIST), (dc.INT, dc.LIST))
_SIGNATURES_3 = ((dc.LIST, dc.INT, dc.LIST),)
_MAGNITUDES = (256, 128, 64, 32, 16, 8, 4, 2)


def deepcoder_program(rng: random.Random, level: int) -> dc.Program:
    """A DeepCoder program with ``level`` statements that uses every input and every intermediate value.

    Args:
        rng: Source of randomness.
        level: 1..5, the number of statements.

    Returns:
        The program.

    >>> dc.to_text(deepcoder_program(random.Random(0), 2)) == dc.to_text(deepcoder_program(random.Random(0), 2))
    True
    """
    level = _check_level(level)
    for _ in range(_ATTEMPTS):
        prog = _dc_random(rng, level)
        if prog is not None and _dc_interesting(rng, prog):
            return prog
    raise DSLError(f"could not sample a non-degenerate DeepCoder program at level {level}")  # pragma: no cover


def _dc_random(rng: random.Random, n_lines: int) -> dc.Program | None:
    signature = rng.choice(_SIGNATURES + (_SIGNATURES_3 if n_lines > 1 else ()))
    names = iter(string.ascii_lowercase)
    types: dict[str, str] = {next(names): t for t in signature}
    inputs = tuple(types.items())
    unused = list(types)
    lines: list[dc.Line] = []
    for _ in range(n_lines):
        have = set(types.values())
        fn = rng.choice([f for f, spec in dc.FUNCTIONS.items() if set(spec.args) <= have])
        spec = dc.FUNCTIONS[fn]
        lam = rng.choice(sorted(dc.LAMBDAS_BY_KIND[spec.lam])) if spec.lam else None
        args: list[str] = []
        for want in spec.args:
            fresh = [v for v in unused if types[v] == want and v not in args]
            pool = fresh if fresh and rng.random() < 0.85 else [v for v, t in types.items() if t == want]
            args.append(rng.choice(pool))
        line = dc.Line(next(names), fn, lam, tuple(args))
        if any((old.fn, old.lam, old.args) == (fn, lam, line.args) for old in lines):
            return None
        lines.append(line)
        unused = [v for v in unused if v not in args] + [line.var]
        types[line.var] = spec.out
    if unused != [lines[-1].var]:
        return None  # dead code: an input or intermediate value is never used
    return dc.Program(inputs, tuple(lines))


def _dc_interesting(rng: random.Random, prog: dc.Program, n: int = 8) -> bool:
    pairs = _dc_collect(rng, prog, n, 20 * n, give_up_after=60)
    if len(pairs) < n:
        return False
    outputs = [dc.run(prog, args) for args, _ in pairs]
    if len({out for _, out in pairs}) < 3 or sum(1 for o in outputs if o == []) > n // 4:
        return False
    return not any(
        all(o == args[k] for o, (args, _) in zip(outputs, pairs, strict=True)) for k in range(len(prog.inputs))
    )


def _dc_args(rng: random.Random, prog: dc.Program, failures: int = 0) -> tuple[Any, ...]:
    """Random inputs; the value magnitude starts at the full range and shrinks as draws keep failing."""
    top = min(failures // 6, len(_MAGNITUDES) - 1)
    mag = _MAGNITUDES[rng.randint(top, len(_MAGNITUDES) - 1) if rng.random() < 0.25 else top]
    lo = 0 if rng.random() < 0.3 else max(dc.INT_MIN, -mag)  # sometimes only non-negative values
    args: list[Any] = []
    for typ in prog.input_types:
        if typ == dc.INT:
            args.append(rng.randint(0, SAMPLE_MAX_LEN))
        else:
            length = rng.randint(0, SAMPLE_MAX_LEN) if rng.random() < 0.1 else rng.randint(3, SAMPLE_MAX_LEN)
            args.append([rng.randint(lo, min(dc.INT_MAX, mag - 1)) for _ in range(length)])
    return tuple(args)


def _dc_collect(
    rng: random.Random, prog: dc.Program, n: int, tries: int, give_up_after: int | None = None
) -> list[tuple[tuple[Any, ...], str]]:
    failures = 0

    def execute(args: tuple[Any, ...]) -> Any:
        nonlocal failures
        try:
            return dc.run(prog, args)
        except DSLError:
            failures += 1
            raise

    return _collect(lambda: _dc_args(rng, prog, failures), execute, n, tries, give_up_after)


def deepcoder_inputs(rng: random.Random, program: dc.Program | str, n: int) -> list[tuple[Any, ...]]:
    """``n`` distinct input tuples on which ``program`` runs (no NULL, no overflow), with varied outputs.

    Lists have up to 10 elements in ``[-256, 255]``, drawn from the widest value range the program tolerates
    (it shrinks as draws overflow); int inputs lie in 0..10.

    Args:
        rng: Source of randomness.
        program: A DeepCoder program or its text.
        n: How many input tuples (1..100).

    Returns:
        The input tuples, one value per declared input; at least two distinct outputs whenever the draws find them.

    Raises:
        DSLError: If ``n`` is out of range or too few working inputs turn up.

    >>> prog = dc.parse("a <- [int]\\nb <- REVERSE a")
    >>> [dc.run(prog, x) == x[0][::-1] for x in deepcoder_inputs(random.Random(3), prog, 3)]
    [True, True, True]
    """
    prog, n = dc.parse(program), _check_n(n)
    tries = 60 * n + 50
    pairs = _dc_collect(rng, prog, n, tries)
    if len(pairs) < n:
        raise DSLError(f"found only {len(pairs)} of {n} inputs on which the program runs in {tries} tries")
    return [args for args, _ in pairs]


# -------------------------------------------------------------------------------------------- RobustFill

_CONSONANTS, _VOWELS = "bcdfghjklmnprstvwz", "aeiou"
_FIELDS = ("proper", "proper", "lower", "caps", "number", "number", "alnum")
_INDICES = (1, 1, 2, 3, -1, -1, -2)
_SEPARATORS = (" ",) * 8 + (", ", ". ", "-", "/", "@", ":", ";", "#", "&", ".", ",", "$", "%", "(", ")", "!", "?")
#: Weights of the nesting functions innermost (reading the input) and as outer wrappers.
_LEAF_WEIGHTS = {"GetToken": 6, "GetUpto": 2, "GetFrom": 2, "GetFirst": 2, "GetAll": 2, "ToCase": 1, "Replace": 1}
_OUTER_WEIGHTS = {"ToCase": 5, "GetToken": 3, "Replace": 2, "Trim": 1, "GetFirst": 1, "GetAll": 1, "GetUpto": 1}


def _word(rng: random.Random, lo: int = 2, hi: int = 7) -> str:
    letters = [rng.choice(_VOWELS if k % 2 else _CONSONANTS) for k in range(rng.randint(lo, hi))]
    return "".join(letters)


def _field(rng: random.Random, kind: str) -> str:
    if kind == "proper":
        return _word(rng, 3).capitalize()
    if kind == "lower":
        return _word(rng)
    if kind == "caps":
        return _word(rng, 2, 4).upper()
    if kind == "number":
        return str(rng.randint(0, 10 ** rng.randint(1, 4) - 1))
    return _word(rng, 1, 3) + str(rng.randint(0, 99))  # alnum


def _format(rng: random.Random) -> tuple[list[str], list[str], bool]:
    fields = [rng.choice(_FIELDS) for _ in range(rng.randint(2, 6))]
    seps = []
    for _ in fields[1:]:
        seps.append(rng.choice(_SEPARATORS))
    return fields, seps, rng.random() < 0.15


def _fill(rng: random.Random, fmt: tuple[list[str], list[str], bool]) -> str:
    fields, seps, pad = fmt
    text = _field(rng, fields[0]) + "".join(sep + _field(rng, kind) for sep, kind in zip(seps, fields[1:], strict=True))
    return " " * rng.randint(1, 2) + text + " " * rng.randint(0, 2) if pad else text


def _rf_regex(rng: random.Random) -> str:
    return rng.choice(list(rf.TYPES)) if rng.random() < 0.5 else rng.choice(rf.DELIMITERS)


def _rf_nesting(rng: random.Random, weights: dict[str, int]) -> rf.Expr:
    fn = rng.choices(list(weights), weights=list(weights.values()))[0]
    types = list(rf.TYPES)
    params: tuple[int | str, ...]
    if fn == "GetToken":
        params = (rng.choice(types), rng.choice(_INDICES))
    elif fn == "ToCase":
        params = (rng.choice(rf.CASES),)
    elif fn == "Replace":
        d1 = rng.choice(rf.DELIMITERS)
        params = (d1, rng.choice([d for d in rf.DELIMITERS if d != d1]))
    elif fn in ("GetUpto", "GetFrom"):
        params = (_rf_regex(rng),)
    elif fn == "GetFirst":
        params = (rng.choice(types), rng.randint(2, 3))
    elif fn == "GetAll":
        params = (rng.choice(types),)
    else:  # Trim
        params = ()
    return rf.Expr(fn, params)


def _rf_leaf(rng: random.Random) -> rf.Expr:
    r = rng.random()
    if r < 0.12:
        k1, k2 = (rng.choice((1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6)) for _ in range(2))
        return rf.Expr("SubStr", (min(k1, k2), max(k1, k2)) if (k1 > 0) == (k2 > 0) else (k1, k2))
    if r < 0.24:
        bounds = rf.BOUNDS
        return rf.Expr(
            "GetSpan",
            (_rf_regex(rng), rng.choice((1, 2, -1)), rng.choice(bounds))
            + (_rf_regex(rng), rng.choice((1, 2, -1)), rng.choice(bounds)),
        )
    return _rf_nesting(rng, _LEAF_WEIGHTS)


def _rf_part(rng: random.Random, level: int, const: bool) -> rf.Expr:
    if const:
        pool = rf.DELIMITERS if rng.random() < 0.75 else string.ascii_letters + string.digits
        return rf.Expr("ConstStr", (rng.choice(pool),))
    max_depth = 1 if level <= 2 else 2 if level <= 4 else 3
    expr = _rf_leaf(rng)
    for _ in range(rng.randint(1, max_depth) - 1):
        expr = replace(_rf_nesting(rng, _OUTER_WEIGHTS), source=expr)
    return expr


def robustfill_program(rng: random.Random, level: int) -> rf.Program:
    """A RobustFill program concatenating ``level`` parts, composed deeper at higher levels.

    Args:
        rng: Source of randomness.
        level: 1..5.

    Returns:
        The program.

    >>> rf.to_text(robustfill_program(random.Random(4), 3)) == rf.to_text(robustfill_program(random.Random(4), 3))
    True
    """
    level = _check_level(level)
    for _ in range(_ATTEMPTS):
        n_const = sum(rng.random() < 0.2 for _ in range(level)) if level > 1 else 0
        n_const = min(n_const, level // 2)
        const = set(rng.sample(range(level), n_const))
        parts: list[rf.Expr] = []
        for k in range(level):  # screen each part on its own first, then the whole program
            for _ in range(30):
                part = _rf_part(rng, level, const=k in const)
                if k in const or _rf_interesting(rng, rf.Program((part,))):
                    parts.append(part)
                    break
        prog = rf.Program(tuple(parts)) if len(parts) == level else None
        if prog is not None and _rf_interesting(rng, prog):
            return prog
    raise DSLError(f"could not sample a non-degenerate RobustFill program at level {level}")  # pragma: no cover


def _rf_interesting(rng: random.Random, prog: rf.Program, n: int = 6) -> bool:
    try:
        samples = robustfill_inputs(rng, prog, n, _formats=12)
    except DSLError:
        return False
    outputs = [rf.run(prog, x) for x in samples]
    if len(set(outputs)) < 3 or all(o == x[0] for o, x in zip(outputs, samples, strict=True)):
        return False
    inputs = [x[0] for x in samples]
    for part in prog.parts:  # every part varies, and each function in it changes what it reads
        if part.fn == "ConstStr":
            continue
        values = [rf.run(rf.Program((part,)), x) for x in samples]
        if len(set(values)) < 2:
            return False
        node: rf.Expr | None = part
        while node is not None:
            read = [rf.run(rf.Program((node.source,)), x) for x in samples] if node.source else inputs
            if [rf.run(rf.Program((node,)), x) for x in samples] == read:
                return False
            node = node.source
    return True


def robustfill_inputs(
    rng: random.Random, program: rf.Program | str, n: int, *, _formats: int = 200
) -> list[tuple[str]]:
    """``n`` distinct one-string input tuples on which ``program`` runs, with varied outputs.

    Each call draws a random field layout (capitalised words, lower-case words, capitals, numbers, letters with
    digits, joined by spaces or delimiters, sometimes padded with spaces) and fills it with fresh random fields;
    it moves on to another layout when the program fails on one.

    Args:
        rng: Source of randomness.
        program: A RobustFill program or its text.
        n: How many inputs (1..100).

    Returns:
        One-element tuples ``(input_string,)``; at least two distinct outputs whenever the draws find them.

    Raises:
        DSLError: If ``n`` is out of range or no layout gives ``n`` working inputs.

    >>> xs = robustfill_inputs(random.Random(1), "GetToken(Number, 1)", 4)
    >>> len(xs), all(any(c.isdigit() for c in x[0]) for x in xs)
    (4, True)
    """
    prog, n = rf.parse(program), _check_n(n)
    best: list[tuple[tuple[Any, ...], str]] = []
    for _ in range(_formats):
        fmt = _format(rng)
        pairs = _collect(lambda fmt=fmt: (_fill(rng, fmt),), lambda x: rf.run(prog, x), n, 10 * n + 20, 10)
        if len(pairs) == n and len({out for _, out in pairs}) >= min(2, n):
            return [args for args, _ in pairs]  # type: ignore[misc]
        if len(pairs) > len(best):
            best = pairs
    if len(best) < n:
        raise DSLError(f"found only {len(best)} of {n} inputs on which the program runs")
    return [args for args, _ in best]  # type: ignore[misc]
