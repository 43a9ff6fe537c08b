"""The LLM debate path end to end on the offline tiny model with the hf backend (CPU)."""

import json

import pytest

from metamod.llm import BackendConfig, SamplingConfig, build_generator
from metamod.rollout.debate import DebateStats, run_debates
from metamod.rollout.debaters import LLMDebaters
from metamod.rollout.run import main
from metamod.rollout.traces import read_traces, validate_trace
from metamod.tasks import load_task


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py)


def test_engine_on_tiny_model(tiny_dir):
    gen = build_generator(BackendConfig(backend="hf", model=str(tiny_dir), device="cpu", batch_size=8))
    group = LLMDebaters(gen, SamplingConfig(temperature=0.0, max_tokens=6), backend="hf")
    examples = list(load_task("arith", num_examples=2, seed=0, levels=[1]).examples())
    stats = DebateStats()
    traces = list(run_debates(examples, [group, group], max_rounds=2, stats=stats, progress=False, task="arith"))
    assert len(traces) == 2
    for trace in traces:
        validate_trace(trace)
        assert trace["simulated"] is False and trace["num_rounds"] == 2
        assert trace["agents"][0]["backend"] == "hf" and trace["agents"][0]["model"] == str(tiny_dir)
        for rnd in trace["rounds"]:
            for resp in rnd["responses"]:
                assert 1 <= resp["completion_tokens"] <= 6 and resp["prompt_tokens"] > 50
                assert resp["answer"] is None or isinstance(resp["answer"], str)
                assert rnd["eta"] in (0, 1)
        # round-1 prompts carry the own previous response and the peer's: longer than round 0
        r0, r1 = (r["responses"][0]["prompt_tokens"] for r in trace["rounds"])
        assert r1 > r0
    assert stats.calls == {f"hf:{tiny_dir}": 2}  # ONE batched generate call per round for 2 questions x 2 agents


def test_rollout_cli_on_tiny_model(tiny_dir, tmp_path):
    debaters = json.dumps([{"backend": "hf", "model": str(tiny_dir), "device": "cpu"}])
    argv = [
        "--tasks",
        "arith",
        "--task_options",
        "{arith: {task_num_examples: 2}}",
        "--debaters",
        debaters,
        "--max_rounds",
        "2",
        "--max_tokens",
        "4",
        "--output_dir",
        str(tmp_path),
        "--progress",
        "false",
    ]
    assert main(argv) == 0
    traces = list(read_traces(tmp_path / "traces.jsonl"))
    assert len(traces) == 2 and not traces[0]["simulated"]
