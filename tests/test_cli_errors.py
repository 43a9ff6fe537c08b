"""One error path for the CLI: anticipated failures are exit code 2 and one stderr line; bugs keep a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metamod.cli import main
from metamod.config import ConfigError, parse_config
from metamod.errors import InputError, MetamodError, anticipated_message
from metamod.evaluate.config import EvalConfig

SIM_ROLLOUT = ["--config", "configs/rollout/sim_arith.yaml", "--progress", "false"]
EVAL = ["--config", "configs/eval/sim_debate.yaml", "--methods", "majority_vote", "consensus", "--reference_method",
        "consensus", "--plots", "false"]  # fmt: skip


def _error_line(capsys, command: str) -> str:
    """The one stderr line of a failed command (and nothing else on stderr)."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"metamod {command}: error: "), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ empty inputs


def test_build_dataset_refuses_an_empty_traces_file(tmp_path, capsys):
    traces, out = tmp_path / "traces.jsonl", tmp_path / "ds"
    traces.write_text("")
    assert main(["build-dataset", "--traces", str(traces), "--output_dir", str(out)]) == 2
    line = _error_line(capsys, "build-dataset")
    assert str(traces) in line and "0 usable traces" in line and "at least 1" in line
    assert not out.exists()


def test_train_refuses_a_dataset_with_no_rows(tmp_path, capsys):
    from datasets import Dataset, DatasetDict

    from metamod.rollout.snapshots import dataset_features

    features = dataset_features()
    empty = Dataset.from_dict({c: [] for c in features}, features=features)
    data = tmp_path / "ds"
    DatasetDict({"train": empty}).save_to_disk(str(data), num_shards={"train": 1})
    capsys.readouterr()  # the progress bar of save_to_disk
    out = tmp_path / "mod"
    argv = ["train", "--model_name_or_path", "m", "--dataset_path", str(data), "--output_dir", str(out),
            "--per_device_train_batch_size", "4", "--num_generations", "2", "--report_to", "none"]  # fmt: skip
    assert main(argv) == 2
    line = _error_line(capsys, "train")
    assert f"{data}[train] is empty (0 rows); expected at least 1 row" in line
    assert "metamod build-dataset" in line and "max_prompt_tokens" in line  # the likely fixes
    assert not out.exists()
    assert main([*argv, "--max_train_examples", "0"]) == 2
    assert "max_train_examples must be >= 1" in _error_line(capsys, "train")


def test_eval_refuses_an_empty_traces_file(tmp_path, capsys):
    traces, out = tmp_path / "traces.jsonl", tmp_path / "eval"
    traces.write_text("\n")
    assert main(["eval", *EVAL, "--traces", str(traces), "--output_dir", str(out)]) == 2
    line = _error_line(capsys, "eval")
    assert str(traces) in line and "0 traces" in line and "at least one" in line
    assert not out.exists()


# ------------------------------------------------------------------------------ paths and config files


def test_output_dir_that_is_a_file(tmp_path, capsys):
    existing = tmp_path / "taken"
    existing.write_text("not a folder")
    assert main(["rollout", *SIM_ROLLOUT, "--output_dir", str(existing)]) == 2
    line = _error_line(capsys, "rollout")
    assert f"output_dir {str(existing)!r} is an existing file" in line and "expected a folder" in line
    assert existing.read_text() == "not a folder"
    below = existing / "sub"
    assert main(["rollout", *SIM_ROLLOUT, "--output_dir", str(below)]) == 2
    assert "is a file" in _error_line(capsys, "rollout")


def test_output_dir_without_write_permission(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # the tests run as root, where chmod does not stop writes: deny access to that folder instead
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    assert main(["eval", *EVAL, "--output_dir", str(locked / "eval")]) == 2
    line = _error_line(capsys, "eval")
    assert "is not writable" in line and str(locked) in line and "expected a folder you can write to" in line
    assert list(locked.iterdir()) == []


def test_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: arith\nmax_rounds: [3\nnum_agents: 2\n")
    assert main(["rollout", "--config", str(bad), "--output_dir", str(tmp_path / "o")]) == 2
    line = _error_line(capsys, "rollout")
    assert f"{bad}:3:" in line and "YAML syntax error" in line
    assert not (tmp_path / "o").exists()


def test_config_file_that_is_not_utf8(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"task: arith\nmax_rounds: 3 # \xff\n")
    assert main(["rollout", "--config", str(bad)]) == 2
    assert f"{bad}:2:17: byte 0xff is not valid UTF-8" in _error_line(capsys, "rollout")


def test_argparse_errors_are_one_line(tmp_path, capsys):
    assert main(["rollout", *SIM_ROLLOUT, "--max_rounds", "many", "--output_dir", str(tmp_path / "o")]) == 2
    line = _error_line(capsys, "rollout")
    assert "argument --max_rounds/--max-rounds: invalid int value: 'many'" in line and "metamod rollout --help" in line


# ------------------------------------------------------------------------------ meaningless values


def test_eval_refuses_repeated_seeds(tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", *EVAL, "--seeds", "0", "0", "--output_dir", str(out)]) == 2
    line = _error_line(capsys, "eval")
    assert "seeds [0, 0] repeats [0]" in line and "expected distinct seeds" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "options, match",
    [
        ({"fixed_rounds": 6, "max_rounds": 5, "methods": ["adjudication_only"]}, r"fixed_rounds in 1\.\.5"),
        ({"reference_method": "judge", "methods": ["majority_vote"]}, "reference_method 'judge' is not among"),
        ({"temperature": -0.1}, r"temperature must be >= 0"),
        ({"moderator_temperature": -1.0}, r"moderator_temperature must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"num_agents": 1}, "num_agents must be >= 2"),
        ({"simulation": {"sim_sead": 1}}, r"simulation: unknown key\(s\) \['sim_sead'\].*sim_seed"),
        (
            {"task_options": {"arith": {"limit": 5}}},
            r"task_options\['arith'\]: unknown key\(s\) \['limit'\].*task_limit",
        ),
        ({"moderator_backend_options": {"devise": "cpu"}}, r"unknown key\(s\) \['devise'\].*device"),
    ],
)
def test_eval_config_refuses_meaningless_values(options, match):
    with pytest.raises(ValueError, match=match):
        EvalConfig(**{"methods": ["majority_vote"], **options})


def test_reference_method_defaults_to_the_moderator_when_evaluated():
    assert EvalConfig(methods=["majority_vote"]).reference_method is None
    assert EvalConfig(methods=["majority_vote", "moderator"]).reference_method == "moderator"
    assert EvalConfig(methods=["majority_vote"], reference_method="majority_vote").reference_method == "majority_vote"
    assert EvalConfig(methods=["adjudication_only"], fixed_rounds=5, max_rounds=5).fixed_rounds == 5
    assert EvalConfig(methods=["majority_vote"], fixed_rounds=6, max_rounds=5).fixed_rounds == 6  # unused there


@pytest.mark.parametrize(
    "command, argv, match",
    [
        ("rollout", [*SIM_ROLLOUT, "--temperature", "-1"], "temperature must be >= 0"),
        ("rollout", [*SIM_ROLLOUT, "--num_agents", "1"], "num_agents must be >= 2"),
        ("eval", [*EVAL, "--methods", "consensus", "--reference_method", "judge"], "reference_method 'judge'"),
        (
            "eval",
            [*EVAL, "--methods", "adjudication_only", "--reference_method", "adjudication_only", "--max_rounds", "2"],
            r"fixed_rounds in 1..2",
        ),
        ("train", ["--config", "configs/train/tiny_sim.yaml", "--temperature", "-0.5"], "temperature must be >= 0"),
    ],
)
def test_meaningless_values_on_the_command_line(command, argv, match, capsys, tmp_path):
    import re

    assert main([command, *argv, "--output_dir", str(tmp_path / "o")]) == 2
    assert re.search(match, _error_line(capsys, command))
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------ dict-valued keys


def test_dict_keys_from_the_command_line():
    (cfg,) = parse_config(
        [EvalConfig],
        ["--task_options", "{arith: {task_limit: 5}}", "--simulation", "{}", "--moderator_backend_options",
         '{"device": "cpu"}', "--methods", "majority_vote"],
    )  # fmt: skip
    assert cfg.task_options == {"arith": {"task_limit": 5}} and cfg.simulation == {}
    assert cfg.moderator_backend_options == {"device": "cpu"}
    assert cfg.task_config("arith").task_limit == 5


def test_bad_dict_keys_from_the_command_line(capsys):
    assert main(["eval", *EVAL, "--simulation", "{sim_sead: 3}"]) == 2
    line = _error_line(capsys, "eval")
    assert "simulation: unknown key(s) ['sim_sead']" in line and "sim_seed" in line
    assert main(["eval", *EVAL, "--simulation", "[1, 2]"]) == 2
    assert "argument --simulation: expected a YAML/JSON mapping" in _error_line(capsys, "eval")
    assert main(["eval", *EVAL, "--task_options", "{arith: {task_limit: 5}"]) == 2
    assert "YAML syntax error" in _error_line(capsys, "eval")


# ------------------------------------------------------------------------------ task files


def test_task_file_with_a_non_utf8_byte(tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_bytes(b'{"question": "1+1?", "answer": "#### 2"}\n{"question": "caf\xff?", "answer": "#### 3"}\n')
    out = tmp_path / "eval"
    options = json.dumps({"gsm8k": {"task_data_files": str(data)}})
    assert main(["eval", *EVAL, "--tasks", "gsm8k", "--task_options", options, "--output_dir", str(out)]) == 2
    line = _error_line(capsys, "eval")
    assert f"{data}:2:18: byte 0xff is not valid UTF-8" in line and "expected a UTF-8 text file" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("q.json", b'[{"question": "a",\n "answer": }]', r"q\.json:2:12: not valid JSON"),
        ("q.json", b'[{"question": "\xfe"}]', r"q\.json:1:16: byte 0xfe is not valid UTF-8"),
        ("q.csv", b"question,answer\n1+1?,2\n\xff,3\n", r"q\.csv:3:1: byte 0xff"),
        ("q.csv", b"question,answer\n1+1?,2,extra\n", r"q\.csv:2: 3 fields; expected 2"),
        ("q.parquet", b"not parquet", r"q\.parquet: not a readable Parquet file"),
    ],
)
def test_task_file_errors_name_the_file_and_line(tmp_path, name, content, match):
    from metamod.tasks.sources import read_table

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=match):
        read_table(path)


def test_task_file_with_a_byte_order_mark_reads(tmp_path):
    from metamod.tasks.sources import read_table

    path = tmp_path / "q.csv"
    path.write_bytes(b"\xef\xbb\xbfquestion,answer\n1+1?,2\n")
    assert read_table(path) == {"question": ["1+1?"], "answer": ["2"]}


# ------------------------------------------------------------------------------ corrupt weights and JSON


def _adapter(tmp_path: Path, config: bytes, weights: bytes) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_bytes(config)
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


def test_adapter_with_corrupt_weights(tmp_path, capsys):
    config = json.dumps({"peft_type": "LORA", "base_model_name_or_path": "some/base"}).encode()
    adapter = _adapter(tmp_path, config, b"\x10\x00\x00\x00\x00\x00\x00\x00{truncated")
    out = tmp_path / "eval"
    argv = ["eval", *EVAL, "--methods", "moderator", "--reference_method", "moderator", "--moderator", str(adapter),
            "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 2
    line = _error_line(capsys, "eval")
    assert f"{adapter / 'adapter_model.safetensors'}: adapter weights do not load" in line
    assert "expected a complete .safetensors file" in line
    assert not out.exists()


def test_adapter_with_corrupt_config_json(tmp_path, capsys):
    adapter = _adapter(tmp_path, b'{"peft_type": "LORA",\n "r": }', b"")
    assert (
        main(["eval", *EVAL, "--methods", "moderator", "--reference_method", "moderator", "--moderator", str(adapter)])
        == 2
    )
    line = _error_line(capsys, "eval")
    assert f"{adapter / 'adapter_config.json'}:2:7: not valid JSON" in line and "PEFT adapter config" in line


def test_library_errors_about_files_name_the_file(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text("{oops")

    def read(path):
        return json.loads(Path(path).read_text())

    with pytest.raises(json.JSONDecodeError) as info:
        read(bad)
    message = anticipated_message(info.value)
    assert message.startswith(f"{bad}: a JSON file does not load") and "expected a complete, valid file" in message
    mismatch = RuntimeError("Error(s) in loading state_dict for PeftModel:\n\tsize mismatch for lora_A")
    assert "the weights (they do not fit the model) does not load" in anticipated_message(mismatch)
    assert anticipated_message(PermissionError(13, "Permission denied", "/x/y")).startswith("/x/y: Permission denied")


# ------------------------------------------------------------------------------ --debug, and bugs


def test_debug_shows_the_traceback(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    with pytest.raises(InputError, match="0 usable traces"):
        main(["--debug", "build-dataset", "--traces", str(traces), "--output_dir", str(tmp_path / "ds")])
    with pytest.raises(ConfigError, match="repeats"):
        main(["eval", *EVAL, "--seeds", "1", "1", "--debug"])


def test_a_bug_keeps_its_traceback(monkeypatch):
    def buggy(argv):
        return [][0]

    monkeypatch.setattr("metamod.rollout.run.main", buggy)
    with pytest.raises(IndexError):
        main(["rollout"])

    def library_value_error(argv):
        return int("not a number")  # a ValueError not raised by a `raise` statement in metamod: a bug

    monkeypatch.setattr("metamod.rollout.run.main", library_value_error)
    with pytest.raises(ValueError, match="invalid literal"):
        main(["rollout"])


def test_error_types_are_value_errors():
    assert issubclass(ConfigError, MetamodError) and issubclass(ConfigError, ValueError)
    assert issubclass(InputError, MetamodError) and issubclass(InputError, ValueError)


def test_domain_errors_are_anticipated_and_keep_their_bases():
    from metamod.llm.openai_backend import BackendError
    from metamod.rollout.trace_schema import TraceError
    from metamod.train.hub import HubUploadError

    for cls, base in ((TraceError, ValueError), (BackendError, RuntimeError), (HubUploadError, RuntimeError)):
        assert issubclass(cls, MetamodError) and issubclass(cls, base)
        assert anticipated_message(cls("x.jsonl:3: field 'id'\n  must be str")) == "x.jsonl:3: field 'id' must be str"


def test_a_domain_error_in_a_command_is_one_line(monkeypatch, capsys):
    from metamod.llm.openai_backend import BackendError

    def unreachable(argv):
        raise BackendError("POST http://localhost:8000/v1/chat/completions failed after 3 retries: connection refused")

    monkeypatch.setattr("metamod.rollout.run.main", unreachable)
    assert main(["rollout"]) == 2
    assert "connection refused" in _error_line(capsys, "rollout")


@pytest.mark.parametrize(
    "argv, match",
    [
        (["bogus"], "argument action: invalid choice: 'bogus'"),
        (["prepare", "--frce"], "unrecognized arguments: --frce"),
        ([], "the following arguments are required: action"),
        (["path", "no-such-model"], "Unknown embedded model 'no-such-model'. Valid names: smollm2-135m-instruct"),
    ],
)
def test_model_command_errors_are_one_line(argv, match, capsys):
    assert main(["model", *argv]) == 2
    assert match in _error_line(capsys, "model")


def test_shipped_eval_configs_accept_any_methods():
    """`reference_method` is left to its default (the moderator when evaluated), so other method lists work."""
    for path in sorted(Path("configs/eval").glob("*.yaml")):
        assert "reference_method: moderator" not in path.read_text(), path
    (cfg,) = parse_config([EvalConfig], ["--config", "configs/eval/sim_debate.yaml", "--methods", "majority_vote"])
    assert cfg.methods == ["majority_vote"] and cfg.reference_method is None
    (cfg,) = parse_config([EvalConfig], ["--config", "configs/eval/sim_debate.yaml"])
    assert cfg.reference_method == "moderator"


def test_the_installed_command(tmp_path):
    """A real process: exit code 2 and one stderr line; --debug prints the traceback."""
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    argv = [sys.executable, "-m", "metamod.cli", "build-dataset", "--traces", str(traces), "--output_dir",
            str(tmp_path / "ds")]  # fmt: skip
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2
    assert plain.stderr.strip().splitlines() == [plain.stderr.strip()]
    assert plain.stderr.startswith("metamod build-dataset: error: ")
    debug = subprocess.run([*argv, "--debug"], capture_output=True, text=True, timeout=300)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert "metamod.errors.InputError" in debug.stderr
