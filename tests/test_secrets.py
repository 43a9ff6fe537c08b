"""A Hub token never lands in a file: `metamod train` refuses --hub_token, and a run with HF_TOKEN set writes none."""

from __future__ import annotations

from pathlib import Path

import pytest

from metamod.config import ConfigError
from metamod.train.grpo import main as train_main
from tests._train_data import save_dataset

FAKE_TOKEN = "hf_FAKEsecretstest0123456789abcdefghijk"


def _files_holding(root: Path, token: str) -> list[str]:
    """Every file under ``root`` (binary ones too: training_args.bin is a pickle) whose bytes contain ``token``."""
    return [
        str(p.relative_to(root)) for p in sorted(root.rglob("*")) if p.is_file() and token.encode() in p.read_bytes()
    ]


def _argv(model: str, data: str, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path", model, "--dataset_path", data, "--output_dir", str(out),
        "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "4",
        "--lora_r", "4", "--logging_steps", "1", "--report_to", "none", "--seed", "0",
        "--push_to_hub", "true", "--hub_model_id", "org/moderator", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return save_dataset(tmp_path_factory.mktemp("data") / "moderator", n_train=16, n_val=4)


def test_hub_token_option_is_refused_before_anything_is_written(tiny_model_dir, dataset, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"hf auth login.*HF_TOKEN"):
        train_main(_argv(str(tiny_model_dir), dataset, out, "--max_steps", "1", "--hub_token", FAKE_TOKEN))
    assert not out.exists()
    assert _files_holding(tmp_path, FAKE_TOKEN) == []


def test_hub_token_on_the_command_line_is_one_line_and_written_nowhere(tiny_model_dir, dataset, tmp_path, capsys):
    from metamod.cli import main as cli_main

    out = tmp_path / "run"
    argv = _argv(str(tiny_model_dir), dataset, out, "--max_steps", "1", "--hub_token", FAKE_TOKEN)
    assert cli_main(["train", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("metamod train: error: ") and "--hub_token" in lines[0]
    assert FAKE_TOKEN not in lines[0]  # not even echoed
    assert not out.exists()
    assert _files_holding(tmp_path, FAKE_TOKEN) == []


def test_training_with_a_token_in_the_environment_writes_it_nowhere(tiny_model_dir, dataset, tmp_path, monkeypatch):
    """2 GRPO steps with push_to_hub on (the Hub calls are stubbed: no network) and a checkpoint per step."""
    from transformers import Trainer

    pushes = []
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    monkeypatch.setattr(Trainer, "init_hf_repo", lambda self, token=None: pushes.append(("init", token)))
    monkeypatch.setattr(Trainer, "_push_from_checkpoint", lambda self, folder: pushes.append(("checkpoint", folder)))
    monkeypatch.setattr(Trainer, "push_to_hub", lambda self, *a, **k: pushes.append(("push", k.get("token"))))
    out = tmp_path / "run"
    argv = _argv(str(tiny_model_dir), dataset, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1")
    assert train_main(argv) == 0
    assert ("init", None) in pushes and any(kind == "checkpoint" for kind, _ in pushes)  # the push path ran
    written = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in written) and len(written) > 10
    assert _files_holding(out, FAKE_TOKEN) == []
    assert _files_holding(tmp_path, FAKE_TOKEN) == []
