"""Tasks: the arith generator, benchmark loaders on their fixtures, the registry and TaskConfig."""

import itertools
import json
import logging
import re
import time
import types
from pathlib import Path

import pytest

from metamod.config import ConfigError, parse_config
from metamod.tasks import TASKS, Task, TaskConfig, load_task
from metamod.tasks import benchmarks as benchmarks_module
from metamod.tasks.arith import ArithTask, apply
from metamod.tasks.grading import is_equivalent

FIXTURES = Path(__file__).resolve().parent.parent / "data" / "fixtures"

# ------------------------------------------------------------------------------------------- arith


def _check_steps(steps):
    """Every step string is true arithmetic, and each one's left operand chains from earlier results."""
    for line in steps:
        match = re.fullmatch(r"(\d+) ([-+*/]) (\d+) = (\d+)", line)
        assert match, line
        a, op, b, c = match.groups()
        assert apply(int(a), op, int(b)) == int(c), line


def test_arith_is_deterministic_by_seed():
    first = [ex.to_dict() for ex in ArithTask(num_examples=20, seed=11).examples()]
    again = [ex.to_dict() for ex in ArithTask(num_examples=20, seed=11).examples()]
    other = [ex.to_dict() for ex in ArithTask(num_examples=20, seed=12).examples()]
    assert first == again
    assert [ex["question"] for ex in first] != [ex["question"] for ex in other]
    assert [ex["id"] for ex in first] == [f"arith-11-{i}" for i in range(20)]


def test_arith_examples_are_well_formed():
    for ex in ArithTask(num_examples=150, seed=0).examples():
        assert ex.kind == "math" and ex.choices is None
        assert ex.gold.isdigit()
        steps = ex.meta["steps"]
        _check_steps(steps)
        assert steps[-1].endswith(f"= {ex.gold}")
        assert ex.meta["level"] in (1, 2, 3, 4, 5)
        assert ex.question.endswith("?")
        distractors = ex.meta["distractors"]
        assert len(distractors) == 3 and len(set(distractors)) == 3
        for wrong in distractors:
            assert not is_equivalent(wrong, ex.gold, "math")
            assert int(wrong) >= 0
        for wrong, wrong_steps in zip(distractors, ex.meta["distractor_steps"], strict=True):
            assert wrong_steps[-1].endswith(f"= {wrong}")
        assert is_equivalent(ex.gold, ex.gold, "math")


def test_arith_distractors_come_from_realistic_slips():
    kinds = [k for ex in ArithTask(num_examples=200, seed=5).examples() for k in ex.meta["distractor_kinds"]]
    assert {"wrong_op", "arithmetic_slip", "skipped_step"} <= set(kinds)
    assert kinds.count("final_slip") < len(kinds) * 0.1


def test_arith_levels_get_harder():
    def stats(level):
        exs = list(ArithTask(num_examples=60, seed=1, levels=[level]).examples())
        assert {ex.meta["level"] for ex in exs} == {level}
        mean_steps = sum(len(ex.meta["steps"]) for ex in exs) / len(exs)
        biggest = max(int(n) for ex in exs for n in re.findall(r"\d+", " ".join(ex.meta["steps"])))
        return mean_steps, biggest

    (s1, n1), (s3, n3), (s5, n5) = stats(1), stats(3), stats(5)
    assert s1 == 2 and s1 < s3 < s5
    assert n1 < n3 < n5
    ops1 = {line.split()[1] for ex in ArithTask(num_examples=40, levels=[1]).examples() for line in ex.meta["steps"]}
    ops5 = {line.split()[1] for ex in ArithTask(num_examples=40, levels=[5]).examples() for line in ex.meta["steps"]}
    assert ops1 <= {"+", "-"} and ops5 == {"+", "-", "*", "/"}


def test_arith_mixes_requested_levels():
    levels = [ex.meta["level"] for ex in ArithTask(num_examples=200, seed=2, levels=[2, 4]).examples()]
    assert set(levels) == {2, 4}
    assert 60 < levels.count(2) < 140


def test_arith_train_and_test_streams_are_disjoint():
    train = {ex.question for ex in ArithTask(num_examples=400, seed=0, split="train", levels=[1]).examples()}
    test_examples = list(ArithTask(num_examples=400, seed=0, split="test", levels=[1]).examples())
    assert not train & {ex.question for ex in test_examples}
    assert test_examples[0].id == "arith-test-0-0"


def test_arith_streams_lazily():
    task = ArithTask(num_examples=10**9, seed=3)
    stream = task.examples()
    assert isinstance(stream, types.GeneratorType)
    start = time.perf_counter()
    head = list(itertools.islice(stream, 50))
    assert len(head) == 50 and time.perf_counter() - start < 5
    assert [ex.id for ex in task.examples(limit=3)] == ["arith-3-0", "arith-3-1", "arith-3-2"]
    assert [ex.id for ex in task.examples(limit=2, seed=9)] == ["arith-9-0", "arith-9-1"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"levels": [0, 6]}, "levels must be a non-empty subset"),
        ({"levels": []}, "levels must be a non-empty subset"),
        ({"split": "validation"}, "split must be one of"),
        ({"num_examples": 0}, "num_examples must be a positive integer"),
    ],
)
def test_arith_bad_options(options, message):
    with pytest.raises(ValueError, match=message):
        ArithTask(**options)


# ------------------------------------------------------------------------------------------- loaders

EXPECTED = {
    "gsm8k": ("math", ["216", "240", "980", "11.25", "300"]),
    "math500": ("math", ["\\frac{7}{12}", "\\left( 3, \\frac{\\pi}{2} \\right)", "5\\sqrt{2}", "6"]),
    "amc": ("math", ["78", "60", "9"]),
    "strategyqa": ("yesno", ["no", "yes", "yes", "no"]),
    "mmlu": ("mc", ["B", "C", "D", "C", "A"]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_reads_its_fixture(name):
    task = load_task(name, data_files=str(FIXTURES / f"{name}.jsonl"))
    assert isinstance(task, Task)
    kind, golds = EXPECTED[name]
    examples = list(task.examples())
    assert task.kind == kind and [ex.kind for ex in examples] == [kind] * len(golds)
    assert [ex.gold for ex in examples] == golds
    assert len({ex.id for ex in examples}) == len(examples)
    for ex in examples:
        assert ex.question and ex.meta["source"].endswith(f"{name}.jsonl")
        assert is_equivalent(ex.gold, ex.gold, ex.kind, ex.choices)


def test_loader_details():
    mmlu = list(load_task("mmlu", data_files=str(FIXTURES / "mmlu.jsonl")).examples())
    assert mmlu[0].choices == ("Oxygen", "Nitrogen", "Carbon dioxide", "Argon")
    assert mmlu[0].meta["subject"] == "high_school_chemistry"
    assert "(B) Nitrogen" in mmlu[0].prompt_text()
    math500 = list(load_task("math500", data_files=str(FIXTURES / "math500.jsonl")).examples())
    assert math500[0].id == "test/prealgebra/fixture-1.json" and math500[0].meta["level"] == 2
    assert [ex.id for ex in load_task("amc", data_files=str(FIXTURES / "amc.jsonl")).examples()] == [
        "amc-0",
        "amc-1",
        "amc-2",
    ]
    assert next(load_task("strategyqa", data_files=str(FIXTURES / "strategyqa.jsonl")).examples()).id == "fx01"


def test_math500_levels_are_integers_in_meta(tmp_path):
    fixture = list(load_task("math500", data_files=str(FIXTURES / "math500.jsonl")).examples())
    assert [ex.meta["level"] for ex in fixture] == [2, 2, 1, 1]
    assert all(isinstance(ex.meta["level"], int) and ex.meta["subject"] for ex in fixture)
    path = tmp_path / "math500.csv"
    path.write_text(
        "problem,answer,level,subject,unique_id\n"
        "What is 1+1?,2,3,Algebra,a\nWhat is 2+2?,4,Level 5,Algebra,b\nWhat is 3+3?,6,?,Algebra,c\n"
    )
    rows = list(load_task("math500", data_files=str(path)).examples())
    assert [ex.meta.get("level") for ex in rows] == [3, 5, None]
    original = tmp_path / "math.jsonl"  # the original MATH layout: "Level 4" and a "type" column
    original.write_text(json.dumps({"problem": "p?", "answer": "1", "level": "Level 4", "type": "Geometry"}) + "\n")
    (row,) = load_task("math500", data_files=str(original), id_column="problem").examples()
    assert row.meta["level"] == 4 and row.meta["type"] == "Geometry" and "subject" not in row.meta


def test_parquet_matches_jsonl():
    from_jsonl = [ex.to_dict() for ex in load_task("mmlu", data_files=str(FIXTURES / "mmlu.jsonl")).examples()]
    from_parquet = [ex.to_dict() for ex in load_task("mmlu", data_files=str(FIXTURES / "mmlu.parquet")).examples()]
    for row in from_jsonl + from_parquet:
        row["meta"].pop("source")
    assert from_jsonl == from_parquet
    # and both hold the fixture's five questions (two empty reads would be equal too)
    assert [(r["id"], r["gold"]) for r in from_parquet] == [
        ("mmlu-test-0", "B"),
        ("mmlu-test-1", "C"),
        ("mmlu-test-2", "D"),
        ("mmlu-test-3", "C"),
        ("mmlu-test-4", "A"),
    ]
    assert from_parquet[0]["question"] == "Which gas makes up most of the Earth's atmosphere?"


def test_rows_without_gold_are_skipped_and_counted(caplog):
    with caplog.at_level(logging.WARNING, logger="metamod.tasks.benchmarks"):
        task = load_task("gsm8k", data_files=str(FIXTURES / "gsm8k.jsonl"))
    assert task.skipped_ids == ["gsm8k-test-4"]
    assert len(task) == 5 and len(list(task.examples())) == 5
    assert "skipped 1 of 6 rows" in caplog.text and "gsm8k-test-4" in caplog.text


def test_limit_and_seed_subsample_deterministically():
    path = str(FIXTURES / "mmlu.jsonl")
    everything = [ex.id for ex in load_task("mmlu", data_files=path).examples()]
    a = [ex.id for ex in load_task("mmlu", data_files=path, limit=3, seed=1).examples()]
    b = [ex.id for ex in load_task("mmlu", data_files=path).examples(limit=3, seed=1)]
    assert a == b and len(a) == 3 and set(a) <= set(everything)
    assert a == sorted(a, key=everything.index)  # file order is kept
    seeds = {tuple(ex.id for ex in load_task("mmlu", data_files=path, limit=2, seed=s).examples()) for s in range(8)}
    assert len(seeds) > 1
    assert [ex.id for ex in load_task("mmlu", data_files=path, limit=500).examples()] == everything


def test_local_task_with_csv_and_column_mapping(tmp_path):
    path = tmp_path / "quiz.csv"
    path.write_text(
        'qid,prompt,options,key\nq1,Pick the even number,"[""3"", ""4"", ""5""]",b\nq2,Pick the vowel,"[""k"", ""e""]",1\n'
        'q3,,"[""x"", ""y""]",a\n'
    )
    task = load_task(
        "local",
        data_files=str(path),
        kind="mc",
        name="quiz",
        question_column="prompt",
        answer_column="key",
        choices_column="options",
        id_column="qid",
    )
    examples = list(task.examples())
    assert [(ex.id, ex.gold, ex.choices) for ex in examples] == [("q1", "B", ("3", "4", "5")), ("q2", "B", ("k", "e"))]
    assert task.skipped_ids == ["q3"] and task.name == "quiz"


def test_local_task_json_yesno(tmp_path):
    path = tmp_path / "facts.json"
    path.write_text(json.dumps({"data": [{"q": "Is ice cold?", "a": "True"}, {"q": "Is fire wet?", "a": False}]}))
    task = load_task("local", data_files=str(path), kind="yesno", question_column="q", answer_column="a")
    assert [(ex.id, ex.gold) for ex in task.examples()] == [("local-local-0", "yes"), ("local-local-1", "no")]


def test_hub_loading_uses_dataset_id_config_and_split(monkeypatch):
    calls = []

    def fake_hub(path, config, split):
        calls.append((path, config, split))
        if path == "cais/mmlu":
            return {"question": ["2 + 2?"], "choices": [["3", "4"]], "answer": [1], "subject": ["arithmetic"]}
        return {"question": ["What is 2 + 2?"], "answer": ["2 + 2 = 4\n#### 4"]}

    monkeypatch.setattr(benchmarks_module, "load_hub_table", fake_hub)
    task = load_task("gsm8k", split="train")
    assert calls == []  # the hub is only touched when examples are requested
    assert [(ex.id, ex.gold) for ex in task.examples()] == [("gsm8k-train-0", "4")]
    assert calls == [("openai/gsm8k", "main", "train")]
    mmlu = load_task("mmlu", split="auxiliary_train")
    assert [(ex.id, ex.gold, ex.choices) for ex in mmlu.examples()] == [("mmlu-auxiliary_train-0", "B", ("3", "4"))]
    assert calls[-1] == ("cais/mmlu", "all", "auxiliary_train")


def test_missing_file_names_the_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_task("gsm8k", data_files=str(missing))


def test_missing_column_lists_available_columns():
    with pytest.raises(ValueError) as info:
        load_task("gsm8k", data_files=str(FIXTURES / "math500.jsonl"))
    message = str(info.value)
    assert "math500.jsonl" in message and "'question'" in message and "question_column" in message
    assert "Available columns: answer, level, problem, solution, subject, unique_id" in message


def test_bad_file_contents(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        load_task("gsm8k", data_files=str(bad))
    odd = tmp_path / "data.txt"
    odd.write_text("hello")
    with pytest.raises(ValueError, match="unsupported file type"):
        load_task("gsm8k", data_files=str(odd))


# ------------------------------------------------------------------------------------------- registry and config


def test_registry_and_errors():
    assert set(TASKS) == {
        "arith",
        "gsm8k",
        "math500",
        "amc",
        "strategyqa",
        "mmlu",
        "theoremqa",
        "game24",
        "local",
        "aime25",
        "omni_math",
        "physreason",
        "numina_math",
        "camel_physics",
        "cruxeval_o",
        "cruxeval_i",
        "livecodebench_o",
        "livecodebench_i",
        "list_function",
        "mini_arc",
        "robustfill",
        "deepcoder",
        "synthetic_code",
    }
    with pytest.raises(
        KeyError,
        match="Valid names: aime25, amc, arith, camel_physics, cruxeval_i, cruxeval_o, deepcoder, game24, gsm8k, "
        "list_function, livecodebench_i, livecodebench_o, local, math500, mini_arc, mmlu, numina_math, omni_math, "
        "physreason, robustfill, strategyqa, synthetic_code, theoremqa",
    ):
        load_task("gsm9k")
    with pytest.raises(ValueError, match=r"Unknown option\(s\) \['levels'\] for task 'gsm8k'. Valid options: "):
        load_task("gsm8k", levels=[1])
    with pytest.raises(ValueError, match="kind must be one of"):
        load_task("local", data_files=str(FIXTURES / "mmlu.jsonl"))
    with pytest.raises(ValueError, match="choices_column"):
        load_task("local", data_files=str(FIXTURES / "mmlu.jsonl"), kind="mc")
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        load_task("amc", data_files=str(FIXTURES / "amc.jsonl"), limit=0)


def test_task_config_parses_and_loads(tmp_path):
    (cfg,) = parse_config([TaskConfig], ["--task", "arith", "--task_levels", "1", "2", "--task_limit", "4"])
    assert cfg.options() == {"limit": 4, "levels": [1, 2]}
    assert len(list(cfg.load().examples())) == 4
    yaml_file = tmp_path / "task.yaml"
    yaml_file.write_text(f"task: mmlu\ntask_data_files: {FIXTURES / 'mmlu.parquet'}\ntask_limit: 2\n")
    (cfg,) = parse_config([TaskConfig], ["--config", str(yaml_file)])
    assert [ex.gold for ex in cfg.load().examples()] and cfg.load().name == "mmlu"
    with pytest.raises(ConfigError, match="task_difficulty"):
        parse_config([TaskConfig], ["--task", "arith", "--task_difficulty", "1"])
    with pytest.raises(ValueError, match="task_kind is not an option of task 'mmlu'"):
        TaskConfig(task="mmlu", task_kind="mc")
    with pytest.raises(KeyError, match="Unknown task"):
        TaskConfig(task="nope")
    with pytest.raises(ValueError, match="task_limit must be a positive integer"):
        TaskConfig(task_limit=0)
    for f in TaskConfig.__dataclass_fields__.values():
        assert f.metadata.get("help"), f.name


def test_mmlu_training_questions_come_from_mmlu_splits(monkeypatch, caplog):
    """validation / dev+validation are MMLU's own questions; auxiliary_train (ARC, MCTest, OBQA, RACE) warns."""
    rows = {
        "dev": {"question": ["d0?", "d1?"], "choices": [["a", "b"], ["c", "d"]], "answer": [0, 1]},
        "validation": {"question": ["v0?"], "choices": [["e", "f"]], "answer": [1], "subject": ["anatomy"]},
    }
    calls = []

    def fake_hub(path, config, split):
        calls.append((path, config, split))
        return rows.get(split, rows["validation"])

    monkeypatch.setattr(benchmarks_module, "load_hub_table", fake_hub)
    with caplog.at_level(logging.WARNING, logger="metamod.tasks.benchmarks"):
        validation = list(load_task("mmlu", split="validation").examples())
    assert [(ex.id, ex.gold, ex.meta["split"]) for ex in validation] == [("mmlu-validation-0", "B", "validation")]
    joined = list(load_task("mmlu", split="dev+validation").examples())
    assert calls[-2:] == [("cais/mmlu", "all", "dev"), ("cais/mmlu", "all", "validation")]
    assert [ex.id for ex in joined] == ["mmlu-dev-0", "mmlu-dev-1", "mmlu-validation-0"]
    assert [(ex.meta["split"], ex.meta["row"], ex.gold) for ex in joined] == [
        ("dev", 0, "A"),
        ("dev", 1, "B"),
        ("validation", 0, "B"),
    ]
    assert "subject" not in joined[0].meta and joined[2].meta["subject"] == "anatomy"
    sampled = [ex.id for ex in load_task("mmlu", split="dev+validation", limit=2, seed=3).examples()]
    assert len(sampled) == 2 and set(sampled) <= {ex.id for ex in joined}
    assert "auxiliary_train" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="metamod.tasks.benchmarks"):
        list(load_task("mmlu", split="auxiliary_train").examples())
    assert "auxiliary_train is not MMLU" in caplog.text and "validation" in caplog.text
    with pytest.raises(ValueError, match="empty part"):
        load_task("mmlu", split="dev+")


def test_paper_rollout_config_draws_mmlu_from_validation():
    from metamod.rollout.run import RolloutConfig

    path = Path(__file__).resolve().parent.parent / "configs" / "rollout" / "paper_gsm8k_mmlu_llama8b.yaml"
    (config,) = parse_config([RolloutConfig], ["--config", str(path)])
    blocks = {t.task: t for t in config.task_configs()}
    assert (blocks["mmlu"].task_split, blocks["mmlu"].task_limit) == ("validation", 500)
    assert (blocks["gsm8k"].task_split, blocks["gsm8k"].task_limit) == ("train", 500)


def test_arith_direct_level_is_one_step_with_several_phrasings():
    from metamod.tasks.arith import DIRECT_PHRASINGS, ArithTask

    examples = list(ArithTask(num_examples=60, seed=0, levels=[0]).examples())
    ops = {ex.meta["steps"][0].split()[1] for ex in examples}
    assert ops == {"*", "+"}
    for ex in examples:
        a, op, b, _, result = ex.meta["steps"][0].split()
        assert ex.meta["level"] == 0 and len(ex.meta["steps"]) == 1 and result == ex.gold
        assert str(int(a) * int(b) if op == "*" else int(a) + int(b)) == ex.gold
        assert a in ex.question and b in ex.question and len(set(ex.meta["distractors"]) - {ex.gold}) == 3
    phrasings = {
        p
        for ex in examples
        for p in DIRECT_PHRASINGS[ex.meta["steps"][0].split()[1]]
        if p.format(a=ex.meta["steps"][0].split()[0], b=ex.meta["steps"][0].split()[2]) == ex.question
    }
    assert len(phrasings) >= 6
    test_ids = {ex.question for ex in ArithTask(num_examples=60, seed=0, levels=[0], split="test").examples()}
    assert not test_ids & {ex.question for ex in examples}  # a question text belongs to one split only


def test_arith_levels_are_checked():
    from metamod.tasks.arith import ArithTask

    with pytest.raises(ValueError, match=r"levels must be a non-empty subset of \[0, 1, 2, 3, 4, 5\]"):
        ArithTask(levels=[6])
