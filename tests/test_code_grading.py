"""Code-reasoning grading: literal reading, answer extraction, grade_code / visible_feedback, the grading hooks."""

import json
import os

import pytest

from metamod.tasks.base import ANSWER_KINDS, Example
from metamod.tasks.code.extract import (
    MAX_LITERAL_DEPTH,
    LiteralError,
    bind_entry,
    extract_code_answer,
    literal_repr,
    parse_args,
    parse_literal,
    positional_args,
)
from metamod.tasks.code.grading import (
    CodeGrade,
    CodeProblem,
    abduction_gold,
    code_problem,
    code_score,
    grade_code,
    induction_gold,
    visible_feedback,
)
from metamod.tasks.grading import KINDS, is_equivalent, normalize_answer

MALICIOUS = [
    "__import__('os').system('id')",
    "exec('import os')",
    "open('/etc/passwd').read()",
    "(lambda: 1)()",
    "[x for x in ().__class__.__base__.__subclasses__()]",
    "globals()",
    "f(1)",
    "1 if True else 2",
]


def _sandbox():
    from metamod import sandbox

    if not sandbox.capabilities().namespaces:
        pytest.skip("the sandbox needs user + network namespaces on this host")
    return sandbox


@pytest.fixture
def sandbox():
    return _sandbox()


# ------------------------------------------------------------------------------------------- literals


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("[1, 2]", [1, 2]),
        ("  `'abc'`  ", "abc"),
        ("```python\n{'a': (1, 2)}\n```", {"a": (1, 2)}),
        ("**-3**", -3),
        ("set()", set()),
        ("frozenset({1, 2})", frozenset({1, 2})),
        ("{1, 2}", {1, 2}),
        ("inf", float("inf")),
        ("-inf", float("-inf")),
        ("1+2j", 1 + 2j),
        ("b'x'", b"x"),
        ("True", True),
        ("None", None),
        ("'done'.", "done"),
        ("(1,)", (1,)),
        ("()", ()),
    ],
)
def test_parse_literal_reads_literals_and_repr_quirks(text, value):
    assert parse_literal(text) == value


@pytest.mark.parametrize("text", MALICIOUS + ["", "abc", "[1, 2", "...", "{**a}", "[*a]", "true", None])
def test_parse_literal_refuses_code_and_garbage(text):
    with pytest.raises(LiteralError):
        parse_literal(text)


def test_parse_literal_caps_size_depth_and_digits():
    for text in ["[" * 300 + "]" * 300, "-" * 100_000 + "1", "1" * 5000, "[" + "1, " * 60_000 + "]"]:
        with pytest.raises(LiteralError):
            parse_literal(text)
    deep = "[" * (MAX_LITERAL_DEPTH + 2) + "]" * (MAX_LITERAL_DEPTH + 2)
    with pytest.raises(LiteralError, match="nested deeper"):
        parse_literal(deep)
    assert parse_literal("[" * 10 + "]" * 10) == [[[[[[[[[[]]]]]]]]]]


def test_malicious_value_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    text = f"__import__('os').system('touch {marker}')"
    assert grade_code(text, "0", "code_output").error == "unparsable answer"
    assert not is_equivalent(text, "0", "code_output")
    assert normalize_answer(text, "code_output") is None
    assert not marker.exists()


def test_literal_repr_is_canonical_and_round_trips():
    for value in [{3, 1}, {"b": [1, {2}], "a": ()}, (1,), frozenset({2, 1}), -0.0, "it's", [None, True, 1.5]]:
        assert parse_literal(literal_repr(value)) == value
    assert literal_repr({"b": 1, "a": 2}) == literal_repr({"a": 2, "b": 1})


def test_parse_args_and_keyword_placement():
    assert parse_args("") == ([], {})
    assert parse_args("[1, 2], 'a'") == ([[1, 2], "a"], {})
    src = "def minSum(nums1: List[int], nums2: List[int], k: int = 3) -> int:\n    return 0"
    assert positional_args("nums2 = [1], nums1 = [2, 0]", src, "minSum") == "[2, 0], [1]"
    with pytest.raises(LiteralError, match="missing argument 'nums2'"):
        positional_args("[2], k = 5", src, "minSum")
    with pytest.raises(LiteralError, match="unexpected"):
        positional_args("zzz = 1", src, "minSum")
    with pytest.raises(LiteralError):
        positional_args("*[1, 2]")
    with pytest.raises(LiteralError):
        positional_args("__import__('os')")


# ------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("response", "subtask", "expected"),
    [
        ("Let's run it.\n[ANSWER]\nassert f([1, 2]) == [2, 4]\n[/ANSWER]", "deduction", "[2, 4]"),
        ("Let's run it.\n[ANSWER]\nassert f([1, 2]) == [2, 4]\n[/ANSWER]", "abduction", "[1, 2]"),
        ("first <answer>3</answer> then <answer> 'x' </answer>", "deduction", "'x'"),
        ("The loop adds 3 each time.\nassert f(3) == 7", "deduction", "7"),
        ("So:\n```python\nassert f('ab') == 'ba'\n```\nDone.", "deduction", "'ba'"),
        ("```python\n[3, 2, 1]\n```", "deduction", "[3, 2, 1]"),
        ("Tracing: x becomes 9, so the output is 9.", "deduction", "9"),
        ("The function returns [1, 2] for this input.", "deduction", "[1, 2]"),
        ("Hence f(4) == 7.", "deduction", "7"),
        ("<answer>f(2, 'x')</answer>", "abduction", "2, 'x'"),
        ("<answer>assert differenceOfSums(n = 5, m = 1) == -15</answer>", "abduction", "n = 5, m = 1"),
        ("We need the sum to be 6, so the input should be [1, 2, 3].", "abduction", "[1, 2, 3]"),
        ("assert f(\n    [1, 2],\n    3,\n) == [\n    4,\n]", "deduction", "[\n    4,\n]"),
        ("assert f(\n    [1, 2],\n    3,\n) == [\n    4,\n]", "abduction", "[1, 2], 3"),
        ("<answer>7", "deduction", "7"),
        ("<answer>f(4) = 7</answer>", "deduction", "7"),
        ("<answer>f([1], 'a') -> 3</answer>", "abduction", "[1], 'a'"),
        ("I am not sure what it does.", "deduction", None),
        ("<answer></answer>", "deduction", None),
        ("<answer>__import__('os').system('id')</answer>", "deduction", None),
    ],
)
def test_extract_deduction_and_abduction(response, subtask, expected):
    assert extract_code_answer(response, subtask) == expected


def test_extract_induction_programs():
    response = (
        "First try:\n```python\ndef g(x):\n    return x\n```\nBetter:\n```python\ndef f(xs):\n"
        "    return [v * 2 for v in xs]\n```\nAnd a test:\n```python\nprint(f([1]))\n```"
    )
    assert extract_code_answer(response, "induction") == "def f(xs):\n    return [v * 2 for v in xs]"
    assert extract_code_answer("<answer>\n```python\ndef f(x):\n    return 1\n```\n</answer>", "induction") == (
        "def f(x):\n    return 1"
    )
    assert extract_code_answer("def f(x):\n    return x + 1", "induction") == "def f(x):\n    return x + 1"
    assert extract_code_answer("The rule doubles every element.", "induction") is None
    dsl = "Program:\n```\na <- [int]\nb <- SORT a\n```"
    assert extract_code_answer(dsl, "induction", language="deepcoder") == "a <- [int]\nb <- SORT a"
    assert extract_code_answer(dsl, "induction") is None
    with pytest.raises(ValueError, match="Unknown subtask"):
        extract_code_answer("x", "transduction")


def test_bind_entry_aliases_a_single_other_name():
    assert bind_entry("def f(x):\n    return x", "f") == "def f(x):\n    return x"
    assert bind_entry("def program(x0):\n    return x0", "f").endswith("f = program\n")
    assert bind_entry("print('hi')", "f") is None


# ------------------------------------------------------------------------------------------- deduction grading


@pytest.mark.parametrize(
    ("prediction", "gold", "correct"),
    [
        ("7", "7", True),
        ("7.0", "7", True),  # Python ==, as CRUXEval's assert
        ("[ANSWER]assert f(4) == 7[/ANSWER]", "7", True),
        ("'abc'", '"abc"', True),
        ("{2, 1}", "{1, 2}", True),
        ("[1, 2]", "[2, 1]", False),
        ("(1, 2)", "[1, 2]", False),
        ("'7'", "7", False),
        ("", "7", False),
        (None, "7", False),
        ("seven", "7", False),
    ],
)
def test_grade_code_output(prediction, gold, correct):
    grade = grade_code(prediction, gold, "code_output")
    assert grade.correct is correct
    assert grade.score == float(correct) and grade.total == 1
    assert is_equivalent(prediction, gold, "code_output") is correct


def test_grade_code_rejects_unknown_kinds_and_bad_golds():
    with pytest.raises(ValueError, match="code answer kind"):
        grade_code("1", "1", "math")
    assert grade_code("1", "not json", "code_input").error == "unparsable gold"
    assert grade_code("def f(x): pass", "{}", "code_function").error == "unparsable gold"
    assert set(ANSWER_KINDS) == set(KINDS) and {"code_output", "code_input", "code_function"} <= set(KINDS)


def test_normalize_answer_groups_equal_code_answers():
    same = ["[ANSWER]assert f(1) == {'a': 1, 'b': 2}[/ANSWER]", "{'b': 2, 'a': 1}", "<answer>{'a': 1, 'b': 2}</answer>"]
    assert len({normalize_answer(a, "code_output") for a in same}) == 1
    assert normalize_answer("f([1,2], 'x')", "code_input") == normalize_answer("[1, 2], 'x'", "code_input")
    program = "```python\ndef f(x):\n    return x\n```"
    assert normalize_answer(program, "code_function") == "def f(x):\n    return x"
    assert normalize_answer("nonsense", "code_input") is None


def test_code_problem_checks_and_round_trip():
    problem = CodeProblem("induction", "f", None, visible=(("[1]", "[2]"),), language="deepcoder", level=2)
    example = Example(id="x", question="q", gold=induction_gold([("[3]", "[4]")], "f", "deepcoder", None),
                      kind="code_function", meta={"code": problem.to_meta()})  # fmt: skip
    assert code_problem(example) == problem
    assert code_problem(example.meta["code"]).visible == (("[1]", "[2]"),)
    with pytest.raises(ValueError, match="visible"):
        CodeProblem("induction", "f", None)
    with pytest.raises(ValueError, match="language"):
        CodeProblem("induction", "f", None, visible=(("1", "2"),), language="lisp")
    with pytest.raises(ValueError, match="output is required"):
        CodeProblem("abduction", "f", "def f(x): return x")
    with pytest.raises(ValueError, match="no meta"):
        code_problem(Example(id="y", question="q", gold="1", kind="math"))


def test_deduction_feedback_format_check_never_uses_the_answer():
    problem = CodeProblem("deduction", "f", "def f(x):\n    return x + 3", input="4")
    feedback = visible_feedback(problem.to_meta(), "[ANSWER]assert f(4) == 8[/ANSWER]")
    assert feedback.passed and feedback.n_total == 1  # a wrong but well-formed answer passes the format check
    bad = visible_feedback(problem.to_meta(), "eight")
    assert not bad.passed and bad.error == "unparsable answer"
    with pytest.raises(ValueError, match="deduction_check"):
        visible_feedback(problem.to_meta(), "7", deduction_check="peek")


# ------------------------------------------------------------------------------------------- DSL induction


def _dsl_gold(language, tests):
    return induction_gold(tests, "f", language, None)


def test_deepcoder_programs_are_graded_by_the_interpreter():
    gold = _dsl_gold("deepcoder", [("[3, 1, 2]", "[1, 2, 3]"), ("[5, -1]", "[-1, 5]"), ("[2, 2, 0]", "[0, 2, 2]")])
    assert grade_code("```\na <- [int]\nb <- SORT a\n```", gold, "code_function").correct
    half = grade_code("a <- [int]\nb <- REVERSE a", gold, "code_function")
    assert not half.correct and (half.passed, half.total) == (2, 3)  # reversing sorts two of the three
    assert grade_code("a <- [int]\nb <- FROB a", gold, "code_function").error == "unparsable program"
    assert code_score("a <- [int]\nb <- SORT a", gold, "code_function") == 1.0


def test_robustfill_programs_are_graded_by_the_interpreter():
    gold = _dsl_gold("robustfill", [("'Hello big World'", "'World!'"), ("'a b'", "'b!'")])
    answer = '<answer>Concat(GetToken(Word, -1), ConstStr("!"))</answer>'
    assert grade_code(answer, gold, "code_function").correct
    assert grade_code('ConstStr("World!")', gold, "code_function").score == 0.5


# ------------------------------------------------------------------------------------------- sandboxed grading


ABDUCTION_FN = "def f(nums, k):\n    return sorted(nums)[:k]"


def test_abduction_runs_the_function_on_the_predicted_input(sandbox):
    gold = abduction_gold(ABDUCTION_FN, "f", "[1, 2]", "[2, 1, 9], 2")
    assert grade_code("[ANSWER]assert f([2, 1, 9], 2) == [1, 2][/ANSWER]", gold, "code_input").correct
    assert grade_code("f([1, 2], 5)", gold, "code_input").correct  # any input giving the output is right
    assert grade_code("f(k = 2, nums = [9, 2, 1])", gold, "code_input").correct
    wrong = grade_code("[3, 4], 2", gold, "code_input")
    assert not wrong.correct and wrong.total == 1
    assert not grade_code("f([1, 2])", gold, "code_input").correct  # missing argument: TypeError in the child


def test_abduction_never_runs_a_malicious_input(sandbox, monkeypatch, tmp_path):
    import metamod.sandbox

    calls = []
    monkeypatch.setattr(metamod.sandbox, "run_function", lambda *a, **k: calls.append(a))
    gold = abduction_gold(ABDUCTION_FN, "f", "[1, 2]", "[2, 1, 9], 2")
    for text in MALICIOUS[:6]:
        grade = grade_code(f"f({text}, 2)", gold, "code_input")
        assert not grade.correct and grade.error.startswith("unparsable answer")
    assert calls == []


def test_abduction_input_that_loops_forever_times_out(sandbox):
    function = "def f(n):\n    while n != 0:\n        n -= 2\n    return n"
    gold = abduction_gold(function, "f", "0", "4")
    grade = grade_code("f(3)", gold, "code_input", timeout_s=1.0)
    assert not grade.correct
    assert grade_code("f(6)", gold, "code_input", timeout_s=5.0).correct


def test_livecodebench_prelude_is_run_before_the_function(sandbox):
    from metamod.tasks.code.loaders import LIVECODEBENCH_PRELUDE

    function = "def count(nums: List[int]) -> int:\n    return len(Counter(nums))"
    gold = abduction_gold(function, "count", "2", "nums = [1, 1, 2]", LIVECODEBENCH_PRELUDE)
    assert grade_code("count(nums = [5, 6, 6])", gold, "code_input").correct


def test_induction_score_is_the_share_of_graded_pairs(sandbox):
    gold = induction_gold(
        [("[1, 2]", "[2, 4]"), ("[3]", "[6]"), ("[]", "[]"), ("[0, 5]", "[0, 10]")], "f", "python", None
    )
    right = "```python\ndef f(xs):\n    return [2 * v for v in xs]\n```"
    assert grade_code(right, gold, "code_function") == CodeGrade(True, 1.0, 4, 4, None)
    partial = grade_code("def f(xs):\n    return [v + v if v < 3 else v for v in xs]", gold, "code_function")
    assert (partial.correct, partial.passed, partial.total) == (False, 2, 4)
    assert (
        partial.score
        == 0.5
        == code_score("def f(xs):\n    return [v + v if v < 3 else v for v in xs]", gold, "code_function")
    )
    assert grade_code("def program(xs):\n    return [2 * v for v in xs]", gold, "code_function").correct
    crash = grade_code("def f(xs):\n    return xs[5]", gold, "code_function")
    assert crash.score == 0.0 and "IndexError" in (crash.error or "")
    assert grade_code("The function doubles each element.", gold, "code_function").error == "no program found"


def test_induction_grade_counts_every_pair_and_the_hidden_ones_apart(sandbox):
    """MARCO's accuracy counts all pairs; the gold's ``visible`` count lets the hidden pairs be counted too."""
    pairs = [("[1]", "[2]"), ("[2]", "[4]"), ("[-3]", "[-6]"), ("[5]", "[10]")]
    gold = induction_gold(pairs, "f", "python", None, visible=2)
    overfit = "def f(xs):\n    return {(1,): [2], (2,): [4]}.get(tuple(xs), [])"  # a table of the visible pairs
    grade = grade_code(overfit, gold, "code_function")
    assert (grade.correct, grade.passed, grade.total, grade.score) == (False, 2, 4, 0.5)
    assert (grade.hidden_passed, grade.hidden_total) == (0, 2)
    right = grade_code("def f(xs):\n    return [2 * v for v in xs]", gold, "code_function")
    assert right.correct and (right.hidden_passed, right.hidden_total) == (2, 2)
    for missing in (None, "  "):  # no answer: every pair fails, counted as such (not as one check)
        none = grade_code(missing, gold, "code_function")
        assert (none.passed, none.total, none.hidden_passed, none.hidden_total) == (0, 4, 0, 2)
    crash = grade_code("def f(xs):\n    return xs[5]", gold, "code_function")
    assert (crash.passed, crash.hidden_passed, crash.hidden_total) == (0, 0, 2)
    hidden_only = induction_gold(pairs[2:], "f", "python", None, visible=0)
    assert grade_code(overfit, hidden_only, "code_function").hidden_total == 2
    legacy = induction_gold(pairs[2:], "f", "python", None)  # no visible count: hidden counts unknown
    assert grade_code(overfit, legacy, "code_function").hidden_total is None


def test_induction_proposal_that_loops_forever_is_wrong(sandbox):
    gold = induction_gold([("1", "2"), ("2", "3")], "f", "python", None)
    grade = grade_code("def f(x):\n    while True:\n        pass", gold, "code_function", timeout_s=1.0)
    assert not grade.correct and grade.passed == 0
    problem = CodeProblem("induction", "f", None, visible=(("1", "2"),))
    feedback = visible_feedback(problem.to_meta(), "def f(x):\n    while True:\n        pass", timeout_s=1.0)
    assert not feedback.passed and feedback.failures == ["f(1) did not finish in time"]


def test_proposed_function_is_contained(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("METAMOD_TEST_SECRET", "s3cret")
    gold = induction_gold([("0", "'s3cret'")], "f", "python", None)
    reads_env = "import os\ndef f(x):\n    return os.environ.get('METAMOD_TEST_SECRET')"
    assert not grade_code(reads_env, gold, "code_function").correct  # the sandbox starts with an empty env
    marker = tmp_path / "written"
    writes = f"def f(x):\n    open({str(marker)!r}, 'w').write('x')\n    return 's3cret'"
    grade_code(writes, gold, "code_function")
    assert not marker.exists()
    assert os.environ["METAMOD_TEST_SECRET"] == "s3cret"
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    reads_file = f"def f(x):\n    return open({str(secret)!r}).read()"
    if sandbox.capabilities().landlock_abi:  # host files are hidden where Landlock is available
        assert not grade_code(reads_file, gold, "code_function").correct


def test_visible_feedback_uses_only_visible_pairs(sandbox):
    visible = (("[1, 2]", "[2, 4]"), ("[3]", "[6]"))
    problem = CodeProblem("induction", "f", None, visible=visible)
    gold = induction_gold([("[-1]", "[-2]")], "f", "python", None)
    example = Example(id="i", question="q", gold=gold, kind="code_function", meta={"code": problem.to_meta()})
    overfit = "def f(xs):\n    return [abs(2 * v) for v in xs]"  # right on the visible pairs, wrong on the hidden
    feedback = visible_feedback(example, overfit)
    assert feedback.passed and (feedback.n_passed, feedback.n_total) == (2, 2) and not feedback.failures
    assert not grade_code(overfit, gold, "code_function").correct
    wrong = visible_feedback(example, "def f(xs):\n    return xs")
    assert not wrong.passed and wrong.n_passed == 0
    assert wrong.failures[0] == "f([1, 2]) returned [1, 2], expected [2, 4]"
    none = visible_feedback(example, "no code here")
    assert none.error == "no program found" and not none.passed


def test_visible_feedback_abduction_and_oracle_deduction(sandbox):
    problem = CodeProblem("abduction", "f", ABDUCTION_FN, output="[1, 2]")
    assert visible_feedback(problem.to_meta(), "f([2, 1], 2)").passed
    miss = visible_feedback(problem.to_meta(), "f([5, 1], 2)")
    assert not miss.passed and miss.failures == ["f([5, 1], 2) returned [1, 5], expected [1, 2]"]
    deduction = CodeProblem("deduction", "f", "def f(x):\n    return x + 3", input="4")
    assert visible_feedback(deduction.to_meta(), "7", deduction_check="oracle").passed
    assert not visible_feedback(deduction.to_meta(), "8", deduction_check="oracle").passed
    assert visible_feedback(deduction.to_meta(), "8").passed  # the default format check reveals nothing


def test_gold_json_is_self_contained():
    gold = json.loads(abduction_gold(ABDUCTION_FN, "f", "[1, 2]", "[2, 1, 9], 2"))
    assert set(gold) == {"function", "entry", "output", "input"}
    gold = json.loads(induction_gold([("1", "2")], "f", "python", "def f(x):\n    return x + 1"))
    assert set(gold) == {"tests", "entry", "language", "reference"}
    gold = json.loads(induction_gold([("1", "2"), ("3", "4")], "f", "python", None, visible=1))
    assert set(gold) == {"tests", "entry", "language", "reference", "visible"} and gold["visible"] == 1
    with pytest.raises(ValueError, match="visible must be an integer in 0..2"):
        induction_gold([("1", "2"), ("3", "4")], "f", "python", None, visible=3)


def test_extraction_stays_fast_on_hostile_responses():
    import time

    hostile = [
        "<answer>" * 3000 + "x" * 3000,
        "<answer>x</answer>" + "[ANSWER]" * 5000,
        "```" * 20000,
        "```python\n" + "\n" * 50000 + "```",
        ("f(1) == 2 and " * 100 + "\n") * 200,
        ("Output: " + "z " * 400 + "\n") * 300,
        "I think f(1" + ") == 2 and f(1" * 2000,
        ("assert f(1) == [\n" + "1,\n" * 39) * 200,
        "[" * 100_000,
    ]
    start = time.perf_counter()
    for text in hostile:
        for subtask in ("deduction", "abduction", "induction"):
            extract_code_answer(text, subtask)
    assert time.perf_counter() - start < 5.0
