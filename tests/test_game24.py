"""Game of 24: the safe expression checker, the solver, the generated stream, file/hub loading and grading."""

import itertools
import json
import logging
import time

import pytest

from metamod.tasks import TASKS, TaskConfig, load_task
from metamod.tasks import benchmarks as benchmarks_module
from metamod.tasks.game24 import (
    TOT_HARD_RANKS,
    Game24Task,
    canonical_expression,
    check_expression,
    count_solutions,
    near_misses,
    puzzle_numbers,
    puzzle_ranks,
    solve,
)
from metamod.tasks.grading import extract_answer, is_equivalent, normalize_answer

# ------------------------------------------------------------------------------------------- check_expression


@pytest.mark.parametrize(
    ("expression", "numbers"),
    [
        ("(8 - 4) * (7 - 1)", [1, 4, 7, 8]),
        ("8 / (3 - 8 / 3)", [3, 3, 8, 8]),
        ("4 * 6 * 1 * 1", [1, 1, 4, 6]),
        ("(5 * (10 - 4)) - 6", [4, 5, 6, 10]),
        ("(10 - 4) * (13 - 9)", [4, 9, 10, 13]),
        ("  (8-4)*(7-1)  ", [8, 7, 4, 1]),
        ("(8 - 4) * (7 - 1) = 24", [1, 4, 7, 8]),
        ("(8 - 4) * (7 - 1) = 4 * 6 = 24", [1, 4, 7, 8]),
        ("(8 − 4) × (7 − 1)", [1, 4, 7, 8]),
        ("(8 - 4) x (7 - 1)", [1, 4, 7, 8]),
        ("24 ÷ 1 × 1 × 1", [24, 1, 1, 1]),
        (r"\left(8 - 4\right) \times (7 - 1)", [1, 4, 7, 8]),
        (r"$8 \div (3 - 8 \div 3)$", [3, 3, 8, 8]),
        ("[(8 - 4) * (7 - 1)]", [1, 4, 7, 8]),
        ("(8 - 4) * (7 - 1).", [1, 4, 7, 8]),
        ("6 * 4", [6, 4]),
        ("12 + 12", [12, 12]),
    ],
)
def test_valid_solutions(expression, numbers):
    assert check_expression(expression, numbers)


@pytest.mark.parametrize(
    ("expression", "numbers"),
    [
        ("(8 - 4) * (7 - 2)", [2, 4, 7, 8]),  # 20: wrong result
        ("8 * 3 + 1 - 1", [1, 3, 8, 8]),  # uses 1 twice and one 8 only
        ("8 * 3 * 1", [1, 1, 3, 8]),  # a number missing
        ("8 * 3 * 1 * 1 * 1", [1, 1, 3, 8]),  # an extra number
        ("8 * 3 * 1 * 1", [1, 2, 3, 8]),  # wrong numbers
        ("(8 - 4) * (8 - 2)", [2, 4, 7, 8]),  # 8 reused, 7 unused
        ("(8 - 4) * (7 - 1) = 25", [1, 4, 7, 8]),  # a wrong claim after the expression
        ("(8 - 4) * (7 - 1) = 4 * 5", [1, 4, 7, 8]),
        ("8 / (3 - 3) + 24", [3, 3, 8, 24]),  # division by zero
        ("8 / (3 - 8 / 3) * 0", [0, 3, 3, 8]),  # 0
        ("-4 + 28", [4, 28]),  # unary minus is not allowed
        ("+24", [24]),
        ("8.0 * 3", [8, 3]),  # float literal
        ("24", [1, 2, 3, 4]),
        ("= 24", [1, 2, 3, 4]),
        ("12 12", [12, 12]),  # two numbers, no operation
        ("1_2 + 12", [12, 12]),
        ("0x18", [24]),
    ],
)
def test_invalid_solutions(expression, numbers):
    assert check_expression(expression, numbers) is False


MALICIOUS = [
    "__import__('os').system('x')",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "9**9**9",
    "10**100000",
    "2**3*3",
    "2//1 * 24",
    "48 % 25 - 1 + 1 - 0",
    "(" * 10_000 + "24" + ")" * 10_000,
    "(" * 10_000,
    "-" * 150 + "24",
    "1" * 300,
    "9" * 100 + " - " + "9" * 100,
    "1000001 - 1000001 + 24",
    "x",
    "a + b + c + d",
    "abs(-24)",
    "print(24)",
    "lambda: 24",
    "'24'",
    "b'24'",
    "24 if 1 else 0",
    "[24][0]",
    "24 == 24",
    "24 < 25",
    "(24,)",
    "{24: 1}",
    "not 0",
    "True * 24",
    "24j",
    "1e1 + 14",
    "",
    "   ",
    "\x00",
    "\u0663 * 8",  # a non-ASCII digit
    "24; import os",
    "24\nimport os",
    "exec('24')",
    "eval('24')",
]


@pytest.mark.parametrize("expression", MALICIOUS)
def test_malicious_inputs_are_false_fast(expression):
    start = time.perf_counter()
    assert check_expression(expression, [24]) is False
    assert check_expression(expression, [1, 2, 3, 4]) is False
    assert canonical_expression(expression) is None or "=" not in expression
    assert time.perf_counter() - start < 0.5


def test_nesting_is_bounded_not_fatal():
    assert check_expression("(" * 99 + "24" + ")" * 99, [24])  # deep but short enough: parsed normally
    assert not check_expression("(" * 150 + "24" + ")" * 150, [24])  # over MAX_EXPRESSION_CHARS
    assert not check_expression("(" * 100_000 + "24" + ")" * 100_000, [24])


@pytest.mark.parametrize("expression", [None, 24, 24.0, b"24", ["24"], {"a": 1}, object()])
def test_non_strings_are_false(expression):
    assert check_expression(expression, [24]) is False
    assert canonical_expression(expression) is None


@pytest.mark.parametrize("numbers", [None, "24", [24.0], [True], [1, "2"], 24, {24}])
def test_bad_numbers_are_false(numbers):
    assert check_expression("24", numbers) is False


def test_canonical_expression_groups_spellings():
    forms = ["(8-4)*(7-1)", " ( 8 - 4 ) × ( 7 - 1 ) ", "((8 - 4)) * (7 - 1) = 24", r"$(8-4) \times (7-1)$"]
    assert {canonical_expression(f) for f in forms} == {"(8 - 4) * (7 - 1)"}
    assert canonical_expression("(7 - 1) * (8 - 4)") == "(7 - 1) * (8 - 4)"  # another order is another vote
    assert canonical_expression("8 / 0") == "8 / 0"  # well-formed, never correct


def test_puzzle_numbers():
    assert puzzle_numbers("4 7 8 8") == (4, 7, 8, 8)
    assert puzzle_numbers(" 1, 1, 4, 6 ") == (1, 1, 4, 6)
    assert puzzle_numbers("8 / (3 - 8 / 3)") == (3, 3, 8, 8)
    assert puzzle_numbers("one two") is None and puzzle_numbers("") is None and puzzle_numbers(5) is None


# ------------------------------------------------------------------------------------------- solver


def test_solver_finds_exactly_the_solvable_puzzles():
    assert solve([1, 1, 1, 1]) is None and count_solutions([1, 1, 1, 1]) == 0
    assert solve([3, 3, 8, 8]) == "8 / (3 - 8 / 3)" and count_solutions([3, 3, 8, 8]) == 1
    sample = list(itertools.combinations_with_replacement(range(1, 14), 4))[::7]
    for numbers in sample:
        solution = solve(numbers)
        assert solution is None or check_expression(solution, list(numbers)), numbers
        assert (solution is None) == (count_solutions(numbers) == 0)
    assert solve([8, 3, 3, 8]) == solve([3, 8, 8, 3])  # order does not matter
    misses = near_misses([4, 7, 8, 8])  # the closest misses, not just any (an empty list would pass the loop)
    assert misses == ("8 * 8 / 4 + 7", "(4 - 7 / 8) * 8", "(4 - 8 / 7) * 8")
    for wrong in misses:
        assert puzzle_numbers(wrong) == (4, 7, 8, 8) and not check_expression(wrong, [4, 7, 8, 8])
        assert 0 < abs(eval(wrong) - 24) <= 1.5  # noqa: S307 (a literal arithmetic string from the solver)


# ------------------------------------------------------------------------------------------- generated task


def test_generated_stream_is_solvable_deterministic_and_distinct():
    first = [ex.to_dict() for ex in Game24Task(num_examples=60, seed=3).examples()]
    again = [ex.to_dict() for ex in load_task("game24", num_examples=60, seed=3).examples()]
    other = [ex["gold"] for ex in (e.to_dict() for e in Game24Task(num_examples=60, seed=4).examples())]
    assert first == again and [ex["gold"] for ex in first] != other
    assert [ex["id"] for ex in first] == [f"game24-3-{i}" for i in range(60)]
    assert len({ex["gold"] for ex in first}) == 60  # no repeats within a stream
    for ex in first:
        meta = ex["meta"]
        assert ex["kind"] == "game24" and ex["choices"] is None
        assert len(meta["numbers"]) == 4 and all(1 <= n <= 13 for n in meta["numbers"])
        assert ex["gold"] == " ".join(map(str, sorted(meta["numbers"])))
        assert check_expression(meta["solution"], meta["numbers"])
        assert is_equivalent(meta["solution"], ex["gold"], "game24")
        assert meta["solution"] not in ex["question"] and meta["num_solutions"] >= 1
        assert all(n in ex["question"] for n in map(str, meta["numbers"]))
        assert len(meta["distractors"]) == 3
        for wrong in meta["distractors"]:
            assert not is_equivalent(wrong, ex["gold"], "game24")


def test_generated_splits_are_disjoint_and_limit_and_seed_override():
    train = {ex.gold for ex in Game24Task(num_examples=150, seed=0).examples()}
    test = list(Game24Task(num_examples=40, seed=0, split="test").examples())
    assert not train & {ex.gold for ex in test}
    assert test[0].id == "game24-test-0-0"
    task = Game24Task(num_examples=10**9, seed=5)
    assert [ex.id for ex in task.examples(limit=3)] == ["game24-5-0", "game24-5-1", "game24-5-2"]
    assert [ex.id for ex in task.examples(limit=2, seed=9)] == ["game24-9-0", "game24-9-1"]
    assert len(Game24Task(num_examples=7)) == 7 and len(Game24Task(num_examples=7, limit=3)) == 3


def test_generated_stream_repeats_only_after_every_puzzle_is_used(caplog):
    with caplog.at_level(logging.INFO, logger="metamod.tasks.game24"):
        golds = [ex.gold for ex in Game24Task(num_examples=300, seed=1, split="test").examples()]
    pool = len(set(golds))
    assert pool == 277 and len(set(golds[:pool])) == pool  # every solvable test puzzle once, then repeats
    assert "puzzles used" in caplog.text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"source": "web"}, "source must be one of generated, hub, file"),
        ({"source": "file"}, "data_files goes with source='file'"),
        ({"source": "hub", "num_examples": 5}, "num_examples is for source='generated' only"),
        ({"num_examples": 0}, "num_examples must be a positive integer"),
        ({"split": "validation"}, "split must be one of train, test"),
        ({"limit": 0}, "limit must be a positive integer"),
        ({"selection": "all"}, "selection is for a puzzle table"),
        ({"source": "hub", "selection": "hard"}, "selection must be one of tot_hard, all"),
    ],
)
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        Game24Task(**options)


# ------------------------------------------------------------------------------------------- files and hub


def test_game24_reads_a_local_file_and_skips_bad_rows(tmp_path, caplog):
    path = tmp_path / "24.csv"
    path.write_text(
        'Rank,Puzzles,AMT (s),Solved rate\n1,1 1 4 6,4.4,99.20%\n2,"1, 1, 11, 11",4.41,99.60%\n3,1 1 1 1,5,1%\n'
        "4,1 2 3,5,1%\n5,4 7 8 8,6,90%\n"
    )
    with caplog.at_level(logging.WARNING, logger="metamod.tasks.benchmarks"):
        task = load_task("game24", data_files=str(path), selection="all")
    examples = list(task.examples())
    assert [ex.gold for ex in examples] == ["1 1 4 6", "1 1 11 11", "4 7 8 8"]
    assert [ex.id for ex in examples] == ["game24-train-0", "game24-train-1", "game24-train-4"]
    assert task.skipped_ids == ["game24-train-2", "game24-train-3"] and "skipped 2 of 5 rows" in caplog.text
    assert examples[0].meta["rank"] == "1" and examples[0].meta["solved_rate"] == "99.20%"
    assert examples[1].meta["numbers"] == [1, 1, 11, 11]
    for ex in examples:
        assert check_expression(ex.meta["solution"], ex.meta["numbers"])
    jsonl = tmp_path / "puzzles.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": f"p{i}", "q": q}) + "\n" for i, q in enumerate(["3 3 8 8", [1, 2, 3, 4]]))
    )
    task = load_task(
        "game24", data_files=str(jsonl), question_column="q", id_column="id", selection="all", limit=1, seed=0
    )
    assert len(list(task.examples())) == 1 and {ex.id for ex in task.examples(limit=5)} == {"p0", "p1"}
    with pytest.raises(ValueError, match="column 'Puzzles' .* Set question_column"):
        load_task("game24", data_files=str(jsonl), selection="all")


# The Tree-of-Thoughts 24.csv header (and the columns of its hub copy test-time-compute/game-of-24).
TOT_HEADER = "Rank,Puzzles,AMT (s),Solved rate,1-sigma Mean (s),1-sigma STD (s)\n"


def _tot_table(tmp_path, ranks):
    """A small synthetic table in the real 24.csv schema: solvable puzzles, the given ranks, made-up timings."""
    puzzles = ["1 2 3 4", "2 3 4 5", "3 3 8 8", "1 5 5 5", "2 2 6 6", "4 4 6 8", "1 3 4 6", "5 5 5 9"]
    lines = [f"{rank},{puzzles[i]},{9 + i / 10:.2f},{90 - i}.50%,9.9,3.1\n" for i, rank in enumerate(ranks)]
    path = tmp_path / "24.csv"
    path.write_text(TOT_HEADER + "".join(lines))
    return str(path)


def test_default_selection_is_the_tot_hard_set_by_rank(tmp_path, caplog):
    """Ranks 901-1000 inclusive, read from the Rank column (whatever the row order), are the default for a file."""
    assert TOT_HARD_RANKS == (901, 1000)
    path = _tot_table(tmp_path, [899, 900, 901, 950, 1000, 1001, "n/a", 902])
    with caplog.at_level(logging.INFO, logger="metamod.tasks.game24"):
        task = load_task("game24", data_files=path)
    examples = list(task.examples())
    assert [ex.meta["rank"] for ex in examples] == ["901", "950", "1000", "902"]
    assert [ex.id for ex in examples] == ["game24-train-2", "game24-train-3", "game24-train-4", "game24-train-7"]
    assert task.skipped_ids == [] and "kept the 4 puzzles at ranks 901-1000 of 8 rows" in caplog.text
    assert len(load_task("game24", data_files=path, selection="all")) == 8
    assert len(list(load_task("game24", data_files=path, limit=2, seed=3).examples())) == 2  # a sample of the 4


def test_tot_hard_without_a_rank_column_uses_the_row_order(tmp_path):
    rows = [{"Puzzles": "1 1 4 6"}] * 905
    rows[900] = {"Puzzles": "4 5 6 10"}  # row 901 of the list
    path = tmp_path / "puzzles.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    examples = list(load_task("game24", data_files=str(path)).examples())
    assert len(examples) == 5 and examples[0].gold == "4 5 6 10" and examples[0].id == "game24-train-900"
    assert puzzle_ranks({"Puzzles": ["a", "b"]}, 2) == [1, 2]


def test_tot_hard_fails_clearly_when_no_row_is_in_range(tmp_path):
    path = _tot_table(tmp_path, [1, 2, 3])
    with pytest.raises(ValueError, match="no puzzle at ranks 901-1000 .* selection='all' keeps every row"):
        load_task("game24", data_files=path)


def test_game24_hub_path_and_missing_hub(monkeypatch, tmp_path):
    calls = []

    def fake_hub(path, config, split):
        calls.append((path, config, split))
        return {"Rank": [900, 901, 902], "Puzzles": ["1 2 3 4", "4 5 6 10", "1 1 1 1"]}

    monkeypatch.setattr(benchmarks_module, "load_hub_table", fake_hub)
    task = load_task("game24", source="hub")
    assert calls == []  # the hub is only touched when examples are requested
    assert [(ex.id, ex.gold) for ex in task.examples()] == [("game24-train-1", "4 5 6 10")]  # rank 901; 902 unsolvable
    assert calls == [("test-time-compute/game-of-24", None, "train")]
    assert [ex.gold for ex in load_task("game24", source="hub", selection="all").examples()] == ["1 2 3 4", "4 5 6 10"]

    def offline(path, config, split):
        raise RuntimeError(
            f"Could not load dataset {path!r} (config={config!r}, split={split!r}): offline. Without hub access, "
            "pass data_files=<local .jsonl/.json/.parquet/.csv> instead."
        )

    monkeypatch.setattr(benchmarks_module, "load_hub_table", offline)
    with pytest.raises(RuntimeError, match="Could not load dataset 'test-time-compute/game-of-24'.*pass data_files"):
        list(load_task("game24", source="hub").examples())


def test_task_config_selects_game24(tmp_path):
    assert TASKS["game24"] is Game24Task
    cfg = TaskConfig(task="game24", task_num_examples=3, task_seed=2)
    assert [ex.id for ex in cfg.load().examples()] == ["game24-2-0", "game24-2-1", "game24-2-2"]
    assert TaskConfig(task="game24", task_source="hub").load().mode == "hub"
    assert TaskConfig(task="game24", task_source="hub").load().selection == "tot_hard"
    assert TaskConfig(task="game24", task_source="hub", task_selection="all").options()["selection"] == "all"
    with pytest.raises(ValueError, match="task_source is not an option of task 'gsm8k'"):
        TaskConfig(task="gsm8k", task_source="hub")


# ------------------------------------------------------------------------------------------- grading


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("(8 - 4) * (7 - 1)", True),
        ("<answer>(8 - 4) * (7 - 1)</answer>", True),
        ("First 8 - 4 = 4, then 7 - 1 = 6, so <answer>(8 - 4) * (7 - 1) = 24</answer>", True),
        ("\\boxed{(8-4) \\times (7-1)}", True),
        ("Final Answer: (8 - 4) * (7 - 1)", True),
        ("So the answer is (8 - 4) * (7 - 1).", True),
        ("<answer>(8 - 4) * (7 - 2)</answer>", False),
        ("<answer>24</answer>", False),
        ("<answer>1 4 7 8</answer>", False),
        ("<answer></answer>", False),
        ("I cannot make 24.", False),
        (None, False),
        ("", False),
    ],
)
def test_game24_through_the_shared_grader(prediction, expected):
    assert is_equivalent(prediction, "1 4 7 8", "game24") is expected
    assert is_equivalent(prediction, "(8 - 4) * (7 - 1)", "game24") is expected  # an expression gold works too


def test_game24_extraction_and_votes():
    assert extract_answer("Let me try... <answer>(8 - 4) * (7 - 1)</answer>") == "(8 - 4) * (7 - 1)"
    votes = ["<answer>(8-4)*(7-1)</answer>", "(8 - 4) × (7 - 1) = 24", "(7 - 1) * (8 - 4)", "no idea"]
    assert [normalize_answer(v, "game24") for v in votes] == [
        "(8 - 4) * (7 - 1)",
        "(8 - 4) * (7 - 1)",
        "(7 - 1) * (8 - 4)",
        None,
    ]
    assert not is_equivalent("(8 - 4) * (7 - 1)", "", "game24")
    assert not is_equivalent("(8 - 4) * (7 - 1)", "not a puzzle", "game24")
