"""`metamod rollout` / `merge-shards`: configs, resume after a crash, shard + merge, config errors."""

import json
from pathlib import Path

import pytest
import yaml

from metamod.cli import main as cli_main
from metamod.config import ConfigError
from metamod.rollout.merge import merge_main
from metamod.rollout.run import main
from metamod.rollout.traces import read_traces

REPO = Path(__file__).resolve().parents[1]
SIM = [
    "--config",
    str(REPO / "configs/rollout/sim_arith.yaml"),
    "--limit",
    "30",
    "--max_rounds",
    "3",
    "--progress",
    "false",
]


def _ids(path):
    return [t["id"] for t in read_traces(path)]


def test_sim_rollout_writes_traces_config_and_summary(tmp_path, capsys):
    assert main(SIM + ["--output_dir", str(tmp_path)]) == 0
    traces = list(read_traces(tmp_path / "traces.jsonl"))
    assert len(traces) == 30 and all(t["simulated"] and t["num_rounds"] == 3 for t in traces)
    saved = yaml.safe_load((tmp_path / "rollout_config.yaml").read_text())
    assert saved["limit"] == 30 and saved["max_rounds"] == 3 and saved["debaters"] == "simulated"
    assert saved["task_options"]["arith"]["task_num_examples"] == 400 and saved["simulation"]["sim_seed"] == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["simulated"] is True and summary["questions"] == 30 and len(summary["eta_rate_by_round"]) == 3
    assert "simulated" in capsys.readouterr().out


def test_resume_after_crash_with_torn_last_line(tmp_path):
    out = tmp_path / "run"
    assert main(SIM + ["--output_dir", str(out)]) == 0
    path = out / "traces.jsonl"
    reference = list(read_traces(path))
    lines = path.read_text().splitlines(keepends=True)
    # simulate a crash: 12 debates written, the 13th torn half-way
    path.write_text("".join(lines[:12]) + lines[12][: len(lines[12]) // 2])
    assert main(SIM + ["--output_dir", str(out)]) == 0
    resumed = list(read_traces(path))
    assert [t["id"] for t in resumed] == [t["id"] for t in reference]  # no duplicate, none lost, same order
    assert resumed == reference
    summary = json.loads((out / "summary.json").read_text())
    assert summary["this_run"]["skipped_done"] == 12 and summary["this_run"]["questions"] == 18
    # R10: the summary describes the whole file, as one uninterrupted run's does
    assert main(SIM + ["--output_dir", str(tmp_path / "one")]) == 0
    one_run = json.loads((tmp_path / "one" / "summary.json").read_text())
    drop = ("this_run", "traces_file")
    assert {k: v for k, v in summary.items() if k not in drop} == {k: v for k, v in one_run.items() if k not in drop}
    assert summary["questions"] == 30
    assert main(SIM + ["--output_dir", str(out)]) == 0  # a rerun of a finished rollout keeps the real statistics
    rerun = json.loads((out / "summary.json").read_text())
    assert rerun["this_run"]["questions"] == 0 and rerun["coverage"] == one_run["coverage"] is not None


def test_resume_refuses_changed_settings_and_overwrite_restarts(tmp_path):
    assert main(SIM + ["--output_dir", str(tmp_path)]) == 0
    with pytest.raises(ConfigError, match="different settings.*max_rounds"):
        main(SIM + ["--output_dir", str(tmp_path), "--max_rounds", "2"])
    assert main(SIM + ["--output_dir", str(tmp_path), "--max_rounds", "2", "--overwrite", "true"]) == 0
    assert all(t["num_rounds"] == 2 for t in read_traces(tmp_path / "traces.jsonl"))


@pytest.mark.parametrize("shard_by", ["hash", "position"])
def test_shard_and_merge_equals_unsharded(tmp_path, shard_by):
    assert main(SIM + ["--output_dir", str(tmp_path / "full")]) == 0
    for i in range(3):
        assert (
            main(
                SIM
                + [
                    "--output_dir",
                    str(tmp_path / "sharded"),
                    "--num_shards",
                    "3",
                    "--shard_index",
                    str(i),
                    "--shard_by",
                    shard_by,
                ]
            )
            == 0
        )
    shard_sizes = [len(_ids(tmp_path / "sharded" / f"traces.shard-{i}-of-3.jsonl")) for i in range(3)]
    assert sum(shard_sizes) == 30 and all(n > 0 for n in shard_sizes)
    merged = tmp_path / "merged.jsonl"
    assert merge_main(["--inputs", str(tmp_path / "sharded"), "--output", str(merged)]) == 0
    assert list(read_traces(merged)) == list(read_traces(tmp_path / "full" / "traces.jsonl"))


def test_merge_reports_missing_shard(tmp_path):
    assert main(SIM + ["--output_dir", str(tmp_path), "--num_shards", "2", "--shard_index", "0"]) == 0
    with pytest.raises(FileNotFoundError, match=r"shard file\(s\) \[1\] of 2 missing"):
        merge_main(["--inputs", str(tmp_path), "--output", str(tmp_path / "all.jsonl")])


def test_config_errors_are_clear(tmp_path, capsys):
    with pytest.raises(ConfigError, match="Unknown argument.*--num_debaters"):
        main(SIM + ["--output_dir", str(tmp_path / "o"), "--num_debaters", "3"])
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("tasks: [arith]\nmax_round: 3\n")
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['max_round'\]"):
        main(["--config", str(bad_yaml)])
    with pytest.raises(KeyError, match="Unknown task 'arithmetic'.*arith"):
        main(SIM + ["--tasks", "arithmetic"])
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="model folder .*no-such-model.* does not exist"):
        main(
            SIM
            + [
                "--output_dir",
                str(tmp_path / "o"),
                "--debaters",
                json.dumps([{"backend": "hf", "model": str(missing)}]),
            ]
        )
    assert not (tmp_path / "o" / "traces.jsonl").exists()  # failed before any work
    with pytest.raises(ConfigError, match="unknown key.*'modle'"):
        main(SIM + ["--output_dir", str(tmp_path / "o"), "--debaters", '[{"backend": "hf", "modle": "x"}]'])
    with pytest.raises(ConfigError, match="num_agents must be >= 2"):
        main(SIM + ["--num_agents", "1"])
    with pytest.raises(ConfigError, match="2 backend configs for num_agents=3"):
        main(SIM + ["--num_agents", "3", "--debaters", '[{"model": "a"}, {"model": "b"}]'])
    # through the `metamod` dispatcher: exit code 2 and a one-line message
    assert cli_main(["rollout"] + SIM + ["--tasks", "arithmetic"]) == 2
    assert "Unknown task 'arithmetic'" in capsys.readouterr().err


def test_mro_math500_llama8b_config_parses():
    """The GPU MRO rollout config parses on the CPU (nothing loads): one vLLM backend for the three roles, C.8 batch."""
    from metamod.config import parse_config
    from metamod.llm import BackendConfig
    from metamod.rollout.mro.factory import SAMPLING_KEYS, role_specs
    from metamod.rollout.run import RolloutConfig

    path = REPO / "configs/rollout/mc2_paper_mro_math500_llama8b.yaml"
    (config,) = parse_config([RolloutConfig], ["--config", str(path)])
    [task] = config.task_configs()
    assert (task.task, task.task_split) == ("math500", "test")
    assert (config.loop, config.max_iterations, config.batch_questions) == ("mro", 3, 50)
    specs = role_specs(config.roles)
    assert specs["reasoner"] == specs["monitor"] == specs["controller"]
    backend = BackendConfig(**{k: v for k, v in specs["reasoner"].items() if k not in SAMPLING_KEYS})
    assert (backend.backend, backend.model) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")


def test_multi_task_rollout(tmp_path):
    options = {
        "arith@one": {"task_num_examples": 3, "task_seed": 1},
        "arith@two": {"task_num_examples": 2, "task_seed": 2, "task_split": "test"},
    }
    argv = ["--output_dir", str(tmp_path), "--tasks", "arith@one", "arith@two", "--task_options", json.dumps(options)]
    assert main([*SIM[:2], *SIM[4:], *argv]) == 0  # without the config's --limit
    traces = list(read_traces(tmp_path / "traces.jsonl"))
    assert [t["index"] for t in traces] == [0, 1, 2, 3, 4]
    assert [t["id"].split("-")[1] for t in traces] == ["1", "1", "1", "test", "test"]
    assert [t["task"] for t in traces] == ["arith@one"] * 3 + ["arith@two"] * 2
    with pytest.raises(ConfigError, match=r"task_options\['arith'\]: unknown key\(s\) \['levels'\]"):
        main(SIM + ["--output_dir", str(tmp_path / "x"), "--task_options", '{"arith": {"levels": [1]}}'])
    with pytest.raises(ConfigError, match=r"task_options has options for 'gsm8k', which is not in tasks"):
        main(SIM + ["--output_dir", str(tmp_path / "x"), "--task_options", "{gsm8k: {task_limit: 3}}"])


def test_ctrl_c_leaves_a_readable_resumable_file(tmp_path):
    from metamod.rollout.run import RolloutConfig, rollout

    config = RolloutConfig(
        task_options={"arith": {"task_num_examples": 30}},
        output_dir=str(tmp_path / "run"),
        batch_questions=10,
        max_rounds=3,
        progress=False,
    )
    calls = []

    def interrupt_in_third_chunk(round_index, debates):
        calls.append(round_index)
        if len(calls) == 7:  # 2 chunks x 3 rounds done, then Ctrl-C
            raise KeyboardInterrupt
        return [False] * len(debates)

    with pytest.raises(KeyboardInterrupt):
        rollout(config=config, stop_hook=interrupt_in_third_chunk)
    path = tmp_path / "run" / "traces.jsonl"
    assert len(_ids(path)) == 20
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["this_run"]["interrupted"] is True and summary["questions"] == 20
    rollout(config=config)
    reference = tmp_path / "ref"
    assert (
        main(
            [
                "--tasks",
                "arith",
                "--task_options",
                "{arith: {task_num_examples: 30}}",
                "--max_rounds",
                "3",
                "--progress",
                "false",
                "--output_dir",
                str(reference),
            ]
        )
        == 0
    )
    assert list(read_traces(path)) == list(read_traces(reference / "traces.jsonl"))
