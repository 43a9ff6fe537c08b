"""The moderator dataset: columns, prompts from moderator_messages, split without leakage, CLI, skipped rows."""

import json

import pytest
from datasets import load_from_disk

from metamod.rollout.debate import run_debates
from metamod.rollout.simulated import SimulatedDebaters
from metamod.rollout.snapshots import COLUMNS, build_dataset, main, snapshot_rows
from metamod.rollout.state import moderator_messages
from metamod.rollout.traces import TraceError, TraceWriter, example_trace
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
