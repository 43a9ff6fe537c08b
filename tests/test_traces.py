"""Trace IO: schema validation, torn-line recovery, resume and shard merging."""

import json
import logging

import pytest

from metamod.files import repair_torn_tail
from metamod.rollout.trace_schema import TraceError
from metamod.rollout.traces import (
    TraceWriter,
    example_trace,
    in_shard,
    merge_shards,
    read_traces,
    shard_filename,
    shard_of,
    validate_trace,
)


def _write_lines(path, traces, torn_tail: str | None = None):
    with path.open("w") as handle:
        for trace in traces:
            handle.write(json.dumps(trace) + "\n")
        if torn_tail is not None:
            handle.write(torn_tail)


def test_roundtrip_and_flush(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path)
    writer.write(example_trace("a"))
    # flushed before close: another reader sees the line immediately
    assert [t["id"] for t in read_traces(path)] == ["a"]
    writer.write(example_trace("b"))
    writer.close()
    assert [t["id"] for t in read_traces(path)] == ["a", "b"]


def test_torn_last_line_dropped_with_warning(tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    full = json.dumps(example_trace("c"))
    _write_lines(path, [example_trace("a"), example_trace("b")], torn_tail=full[: len(full) // 2])
    with caplog.at_level(logging.WARNING):
        ids = [t["id"] for t in read_traces(path)]
    assert ids == ["a", "b"]
    assert "torn last line" in caplog.text and ":3" in caplog.text


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(example_trace("a")) + "\n{not json\n" + json.dumps(example_trace("b")) + "\n")
    with pytest.raises(TraceError, match=r"t\.jsonl:2: corrupt line"):
        list(read_traces(path))


def test_schema_errors_name_file_line_and_field(tmp_path):
    bad = example_trace("a")
    del bad["gold"]
    path = tmp_path / "t.jsonl"
    _write_lines(path, [example_trace("x"), bad])
    with pytest.raises(TraceError, match=r"t\.jsonl:2: missing field 'gold'"):
        list(read_traces(path))
    bad = example_trace("a")
    bad["rounds"][0]["responses"][1]["prompt_tokens"] = "10"
    with pytest.raises(TraceError, match=r"responses\[1\]: field 'prompt_tokens' must be int"):
        validate_trace(bad)
    bad = example_trace("a")
    bad["num_rounds"] = 3
    with pytest.raises(TraceError, match="num_rounds"):
        validate_trace(bad)
    bad = example_trace("a")
    bad["simulated"] = 1
    with pytest.raises(TraceError, match="'simulated' must be bool"):
        validate_trace(bad)


def test_resume_cuts_torn_tail_and_keeps_done_ids(tmp_path):
    path = tmp_path / "t.jsonl"
    _write_lines(path, [example_trace("a")], torn_tail='{"schema_version": 1, "id": "b", "ta')
    assert repair_torn_tail(path) > 0
    _write_lines(path, [example_trace("a")], torn_tail='{"schema_version": 1, "id": "b", "ta')
    with TraceWriter(path, resume=True) as writer:
        assert writer.done_ids == {"a"}
        writer.write(example_trace("b"))
    assert [t["id"] for t in read_traces(path)] == ["a", "b"]
    with TraceWriter(path, resume=False) as writer:
        assert writer.done_ids == set()
    assert list(read_traces(path)) == []


def test_writer_validates(tmp_path):
    bad = example_trace("a")
    bad["stop_reason"] = "tired"
    with TraceWriter(tmp_path / "t.jsonl") as writer, pytest.raises(TraceError, match="stop_reason"):
        writer.write(bad)


def test_sharding_is_a_partition():
    ids = [f"q{i}" for i in range(200)]
    for by in ("hash", "position"):
        shards = [
            [i for p, i in enumerate(ids) if in_shard(i, p, num_shards=3, shard_index=k, by=by)] for k in range(3)
        ]
        assert sorted(sum(shards, [])) == sorted(ids)
        assert all(len(s) > 40 for s in shards)
    assert shard_of("q1", 3) == shard_of("q1", 3)
    assert shard_filename(1, 0) == "traces.jsonl"
    with pytest.raises(ValueError, match="shard_index"):
        shard_filename(2, 2)


def test_merge_orders_by_index_and_deduplicates(tmp_path):
    traces = []
    for i in range(6):
        t = example_trace(f"q{i}")
        t["index"] = i
        traces.append(t)
    _write_lines(tmp_path / "s0.jsonl", [traces[i] for i in (0, 3, 4)])
    _write_lines(tmp_path / "s1.jsonl", [traces[i] for i in (1, 2, 5, 3)])
    counts = merge_shards([tmp_path / "s1.jsonl", tmp_path / "s0.jsonl"], tmp_path / "all.jsonl")
    assert counts == {"inputs": 2, "traces": 6, "duplicates": 1}
    assert [t["id"] for t in read_traces(tmp_path / "all.jsonl")] == [f"q{i}" for i in range(6)]


def test_merge_rejects_inconsistent_duplicates(tmp_path):
    a, b = example_trace("q1"), example_trace("q1", gold="5")
    _write_lines(tmp_path / "s0.jsonl", [a])
    _write_lines(tmp_path / "s1.jsonl", [b])
    with pytest.raises(TraceError, match=r"'q1'.*\['gold'\]"):
        merge_shards([tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"], tmp_path / "all.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        merge_shards([tmp_path / "missing.jsonl"], tmp_path / "all.jsonl")
