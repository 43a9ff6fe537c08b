"""The one grader: pull a final answer out of a response and decide whether it matches the gold answer.

Rewards (``eta``), evaluation accuracy and majority voting all go through this module, so a format that counts
as correct in one place counts as correct everywhere. An answer that cannot be parsed is never correct.

A hedge is unparsable, so it can never be counted correct however the gold reads:

* ``yesno``: the whole answer must be one yes/no token (``yes``/``true``/``no``/``false``; case, whitespace,
  punctuation and an ``Answer:`` prefix aside). ``"No idea"``, ``"no answer"``, ``"yes, but only if..."`` and
  ``"yes and no"`` are unparsable.
* ``mc``: an answer naming two different options (``"(B) or (C)"``, ``"B and C"``, ``"B/C"``, ``"either A or
  D"``) is unparsable.
* ``math``: an answer naming two different values (``"5 or 7"``, ``"5 and 7"``, ``"either 5 or 7"``,
  ``"x = 1 \\text{ or } x = 2"``) is unparsable, unless the gold itself joins values with or/and.

The same value repeated (``"5 or 5"``, ``"(B) or (B)"``, ``"yes and yes"``) is not a hedge and counts as that value.

Two kinds compare numbers differently:

* ``approx`` (TheoremQA's rule; the number parsing lives in :mod:`metamod.tasks.approx`): a number, or a list of
  numbers compared element-wise in order, where each gold number written with a decimal point or an exponent
  (``0.02``, ``924.0``, ``1e-05``) is matched within :data:`APPROX_REL_TOL` of its size (``|prediction - gold| <=
  0.04 * |gold|``, inclusive) and each gold integer exactly. Predictions may use fractions, ``\\frac``, scientific
  notation (``4.6e3``, ``4.6 \\times 10^3``), units (``924 V``, ``3.5 m/s^2``), a percent sign (read as ``x`` or
  ``x / 100``) or a symbolic value that math-verify evaluates (``\\frac{\\pi}{4}``). A gold that is not numeric is
  graded as ``math``.
* ``game24``: the answer is an arithmetic expression; it is correct when
  :func:`metamod.tasks.game24.check_expression` accepts it for the puzzle's numbers (the gold: ``"4 7 8 8"``, or any
  expression over the numbers).

Three kinds grade code reasoning (:mod:`metamod.tasks.code.grading`; the gold is self-contained):

* ``code_output``: the predicted output, read as a Python literal (never ``eval``), ``==`` the gold literal.
* ``code_input``: the gold's function, run in the sandbox on the predicted argument list, returns the gold output.
* ``code_function``: the proposed function (or DSL program) passes every test pair of the gold (by default the
  visible and the hidden pairs, as MARCO's problem accuracy counts them).

Math equivalence uses a fast exact/number path first and falls back to ``math-verify``. ``math-verify`` guards
its sympy work with ``signal.alarm``, which only works on the main thread of the main interpreter; here the
alarm is used on the main thread only and switched off elsewhere (threads, thread pools), and inputs longer
than :data:`metamod.tasks.math_values.MAX_MATH_CHARS` never reach sympy, so grading is safe to call from any thread or worker process.
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Sequence

from metamod.tasks.approx import approx_equal, approx_key
from metamod.tasks.math_values import (
    TEXT_WRAP_RE,
    boxed_contents,
    latex_key,
    math_equal,
    number_string,
    single_math_value,
    to_number,
)

logger = logging.getLogger(__name__)

#: Kinds understood by :func:`is_equivalent` (kept equal to ``metamod.tasks.base.ANSWER_KINDS``).
KINDS = ("math", "mc", "yesno", "text", "approx", "game24", "code_output", "code_input", "code_function")
#: The code-reasoning kinds, graded by :func:`metamod.tasks.code.grading.grade_code` (execution in the sandbox).
CODE_KINDS = ("code_output", "code_input", "code_function")


_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_FINAL_ANSWER_RE = re.compile(r"final\s+answer\s*(?:\*\*)?\s*[:：]\s*(?:\*\*)?[ \t]*([^\n]+)", re.IGNORECASE)
_ANSWER_IS_RE = re.compile(r"\bthe\s+(?:final\s+|correct\s+)?answer\s+is\s*[:：]?[ \t]*", re.IGNORECASE)
_SENTENCE_RE = re.compile(r"[^\n]*?(?=\.(?:\s|$)|\n|$)")
_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_ANSWER_PREFIX_RE = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+|correct\s+)?answer(?:\s+is)?|option|choice)\s*[:：]?\s*", re.IGNORECASE
)
# Inputs that make sympy compute huge integers (exponent towers, big powers, big factorials); without the
# main-thread alarm nothing could interrupt them, so they are refused before parsing.
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
# Hedges: "either 5 or 7", "x = 1 \text{ or } x = 2", "(B) or (C)", "B/C".
# another option named after a connector: "or (C)", "and C", "/C", "& C", "or maybe C", ", C." (not ", A city")
_OTHER_OPTION_RE = re.compile(
    r"(?:(?:[/&]|\b(?i:or|and)\b)\s*(?:(?i:maybe|possibly|perhaps|option|choice)\s+)*(?:\(([A-Za-z])\)|\b([A-Z])\b)"
    r"|,\s*(?:\(([A-Za-z])\)|\b([A-Z])(?=[.):\]/,]|\s*$)))"
)
_POLARITY = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once when its alarm is off; that is intended here (see module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())


# --------------------------------------------------------------------------------------------- extraction


def _clean(span: str) -> str | None:
    span = span.strip().strip("*").strip()
    if span.endswith("."):
        span = span[:-1].rstrip()
    return span or None


def extract_answer(text: str | None) -> str | None:
    """Return the final answer written in a model response, or ``None`` when there is none.

    Precedence: the LAST ``<answer>...</answer>`` span (case-insensitive, may span lines; an empty last span
    gives ``None``); else the last ``\\boxed{...}``; else the last ``Final Answer:`` line; else the last
    ``the answer is ...`` phrase. A span that is exactly one ``\\boxed{x}`` is unwrapped to ``x``.

    Args:
        text: the response (``None`` is allowed and gives ``None``).

    Returns:
        The answer text, stripped, or ``None``.

    >>> extract_answer("I first said <answer>3</answer>, but on reflection <ANSWER> 4 </ANSWER>")
    '4'
    >>> extract_answer(r"So the area is \\boxed{\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> extract_answer("Work...\\nFinal Answer: 1,000 dollars")
    '1,000 dollars'
    >>> extract_answer("Adding them up, the answer is 12.")
    '12'
    >>> extract_answer("<answer>  </answer>") is None
    True
    >>> extract_answer("I am not sure.") is None
    True
    """
    if not text:
        return None
    spans = _ANSWER_TAG_RE.findall(text)
    if spans:
        span = spans[-1].strip()
        if not span:
            return None
        boxed = boxed_contents(span)
        if len(boxed) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", span, re.DOTALL):
            span = boxed[0].strip()
        return span or None
    boxed = boxed_contents(text)
    if boxed:
        return _clean(boxed[-1])
    spans = _FINAL_ANSWER_RE.findall(text)
    if not spans:
        phrases = list(_ANSWER_IS_RE.finditer(text))
        if phrases:
            sentence = _SENTENCE_RE.match(text, phrases[-1].end())
            spans = [sentence.group(0)] if sentence else []
    if spans:
        inner = boxed_contents(spans[-1])
        return _clean(inner[-1] if inner else spans[-1])
    return None


# --------------------------------------------------------------------------------------------- normalisation


def _candidate(prediction: str | None) -> str | None:
    """The answer part of a prediction: an extracted answer when it carries markers, else the stripped text."""
    if prediction is None:
        return None
    prediction = str(prediction)
    extracted = extract_answer(prediction)
    if extracted is not None:
        return extracted
    if _ANSWER_TAG_RE.search(prediction):  # an explicitly empty <answer></answer>
        return None
    return _clean(prediction)


def _text_key(text: str) -> str:
    text = text.lower().translate(_PUNCT_TABLE)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def _letter(text: str, choices: Sequence[str] | None) -> str | None:
    """The option letter named by ``text`` (``(B)``, ``B``, ``B.``, ``B) text``, ``option B``, the option text).

    ``None`` when no option is named, or when a second, different option is (``(B) or (C)``, ``B/C``).
    """
    text = text.strip().strip("*").strip()
    for _ in range(3):
        stripped = _ANSWER_PREFIX_RE.sub("", text, count=1).strip().strip("*").strip()
        if stripped == text:
            break
        text = stripped
    if not text:
        return None
    num_options = len(choices) if choices else 26
    match = re.match(r"^\(([A-Za-z])\)", text) or re.match(r"^([A-Z])(?:[.):\]]|$)", text)
    if match is None and re.fullmatch(r"[a-z]\.?", text):
        match = re.match(r"^([a-z])", text)
    if match is not None:
        letter = match.group(1).upper()
        index = string.ascii_uppercase.index(letter)
        if index >= num_options:
            return None
        rest = text[match.end() :]
        if choices and _text_key(rest) == _text_key(str(choices[index])):  # "B) <the text of option B>"
            return letter
        for other in _OTHER_OPTION_RE.finditer(rest):
            named = next(group for group in other.groups() if group).upper()
            if named != letter and string.ascii_uppercase.index(named) < num_options:
                return None  # a hedge between two options
        return letter
    if choices:  # the option text itself
        key = _text_key(text)
        for index, choice in enumerate(choices):
            if key and key == _text_key(str(choice)):
                return string.ascii_uppercase[index]
    return None


def _yes_no(text: str) -> str | None:
    """``"yes"``/``"no"`` when the whole answer is one yes/no token (or that token repeated), else ``None``."""
    text = TEXT_WRAP_RE.sub(r"\1", text)
    text = _ANSWER_PREFIX_RE.sub("", text.strip().strip("*").strip(), count=1)
    words = text.lower().translate(_PUNCT_TABLE).split()
    if len(words) == 1:
        return _POLARITY.get(words[0])
    # "yes and yes" repeats one answer; "yes and no", "no idea", "yes, but only if ..." commit to nothing
    if len(words) == 3 and words[1] in ("and", "or") and _POLARITY.get(words[0]) == _POLARITY.get(words[2]):
        return _POLARITY.get(words[0])
    return None


def normalize_answer(answer: str | None, kind: str, choices: Sequence[str] | None = None) -> str | None:
    """Canonical form of an answer, so that equal answers compare (and vote) equal.

    ``mc`` gives the option letter, ``yesno`` gives ``"yes"``/``"no"``, ``math`` gives an integer or ``p/q``
    string for plain numbers and a whitespace-free LaTeX key otherwise, ``text`` gives lower-cased words without
    punctuation or articles. ``approx`` gives the exact value like ``math`` (a list as ``[a,b]``; votes group equal
    values, the tolerance is not applied), ``game24`` the expression in one canonical spelling
    (:func:`metamod.tasks.game24.canonical_expression`). Used for majority voting; :func:`is_equivalent` is the
    authority on correctness.

    Args:
        answer: an extracted answer or a response that contains one (``None`` allowed).
        kind: one of :data:`KINDS`.
        choices: the options of a multiple-choice item (lets the option text stand for its letter).

    Returns:
        The canonical string, or ``None`` when the answer cannot be parsed.

    >>> [normalize_answer(a, "math") for a in ["1,000", "$1000", "1000.0 dollars", "0.5", r"\\frac{1}{2}"]]
    ['1000', '1000', '1000', '1/2', '1/2']
    >>> [normalize_answer(a, "mc", ["cat", "dog"]) for a in ["(B)", "b", "Answer: B", "Dog", "(C)"]]
    ['B', 'B', 'B', 'B', None]
    >>> normalize_answer("True.", "yesno"), normalize_answer("maybe", "yesno")
    ('yes', None)

    Hedges are unparsable; one value repeated is that value:

    >>> [normalize_answer(a, "yesno") for a in ["Yes.", " no!", "No idea", "yes, but only if it rains", "Yes and no"]]
    ['yes', 'no', None, None, None]
    >>> [normalize_answer(a, "mc", ["cat", "dog", "cow"]) for a in ["(B) or (C)", "B/C", "either A or C", "B) dog"]]
    [None, None, None, 'B']
    >>> [normalize_answer(a, "math") for a in ["5 or 7", "either 5 or 7", "5 and 7", "5 or 5", "$5$"]]
    [None, None, None, '5', '5']
    >>> normalize_answer("4.6e3", "approx"), normalize_answer("[1, 0.5]", "approx")
    ('4600', '[1,1/2]')
    >>> normalize_answer("((8-4)) × (7-1)", "game24"), normalize_answer("8 ** 2", "game24")
    ('(8 - 4) * (7 - 1)', None)

    Code kinds: deduction and abduction answers become a canonical spelling of the literal value (argument list),
    induction answers the stripped program text:

    >>> normalize_answer("[ANSWER]assert f(2) == {'b': 1, 'a': 2}[/ANSWER]", "code_output")
    "{'a': 2, 'b': 1}"
    >>> normalize_answer("f([1,2],  'x')", "code_input"), normalize_answer("__import__('os')", "code_output")
    ("[1, 2], 'x'", None)
    """
    _check_kind(kind)
    if kind in CODE_KINDS:
        from metamod.tasks.code.grading import normalize_code_answer

        return normalize_code_answer(answer, kind)
    candidate = _candidate(answer)
    if candidate is None:
        return None
    if kind == "math":
        candidate = single_math_value(candidate)
        if candidate is None:
            return None
        number = to_number(candidate)
        if number is not None:
            return number_string(number)
        return latex_key(candidate) or None
    if kind == "mc":
        return _letter(candidate, choices)
    if kind == "yesno":
        return _yes_no(candidate)
    if kind == "approx":
        return approx_key(candidate)
    if kind == "game24":
        from metamod.tasks.game24 import canonical_expression

        return canonical_expression(candidate)
    return _text_key(candidate) or None


# --------------------------------------------------------------------------------------------- equivalence


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"Unknown answer kind {kind!r}; expected one of {', '.join(KINDS)}")


def is_equivalent(prediction: str | None, gold: str, kind: str, choices: Sequence[str] | None = None) -> bool:
    """Whether ``prediction`` is a correct answer for ``gold``.

    ``prediction`` is normally an extracted answer; a response with answer markers (``<answer>``, ``\\boxed``,
    ``Final Answer:``) also works. ``None``, empty or unparsable predictions are never correct; hedges such as
    ``"5 or 7"``, ``"(B) or (C)"`` and ``"no idea"`` are unparsable (see the module docstring).

    Args:
        prediction: the predicted answer.
        gold: the reference answer (a letter for ``mc``, yes/no for ``yesno``).
        kind: ``math`` (numbers, fractions, LaTeX via math-verify), ``mc`` (option letter or option text),
            ``yesno`` (yes/no/true/false), ``text`` (normalised exact match), ``approx`` (numbers or lists of
            numbers, decimal golds within :data:`APPROX_REL_TOL`), ``game24`` (an expression solving the puzzle
            whose numbers the gold lists), or a code kind (``code_output``, ``code_input``, ``code_function``:
            graded by execution, see :func:`metamod.tasks.code.grading.grade_code`).
        choices: the options of a multiple-choice item.

    Returns:
        ``True`` when equivalent.

    Raises:
        ValueError: for an unknown ``kind``.

    >>> is_equivalent("1,000", "1000", "math"), is_equivalent("$5", "5", "math"), is_equivalent("0.5", "1/2", "math")
    (True, True, True)
    >>> is_equivalent(r"\\boxed{\\frac{1}{2}}", "0.5", "math"), is_equivalent("41", "42", "math")
    (True, False)
    >>> is_equivalent("B) dog", "B", "mc", ["cat", "dog"]), is_equivalent("cat", "B", "mc", ["cat", "dog"])
    (True, False)
    >>> is_equivalent("True", "yes", "yesno"), is_equivalent("The Eiffel tower!", "eiffel Tower", "text")
    (True, True)
    >>> is_equivalent(None, "42", "math"), is_equivalent("", "yes", "yesno"), is_equivalent("no idea", "7", "math")
    (False, False, False)
    >>> is_equivalent("5 or 7", "7", "math"), is_equivalent("(B) or (C)", "B", "mc"), is_equivalent("No idea", "no", "yesno")
    (False, False, False)
    >>> is_equivalent("0.0208", "0.02", "approx"), is_equivalent("0.021", "0.02", "approx"), is_equivalent("[1, 0]", "[1, 0]", "approx")
    (True, False, True)
    >>> is_equivalent("(8 - 4) * (7 - 1)", "1 4 7 8", "game24"), is_equivalent("8 * 3 * 1 * 1", "1 4 7 8", "game24")
    (True, False)
    >>> is_equivalent("[ANSWER]assert f(4) == 7[/ANSWER]", "7", "code_output"), is_equivalent("7.0", "7", "code_output")
    (True, True)
    >>> is_equivalent("__import__('os').system('id')", "0", "code_output"), is_equivalent("[1, 2]", "[2, 1]", "code_output")
    (False, False)
    >>> is_equivalent("7", "7", "number")
    Traceback (most recent call last):
    ...
    ValueError: Unknown answer kind 'number'; expected one of math, mc, yesno, text, approx, game24, code_output, code_input, code_function
    """
    _check_kind(kind)
    if kind in CODE_KINDS:
        from metamod.tasks.code.grading import grade_code

        return grade_code(prediction, gold, kind).correct
    candidate = _candidate(prediction)
    if candidate is None or gold is None or not str(gold).strip():
        return False
    gold = str(gold).strip()
    if kind == "mc":
        letter = _letter(candidate, choices)
        return letter is not None and letter == _letter(gold, choices)
    if kind == "yesno":
        answer = _yes_no(candidate)
        return answer is not None and answer == _yes_no(gold)
    if kind == "text":
        key = _text_key(candidate)
        return bool(key) and key == _text_key(gold)
    if kind == "approx":
        return approx_equal(candidate, gold, math_equal=lambda c, g: is_equivalent(c, g, "math"))
    if kind == "game24":
        from metamod.tasks.game24 import check_expression, puzzle_numbers

        numbers = puzzle_numbers(gold)
        return numbers is not None and check_expression(candidate, numbers)
    return math_equal(candidate, gold)
