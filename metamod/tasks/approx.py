"""Answer kind ``approx``: numbers, or lists of numbers, matched within a relative tolerance (TheoremQA's rule).

TheoremQA grades a numeric answer with ``within_eps(pred, gold)``, ``eps = 4% of |gold|``; here:

* Each gold number written with a decimal point or an exponent (``0.02``, ``924.0``, ``1e-05``) is matched within
  :data:`APPROX_REL_TOL` of its size: ``|prediction - gold| <= 0.04 * |gold|`` (the edge is inclusive). Each gold
  integer (``5``, ``[1, 0]``) is matched exactly.
* A list gold (``[0.5, 1.25]``) is compared element-wise, in order; the prediction must have the same length.
* Predictions may use fractions, ``\\frac``, scientific notation (``4.6e3``, ``4.6 \\times 10^3``), units (``924 V``,
  ``3.5 m/s^2``), a percent sign (read as ``x`` or ``x / 100``), a left-hand side (``v = 0.02``) or a symbolic value
  that math-verify evaluates (``\\frac{\\pi}{4}``). A hedge (``0.02 or 0.5``) is never right.
* A gold that is not numeric is graded as ``math``.

This module holds the number parsing the kind needs, built on :mod:`metamod.tasks.math_values`;
:func:`metamod.tasks.grading.is_equivalent` (the one grader) and :func:`metamod.tasks.grading.normalize_answer`
remain the entry points and dispatch here (this module does not import the grader).

>>> approx_equal("0.0208", "0.02"), approx_equal("0.021", "0.02"), approx_equal("[0.51, 1.3]", "[0.5, 1.25]")
(True, False, True)
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from fractions import Fraction

from metamod.tasks.math_values import (
    MATH_VERIFY_TIMEOUT_S,
    MAX_MATH_CHARS,
    MV_LOCK,
    TEXT_WRAP_RE,
    THOUSANDS_RE,
    latex_key,
    math_equal,
    number_string,
    single_math_value,
    to_number,
    too_costly,
    wrap_latex,
)

#: Relative tolerance of kind ``approx`` for gold numbers written as decimals (TheoremQA's ``within_eps``: 4%).
APPROX_REL_TOL = Fraction(4, 100)

# scientific notation ("4.6e3", "4.6 \times 10^{3}", "10^{-5}"); the value after the last "=", "≈" or "\approx"
# ("v = 0.02"); a unit after a number ("924 V", "3.5 m/s^2", but not "3 sqrt(2)"); decimal gold numbers
_SCIENTIFIC_RE = re.compile(
    r"^(?:([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:[eE]\s*([-+]?\d{1,3})$|(?:\\times|\\cdot|[x×*·])\s*(?=10))?)?"
    r"(?:10\s*(?:\^|\*\*)\s*\{?\s*([-+]?\d{1,3})\s*\}?)?$"
)
_LHS_RE = re.compile(r"^.*(?:=|≈|\\approx)\s*", re.DOTALL)
_UNIT_RE = re.compile(
    r"^(.*?\d\}?)\s*(?:\\(?:text|mathrm)\s*\{[^{}]*\}|(?!(?:sqrt|pi|ln|log|sin|cos|tan|exp|e|i|or|and|to)\b)"
    r"[A-Za-z°Ωµμ]+(?:\s*[/·*]?\s*[A-Za-z°Ωµμ]+|\^\s*\{?-?\d\}?)*)\s*$"
)
_DECIMAL_RE = re.compile(r"\d\.|\.\d|\d\s*[eE]\s*[-+]?\d|\\times\s*10|10\s*\^")
# what the symbolic fallback may read: numbers, + - * / ^ ( ) { }, and these LaTeX commands
_SYMBOLIC_COMMANDS_RE = re.compile(r"\\(?:[dt]?frac|sqrt|pi|cdot|times|left|right)\b|π")
_SYMBOLIC_REST_RE = re.compile(r"[\d\s.+\-*/^(){}\[\]]*")


def list_items(text: str, bare: bool = True) -> list[str] | None:
    """The items of ``[a, b]`` / ``(a, b)`` (top-level commas), or of a bare ``a, b`` when ``bare``; else ``None``.

    Args:
        text: the answer or gold text.
        bare: whether ``a, b`` without brackets counts as a list (a comma must be followed by a space, so
            ``1,000`` stays one number).

    Returns:
        The stripped items, or ``None`` when ``text`` is not a list (or has an empty item).

    >>> list_items("[1, 0.5]"), list_items("(f(1, 2), 3)"), list_items("1, 0")
    (['1', '0.5'], ['f(1, 2)', '3'], ['1', '0'])
    >>> list_items("1,0") is None, list_items("1, 0", bare=False) is None, list_items("[1, ]") is None
    (True, True, True)
    """
    text = text.replace("\\left", "").replace("\\right", "").replace("$", "").strip()
    if len(text) >= 2 and text[0] in "[(" and text[-1] in "])":
        text = text[1:-1]
    elif not (bare and re.search(r",\s", text)):
        return None
    items, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            items.append(text[start:pos].strip())
            start = pos + 1
    items.append(text[start:].strip())
    return items if all(items) else None


def parse_number(text: str) -> Fraction | None:
    """A number in plain, fraction, scientific (``4.6e3``, ``4.6 \\times 10^3``) or unit-suffixed form, else ``None``.

    Args:
        text: one number, possibly with a unit (``924 V``, ``3.5 m/s^2``, ``5 \\text{ kg}``).

    Returns:
        The exact value, or ``None`` when ``text`` is not one number.

    >>> [str(parse_number(t)) for t in ["4.6e3", "4.6 \\\\times 10^{3}", "10^{-2}", "924 V", "3.5 m/s^2", "−1/4"]]
    ['4600', '4600', '1/100', '924', '7/2', '-1/4']
    >>> parse_number("3 sqrt(2)") is None, parse_number("x") is None
    (True, True)
    """
    text = text.replace("−", "-")
    number = to_number(text)
    if number is not None:
        return number
    text = TEXT_WRAP_RE.sub(r" \1 ", text.replace("$", "").replace("\\!", "").replace("\\,", " "))
    text = THOUSANDS_RE.sub("", text).strip().rstrip(".").strip()
    match = _SCIENTIFIC_RE.match(text) if text else None
    if match and (match.group(1) is not None or match.group(3) is not None):
        mantissa, exponent_e, exponent_ten = match.groups()
        value = Fraction(mantissa) if mantissa is not None else Fraction(1)
        exponent = exponent_e if exponent_e is not None else exponent_ten
        return value * Fraction(10) ** int(exponent) if exponent is not None else value
    unit = _UNIT_RE.match(text)
    if unit and unit.group(1).strip() != text:
        return parse_number(unit.group(1))
    return None


def _symbolic_number(text: str) -> Fraction | None:
    """The numeric value of a symbolic answer (``\\frac{\\pi}{4}``, ``2\\sqrt{3}``) via math-verify, else ``None``.

    Only numbers, ``+ - * / ^``, brackets and a few LaTeX commands are handed to math-verify, never costly inputs
    (see :func:`metamod.tasks.math_values.too_costly`); the signal alarm is used on the main thread only.

    >>> round(float(_symbolic_number("\\\\frac{\\\\pi}{4}")), 4), _symbolic_number("x + 1") is None
    (0.7854, True)
    """
    if (
        len(text) > MAX_MATH_CHARS
        or too_costly(text)
        or not _SYMBOLIC_REST_RE.fullmatch(_SYMBOLIC_COMMANDS_RE.sub(" ", text))
    ):
        return None
    from math_verify import parse
    from sympy import Expr, N

    seconds = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    with MV_LOCK:
        parsed = parse(wrap_latex(text), parsing_timeout=seconds)
        for item in parsed:
            if isinstance(item, Expr) and item.is_number:
                try:
                    return Fraction(str(N(item, 20)))
                except (TypeError, ValueError, ArithmeticError):
                    return None
    return None


def readings(text: str) -> tuple[Fraction, ...]:
    """The values an ``approx`` answer can mean: one, or two for a percentage (``7.5%`` is 7.5 or 0.075).

    A left-hand side (``v = ``, ``x \\approx``) is dropped; a symbolic value is evaluated by math-verify.

    Args:
        text: one answer item.

    Returns:
        The possible values, or ``()`` when the answer is not a number.

    >>> [str(v) for v in readings("7.5%")], [str(v) for v in readings("v = 0.02")], readings("about right")
    (['15/2', '3/40'], ['1/50'], ())
    """
    text = _LHS_RE.sub("", text, count=1).strip()
    number = parse_number(text)
    if number is None:
        number = _symbolic_number(text)
    if number is None:
        return ()
    return (number, number / 100) if "%" in text else (number,)


def gold_numbers(gold: str) -> list[tuple[Fraction, bool]] | None:
    """``[(value, tolerant)]`` per gold number, else ``None`` (a gold that is not numeric).

    ``tolerant`` is whether the number is written with a decimal point or an exponent, so that it is matched within
    :data:`APPROX_REL_TOL` rather than exactly.

    Args:
        gold: the gold answer (a number or a bracketed list of numbers).

    Returns:
        One ``(value, tolerant)`` pair per number, or ``None``.

    >>> [(str(value), tolerant) for value, tolerant in gold_numbers("[1, 0.5, 1e-05]")]
    [('1', False), ('1/2', True), ('1/100000', True)]
    >>> gold_numbers("x^2") is None
    True
    """
    items = list_items(gold, bare=False) or [gold]
    numbers = [parse_number(item) for item in items]
    if None in numbers:
        return None
    return [(number, bool(_DECIMAL_RE.search(item))) for number, item in zip(numbers, items, strict=True)]


def approx_equal(candidate: str, gold: str, *, math_equal: Callable[[str, str], bool] = math_equal) -> bool:
    """Whether ``candidate`` matches ``gold`` under the ``approx`` rule (see the module docstring).

    Called by :func:`metamod.tasks.grading.is_equivalent`, which should be used instead: it extracts the answer,
    checks the kind and refuses empty input.

    Args:
        candidate: the extracted answer.
        gold: the gold answer; one that is not numeric is graded as ``math``.
        math_equal: how a non-numeric gold is graded (the grader passes its whole ``math`` rule, answer extraction
            included; default :func:`metamod.tasks.math_values.math_equal`).

    Returns:
        ``True`` when every gold number is matched (decimals within :data:`APPROX_REL_TOL`, integers exactly).

    >>> approx_equal("0.26", "0.25"), approx_equal("0.2601", "0.25"), approx_equal("5.1", "5")
    (True, False, False)
    >>> approx_equal("[1, 0]", "[1, 0]"), approx_equal("[0, 1]", "[1, 0]"), approx_equal("924 V", "924.0")
    (True, False, True)
    >>> approx_equal("0.02 or 0.5", "0.02"), approx_equal("x^2", "x^2")
    (False, True)
    """
    wanted = gold_numbers(gold)
    if wanted is None:  # not a numeric gold: grade it as math
        return math_equal(candidate, gold)
    if len(wanted) == 1 and list_items(gold, bare=False) is None:
        single = single_math_value(candidate)
        items = [single] if single is not None else []
    else:
        items = list_items(candidate) or [candidate]
    if len(items) != len(wanted):
        return False
    for item, (value, tolerant) in zip(items, wanted, strict=True):
        limit = APPROX_REL_TOL * abs(value) if tolerant else 0
        if single_math_value(item) != item or not any(abs(reading - value) <= limit for reading in readings(item)):
            return False
    return True


def approx_key(candidate: str) -> str | None:
    """Vote key of an ``approx`` answer: exact numbers (``p/q``) or LaTeX keys, a list as ``[a,b]``.

    Equal values get equal keys; the tolerance is not applied (``0.5`` and ``0.51`` are different votes).

    Args:
        candidate: the extracted answer.

    Returns:
        The key, or ``None`` for a hedge or an unparsable list item.

    >>> approx_key("5e-1"), approx_key("x = 0.50"), approx_key("(1, 0.5)"), approx_key("0.02 or 0.5") is None
    ('1/2', '1/2', '[1,1/2]', True)
    """
    items = list_items(candidate)
    if items is None:
        single = single_math_value(candidate)
        if single is None:
            return None
        number = parse_number(_LHS_RE.sub("", single, count=1).strip())
        return number_string(number) if number is not None else (latex_key(single) or None)
    keys = [approx_key(item) for item in items]
    return None if None in keys else "[" + ",".join(keys) + "]"
