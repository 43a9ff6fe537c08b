"""Code-reasoning tasks: the CRUXEval / LiveCodeBench / induction loaders on local files, and synthetic_code."""

import json
import random

import pytest

from metamod.tasks import TASKS, TaskConfig, load_task
from metamod.tasks.code.extract import parse_args, parse_literal
from metamod.tasks.code.grading import code_problem, grade_code
from metamod.tasks.code.loaders import LIVECODEBENCH_PRELUDE, RHDA102_IDS
from metamod.tasks.synthetic_code import draw_function, draw_input, python_problem

CODE_TASKS = [
    "cruxeval_o",
    "cruxeval_i",
    "livecodebench_o",
    "livecodebench_i",
    "list_function",
    "mini_arc",
    "robustfill",
    "deepcoder",
    "synthetic_code",
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _sandbox():
    from metamod import sandbox

    if not sandbox.capabilities().namespaces:
        pytest.skip("the sandbox needs user + network namespaces on this host")
    return sandbox


CRUX_ROWS = [
    {
        "code": "def f(text, n):\n    return text[:n] + text[::-1]",
        "input": "'abc', 1",
        "output": "'acba'",
        "id": "sample_0",
    },
    {"code": "def f(nums):\n    return sorted(nums)", "input": "[3, 1, 2]", "output": "[1, 2, 3]", "id": "sample_1"},
    {"code": "def f(x):\n    return x", "input": "os.getcwd()", "output": "1", "id": "sample_2"},  # not a literal
    {"code": "def f(x):\n    return x", "input": "1", "output": "oops(", "id": "sample_3"},  # bad output
]

LCB_ROWS = [
    {
        "question_id": 3172,
        "id": "sample_244",
        "function_name": "differenceOfSums",
        "code": "def differenceOfSums(n: int, m: int) -> int:\n    return sum(x for x in range(1, n + 1) if x % m) - "
        "sum(x for x in range(1, n + 1) if x % m == 0)",
        "input": "differenceOfSums(n = 5, m = 1)",
        "output": "-15",
        "numsteps": 642,
        "problem_id": [65, 10, 2],
        "contest_id": "weekly-contest-366",
        "contest_date": "2023-10-08",
        "difficulty": "easy",
    },
    {
        "question_id": 3176,
        "id": "sample_255",
        "function_name": "minimumSum",
        "code": "def minimumSum(nums: List[int]) -> int:\n    return min(nums) if nums else -1",
        "input": "minimumSum(nums = [8, 6, 1, 5, 3])",
        "output": "1",
        "difficulty": "easy",
    },
    {
        "id": "sample_9",
        "function_name": "g",
        "code": "def g(a):\n    return a",
        "input": "g(b = 1)",  # keyword that is not a parameter: skipped
        "output": "1",
    },
]


# ------------------------------------------------------------------------------------------- registry and config


def test_code_tasks_are_registered_and_configurable(tmp_path):
    assert set(CODE_TASKS) <= set(TASKS)
    cfg = TaskConfig(task="synthetic_code", task_subtask="induction", task_levels=[1], task_num_examples=3)
    assert cfg.options() == {"levels": [1], "num_examples": 3, "subtask": "induction"}
    assert [ex.kind for ex in cfg.load().examples()] == ["code_function"] * 3
    data = _jsonl(tmp_path / "lf.jsonl", [{"pairs": [["[1]", "[2]"], ["[2]", "[3]"]]}])
    cfg = TaskConfig(task="list_function", task_data_files=data, task_grade_pairs="all")
    assert json.loads(next(cfg.load().examples()).gold)["tests"] == [["[1]", "[2]"], ["[2]", "[3]"]]
    cfg = TaskConfig(task="list_function", task_data_files=data, task_grade_pairs="hidden")
    assert json.loads(next(cfg.load().examples()).gold) == {
        "tests": [["[2]", "[3]"]], "entry": "f", "language": "python", "reference": None, "visible": 0}  # fmt: skip
    with pytest.raises(ValueError, match="task_subtask is not an option of task 'gsm8k'"):
        TaskConfig(task="gsm8k", task_subtask="deduction")
    with pytest.raises(ValueError, match="data_files is required"):
        load_task("list_function")
    with pytest.raises(ValueError, match="grade_pairs must be one of"):
        load_task("mini_arc", data_files=data, grade_pairs="some")


# ------------------------------------------------------------------------------------------- CRUXEval / LiveCodeBench


def test_cruxeval_output_and_input_tasks(tmp_path, caplog):
    data = _jsonl(tmp_path / "crux.jsonl", CRUX_ROWS)
    out_task = load_task("cruxeval_o", data_files=data)
    examples = list(out_task.examples())
    assert [ex.id for ex in examples] == ["cruxeval_o-sample_0", "cruxeval_o-sample_1"]
    assert out_task.skipped_ids == ["cruxeval_o-sample_2", "cruxeval_o-sample_3"]
    first = examples[0]
    assert (first.kind, first.gold) == ("code_output", "'acba'")
    problem = code_problem(first)
    assert (problem.subtask, problem.entry, problem.input, problem.output) == ("deduction", "f", "'abc', 1", None)
    assert "f('abc', 1)" in first.question and "return text[:n]" in first.question
    assert grade_code("[ANSWER]assert f('abc', 1) == 'acba'[/ANSWER]", first.gold, "code_output").correct

    in_examples = list(load_task("cruxeval_i", data_files=data).examples())
    assert [ex.id for ex in in_examples] == ["cruxeval_i-sample_0", "cruxeval_i-sample_1"]
    gold = json.loads(in_examples[1].gold)
    assert gold == {"function": CRUX_ROWS[1]["code"], "entry": "f", "output": "[1, 2, 3]", "input": "[3, 1, 2]"}
    problem = code_problem(in_examples[1])
    assert (problem.subtask, problem.input, problem.output) == ("abduction", None, "[1, 2, 3]")
    assert "[1, 2, 3]" in in_examples[1].question and "[3, 1, 2]" not in json.dumps(in_examples[1].meta)


def test_livecodebench_tasks_place_keyword_inputs(tmp_path):
    data = _jsonl(tmp_path / "lcb.jsonl", LCB_ROWS)
    task = load_task("livecodebench_o", data_files=data)
    examples = list(task.examples())
    assert [ex.id for ex in examples] == ["livecodebench_o-sample_244", "livecodebench_o-sample_255"]
    assert task.skipped_ids == ["livecodebench_o-sample_9"]
    problem = code_problem(examples[0])
    assert (problem.entry, problem.input, problem.prelude) == ("differenceOfSums", "5, 1", LIVECODEBENCH_PRELUDE)
    assert examples[0].gold == "-15" and examples[0].meta["difficulty"] == "easy"
    assert examples[0].meta["code"]["prelude"] == LIVECODEBENCH_PRELUDE
    assert "differenceOfSums(5, 1)" in examples[0].question and "from typing" not in examples[0].question
    abduction = list(load_task("livecodebench_i", data_files=data).examples())[1]
    gold = json.loads(abduction.gold)
    assert (gold["entry"], gold["input"], gold["output"], gold["prelude"]) == (
        "minimumSum",
        "[8, 6, 1, 5, 3]",
        "1",
        LIVECODEBENCH_PRELUDE,
    )
    renamed = tmp_path / "renamed.jsonl"
    rows = [{"src": r["code"], "call": r["input"], "want": r["output"], "name": r["function_name"]} for r in LCB_ROWS]
    renamed_task = load_task(
        "livecodebench_o",
        data_files=_jsonl(renamed, rows[:2]),
        code_column="src",
        input_column="call",
        output_column="want",
        entry_column="name",
    )
    assert [ex.id for ex in renamed_task.examples()] == ["livecodebench_o-test-0", "livecodebench_o-test-1"]
    with pytest.raises(ValueError, match="column 'code' .* Set code_column"):
        load_task("cruxeval_o", data_files=str(renamed))


def test_livecodebench_rhda102_selection(tmp_path, caplog, monkeypatch):
    """rhda102 keeps the ids of RHDA's 102-problem file (sample_244..301, sample_435..478); all is the default."""
    assert len(RHDA102_IDS) == 102 and {"sample_244", "sample_301", "sample_435", "sample_478"} <= RHDA102_IDS
    assert not {"sample_243", "sample_302", "sample_434", "sample_479"} & RHDA102_IDS
    rows = [dict(LCB_ROWS[0], id=sample) for sample in ("sample_243", "sample_244", "sample_301", "sample_302")]
    rows += [dict(LCB_ROWS[1], id=sample, contest_date="2023-06-04") for sample in ("sample_434", "sample_435")]
    data = _jsonl(tmp_path / "lcb.jsonl", rows)
    assert len(load_task("livecodebench_o", data_files=data)) == 6
    with caplog.at_level("INFO", logger="metamod.tasks.code.loaders"):
        task = load_task("livecodebench_i", data_files=data, selection="rhda102")
    assert [ex.id for ex in task.examples()] == [
        "livecodebench_i-sample_244",
        "livecodebench_i-sample_301",
        "livecodebench_i-sample_435",
    ]
    assert task.skipped_ids == [] and "kept 3 of 6 rows" in caplog.text
    assert "4 rows have a contest_date after 2023-10-01" in caplog.text
    assert TaskConfig(task="livecodebench_o", task_selection="rhda102").options() == {"selection": "rhda102"}
    with pytest.raises(ValueError, match="selection must be one of all, rhda102"):
        load_task("livecodebench_o", data_files=data, selection="recent")
    with pytest.raises(ValueError, match="task_selection is not an option of task 'cruxeval_o'"):
        TaskConfig(task="cruxeval_o", task_selection="rhda102")
    no_ids = _jsonl(tmp_path / "no_ids.jsonl", [{k: v for k, v in row.items() if k != "id"} for row in rows])
    with pytest.raises(ValueError, match="column 'id' \\(set by id_column\\) not found"):
        load_task("livecodebench_o", data_files=no_ids, selection="rhda102")

    # from the hub, a count other than 102 is worth a warning (the split may have changed since RHDA's download)
    from metamod.tasks import benchmarks as benchmarks_module

    table = {column: [row.get(column) for row in rows] for column in rows[0]}
    monkeypatch.setattr(benchmarks_module, "load_hub_table", lambda path, config, split: table)
    caplog.clear()
    with caplog.at_level("WARNING", logger="metamod.tasks.code.loaders"):
        assert len(load_task("livecodebench_o", selection="rhda102")) == 3
    assert "expected the 102 rows of RHDA's file" in caplog.text


# ------------------------------------------------------------------------------------------- induction loaders


def test_list_function_train_test_layout(tmp_path):
    row = {
        "idx": 7,
        "train": [{"input": "[3, 4, 1]", "output": "[1]"}, {"input": "[5, 0, 6]", "output": "[6]"}],
        "test": [{"input": "[4, 7, 6]", "output": "[6]"}, {"input": "[9]", "output": "[]"}],
    }
    bad = {"idx": 8, "train": [{"input": "[1", "output": "[]"}], "test": [{"input": "[1]", "output": "[]"}]}
    task = load_task("list_function", data_files=_jsonl(tmp_path / "lf.jsonl", [row, bad]))
    (example,) = list(task.examples())
    assert task.skipped_ids == ["list_function-8"]
    assert example.id == "list_function-7" and example.kind == "code_function"
    problem = code_problem(example)
    assert problem.visible == (("[3, 4, 1]", "[1]"), ("[5, 0, 6]", "[6]")) and problem.function is None
    gold = json.loads(example.gold)
    # MARCO grades on every pair: the visible ones first, then the hidden ones, with the visible count marked
    assert gold["tests"] == [["[3, 4, 1]", "[1]"], ["[5, 0, 6]", "[6]"], ["[4, 7, 6]", "[6]"], ["[9]", "[]"]]
    assert gold["visible"] == 2 and gold["language"] == "python"
    assert "[4, 7, 6]" not in example.question and "f([3, 4, 1]) == [1]" in example.question


def test_generic_pairs_layout_splits_half_visible_rounding_up(tmp_path):
    rows = [
        {"id": "a", "pairs": [[f"[{i}]", f"[{i + 1}]"] for i in range(5)], "program": "def f(x): ..."},
        {"id": "b", "pairs": [[[[1, 0]], [[0, 1]]], [[[2, 2]], [[2, 2]]]]},  # JSON values: grids
        {"id": "c", "pairs": [["[1]", "[2]"]]},  # one pair: no hidden pair, skipped
    ]
    task = load_task("mini_arc", data_files=_jsonl(tmp_path / "arc.jsonl", rows))
    examples = list(task.examples())
    assert [ex.id for ex in examples] == ["mini_arc-a", "mini_arc-b"] and task.skipped_ids == ["mini_arc-c"]
    assert len(examples[0].meta["code"]["visible"]) == 3 and len(json.loads(examples[0].gold)["tests"]) == 5
    assert json.loads(examples[0].gold)["reference"] == "def f(x): ..."
    assert examples[1].meta["code"]["visible"] == [["[[1, 0]]", "[[0, 1]]"]]
    assert json.loads(examples[1].gold)["tests"] == [["[[1, 0]]", "[[0, 1]]"], ["[[2, 2]]", "[[2, 2]]"]]


def test_robustfill_and_deepcoder_columnwise_layouts(tmp_path):
    rf_row = {
        "index": 0,
        "train": {"inputs": ["ab cd", "x y"], "outputs": ["cd", "y"], "program": "4 5|6"},
        "test": {"inputs": ["p q"], "outputs": ["q"], "program": "4 5|6"},
    }
    rf = next(load_task("robustfill", data_files=_jsonl(tmp_path / "rf.jsonl", [rf_row])).examples())
    assert rf.id == "robustfill-0" and rf.meta["code"]["language"] == "robustfill"
    assert rf.meta["code"]["visible"] == [["'ab cd'", "'cd'"], ["'x y'", "'y'"]]
    assert json.loads(rf.gold) == {
        "tests": [["'ab cd'", "'cd'"], ["'x y'", "'y'"], ["'p q'", "'q'"]],
        "entry": "f",
        "language": "robustfill",
        "reference": "4 5|6",
        "visible": 2,
    }
    dc_row = {
        "index": 3,
        "train": {"inputs": {"x0": [[1, 2], [3]], "x1": [1, 0]}, "outputs": [[2], []]},
        "test": {"inputs": {"x0": [[5, 6, 7]], "x1": [2]}, "outputs": [[7]]},
    }
    dc = next(load_task("deepcoder", data_files=_jsonl(tmp_path / "dc.jsonl", [dc_row])).examples())
    assert dc.meta["code"]["visible"] == [["[1, 2], 1", "[2]"], ["[3], 0", "[]"]]
    assert json.loads(dc.gold)["tests"][2:] == [["[5, 6, 7], 2", "[7]"]]
    args, _ = parse_args(dc.meta["code"]["visible"][0][0])
    assert args == [[1, 2], 1]


def test_dsl_rows_without_outputs_are_completed_by_the_interpreter(tmp_path):
    row = {"id": "p1", "program": "a <- [int]\nb <- SORT a", "inputs": [[3, 1], [2, 0, 1], [5], [9, 8]]}
    task = load_task("deepcoder", data_files=_jsonl(tmp_path / "dc.jsonl", [row]))
    example = next(task.examples())
    assert example.meta["code"]["visible"] == [["[3, 1]", "[1, 3]"], ["[2, 0, 1]", "[0, 1, 2]"]]
    assert grade_code("a <- [int]\nb <- SORT a", example.gold, "code_function").correct
    missing = [{"id": "p2", "inputs": [[1], [2]]}]
    task = load_task("list_function", data_files=_jsonl(tmp_path / "lf.jsonl", missing))
    assert list(task.examples()) == [] and task.skipped_ids == ["list_function-p2"]


# ------------------------------------------------------------------------------------------- synthetic_code


def test_synthetic_code_is_seeded_and_has_disjoint_splits():
    def stream(**kw):
        return [ex.to_dict() for ex in load_task("synthetic_code", num_examples=40, **kw).examples()]

    first, again, other = stream(seed=3), stream(seed=3), stream(seed=4)
    assert first == again and first != other
    assert [ex["id"] for ex in first[:2]] == [
        "synthetic_code-deduction-train-3-0",
        "synthetic_code-deduction-train-3-1",
    ]
    train = {ex["meta"]["code"]["function"] for ex in stream(seed=0)}
    test = {ex["meta"]["code"]["function"] for ex in stream(seed=0, split="test")}
    assert train and test and not train & test
    assert {ex["meta"]["level"] for ex in stream(seed=0)} == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match="levels must be"):
        load_task("synthetic_code", levels=[0])
    with pytest.raises(ValueError, match="needs subtask='induction'"):
        load_task("synthetic_code", language="deepcoder")


def test_synthetic_level_one_is_easy():
    examples = list(load_task("synthetic_code", subtask="deduction", levels=[1], num_examples=40, seed=1).examples())
    for ex in examples:
        function = ex.meta["code"]["function"]
        assert function.count("\n") == 1 and function.startswith("def f(x):\n    return ")
        assert len(ex.meta["code"]["input"]) <= 20
    assert any(ex.meta["code"]["function"] == "def f(x):\n    return x + 3" for ex in
               load_task("synthetic_code", levels=[1], num_examples=300, split="test").examples())  # fmt: skip


def test_synthetic_items_are_not_degenerate():
    for subtask in ("deduction", "abduction", "induction"):
        for ex in load_task("synthetic_code", subtask=subtask, num_examples=60, seed=5).examples():
            problem = code_problem(ex)
            assert problem.dataset == "synthetic" and problem.level in (1, 2, 3, 4, 5)
            if subtask == "deduction":
                assert parse_literal(ex.gold) != parse_literal(problem.input)
                assert grade_code(ex.gold, ex.gold, "code_output").correct
            elif subtask == "abduction":
                gold = json.loads(ex.gold)
                assert parse_literal(gold["input"]) != parse_literal(gold["output"])
            else:
                gold = json.loads(ex.gold)
                pairs = gold["tests"]  # every pair is graded (MARCO), the visible ones first
                assert len(problem.visible) == 3 and len(pairs) == 6 and gold["visible"] == 3
                assert [tuple(p) for p in pairs[:3]] == list(problem.visible)
                assert len({out for _, out in pairs}) > 1 and len({inp for inp, _ in pairs}) == 6
                assert json.loads(ex.gold)["reference"].startswith("def f(x):")


def test_synthetic_dsl_induction():
    for language in ("deepcoder", "robustfill"):
        task = load_task("synthetic_code", subtask="induction", language=language, num_examples=2, levels=[1], pairs=4)
        for ex in task.examples():
            gold = json.loads(ex.gold)
            assert ex.meta["code"]["language"] == language and len(ex.meta["code"]["visible"]) == 2
            assert grade_code(gold["reference"], ex.gold, "code_function").correct


def test_rendered_source_matches_the_callables_in_the_sandbox():
    sandbox = _sandbox()
    rng = random.Random(0)
    checked = 0
    for attempt in range(400):
        level = 1 + attempt % 5
        function = draw_function(random.Random(f"src-{attempt}"), level)
        inputs, outputs = [], []
        for _ in range(4):
            value = draw_input(rng, function.in_type, level)
            try:
                outputs.append(repr(function.call(value)))
            except Exception:
                continue
            inputs.append(repr(value))
        if not inputs:
            continue
        run = sandbox.run_function(function.source, "f", inputs, expected=outputs, timeout_s=10)
        assert all(call.passed for call in run.calls), (function.source, inputs, outputs, run.calls)
        checked += 1
        if checked == 25:
            break
    assert checked == 25


def test_synthetic_golds_grade_their_reference_answers():
    _sandbox()
    for ex in load_task("synthetic_code", subtask="abduction", num_examples=5, seed=2).examples():
        assert grade_code(json.loads(ex.gold)["input"], ex.gold, "code_input").correct
    for ex in load_task("synthetic_code", subtask="induction", num_examples=5, seed=2).examples():
        assert grade_code(json.loads(ex.gold)["reference"], ex.gold, "code_function").correct
    assert python_problem(random.Random(1), "deduction", 1) is not None
