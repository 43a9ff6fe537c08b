"""The moderator dataset: columns, prompts from moderator_messages, split without leakage, CLI, skipped rows."""

import json

import pytest
from datasets import load_from_disk

from metamod.config import ConfigError
from metamod.rollout.debate import run_debates
from metamod.rollout.simulated import SimulatedDebaters
from metamod.rollout.snapshots import COLUMNS, build_dataset, main, snapshot_rows
from metamod.rollout.state import moderator_messages
from metamod.rollout.trace_schema import TraceError
from metamod.rollout.traces import TraceWriter, example_trace
from metamod.tasks import load_task


@pytest.fixture(scope="module")
def traces_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "traces.jsonl"
    sim = SimulatedDebaters()
    stop = lambda t, debates: [d["id"].endswith("7") and t == 1 for d in debates]  # noqa: E731
    examples = load_task("arith", num_examples=60, seed=0).examples()
    with TraceWriter(path) as writer:
        for trace in run_debates(examples, [sim, sim], max_rounds=3, stop_hook=stop, progress=False, task="arith"):
            writer.write(trace)
    return path


def test_rows_and_columns(traces_file, tmp_path):
    ds = build_dataset(traces_file, tmp_path / "ds", validation_fraction=0.2, seed=0)
    assert set(ds) == {"train", "validation"}
    for split in ds.values():
        assert set(COLUMNS) <= set(split.column_names)
    total = len(ds["train"]) + len(ds["validation"])
    traces = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert total == sum(t["num_rounds"] for t in traces)
    row = ds["train"][0]
    trace = next(t for t in traces if t["id"] == row["id"])
    rnd = trace["rounds"][row["round"]]
    assert row["prompt"] == moderator_messages(
        trace["question"], [r["text"] for r in rnd["responses"]], final=row["is_final_round"]
    )
    assert row["eta"] == rnd["eta"] and row["gold"] == trace["gold"] and row["kind"] == "math"
    assert row["answers"] == [r["answer"] for r in rnd["responses"]] and row["num_agents"] == 2
    assert row["simulated"] is True and row["task"] == "arith"
    # final round <=> last round of a full-length (3-round) debate; hook-stopped debates have none
    for split in ds.values():
        for r in split:
            t = next(x for x in traces if x["id"] == r["id"])
            assert r["is_final_round"] == (t["stop_reason"] == "max_rounds" and r["round"] == 2)
            assert ("last round" in r["prompt"][0]["content"]) == r["is_final_round"]
    assert any(t["stop_reason"] == "hook" for t in traces)
    # saved and loadable
    loaded = load_from_disk(str(tmp_path / "ds"))
    assert len(loaded["train"]) == len(ds["train"])


def test_split_by_question_without_leakage_and_deterministic(traces_file, tmp_path):
    a = build_dataset(traces_file, None, validation_fraction=0.25, seed=3)
    b = build_dataset(traces_file, None, validation_fraction=0.25, seed=3)
    train_ids, val_ids = set(a["train"]["id"]), set(a["validation"]["id"])
    assert train_ids and val_ids and not train_ids & val_ids
    assert len(train_ids | val_ids) == 60
    assert 5 <= len(val_ids) <= 25
    assert a["validation"]["id"] == b["validation"]["id"]
    c = build_dataset(traces_file, None, validation_fraction=0.25, seed=4)
    assert set(c["validation"]["id"]) != val_ids


def test_max_rounds_truncates_and_marks_final(traces_file):
    ds = build_dataset(traces_file, None, validation_fraction=0.0, max_rounds=2)
    assert len(ds["validation"]) == 0
    assert set(ds["train"]["round"]) == {0, 1}
    assert all(r["is_final_round"] == (r["round"] == 1) for r in ds["train"])


def test_rows_missing_gold_are_skipped_and_counted(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    good, no_gold, no_question = example_trace("a"), example_trace("b"), example_trace("c")
    no_gold["gold"] = ""
    del no_question["question"]
    path.write_text("".join(json.dumps(t) + "\n" for t in (good, no_gold, no_question)))
    ds = build_dataset(path, None, validation_fraction=0.0)
    assert ds.info_summary["skipped_ids"] == ["b", "c"]
    assert ds["train"]["id"] == ["a"]
    assert "skipped 2 trace(s)" in caplog.text
    bad = example_trace("d")
    bad["rounds"][0]["eta"] = 5
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(TraceError, match="trace 'd'.*eta"):
        build_dataset(path, None)


def test_snapshot_rows_of_single_trace():
    rows = snapshot_rows(example_trace("x", answers=("4", None)))
    assert rows[0]["answers"] == ["4", None] and rows[0]["is_final_round"] is True


def test_cli(traces_file, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["--traces", str(traces_file), "--output_dir", str(out), "--validation_fraction", "0.2"]) == 0
    printed = capsys.readouterr().out
    assert "eta rate by round" in printed and "coverage" in printed and "simulated" in printed
    assert (out / "build_dataset_config.yaml").is_file() and (out / "build_summary.json").is_file()
    assert set(load_from_disk(str(out))) == {"train", "validation"}
    with pytest.raises(FileNotFoundError, match="traces file not found"):
        main(["--traces", str(tmp_path / "nope.jsonl"), "--output_dir", str(out)])


# ------------------------------------------------------------------ paper rows: one template, first two agents


@pytest.fixture(scope="module")
def three_agent_traces(tmp_path_factory):
    """Three simulated agents; the weak first two make rows where only the third agent is right."""
    from metamod.rollout.simulated import SimulationConfig

    path = tmp_path_factory.mktemp("traces3") / "traces.jsonl"
    sim = SimulatedDebaters(SimulationConfig(agent_accuracy=[0.3, 0.3, 0.95]))
    examples = load_task("arith", num_examples=30, seed=1).examples()
    with TraceWriter(path) as writer:
        for trace in run_debates(examples, [sim, sim, sim], max_rounds=3, progress=False, task="arith"):
            writer.write(trace)
    return path


def test_paper_rows_use_one_template_and_the_first_two_agents(three_agent_traces, tmp_path):
    from metamod.rewards.moderator import control_reward
    from metamod.tasks.grading import is_equivalent

    out = tmp_path / "ds"
    ds = build_dataset(three_agent_traces, out, validation_fraction=0.0, single_template=True, keep_agents=2)
    traces = {t["id"]: t for t in map(json.loads, three_agent_traces.read_text().splitlines())}
    assert all(len(t["rounds"][0]["responses"]) == 3 for t in traces.values())
    rows = list(ds["train"])
    assert len(rows) == sum(t["num_rounds"] for t in traces.values()) and len(ds["validation"]) == 0
    changed = 0
    for row in rows:
        trace = traces[row["id"]]
        rnd = trace["rounds"][row["round"]]
        kept = rnd["responses"][:2]
        assert row["is_final_round"] is False and row["num_agents"] == 2 == len(row["answers"])
        assert row["answers"] == [r["answer"] for r in kept]
        assert row["prompt"] == moderator_messages(trace["question"], [r["text"] for r in kept], final=False)
        content = row["prompt"][0]["content"]
        assert "last round" not in content and "Agent 2:" in content and "Agent 3:" not in content
        expected = any(a is not None and is_equivalent(a, row["gold"], row["kind"]) for a in row["answers"])
        assert row["eta"] == int(expected)
        changed += row["eta"] != rnd["eta"]
    assert changed > 0  # some rows had a correct answer only from the discarded third agent
    assert ds.info_summary["rows_with_agents_dropped"] == len(rows)
    # the control reward applies to every row (no None from forced-answer rows)
    assert None not in control_reward(["CONTINUE"] * len(rows), eta=[r["eta"] for r in rows], is_final_round=[
        r["is_final_round"] for r in rows])  # fmt: skip
    # saved with an empty validation split that loads back; the options are recorded
    loaded = load_from_disk(str(out))
    assert len(loaded["train"]) == len(rows) and len(loaded["validation"]) == 0
    assert set(loaded["validation"].column_names) == set(COLUMNS)
    options = json.loads((out / "build_summary.json").read_text())["options"]
    assert options["single_template"] is True and options["keep_agents"] == 2 and options["validation_fraction"] == 0


def test_default_rows_keep_every_agent_and_the_forced_round(three_agent_traces):
    ds = build_dataset(three_agent_traces, None, validation_fraction=0.0)
    traces = {t["id"]: t for t in map(json.loads, three_agent_traces.read_text().splitlines())}
    for row in ds["train"]:
        rnd = traces[row["id"]]["rounds"][row["round"]]
        assert row["num_agents"] == 3 and row["eta"] == rnd["eta"]
        assert row["is_final_round"] == (row["round"] == 2)
        assert ("last round" in row["prompt"][0]["content"]) == row["is_final_round"]
    assert ds.info_summary["options"] == {
        "validation_fraction": 0.0, "seed": 0, "max_rounds": None, "single_template": False, "keep_agents": None,
    }  # fmt: skip


def test_keep_agents_regrades_eta_and_keeps_more_agents_untouched():
    three = example_trace("q", answers=("5", None, "4"))  # only the third agent is right
    assert three["rounds"][0]["eta"] == 1
    (row,) = snapshot_rows(three, keep_agents=2)
    assert (row["eta"], row["answers"], row["num_agents"]) == (0, ["5", None], 2)
    (row,) = snapshot_rows(three, keep_agents=5)
    assert (row["eta"], row["num_agents"]) == (1, 3)
    (row,) = snapshot_rows(example_trace("r", answers=("4.0", "7")), keep_agents=1)
    assert row["eta"] == 1  # graded with the shared grader, not string equality
    (row,) = snapshot_rows(three, single_template=True, max_rounds=1)
    assert row["is_final_round"] is False and "last round" not in row["prompt"][0]["content"]
    with pytest.raises(ValueError, match="keep_agents must be >= 1"):
        snapshot_rows(three, keep_agents=0)


def test_cli_paper_options_and_train_side_check(three_agent_traces, tmp_path, capsys):
    from metamod.train.common import check_dataset_options

    out = tmp_path / "ds"
    argv = ["--traces", str(three_agent_traces), "--output_dir", str(out)]
    assert main([*argv, "--single_template", "true", "--keep_agents", "2", "--validation_fraction", "0"]) == 0
    assert "first 2 agents" in capsys.readouterr().out
    loaded = load_from_disk(str(out))
    assert set(loaded["train"]["num_agents"]) == {2} and not any(loaded["train"]["is_final_round"])
    paper = {"validation_fraction": 0.0, "single_template": True, "keep_agents": 2}
    assert check_dataset_options(str(out), paper) == []
    with pytest.raises(
        ConfigError, match="was built with keep_agents=2, but this config asks for keep_agents=None"
    ) as info:
        check_dataset_options(str(out), {**paper, "keep_agents": None})
    assert "metamod build-dataset" in str(info.value) and "--keep_agents None" in str(info.value)
    assert check_dataset_options(str(tmp_path / "elsewhere"), paper) == []  # nothing recorded: nothing to check
    with pytest.raises(ConfigError, match="keep_agents must be >= 1"):
        main([*argv, "--keep_agents", "0"])


def test_train_config_passes_the_dataset_options_to_the_builder(monkeypatch, tmp_path):
    from metamod.train import common, grpo

    seen = {}
    monkeypatch.setattr(common, "build_missing_dataset", lambda path, **kwargs: seen.update(kwargs, path=path))
    args = grpo.ModeratorGRPOConfig(
        dataset_path=str(tmp_path / "missing"),
        build_dataset_config="configs/rollout/sim_arith.yaml",
        dataset_single_template=True,
        dataset_keep_agents=2,
        dataset_validation_fraction=0.0,
        per_device_train_batch_size=4,
        num_generations=2,
        report_to="none",
    )
    grpo.prepare_dataset(args)
    assert seen == {
        "path": str(tmp_path / "missing"),
        "rollout_config": "configs/rollout/sim_arith.yaml",
        "validation_fraction": 0.0,
        "single_template": True,
        "keep_agents": 2,
    }
    with pytest.raises(ValueError, match="dataset_keep_agents must be >= 1"):
        grpo.ModeratorGRPOConfig(dataset_path="x", dataset_keep_agents=0, per_device_train_batch_size=4,
                                 num_generations=2, report_to="none")  # fmt: skip
