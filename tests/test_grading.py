"""The shared grader: answer extraction, equivalence per kind, normalisation, thread safety."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from metamod.tasks.grading import KINDS, extract_answer, is_equivalent, normalize_answer

# ------------------------------------------------------------------------------------------- extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>3</answer> then <answer>4</answer>", "4"),
        ("<Answer>\n  12\n</Answer>", "12"),
        ("\\boxed{7} but <answer>8</answer>", "8"),  # a tag beats a boxed answer
        ("<answer>\\boxed{9}</answer>", "9"),
        ("first \\boxed{1}, finally \\boxed{\\frac{2}{3}}", "\\frac{2}{3}"),
        ("\\boxed{\\left\\{1, 2\\right\\}}", "\\left\\{1, 2\\right\\}"),
        ("Final Answer: 15 apples.\n", "15 apples"),
        ("**Final Answer:** 15", "15"),
        ("So the answer is 21. Done.", "21"),
        ("the answer is 1, and then the answer is 2", "2"),
        ("Final Answer: 5\nthe answer is 6", "5"),  # Final Answer comes before the phrase fallback
        ("\\boxed{3}\nFinal Answer: 5", "3"),  # boxed comes before Final Answer
        ("<answer></answer>", None),
        ("<answer>   </answer> the answer is 5", None),  # the last tag is empty: explicitly no answer
        ("\\boxed{12", None),  # unbalanced
        ("I think it is twelve-ish", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


# ------------------------------------------------------------------------------------------- math


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("42", "42"),
        ("1,000", "1000"),
        ("1000", "1,000"),
        ("$5", "5"),
        ("5 dollars", "5"),
        ("$1,234.50", "1234.5"),
        ("1/2", "0.5"),
        ("0.5", "1/2"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "1/2"),
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("\\boxed{42}", "42"),
        ("The answer is \\boxed{42}.", "42"),
        ("<answer>18</answer>", "18"),
        ("3.0", "3"),
        ("-4", "-4"),
        ("x = 5", "5"),
        ("\\sqrt{2}", "\\sqrt 2"),
        ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("6-5i", "6 - 5i"),
    ],
)
def test_math_correct(prediction, gold):
    assert is_equivalent(prediction, gold, "math")


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("41", "42"),
        ("1,001", "1000"),
        ("1,2", "12"),  # not a thousands separator
        ("0.51", "1/2"),
        ("\\frac{1}{3}", "0.5"),
        ("5 and 6", "56"),
        ("no idea", "7"),
        ("", "7"),
        ("   ", "7"),
        (None, "7"),
        ("<answer></answer>", "7"),
        ("1" * 100_000, "5"),  # pathological length never reaches sympy
        ("\\frac{1}{0}", "0"),
    ],
)
def test_math_wrong_or_unparsable(prediction, gold):
    assert not is_equivalent(prediction, gold, "math")


# ------------------------------------------------------------------------------------------- mc / yesno / text

CHOICES = ["a cat", "the dog", "a bird", "fish"]


@pytest.mark.parametrize(
    "prediction",
    [
        "B",
        "(B)",
        "B.",
        "B)",
        "B) the dog",
        "(b)",
        "b",
        "option B",
        "Option B",
        "Answer: B",
        "The answer is B",
        "<answer>(B)</answer>",
        "the dog",
        "Dog",
        "DOG.",
        "**B**",
    ],
)
def test_mc_correct_forms(prediction):
    assert is_equivalent(prediction, "B", "mc", CHOICES)


@pytest.mark.parametrize("prediction", ["A", "(C)", "a cat", "E", "(E)", "cow", "", None, "Both", "I think"])
def test_mc_wrong_or_unparsable(prediction):
    assert not is_equivalent(prediction, "B", "mc", CHOICES)


def test_mc_letter_forms_beat_option_text():
    roman = ["I only", "II only", "I and II", "neither"]
    assert is_equivalent("I only", "A", "mc", roman)
    assert is_equivalent("(C)", "C", "mc", roman)
    letters_as_text = ["B", "A", "D", "C"]
    assert is_equivalent("(B)", "B", "mc", letters_as_text)
    # and what beats means: the letter is not read as the option TEXT "B" (option A); an accept-all grader fails here
    assert not is_equivalent("(B)", "A", "mc", letters_as_text)
    assert not is_equivalent("I only", "B", "mc", roman) and not is_equivalent("(C)", "A", "mc", roman)


def test_mc_without_choices_uses_letters_only():
    assert is_equivalent("(C)", "C", "mc")
    assert not is_equivalent("the dog", "B", "mc")


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("yes", "yes", True),
        ("Yes.", "yes", True),
        ("TRUE", "yes", True),
        ("true", "True", True),
        ("No, because penguins cannot fly.", "no", False),  # the whole answer must be a yes/no token
        ("false", "no", True),
        ("<answer>No</answer>", "no", True),
        ("yes", "no", False),
        ("maybe", "yes", False),
        ("yes and no", "yes", False),
        ("True or false", "no", False),
        ("No, that is not true", "no", False),
        ("yes and yes", "yes", True),
        ("", "yes", False),
        (None, "no", False),
        ("noted", "no", False),
    ],
)
def test_yesno(prediction, gold, expected):
    assert is_equivalent(prediction, gold, "yesno") is expected


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("yes", "yes"),
        ("Yes.", "yes"),
        (" no!", "no"),
        ("TRUE", "yes"),
        ("False.", "no"),
        ("**No**", "no"),
        ("Answer: no", "no"),
        ("<answer> Yes </answer>", "yes"),
        ("\\boxed{\\text{No}}", "no"),
    ],
)
def test_yesno_whole_answer_token_parses(prediction, expected):
    assert normalize_answer(prediction, "yesno") == expected
    assert is_equivalent(prediction, expected, "yesno")


@pytest.mark.parametrize(
    "prediction",
    [
        "No idea",
        "No consensus reached",
        "no answer",
        "yes, but only if it rains",
        "Yes and no",
        "No, because penguins cannot fly.",
        "yes or no",
        "not yes",
        "Yes?? no",
        "<answer>No idea</answer>",
    ],
)
def test_yesno_anything_but_one_token_is_unparsable(prediction):
    assert normalize_answer(prediction, "yesno") is None
    assert not is_equivalent(prediction, "yes", "yesno")
    assert not is_equivalent(prediction, "no", "yesno")


@pytest.mark.parametrize(
    "prediction",
    [
        "(B) or (C)",
        "B and C",
        "B or C",
        "either A or D",
        "B/C",
        "(B)/(C)",
        "B) or C)",
        "B. Or C.",
        "(B) & (C)",
        "B or maybe C",
        "B, C",
        "B) the dog or C) a bird",
        "Answer: (B) or (C)",
        "The answer is B or C.",
        "<answer>(C) or (B)</answer>",
    ],
)
def test_mc_hedge_is_unparsable(prediction):
    for choices in (CHOICES, None):
        assert normalize_answer(prediction, "mc", choices) is None
        for gold in "ABCD":
            assert not is_equivalent(prediction, gold, "mc", choices)


@pytest.mark.parametrize(
    "prediction", ["(B)", "B", "B) Paris", "B) a cat", "B) the dog", "The answer is B", "the dog", "(B) or (B)"]
)
def test_mc_single_option_still_parses(prediction):
    """One option, possibly followed by some text (even text that starts with a capital "A"), is that option."""
    assert normalize_answer(prediction, "mc", CHOICES) == "B"
    assert is_equivalent(prediction, "B", "mc", CHOICES)


def test_mc_option_text_with_a_connector_is_not_a_hedge():
    choices = ["I only", "II only", "I and II", "vitamins A and D"]
    assert is_equivalent("I and II", "C", "mc", choices)
    assert is_equivalent("C) I and II", "C", "mc", choices)
    assert is_equivalent("(D) vitamins A and D", "D", "mc", choices)
    assert not is_equivalent("I and II", "A", "mc", choices) and not is_equivalent("C) I and II", "D", "mc", choices)
    assert normalize_answer("(A) I only, and I am sure", "mc", choices) == "A"  # "I" is not an option letter here


@pytest.mark.parametrize(
    "prediction", ["5 or 7", "5 and 7", "either 5 or 7", "7 or 5", "5, or 7", "x = 5 or x = 7", "x=5 \\text{ or } x=7"]
)
def test_math_two_values_are_unparsable(prediction):
    assert normalize_answer(prediction, "math") is None
    for gold in ("5", "7", "x = 5", "x = 7"):
        assert not is_equivalent(prediction, gold, "math")


@pytest.mark.parametrize(
    "prediction", ["5", "$5", "5.0", "\\boxed{5}", "<answer>5</answer>", "5 dollars", "5 or 5", "5 and 5.0"]
)
def test_math_single_value_still_parses(prediction):
    """One value, however written; the same value repeated ("5 or 5") is that value, not a hedge."""
    assert normalize_answer(prediction, "math") == "5"
    assert is_equivalent(prediction, "5", "math")


def test_math_gold_that_joins_values_can_be_matched():
    assert is_equivalent("1 or -2", "1 \\text{ or } -2", "math")
    assert not is_equivalent("1 or -3", "1 \\text{ or } -2", "math")


@pytest.mark.parametrize(
    ("prediction", "gold", "kind", "choices"),
    [
        ("no idea", "no", "yesno", None),
        ("No consensus reached", "no", "yesno", None),
        ("(B) or (C)", "B", "mc", CHOICES),
        ("either 5 or 7", "5", "math", None),
        ("<answer></answer>", "", "math", None),
        ("<answer>  </answer> the answer is 12", "12", "math", None),
        ("(Z)", "Z", "mc", CHOICES),
        ("maybe", "maybe", "yesno", None),
    ],
)
def test_unparsable_is_never_correct(prediction, gold, kind, choices):
    assert normalize_answer(prediction, kind, choices) is None
    assert not is_equivalent(prediction, gold, kind, choices)


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower", True),
        ("  eiffel   tower! ", "Eiffel Tower", True),
        ("Louvre", "Eiffel Tower", False),
        ("", "Eiffel Tower", False),
        ("the", "a", False),  # only articles: nothing left to compare
        (None, "x", False),
    ],
)
def test_text(prediction, gold, expected):
    assert is_equivalent(prediction, gold, "text") is expected


def test_unknown_kind_lists_kinds():
    with pytest.raises(ValueError, match="math, mc, yesno, text"):
        is_equivalent("1", "1", "numeric")
    with pytest.raises(ValueError, match="Unknown answer kind"):
        normalize_answer("1", "numeric")


def test_empty_gold_is_never_matched():
    for kind in KINDS:
        assert not is_equivalent("", "", kind)
        assert not is_equivalent("x", "", kind)


# ------------------------------------------------------------------------------------------- normalize_answer


@pytest.mark.parametrize(
    ("answers", "kind", "expected"),
    [
        (
            ["1,000", "1000", "$1000", "1000.0", "1000 dollars", "\\boxed{1000}", "<answer>1,000</answer>"],
            "math",
            "1000",
        ),
        (["0.5", "1/2", "\\frac{1}{2}", "$\\frac{1}{2}$"], "math", "1/2"),
        (["(B)", "B", "B.", "b", "option B", "B) the dog", "the dog"], "mc", "B"),
        (["yes", "Yes.", "true", "TRUE"], "yesno", "yes"),
        (["The Eiffel Tower.", "eiffel tower"], "text", "eiffel tower"),
    ],
)
def test_normalize_answer_groups_equal_answers(answers, kind, expected):
    choices = CHOICES if kind == "mc" else None
    assert {normalize_answer(a, kind, choices) for a in answers} == {expected}


def test_normalize_answer_unparsable_is_none():
    assert normalize_answer(None, "math") is None
    assert normalize_answer("", "mc", CHOICES) is None
    assert normalize_answer("(Z)", "mc", CHOICES) is None
    assert normalize_answer("perhaps", "yesno") is None
    assert normalize_answer("\\left( 3, 4 \\right)", "math") == "(3,4)"


# ------------------------------------------------------------------------------------------- threads

THREAD_CASES = [
    ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)", "math", True),
    ("\\sqrt{2}", "\\sqrt 2", "math", True),
    ("x^2+7x+10", "(x+5)(x+2)", "math", True),
    ("\\frac{1}{3}", "\\frac{2}{3}", "math", False),
    ("1,000", "1000", "math", True),
    ("B", "B", "mc", True),
    ("no", "yes", "yesno", False),
]


def test_grading_is_safe_in_a_thread_pool():
    """math-verify's signal alarm fails off the main thread; the grader must switch it off there."""
    jobs = THREAD_CASES * 6
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: is_equivalent(case[0], case[1], case[2], CHOICES), jobs))
    assert results == [case[3] for case in jobs]


def test_grading_in_a_plain_thread():
    out = {}

    def work():
        out["value"] = is_equivalent("\\sqrt{8}", "2\\sqrt{2}", "math")
        out["wrong"] = is_equivalent("\\sqrt{8}", "3", "math")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert out == {"value": True, "wrong": False}


@pytest.mark.parametrize(
    "prediction",
    [
        "9^9^9^9^9",
        "10^{10^{10^{10}}}",
        "(x+1)^{100000}",
        "2**(2**(2**10))",
        "(10^{100})!",
        "999999999999!",
        "1e999999999",
    ],
)
def test_pathological_math_returns_quickly_off_the_main_thread(prediction):
    """Off the main thread math-verify has no timeout, so inputs that make sympy build huge numbers are refused."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(is_equivalent, prediction, "5", "math").result(timeout=30) is False


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [("32", r"\$32"), (r"\$32", "32"), ("18.90", r"\$18.90"), (r"\$18.9", r"\$18.90"), (r"\$1,000", "1000")],
)
def test_latex_escaped_dollar_is_a_currency_sign(prediction, gold):
    """MATH-style golds write dollars as ``\\$``; the escaped sign must not hide the number."""
    assert is_equivalent(prediction, gold, "math")
    assert not is_equivalent("33", gold, "math")
