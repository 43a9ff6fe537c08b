"""The values of a ``math`` answer: numbers, LaTeX keys, hedges ("5 or 7") and the symbolic comparison.

What the grader (:mod:`metamod.tasks.grading`) and the ``approx`` kind (:mod:`metamod.tasks.approx`) both read
math answers with; neither imports the other's internals. :func:`math_equal` is the grader's ``math`` rule on an
already extracted answer: refuse a hedge unless the gold itself joins values, then exact numbers, then a loose
string key, then math-verify (guarded by :data:`MAX_MATH_CHARS`, :func:`too_costly` and a signal alarm on the main
thread only).

>>> to_number("1,000"), to_number("$5"), number_string(to_number("0.5"))
(Fraction(1000, 1), Fraction(5, 1), '1/2')
>>> single_math_value("5 or 5"), single_math_value("5 or 7"), math_equal("0.5", "1/2")
('5', None, True)
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction

#: Longest candidate answer handed to math-verify/sympy; longer ones are graded by the exact paths only.
MAX_MATH_CHARS = 400
#: Seconds math-verify may spend per parse/compare when the signal alarm is usable (main thread only).
MATH_VERIFY_TIMEOUT_S = 5
MV_LOCK = threading.Lock()
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_UNIT_TAIL_RE = re.compile(r"^([-+]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:[a-zA-Z][a-zA-Z ]*)?$")
_FRACTION_RE = re.compile(r"^([-+]?\d+)\s*/\s*([-+]?\d+)$")
_LATEX_FRAC_RE = re.compile(r"^([-+]?)\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*([-+]?\d+)\s*\}$")
THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NESTED_POWER_RE = re.compile(r"(\^|\*\*)\s*(\{[^{}]*|\([^()]*|[\w.]+\s*)(\^|\*\*)")
_BIG_EXPONENT_RE = re.compile(r"(\^|\*\*)\s*[{(]?\s*\d{5,}")
_BIG_FACTORIAL_RE = re.compile(r"(\d{4,}\s*!|!\s*!|\)\s*!|\}\s*!)")
TEXT_WRAP_RE = re.compile(r"\\text(?:rm|bf)?\s*\{([^{}]*)\}")
_EITHER_RE = re.compile(r"^\s*(?:either|both)\s+", re.IGNORECASE)
_CONNECTOR_SPLIT_RE = re.compile(r"\s*,?\s*\b(?:or|and)\b\s*", re.IGNORECASE)


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` (balanced braces), in order; unbalanced ones are ignored."""
    found = []
    for match in _BOXED_RE.finditer(text):
        depth, start = 1, match.end()
        for pos in range(start, len(text)):
            char = text[pos]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:pos])
                    break
    return found


def to_number(text: str) -> Fraction | None:
    """Parse a plain number: ``1,000``, ``$5``, ``5 dollars``, ``1/2``, ``\\frac{1}{2}``, ``3.0``, ``10%``."""
    boxed = boxed_contents(text)
    if boxed and re.fullmatch(r"\s*\\(?:boxed|fbox)\s*\{.*\}\s*", text, re.DOTALL):
        text = boxed[-1]
    text = text.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    text = text.replace("\\!", "").replace("\\,", "")
    text = re.sub(r"\\text\s*\{[^{}]*\}", " ", text)
    text = THOUSANDS_RE.sub("", text).strip().rstrip(".").strip()
    if not text or len(text) > 64:
        return None
    match = _LATEX_FRAC_RE.match(text)
    if match:
        sign, num, den = match.groups()
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return -value if sign == "-" else value
    match = _FRACTION_RE.match(text)
    if match:
        num, den = match.groups()
        return None if int(den) == 0 else Fraction(int(num), int(den))
    match = _UNIT_TAIL_RE.match(text)
    if match:
        try:
            return Fraction(match.group(1))
        except (ValueError, ZeroDivisionError):
            return None
    return None


def number_string(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def latex_key(text: str) -> str:
    """A loose string key for non-numeric math answers (spacing, ``$``, ``\\left``/``\\right``, ``\\dfrac``)."""
    boxed = boxed_contents(text)
    if boxed and re.fullmatch(r"\s*\\(?:boxed|fbox)\s*\{.*\}\s*", text, re.DOTALL):
        text = boxed[-1]
    text = text.replace("\\$", "").replace("$", "").replace("\\left", "").replace("\\right", "")
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    text = re.sub(r"\\text\s*\{([^{}]*)\}", r"\1", text)
    return re.sub(r"\s+", "", text).rstrip(".")


def math_parts(text: str) -> list[str]:
    """The values a math answer names when it joins them with or/and (``either 5 or 7`` -> ``["5", "7"]``)."""
    plain = _EITHER_RE.sub("", TEXT_WRAP_RE.sub(r" \1 ", text))
    parts = [part.strip() for part in _CONNECTOR_SPLIT_RE.split(plain)]
    return [text] if len(parts) == 1 else parts


def same_math_value(first: str, second: str) -> bool:
    numbers = to_number(first), to_number(second)
    if None not in numbers:
        return numbers[0] == numbers[1]
    return bool(latex_key(first)) and latex_key(first) == latex_key(second)


def single_math_value(text: str) -> str | None:
    """``text`` when it names one value; the value when it is repeated (``5 or 5``); ``None`` for a hedge."""
    parts = math_parts(text)
    if len(parts) == 1:
        return text
    if all(same_math_value(parts[0], part) for part in parts[1:]):
        return parts[0]
    return None


def wrap_latex(text: str) -> str:
    return text if "$" in text or "\\(" in text or "\\[" in text else f"${text}$"


def too_costly(text: str) -> bool:
    """Whether sympy could spend unbounded time on ``text`` (exponent towers, 5+ digit exponents, big factorials).

    >>> too_costly("9^9^9"), too_costly("10^{10^{10}}"), too_costly("2^{100000}"), too_costly("(2^{10})!")
    (True, True, True, True)
    >>> too_costly("2^{10} + x^2"), too_costly("x^2+y^2"), too_costly("5!"), too_costly("\\frac{3^4}{2}")
    (False, False, False, False)
    """
    return bool(_NESTED_POWER_RE.search(text) or _BIG_EXPONENT_RE.search(text) or _BIG_FACTORIAL_RE.search(text))


def math_verify_equal(candidate: str, gold: str) -> bool:
    """Symbolic comparison via math-verify; signal timeouts only on the main thread."""
    from math_verify import parse, verify

    on_main = threading.current_thread() is threading.main_thread()
    seconds = MATH_VERIFY_TIMEOUT_S if on_main else None
    with MV_LOCK:
        gold_parsed = parse(wrap_latex(gold), parsing_timeout=seconds)
        if not gold_parsed:
            return False
        for text in dict.fromkeys([wrap_latex(candidate), candidate]):
            target = parse(text, parsing_timeout=seconds)
            if target and verify(gold_parsed, target, timeout_seconds=seconds):
                return True
    return False


def math_equal(candidate: str, gold: str) -> bool:
    """The ``math`` rule of :func:`metamod.tasks.grading.is_equivalent` on an extracted ``candidate`` and a stripped
    ``gold``: a hedge is wrong unless the gold itself joins values; then exact numbers, then the loose string key,
    then symbolic comparison."""
    if len(math_parts(gold)) == 1:
        candidate = single_math_value(candidate)
        if candidate is None:
            return False
    gold_number, number = to_number(gold), to_number(candidate)
    if gold_number is not None and number is not None:
        return gold_number == number
    key = latex_key(candidate)
    if key and key == latex_key(gold):
        return True
    if len(candidate) > MAX_MATH_CHARS or len(gold) > MAX_MATH_CHARS or too_costly(candidate):
        return False
    return math_verify_equal(candidate, gold)
