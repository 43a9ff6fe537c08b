"""Runs that cannot silently mix settings or writers: resume fingerprints, folder locks, validation before writing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metamod.cli import main as cli_main
from metamod.config import FINGERPRINT_FILE, SettingsMismatchError
from metamod.evaluate.cells import read_samples
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate
from metamod.files import FolderLock, FolderLockedError, check_unlocked
from metamod.rollout.traces import read_traces

REPO = Path(__file__).resolve().parents[1]
SIM = ["--config", str(REPO / "configs/rollout/sim_arith.yaml"), "--max_rounds", "3", "--progress", "false"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included) with its bytes."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------- rollout


def test_rollout_with_bad_task_options_writes_nothing_and_the_corrected_rerun_works(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli_main(["rollout", *SIM, "--task_options", "{arith: {task_num_examples: -5}}", "--output_dir", str(out)]) == 2
    )
    assert "num_examples must be a positive integer" in capsys.readouterr().err
    assert not out.exists()  # not even the folder
    out.mkdir()
    assert (
        cli_main(["rollout", *SIM, "--task_options", "{arith: {task_num_examples: -5}}", "--output_dir", str(out)]) == 2
    )
    assert _snapshot(out) == {}  # an existing folder stays empty
    assert cli_main(["rollout", *SIM, "--limit", "8", "--output_dir", str(out)]) == 0
    assert len(list(read_traces(out / "traces.jsonl"))) == 8


def test_rollout_refuses_other_settings_in_one_line_naming_the_keys(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["rollout", *SIM, "--limit", "6", "--output_dir", str(out)]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    argv = ["rollout", *SIM, "--limit", "6", "--output_dir", str(out), "--max_rounds", "2"]
    assert cli_main([*argv, "--simulation", "{agent_accuracy: [0.5, 0.5]}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "max_rounds: 3 -> 2" in err and "agent_accuracy" in err
    assert "--overwrite true" in err and "--output_dir" in err
    assert _snapshot(out) == before
    assert cli_main([*argv, "--overwrite", "true"]) == 0
    assert {t["num_rounds"] for t in read_traces(out / "traces.jsonl")} == {2}


def test_sharded_overwrite_clears_every_shard_of_the_old_settings(tmp_path):
    out = tmp_path / "sharded"
    shard = ["--limit", "10", "--output_dir", str(out), "--num_shards", "2"]
    for i in range(2):
        assert cli_main(["rollout", *SIM, *shard, "--shard_index", str(i)]) == 0
    new = ["--max_rounds", "2", "--overwrite", "true"]
    assert cli_main(["rollout", *SIM, *shard, "--shard_index", "0", *new]) == 0
    assert not (out / "traces.shard-1-of-2.jsonl").exists()  # made with the old settings: gone
    assert cli_main(["rollout", *SIM, *shard, "--shard_index", "1", *new]) == 0  # same new settings: keeps shard 0
    for i in range(2):
        traces = list(read_traces(out / f"traces.shard-{i}-of-2.jsonl"))
        assert traces and {t["num_rounds"] for t in traces} == {2}


def _wait_for_lock(folder: Path, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the first rollout ended before the test could see its lock"
        try:
            check_unlocked(folder)
        except FolderLockedError:
            traces = folder / "traces.jsonl"
            if traces.exists() and traces.stat().st_size > 0:  # writing debates
                return
        time.sleep(0.2)
    raise AssertionError(f"no lock on {folder} after {timeout} s")


def test_second_rollout_into_a_busy_folder_fails_at_once_and_the_lock_dies_with_kill_9(tmp_path, capsys):
    out = tmp_path / "run"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "metamod.cli",
            "rollout",
            *SIM,
            "--task_options",
            "{arith: {task_num_examples: 500000}}",
            "--output_dir",
            str(out),
        ],
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        _wait_for_lock(out, first)
        started = time.monotonic()
        assert (
            cli_main(
                ["rollout", *SIM, "--task_options", "{arith: {task_num_examples: 500000}}", "--output_dir", str(out)]
            )
            == 2
        )
        assert time.monotonic() - started < 30  # at once: no debate ran
        err = capsys.readouterr().err
        assert f"{out} is in use by process {first.pid}" in err and len(err.strip().splitlines()) == 1
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    ids = [t["id"] for t in read_traces(out / "traces.jsonl")]  # one writer only: no duplicate, no corrupt line
    assert ids and len(ids) == len(set(ids))
    # the kernel dropped the killed writer's lock: the next run may start at once
    assert cli_main(["rollout", *SIM, "--limit", "6", "--output_dir", str(out), "--overwrite", "true"]) == 0


def test_readers_do_not_take_the_lock(tmp_path):
    from metamod.rollout.snapshots import build_dataset

    run = tmp_path / "run"
    assert cli_main(["rollout", *SIM, "--limit", "6", "--output_dir", str(run)]) == 0
    with FolderLock(run):  # a rollout still writing there
        dataset = build_dataset(run / "traces.jsonl", tmp_path / "data", validation_fraction=0.0)
        assert len(dataset["train"]) == 18
        doc = evaluate(
            EvalConfig(
                methods=["majority_vote"], traces=str(run / "traces.jsonl"), max_rounds=3, plots=False,
                output_dir=str(tmp_path / "eval"),
            )
        )  # fmt: skip
        assert doc["n_samples"]["arith"]["questions"] == 6


# ---------------------------------------------------------------------------------------------------- eval


def _eval(out: Path, **overrides) -> dict:
    options = dict(
        methods=["majority_vote", "consensus"],
        limit=6,
        seeds=[0, 1],
        max_rounds=3,
        batch_questions=4,
        plots=False,
        output_dir=str(out),
    )
    options.update(overrides)
    return evaluate(EvalConfig(**options))


@pytest.mark.parametrize(
    "change, key",
    [
        ({"max_rounds": 2}, "max_rounds"),
        ({"num_agents": 3}, "num_agents"),
        ({"simulation": {"sim_seed": 4}}, "simulation"),
    ],
)
def test_eval_refuses_a_changed_debate_setting_and_leaves_the_folder_unchanged(tmp_path, change, key):
    out = tmp_path / "eval"
    _eval(out)
    before = _snapshot(out)
    with pytest.raises(SettingsMismatchError, match=rf"different settings \({key}: ") as info:
        _eval(out, **change)
    assert "--overwrite true" in str(info.value) and "--output_dir" in str(info.value)
    assert _snapshot(out) == before
    fresh = _eval(out, overwrite=True, **change)  # start over: every row computed under the new setting
    assert fresh["config"][key] == change[key]
    assert {m["n"] for m in fresh["results"]["arith"].values()} == {12}
    assert all(row["settings"] == fresh["settings_fingerprint"] for row in read_samples(out / "samples.jsonl"))


def test_eval_added_method_computes_only_its_cells(tmp_path):
    out = tmp_path / "eval"
    first = _eval(out)
    rows_before = read_samples(out / "samples.jsonl")
    assert len(rows_before) == 12
    doc = _eval(out, methods=["majority_vote", "consensus", "single_cot"])
    rows = read_samples(out / "samples.jsonl")
    added = rows[len(rows_before) :]
    assert rows[: len(rows_before)] == rows_before  # nothing rewritten
    assert len(added) == 12 and all(set(r["methods"]) == {"single_cot"} for r in added)
    results = doc["results"]["arith"]
    assert {m: results[m]["n"] for m in results} == {"majority_vote": 12, "consensus": 12, "single_cot": 12}
    assert results["majority_vote"] == first["results"]["arith"]["majority_vote"]
    reference = _eval(tmp_path / "fresh", methods=["majority_vote", "consensus", "single_cot"])
    assert doc["results"] == reference["results"]  # exactly what a fresh run computes
    again = len(read_samples(out / "samples.jsonl"))
    _eval(out, methods=["majority_vote", "consensus", "single_cot"])
    assert len(read_samples(out / "samples.jsonl")) == again  # everything done: nothing recomputed


def test_eval_method_setting_recomputes_only_that_method_and_more_questions_only_the_new_ones(tmp_path):
    out = tmp_path / "eval"
    methods = ["majority_vote", "single_cot_sc"]
    _eval(out, methods=methods, sc_samples=3)
    n_before = len(read_samples(out / "samples.jsonl"))
    doc = _eval(out, methods=methods, sc_samples=5)
    added = read_samples(out / "samples.jsonl")[n_before:]
    assert len(added) == 12 and all(set(r["methods"]) == {"single_cot_sc"} for r in added)
    assert doc["results"] == _eval(tmp_path / "fresh", methods=methods, sc_samples=5)["results"]
    rows = read_samples(out / "samples.jsonl")
    doc = _eval(out, methods=methods, sc_samples=5, limit=8)
    added = read_samples(out / "samples.jsonl")[len(rows) :]
    assert len(added) == 4 and not {r["id"] for r in added} & {r["id"] for r in rows}  # the 2 new questions x 2 seeds
    assert all(set(r["methods"]) == set(methods) for r in added)
    assert {m["n"] for m in doc["results"]["arith"].values()} == {16}
    smaller = _eval(out, methods=methods, sc_samples=5, limit=3)  # old rows outside the config are not reported
    assert {m["n"] for m in smaller["results"]["arith"].values()} == {6}


def test_eval_folder_lock_and_folders_without_a_fingerprint(tmp_path):
    out = tmp_path / "eval"
    with FolderLock(out), pytest.raises(FolderLockedError, match=rf"in use by process {os.getpid()}"):
        _eval(out)
    assert _snapshot(out) == {".lock": f"{os.getpid()}\n".encode()}  # refused before writing anything
    _eval(out)
    (out / FINGERPRINT_FILE).unlink()  # outputs whose settings are unknown
    with pytest.raises(SettingsMismatchError, match="without a settings fingerprint"):
        _eval(out)
    assert _eval(out, resume=False)["n_samples"]["arith"]["rows"] == 12


# ---------------------------------------------------------------------------------------------------- build-dataset, train


def test_build_dataset_refuses_other_options_and_a_busy_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli_main(["rollout", *SIM, "--limit", "6", "--output_dir", str(run)]) == 0
    data = tmp_path / "data"
    argv = ["build-dataset", "--traces", str(run), "--output_dir", str(data)]
    assert cli_main(argv) == 0
    assert json.loads((data / FINGERPRINT_FILE).read_text())["command"] == "build-dataset"
    assert cli_main(argv) == 0  # same settings: rebuilt in place
    capsys.readouterr()
    assert cli_main([*argv, "--keep_agents", "1"]) == 2
    err = capsys.readouterr().err
    assert "keep_agents: null -> 1" in err and "--overwrite true" in err
    assert cli_main([*argv, "--keep_agents", "1", "--overwrite", "true"]) == 0
    with FolderLock(data):
        assert cli_main(argv + ["--keep_agents", "1"]) == 2
        assert f"in use by process {os.getpid()}" in capsys.readouterr().err


def test_train_refuses_other_settings_and_a_busy_folder_before_any_work(tmp_path):
    from metamod.config import record_fingerprint
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, train, train_settings

    out = tmp_path / "moderator"

    def args(**kw):
        options = dict(
            dataset_path=str(tmp_path / "no-dataset-yet"),
            per_device_train_batch_size=4,
            num_generations=2,
            report_to="none",
            output_dir=str(out),
        )
        return ModeratorGRPOConfig(**{**options, **kw})

    model_args = ModeratorModelConfig(model_name_or_path=str(tmp_path / "no-model"))
    record_fingerprint(out, train_settings(args(learning_rate=1e-3), model_args), command="train")
    (out / "trainer_state.json").write_text("{}")  # a run's outputs
    with pytest.raises(SettingsMismatchError, match=r"learning_rate: 0\.001 -> 0\.002"):
        train(args=args(learning_rate=2e-3, logging_steps=3), model_args=model_args)  # logging: free
    with FolderLock(out), pytest.raises(FolderLockedError, match=str(os.getpid())):
        train(args=args(learning_rate=1e-3), model_args=model_args)
    with pytest.raises(ValueError, match="overwrite=true deletes the checkpoints"):
        train(args=args(overwrite=True, resume_from_checkpoint="true"), model_args=model_args)


def test_eval_rerun_with_a_changed_debate_setting_is_exit_2_and_one_line(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--config", str(REPO / "configs/eval/sim_debate.yaml"), "--methods", "majority_vote",
            "consensus", "--limit", "4", "--max_rounds", "3", "--plots", "false", "--output_dir", str(out)]  # fmt: skip
    assert cli_main(argv) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert cli_main([*argv, "--max_rounds", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metamod eval: error: ")
    assert "max_rounds: 3 -> 2" in lines[0] and "--overwrite true" in lines[0]
    assert _snapshot(out) == before
    assert cli_main([*argv, "--methods", "majority_vote", "consensus", "single_cot"]) == 0  # an extra method: fine
    rows = read_samples(out / "samples.jsonl")
    assert len(rows) == 8 and [set(r["methods"]) for r in rows[4:]] == [{"single_cot"}] * 4  # only the new cells


# ---------------------------------------------------------------------------------------------------- task files

GSM_CONFIG = "tasks: [gsm8k]\ndebaters: simulated\nmax_rounds: 2\nprogress: false\n"


def _gsm_file(path) -> list[str]:
    """The options of a gsm8k rollout that reads ``path``."""
    return ["--task_options", json.dumps({"gsm8k": {"task_split": "train", "task_data_files": str(path)}})]


GOOD_ROWS = b'{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?", "answer": "#### 4"}\n'


@pytest.mark.parametrize(
    "bad, match",
    [
        (b'{"question": "caf\xff?", "answer": "#### 3"}\n', r"q\.jsonl:3:18: byte 0xff is not valid UTF-8"),
        (b'{"question": "x", "answer": }\n{"question": "y", "answer": "#### 1"}\n', r"q\.jsonl:3:29: not valid JSON"),
    ],
    ids=["non-utf8", "broken-line"],
)
def test_rollout_with_a_bad_task_file_fails_before_writing_anything(tmp_path, capsys, bad, match):
    import re

    config, data, out = tmp_path / "c.yaml", tmp_path / "q.jsonl", tmp_path / "run"
    config.write_text(GSM_CONFIG)
    data.write_bytes(GOOD_ROWS + bad)
    argv = ["rollout", "--config", str(config), *_gsm_file(data), "--output_dir", str(out)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err)
    assert not out.exists()  # not even the folder
    data.write_bytes(GOOD_ROWS)
    assert cli_main(argv) == 0
    before = _snapshot(out)
    data.write_bytes(GOOD_ROWS + bad)  # the same task file, broken in place: the folder of the good run is kept
    assert cli_main(argv) == 2
    assert re.search(match, capsys.readouterr().err)
    assert _snapshot(out) == before


def test_a_relative_and_an_absolute_path_to_one_file_are_one_setting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(GSM_CONFIG)
    Path("q.jsonl").write_bytes(GOOD_ROWS)
    rollout = ["rollout", "--config", "c.yaml", "--output_dir", "run"]
    assert cli_main([*rollout, *_gsm_file("q.jsonl")]) == 0
    traces = tmp_path / "run" / "traces.jsonl"
    before = traces.read_bytes()
    capsys.readouterr()
    assert cli_main([*rollout, *_gsm_file(tmp_path / "q.jsonl")]) == 0  # resumes: nothing to do
    assert "0 new debates (2 already done; 2 in the file)" in capsys.readouterr().out
    assert traces.read_bytes() == before
    assert cli_main([*rollout, *_gsm_file("./q.jsonl")]) == 0

    eval_options = dict(tasks=["gsm8k"], methods=["majority_vote"], max_rounds=2, plots=False, output_dir="eval")
    first = evaluate(EvalConfig(traces="run/traces.jsonl", **eval_options))
    rows = read_samples(Path("eval/samples.jsonl"))
    again = evaluate(EvalConfig(traces=str(traces), **eval_options))  # the absolute form: resumes, computes nothing
    assert read_samples(Path("eval/samples.jsonl")) == rows
    assert again["settings_fingerprint"] == first["settings_fingerprint"] and again["results"] == first["results"]


# ---------------------------------------------------------------------------------------------------- train resume


def _train_argv(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["--model_name_or_path", str(tmp_path / "no-model"), "--dataset_path", str(tmp_path / "no-dataset-yet"),
            "--per_device_train_batch_size", "4", "--num_generations", "2", "--report_to", "none",
            "--output_dir", str(out), *extra]  # fmt: skip


def test_train_resume_checks_the_checkpoint_before_any_work(tmp_path, capsys):
    from metamod.config import parse_config, record_fingerprint
    from metamod.rewards import get_reward_funcs
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, TinyModelConfig, train_settings

    fresh = tmp_path / "fresh"
    assert cli_main(["train", *_train_argv(tmp_path, fresh, "--resume_from_checkpoint", "true")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("metamod train: error: resume_from_checkpoint=true but") and "no checkpoint-<step>" in err
    assert not fresh.exists()

    out = tmp_path / "run"
    args, model_args, tiny_args = parse_config(
        [ModeratorGRPOConfig, ModeratorModelConfig, TinyModelConfig], _train_argv(tmp_path, out)
    )
    _, args.reward_weights = get_reward_funcs(args.reward_funcs, args.reward_weights)  # as train() resolves them
    record_fingerprint(out, train_settings(args, model_args, tiny_args), command="train")
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (checkpoint / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{truncated")
    before = _snapshot(out)
    for resume in ("true", str(checkpoint)):
        assert cli_main(["train", *_train_argv(tmp_path, out, "--resume_from_checkpoint", resume)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("metamod train: error: ")
        assert f"{checkpoint / 'adapter_model.safetensors'} is not a readable safetensors file" in lines[0]
        assert _snapshot(out) == before  # no lock, no config, no dataset, no model
    assert cli_main(["train", *_train_argv(tmp_path, out, "--resume_from_checkpoint", str(tmp_path / "nope"))]) == 2
    assert "is not a folder; expected a checkpoint-<step> folder" in capsys.readouterr().err


def test_training_samples_start_over_on_a_fresh_run_and_drop_redone_steps_on_resume(tmp_path):
    from types import SimpleNamespace

    from metamod.files import read_jsonl
    from metamod.train.sample_log import SampleLogger

    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({"step": s, "completion": "old", "rewards": {}}) + "\n" for s in (2, 4, 6)))
    trainer = SimpleNamespace(_logs={"completion": ["<answer>4</answer>"], "rewards": {"control_reward": [1.0]}})

    def run(resume: bool, start: int, steps: list[int]) -> None:
        logger = SampleLogger(trainer, path, every=2, count=1, resume=resume)
        logger.on_train_begin(None, SimpleNamespace(is_world_process_zero=True, global_step=start), None)
        for step in steps:
            logger.on_log(None, SimpleNamespace(is_world_process_zero=True, global_step=step), None)
        logger.on_train_end(None, None, None)

    run(resume=False, start=0, steps=[2])  # a fresh run: the old file is not appended to
    assert read_jsonl(path) == [{"step": 2, "completion": "<answer>4</answer>", "rewards": {"control_reward": 1.0}}]
    run(resume=False, start=0, steps=[2, 4, 6])
    run(resume=True, start=4, steps=[6, 8])  # resumed from checkpoint-4: steps 5.. run (and are logged) again
    assert [row["step"] for row in read_jsonl(path)] == [2, 4, 6, 8]


def test_eval_overwrite_deletes_every_output_a_resume_would_reuse(tmp_path):
    """``--overwrite true`` leaves no line of the old run: the MRO method's own traces go with its samples."""
    out = tmp_path / "eval"
    options = dict(methods=["mro"], limit=4, max_iterations=2, output_dir=str(out), plots=False)
    evaluate(EvalConfig(**options))
    old = [json.loads(line)["fingerprint"] for line in (out / "method-traces.jsonl").read_text().splitlines()]
    assert len(old) == 4
    evaluate(EvalConfig(**{**options, "max_iterations": 3}, overwrite=True))
    new = [json.loads(line)["fingerprint"] for line in (out / "method-traces.jsonl").read_text().splitlines()]
    assert len(new) == 4 and not set(new) & set(old)


# ------------------------------------------------------------------------------- options added after a folder


def test_an_eval_folder_from_before_an_option_existed_resumes_its_rows_at_the_default(tmp_path, monkeypatch):
    import metamod.evaluate.harness as harness

    out = tmp_path / "eval"
    real = harness.eval_settings

    def without_option(config, memory_config=None):  # the settings as an older metamod recorded them
        settings = real(config, memory_config)
        del settings["moderator_top_logprobs"]
        return settings

    monkeypatch.setattr(harness, "eval_settings", without_option)
    first = _eval(out)
    rows = read_samples(out / "samples.jsonl")
    monkeypatch.setattr(harness, "eval_settings", real)
    again = _eval(out)  # the option now exists, at its default: the same folder, nothing recomputed
    assert again["settings_fingerprint"] == first["settings_fingerprint"]
    assert read_samples(out / "samples.jsonl") == rows
    assert "moderator_top_logprobs" not in json.loads((out / FINGERPRINT_FILE).read_text())["settings"]
    with pytest.raises(SettingsMismatchError, match=r"moderator_top_logprobs: unset -> 3"):
        _eval(out, moderator_top_logprobs=3)  # a non-default value is a difference like any other


def test_a_rollout_folder_from_before_an_option_existed_resumes_at_the_default(tmp_path, monkeypatch, capsys):
    import metamod.rollout.run as run

    out = tmp_path / "run"
    real = run.rollout_settings

    def without_option(config):
        settings = real(config)
        del settings["confidence"]
        return settings

    monkeypatch.setattr(run, "rollout_settings", without_option)
    assert cli_main(["rollout", *SIM, "--limit", "4", "--output_dir", str(out)]) == 0
    monkeypatch.setattr(run, "rollout_settings", real)
    traces = (out / "traces.jsonl").read_bytes()
    capsys.readouterr()
    assert cli_main(["rollout", *SIM, "--limit", "4", "--output_dir", str(out)]) == 0  # resumes: nothing to redo
    assert "0 new debates (4 already done" in capsys.readouterr().out
    assert (out / "traces.jsonl").read_bytes() == traces
    assert cli_main(["rollout", *SIM, "--limit", "4", "--output_dir", str(out), "--confidence", "true"]) == 2
    assert "confidence: false -> true" in capsys.readouterr().err  # the resume recorded the option's default


def test_a_train_folder_from_before_an_option_existed_passes_the_settings_check_at_the_default(tmp_path):
    from metamod.config import record_fingerprint
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, train, train_settings

    out = tmp_path / "moderator"

    def args(**kw):
        options = dict(dataset_path=str(tmp_path / "no-dataset-yet"), per_device_train_batch_size=4,
                       num_generations=2, report_to="none", output_dir=str(out))  # fmt: skip
        return ModeratorGRPOConfig(**{**options, **kw})

    model_args = ModeratorModelConfig(model_name_or_path=str(tmp_path / "no-model"))
    recorded = train_settings(args(reward_weights=[1.0, 1.0]), model_args)  # train fills in the weights
    older = {k: v for k, v in recorded.items() if k != "top_k"}  # as recorded before top_k existed
    record_fingerprint(out, older, command="train")
    (out / "trainer_state.json").write_text("{}")  # a run's outputs
    with pytest.raises(SettingsMismatchError, match=r"top_k: unset -> 5"):
        train(args=args(top_k=5), model_args=model_args)
    with pytest.raises(Exception) as info:  # past the settings check: the next check is the missing dataset
        train(args=args(), model_args=model_args)
    assert not isinstance(info.value, SettingsMismatchError) and "no-dataset-yet" in str(info.value)
