"""TheoremQA: gold parsing per answer type, loading (file, hub path, pictures) and the approx / option grading."""

import csv
import json
import logging
import threading
from fractions import Fraction

import pytest

from metamod.tasks import TASKS, TaskConfig, load_task
from metamod.tasks import benchmarks as benchmarks_module
from metamod.tasks.approx import APPROX_REL_TOL
from metamod.tasks.grading import is_equivalent, normalize_answer
from metamod.tasks.theoremqa import ANSWER_TYPE_KINDS, TheoremQATask, theoremqa_gold

# Rows written for these tests (not copied from the benchmark), in the hub's column layout.
ROWS = [
    {"Question": "What is the rate? Return a decimal.", "Answer": 0.02, "Answer_type": "float", "Picture": None},
    {"Question": "How many apples?", "Answer": 5, "Answer_type": "integer", "Picture": None, "theorem": "counting"},
    {"Question": "Return [mean, variance].", "Answer": [1, 0], "Answer_type": "list of integer", "Picture": None},
    {"Question": "Return the two roots.", "Answer": [0.5, 1.25], "Answer_type": "list of float", "Picture": None},
    {"Question": "Is the set compact?", "Answer": True, "Answer_type": "bool", "Picture": None, "field": "Math"},
    {
        "Question": "Which theorem proves it? (a) Fubini; (b) Tonelli; (c) Vitali; (d) None of the above.",
        "Answer": "(c)",
        "Answer_type": "option",
        "Picture": None,
    },
    {"Question": "Find the angle in the figure.", "Answer": 63.4, "Answer_type": "float", "Picture": "images/g.jpg"},
    {"Question": "What is the voltage?", "Answer": 924.0, "Answer_type": "float", "Picture": ""},
    {"Question": "Explain.", "Answer": "because", "Answer_type": "essay", "Picture": None},
    {"Question": "", "Answer": 3, "Answer_type": "integer", "Picture": None},
]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _hub_form(rows):
    """The hub keeps Answer as a string ("0.02", "[1, 0]", "True", "(c)")."""
    return [{**row, "Answer": str(row["Answer"])} for row in rows]


# ------------------------------------------------------------------------------------------- gold parsing


@pytest.mark.parametrize(
    ("value", "answer_type", "gold"),
    [
        (0.02, "float", "0.02"),
        ("0.02", "float", "0.02"),
        (924.0, "float", "924.0"),
        ("924.0", "float", "924.0"),
        (4600, "float", "4600.0"),
        (1e-05, "float", "1e-05"),
        (5, "integer", "5"),
        ("5", "integer", "5"),
        (5.0, "integer", "5"),
        (108610, "integer", "108610"),
        ([1, 0], "list of integer", "[1, 0]"),
        ("[3, 1]", "list of integer", "[3, 1]"),
        ("(3, 1)", "list of integer", "[3, 1]"),
        ([0.5, 3], "list of float", "[0.5, 3.0]"),
        ("[-1.5, 2.25]", "list of float", "[-1.5, 2.25]"),
        (True, "bool", "yes"),
        ("False", "bool", "no"),
        ("(b)", "option", "B"),
        ("(c)", "option", "C"),
    ],
)
def test_theoremqa_gold(value, answer_type, gold):
    assert theoremqa_gold(value, answer_type) == gold


@pytest.mark.parametrize(
    ("value", "answer_type"),
    [
        ("about five", "integer"),
        (5.5, "integer"),
        (True, "integer"),
        ("nan", "float"),
        ("inf", "float"),
        ("[1, x]", "list of integer"),
        ("[]", "list of float"),
        ("maybe", "bool"),
        ("(?)", "option"),
        ("3", "essay"),
        (None, "float"),
    ],
)
def test_theoremqa_gold_unusable(value, answer_type):
    assert theoremqa_gold(value, answer_type) is None


# ------------------------------------------------------------------------------------------- loading


def test_loads_a_local_file_with_kinds_per_answer_type(tmp_path, caplog):
    path = _write_jsonl(tmp_path / "theoremqa.jsonl", ROWS)
    with caplog.at_level(logging.INFO, logger="metamod.tasks.theoremqa"):
        task = load_task("theoremqa", data_files=path, include_images=False)
    examples = list(task.examples())
    assert [(ex.kind, ex.gold) for ex in examples] == [
        ("approx", "0.02"),
        ("math", "5"),
        ("approx", "[1, 0]"),
        ("approx", "[0.5, 1.25]"),
        ("yesno", "yes"),
        ("mc", "C"),
        ("approx", "924.0"),
    ]
    assert [ex.meta["answer_type"] for ex in examples] == [
        "float",
        "integer",
        "list of integer",
        "list of float",
        "bool",
        "option",
        "float",
    ]
    assert examples[0].id == "theoremqa-test-0" and examples[-1].id == "theoremqa-test-7"
    assert examples[1].meta["theorem"] == "counting" and examples[4].meta["field"] == "Math"
    option = examples[5]
    assert option.choices is None and option.question == ROWS[5]["Question"]
    assert option.meta["distractors"] == ["(a)", "(b)", "(d)"]
    assert task.skipped_ids == ["theoremqa-test-8", "theoremqa-test-9"]  # unknown type, no question
    assert task.left_out_pictures == 1 and caplog.text.count("left out 1 of 10 questions") == 1
    assert "skipped 2 of 9 rows" in caplog.text  # the picture row is left out, not counted as skipped
    for ex in examples:
        assert is_equivalent(ex.gold, ex.gold, ex.kind, ex.choices), ex.gold


def test_picture_questions_are_kept_by_default_as_text(tmp_path, caplog):
    """All 800 by default (the MC2 paper's count): a picture question is asked as text and marked in meta."""
    path = _write_jsonl(tmp_path / "theoremqa.jsonl", ROWS)
    with caplog.at_level(logging.INFO, logger="metamod.tasks.theoremqa"):
        task = load_task("theoremqa", data_files=path)
    pictured = [ex for ex in task.examples() if ex.meta.get("has_picture")]
    assert [(ex.id, ex.gold, ex.question) for ex in pictured] == [("theoremqa-test-6", "63.4", ROWS[6]["Question"])]
    assert task.left_out_pictures == 0 and task.picture_questions == 1 and len(task) == 8
    assert caplog.text.count("1 of 10 questions come with a picture; they are asked as text only") == 1
    assert load_task("theoremqa", data_files=path, include_images=True).picture_questions == 1
    dropped = load_task("theoremqa", data_files=path, include_images=False)
    assert len(dropped) == 7 and dropped.left_out_pictures == 1 and dropped.picture_questions == 1
    with pytest.raises(ValueError, match="include_images must be true or false"):
        load_task("theoremqa", data_files=path, include_images="yes")


def test_hub_string_answers_and_other_formats_agree(tmp_path):
    native_file = _write_jsonl(tmp_path / "a.jsonl", ROWS)
    native = [ex.to_dict() for ex in load_task("theoremqa", data_files=native_file).examples()]
    as_strings = _write_jsonl(tmp_path / "b.jsonl", _hub_form(ROWS))
    stringy = [ex.to_dict() for ex in load_task("theoremqa", data_files=as_strings).examples()]
    table = tmp_path / "c.csv"
    with table.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["Question", "Answer", "Answer_type", "Picture"])
        writer.writeheader()
        for row in _hub_form(ROWS):
            writer.writerow({key: row[key] if row[key] is not None else "" for key in writer.fieldnames})
    from_csv = [ex.to_dict() for ex in load_task("theoremqa", data_files=str(table)).examples()]

    def strip(rows):
        return [(row["id"], row["gold"], row["kind"]) for row in rows]

    assert strip(native) == strip(stringy) == strip(from_csv)


def test_id_column_and_missing_answer_type_column(tmp_path):
    rows = [{**row, "id": f"author/q{i}.json"} for i, row in enumerate(ROWS[:2])]
    task = load_task("theoremqa", data_files=_write_jsonl(tmp_path / "ids.jsonl", rows), id_column="id")
    assert [ex.id for ex in task.examples()] == ["author/q0.json", "author/q1.json"]
    bare = [{"Question": "q?", "Answer": 1}]
    with pytest.raises(ValueError, match="column 'Answer_type' \\(set by answer_type_column\\) not found"):
        load_task("theoremqa", data_files=_write_jsonl(tmp_path / "bare.jsonl", bare))


def test_hub_loading_path_and_missing_hub(monkeypatch):
    calls = []

    def fake_hub(path, config, split):
        calls.append((path, config, split))
        rows = _hub_form(ROWS)
        return {
            column: [row.get(column) for row in rows] for column in ("Question", "Answer", "Answer_type", "Picture")
        }

    monkeypatch.setattr(benchmarks_module, "load_hub_table", fake_hub)
    task = load_task("theoremqa", limit=3, seed=1)
    assert calls == []  # the hub is only touched when examples are requested
    examples = list(task.examples())
    assert calls == [("TIGER-Lab/TheoremQA", None, "test")] and len(examples) == 3
    assert len(list(load_task("theoremqa").examples())) == 8
    assert len(list(load_task("theoremqa", include_images=False).examples())) == 7

    def offline(path, config, split):
        raise RuntimeError(
            f"Could not load dataset {path!r} (config={config!r}, split={split!r}): offline. Without hub access, "
            "pass data_files=<local .jsonl/.json/.parquet/.csv> instead."
        )

    monkeypatch.setattr(benchmarks_module, "load_hub_table", offline)
    with pytest.raises(RuntimeError, match="Could not load dataset 'TIGER-Lab/TheoremQA'.*pass data_files"):
        list(load_task("theoremqa").examples())


def test_registry_and_config():
    assert TASKS["theoremqa"] is TheoremQATask
    assert set(ANSWER_TYPE_KINDS.values()) == {"math", "approx", "yesno", "mc"}
    assert TaskConfig(task="theoremqa", task_include_images=True).options() == {"include_images": True}
    with pytest.raises(ValueError, match="task_include_images is not an option of task 'mmlu'"):
        TaskConfig(task="mmlu", task_include_images=True)


# ------------------------------------------------------------------------------------------- grading


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        # 4% of |gold|, inclusive
        ("0.0208", "0.02", True),
        ("0.0192", "0.02", True),
        ("0.02081", "0.02", False),
        ("0.019", "0.02", False),
        ("-0.0208", "-0.02", True),
        ("-0.0208", "0.02", False),
        ("960.96", "924.0", True),
        ("961", "924.0", False),
        ("887.04", "924.0", True),
        ("0", "0.0", True),
        ("0.001", "0.0", False),
        # number forms
        ("9.24 \\times 10^2", "924.0", True),
        ("9.3e2 V", "924.0", True),
        ("924 V", "924.0", True),
        ("<answer>0.02</answer>", "0.02", True),
        ("The answer is \\boxed{2\\%}.", "0.02", True),
        ("r = 0.0201", "0.02", True),
        ("\\frac{1}{50}", "0.02", True),
        ("\\frac{\\pi}{4}", "0.785", True),
        ("2\\sqrt{3}", "3.464", True),
        ("4.6 \\times 10^{3} rad/s", "4600.0", True),
        ("1e-05", "1e-05", True),
        ("1.03e-5", "1e-05", True),
        # hedges and garbage
        ("0.02 or 0.5", "0.02", False),
        ("about right", "0.02", False),
        ("", "0.02", False),
        (None, "0.02", False),
        ("3 sqrt(2)", "4.24", False),
        # integers in the gold are exact
        ("[1, 0]", "[1, 0]", True),
        ("(1, 0)", "[1, 0]", True),
        ("1, 0", "[1, 0]", True),
        ("[1.0, 0.0]", "[1, 0]", True),
        ("[0, 1]", "[1, 0]", False),  # in order
        ("[1.01, 0]", "[1, 0]", False),
        ("[1]", "[1, 0]", False),
        ("[1, 0, 0]", "[1, 0]", False),
        ("1,0", "[1, 0]", False),  # no space and no brackets: not a list (could be a thousands separator)
        ("[1 or 2, 0]", "[1, 0]", False),
        # decimals in a list gold get the tolerance, element-wise
        ("[0.51, 1.3]", "[0.5, 1.25]", True),
        ("[0.53, 1.25]", "[0.5, 1.25]", False),
        ("[\\frac{1}{2}, \\frac{5}{4}]", "[0.5, 1.25]", True),
        ("[1.25, 0.5]", "[0.5, 1.25]", False),
        # a gold that is not numeric is graded as math
        ("x^2", "x^2", True),
    ],
)
def test_approx(prediction, gold, expected):
    assert is_equivalent(prediction, gold, "approx") is expected


def test_tolerance_edge_is_inclusive():
    gold = "0.25"
    assert APPROX_REL_TOL == Fraction("0.04")
    assert is_equivalent("0.26", gold, "approx") and is_equivalent("0.24", gold, "approx")
    assert not is_equivalent("0.2601", gold, "approx") and not is_equivalent("0.2399", gold, "approx")


def test_integer_answers_are_exact_math():
    assert is_equivalent("5", "5", "math") and is_equivalent("5.0", "5", "math")
    assert not is_equivalent("5.1", "5", "math") and not is_equivalent("4.9", "5", "math")


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("(c)", True),
        ("c", True),
        ("C", True),
        ("(C) Vitali", True),
        ("Answer: (c)", True),
        ("(b)", False),
        ("(b) or (c)", False),
        ("Vitali", False),
        ("", False),
    ],
)
def test_option_answers(prediction, expected):
    assert is_equivalent(prediction, theoremqa_gold("(c)", "option"), "mc") is expected


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [("True", "yes", True), ("yes", "yes", True), ("False", "yes", False), ("no", "no", True)],
)
def test_bool_answers(prediction, gold, expected):
    assert is_equivalent(prediction, theoremqa_gold(gold == "yes", "bool"), "yesno") is expected


def test_approx_votes_group_equal_values():
    assert {normalize_answer(a, "approx") for a in ["0.5", "1/2", "\\frac{1}{2}", "5e-1", "x = 0.50"]} == {"1/2"}
    assert normalize_answer("(1, 0.5)", "approx") == normalize_answer("[1.0, 1/2]", "approx") == "[1,1/2]"
    assert normalize_answer("0.02 or 0.5", "approx") is None and normalize_answer(None, "approx") is None


def test_approx_is_safe_off_the_main_thread():
    out = {}

    def work():
        out["value"] = (is_equivalent("\\frac{\\pi}{4}", "0.785", "approx"), is_equivalent("9^9^9", "0.785", "approx"))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert out == {"value": (True, False)}
