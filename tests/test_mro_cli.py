"""MRO end to end from the CLI: rollout (resume, shards, refusals), controller snapshots, GRPO on them, eval rows."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from metamod.config import ConfigError
from metamod.errors import InputError
from metamod.evaluate.cells import read_samples
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate
from metamod.rollout.merge import merge_main
from metamod.rollout.run import main as rollout_main
from metamod.rollout.snapshots import main as build_main
from metamod.rollout.traces import read_traces
from metamod.train.grpo import main as train_main

REPO = Path(__file__).resolve().parents[1]
SIM = ["--config", str(REPO / "configs/rollout/mro_sim.yaml"), "--limit", "40", "--progress", "false"]


@pytest.fixture(scope="module")
def mro_traces(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mro") / "run"
    assert rollout_main(SIM + ["--output_dir", str(out)]) == 0
    return out / "traces.jsonl"


def test_rollout_writes_mro_traces_and_summary(mro_traces, capsys):
    traces = list(read_traces(mro_traces))
    assert len(traces) == 40 and all(t["loop"] == "mro" and t["simulated"] for t in traces)
    summary = json.loads((mro_traces.parent / "summary.json").read_text())
    assert summary["loop"] == "mro" and summary["questions"] == 40
    assert len(summary["action_shares_by_iteration"]) >= 1 and summary["this_run"]["calls_per_role"]["reasoner"] >= 1


def test_resume_after_crash_equals_one_run(mro_traces, tmp_path):
    out = tmp_path / "run"
    assert rollout_main(SIM + ["--output_dir", str(out)]) == 0
    path = out / "traces.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:15]) + lines[15][:40])  # crash: 15 written, the 16th torn
    assert rollout_main(SIM + ["--output_dir", str(out)]) == 0
    assert list(read_traces(path)) == list(read_traces(mro_traces))
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["this_run"]["skipped_done"] == 15 and resumed["this_run"]["questions"] == 25
    one_run = json.loads((mro_traces.parent / "summary.json").read_text())
    drop = ("this_run", "traces_file")
    assert {k: v for k, v in resumed.items() if k not in drop} == {k: v for k, v in one_run.items() if k not in drop}


def test_shards_merge_to_the_unsharded_run(mro_traces, tmp_path):
    for i in range(2):
        argv = SIM + ["--output_dir", str(tmp_path), "--num_shards", "2", "--shard_index", str(i)]
        assert rollout_main(argv) == 0
    merged = tmp_path / "merged.jsonl"
    assert merge_main(["--inputs", str(tmp_path), "--output", str(merged)]) == 0
    assert list(read_traces(merged)) == list(read_traces(mro_traces))


def test_changed_settings_are_refused(mro_traces):
    out = str(mro_traces.parent)
    with pytest.raises(ConfigError, match="different settings.*max_iterations"):
        rollout_main(SIM + ["--output_dir", out, "--max_iterations", "2"])
    with pytest.raises(ConfigError, match="different settings.*mro_simulation"):
        rollout_main(SIM + ["--output_dir", out, "--mro_simulation", "{monitor_detect: 0.2}"])
    with pytest.raises(ConfigError, match=r"roles: unknown key\(s\) \[.colour.\]"):
        rollout_main(SIM + ["--output_dir", out, "--roles", '{"backend": "hf", "model": "m", "colour": 1}'])
    with pytest.raises(ConfigError, match="loop must be one of"):
        rollout_main(SIM + ["--output_dir", out, "--loop", "tree"])


def test_controller_snapshots_and_a_short_grpo_run(mro_traces, tmp_path, tiny_model_dir):
    data = tmp_path / "snapshots"
    assert build_main(["--traces", str(mro_traces), "--source", "mro", "--output_dir", str(data)]) == 0
    from datasets import load_from_disk

    ds = load_from_disk(str(data))
    rows = list(ds["train"]) + list(ds["validation"])
    traces = {t["id"]: t for t in read_traces(mro_traces)}
    assert len(rows) == sum(t["num_iterations"] for t in traces.values())
    for row in rows:
        record = traces[row["id"]]["history"][row["round"]]
        assert row["eta"] == record["eta"] and row["answers"] == [record["reasoner"]["answer"]]
        assert row["is_final_round"] == (row["round"] + 1 == traces[row["id"]]["max_iterations"])
        assert traces[row["id"]]["gold"] not in row["prompt"][0]["content"].split("Problem:")[0]
    with pytest.raises(InputError, match="is an MRO trace but source is 'debate'"):
        build_main(["--traces", str(mro_traces), "--output_dir", str(tmp_path / "wrong")])
    out = tmp_path / "controller"
    argv = [
        "--model_name_or_path", str(tiny_model_dir), "--dataset_path", str(data), "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8",
        "--learning_rate", "5e-3", "--beta", "0", "--lora_r", "8", "--logging_steps", "1", "--report_to", "none",
        "--seed", "0", "--save_strategy", "no", "--max_steps", "3", "--warm_start", "true",
        "--warm_start_steps", "20", "--warm_start_batch_size", "8", "--warm_start_targets", "reward",
    ]  # fmt: skip
    assert train_main(argv) == 0
    before = load_file(out / "warm_start" / "adapter_model.safetensors")
    after = load_file(out / "adapter_model.safetensors")
    assert any(not (before[k] == after[k]).all() for k in after), "GRPO did not change the controller adapter"

    # the trained adapter serves the Controller's decision in evaluation, next to the prompted Controller
    config = EvalConfig(
        methods=["reasoner_only", "mro", "mro_trained_controller"],
        limit=8,
        seeds=[0, 1],
        max_iterations=2,
        moderator=str(out),
        moderator_backend_options={"device": "cpu"},
        moderator_max_tokens=8,
        output_dir=str(tmp_path / "eval"),
        plots=False,
    )
    document = evaluate(config)
    arith = document["results"]["arith"]
    assert set(arith) == {"reasoner_only", "mro", "mro_trained_controller"}
    trained = arith["mro_trained_controller"]
    assert trained["control_decisions"] > 0 and 0 <= trained["control_accuracy"] <= 1
    assert len(trained["action_shares_by_iteration"]) == 2 and trained["n"] == 16
    rows = read_samples(tmp_path / "eval" / "samples.jsonl")
    record = rows[0]["methods"]["mro_trained_controller"]
    assert record["details"]["mro"]["iterations"] in (1, 2) and record["tokens"]["debater_prompt"] > 0
    assert "MRO loop" in (tmp_path / "eval" / "table.md").read_text()


def test_mro_methods_on_the_tiny_model(tmp_path, tiny_model_dir):
    """The LLM roles end to end on a real (random) model: shapes, tokens, fallbacks counted, resume per cell."""
    config = EvalConfig(
        methods=["reasoner_only", "mro"],
        limit=3,
        max_iterations=2,
        debaters="hf",
        debater_model=str(tiny_model_dir),
        debater_backend_options={"device": "cpu"},
        max_tokens=8,
        output_dir=str(tmp_path / "eval"),
        plots=False,
    )
    document = evaluate(config)
    mro = document["results"]["arith"]["mro"]
    assert mro["n"] == 3 and mro["tokens_per_question"] > 0 and 1 <= mro["mean_iterations"] <= 2
    assert document["simulated"] is False
    rows = read_samples(tmp_path / "eval" / "samples.jsonl")
    assert all(r["methods"]["mro"]["details"]["mro"]["parse"]["monitor"] for r in rows)
    again = evaluate(config)  # every cell is done: nothing recomputed, same results
    assert again["results"] == document["results"]


def test_eval_config_checks_mro_options():
    with pytest.raises(ConfigError, match="mro_simulation: unknown key"):
        EvalConfig(methods=["mro"], mro_simulation={"monitor_recall": 0.5})
    with pytest.raises(ValueError, match="max_iterations must be >= 1"):
        EvalConfig(methods=["mro"], max_iterations=0)
    with pytest.raises(ValueError, match="need a trained moderator"):
        from metamod.evaluate.build import resolve_models

        resolve_models(EvalConfig(methods=["mro_trained_controller"]))


def test_eval_refuses_mro_traces_as_debates(mro_traces, tmp_path):
    with pytest.raises(InputError, match=r"traces.jsonl:1: trace .* is an MRO trace"):
        evaluate(EvalConfig(methods=["majority_vote"], traces=str(mro_traces), output_dir=str(tmp_path / "e")))


def test_method_options_for_a_method_left_out_are_ignored_and_typos_refused():
    config = EvalConfig(methods=["reasoner_only"], method_options={"mro": {"monitor_max_tokens": 8}})
    assert config.method_options["mro"] == {"monitor_max_tokens": 8}
    with pytest.raises(ConfigError, match="'mroo', which is no method"):
        EvalConfig(methods=["mro"], method_options={"mroo": {}})
    with pytest.raises(ConfigError, match=r"method_options\['mro'\]: unknown setting"):
        from metamod.evaluate.decision import LayerContext
        from metamod.evaluate.methods import build_method

        build_method("mro", LayerContext(max_rounds=1, simulated_agent=object(), method_options={"mro": {"budget": 1}}))
