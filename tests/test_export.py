"""`metamod export`: adapter folder -> export (adapter, tokenizer, model card, merged weights) -> Hub upload."""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
import torch
import yaml

from metamod.evaluate.results import load_results
from metamod.llm.adapter_files import resolve_adapter_dir
from metamod.train import export as export_mod
from metamod.train.export import export_adapter, main
from metamod.train.hub import HubUploadError, push_to_hub
from metamod.train.model_card import dataset_statistics


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir):
    """A training output dir as `metamod train` leaves it: adapter + tokenizer + summary + resolved config."""
    from datasets import Dataset, DatasetDict
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("export")
    base_dir = tiny_model_dir  # the session's tiny model (tests/conftest.py)
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    lora = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
        init_lora_weights=False,  # random B: the adapter really changes the logits
    )  # fmt: skip
    torch.manual_seed(1)
    model = get_peft_model(base, lora)
    run = root / "run"
    model.save_pretrained(run)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(run)

    rows = [  # 3 questions x 2 rounds; q1 covered at round 1 only, q2 never
        {"id": q, "round": r, "eta": e, "simulated": True, "task": "arith"}
        for q, etas in {"q0": [1, 1], "q1": [0, 1], "q2": [0, 0]}.items()
        for r, e in enumerate(etas)
    ]
    data = root / "data"
    DatasetDict({"train": Dataset.from_list(rows[:4]), "validation": Dataset.from_list(rows[4:])}).save_to_disk(data)
    config = {
        "learning_rate": 5e-5, "num_generations": 4, "beta": 0.04, "loss_type": "dapo", "max_steps": 7,
        "reward_funcs": ["format", "control"], "reward_weights": [1.0, 2.0], "dataset_path": str(data),
    }  # fmt: skip
    (run / "metamod_train_config.yaml").write_text(yaml.safe_dump(config))
    summary = {  # the shape metamod.train.grpo writes
        "global_step": 7, "simulated": True, "dataset": str(data), "reward_change": 0.5,
        "first_logged": {"step": 1, "reward": 0.75}, "last_logged": {"step": 7, "reward": 1.25},
    }  # fmt: skip
    (run / "train_summary.json").write_text(json.dumps(summary))
    return {"root": root, "base": base_dir, "run": run, "data": data}


def _logits(model, base_dir):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(base_dir)("STOP <answer>42</answer> CONTINUE", return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits


def _peft_logits(base_dir, adapter_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), str(adapter_dir)).eval()
    return _logits(model, base_dir)


@pytest.fixture
def results_file(tmp_path):
    path = tmp_path / "results.json"
    results = {
        "arith": {
            "meta_moderator": {"accuracy": 0.81, "accuracy_stderr": 0.02, "mean_rounds": 1.7, "accuracy_ci_low": 0.7},
            "majority_vote": {"accuracy": 0.74, "accuracy_stderr": 0.03, "mean_rounds": 5.0, "accuracy_ci_low": 0.6},
        }
    }
    labels = {"meta_moderator": "Meta-Moderator", "majority_vote": "MAD (Majority Voting)"}
    path.write_text(json.dumps({"results": results, "labels": labels, "config": {"debaters": "simulated"}}))
    return path


def test_export_is_complete_and_loads_back_with_same_logits(run_dir, tmp_path):
    out = export_adapter(run_dir["run"], tmp_path / "out")
    names = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "tokenizer.json"} <= names
    assert {"train_summary.json", "metamod_train_config.yaml"} <= names
    original = _peft_logits(run_dir["base"], run_dir["run"])
    exported = _peft_logits(run_dir["base"], out)
    assert torch.equal(original, exported)
    from transformers import AutoModelForCausalLM

    base_only = _logits(AutoModelForCausalLM.from_pretrained(run_dir["base"]), run_dir["base"])
    assert not torch.allclose(base_only, exported)  # the adapter is not a no-op, so equality above means something


def test_model_card_contents(run_dir, tmp_path, results_file):
    from huggingface_hub import ModelCard

    out = export_adapter(run_dir["run"], tmp_path / "out", results_path=results_file)
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "peft"
    assert card.data.base_model == str(run_dir["base"])
    for tag in ("meta-moderator", "grpo", "lora", "trl", "multi-agent-debate", "simulated"):
        assert tag in card.data.tags
    text = card.text
    assert "CONTINUE" in text and "<answer>" in text  # output protocol
    assert "**format**" in text and "**control**" in text and "Weight 2." in text
    assert "**answer**" not in text  # not used in this run
    assert "| r (rank) | 4 |" in text and "| alpha | 8 |" in text and "q_proj, v_proj" in text
    assert "| num_generations (group size) | 4 |" in text and "| loss_type | dapo |" in text
    assert "| beta (KL coefficient) | 0.04 |" in text and "| max_steps | 7 |" in text
    # eta statistics read from the dataset recorded in the config: 6 rows, 3 questions, coverage 2/3
    assert "| rows | 6 |" in text and "| questions | 3 |" in text and "| 0.6667 |" in text
    assert "| 1 | 0.6667 | 3 |" in text  # round 1: eta rate 2/3 over 3 rows
    assert "**simulated**" in text
    assert "| steps trained | 7 |" in text and "| last_logged | step=7, reward=1.25 |" in text
    assert "| Task | Method | accuracy | mean_rounds |" in text  # the headline metrics only
    assert "| arith | Meta-Moderator (`meta_moderator`) | 0.81 ± 0.02 | 1.7 |" in text
    assert "(simulated debaters)" in text
    assert 'LoRARequest("moderator", 1, adapter_path)' in text and "enable_lora=True" in text
    assert "metamod eval" in text
    assert (out / "results.json").is_file()


def test_model_card_python_snippet_runs(run_dir, tmp_path):
    out = export_adapter(run_dir["run"], tmp_path / "out")
    snippet = re.search(r"```python\n(.*?)```", (out / "README.md").read_text(), re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(snippet, "model_card_snippet", "exec"), namespace)  # the tiny model: loads, generates, parses
    assert namespace["decision"].action in {"STOP", "CONTINUE", None}


def test_merge_writes_weights_equal_to_base_plus_adapter(run_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    out = export_adapter(run_dir["run"], tmp_path / "out", merge=True, merge_dtype="float32")
    merged_dir = out / "merged"
    assert (merged_dir / "config.json").is_file() and (merged_dir / "tokenizer.json").is_file()
    assert not (merged_dir / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir)
    expected = _peft_logits(run_dir["base"], run_dir["run"])
    torch.testing.assert_close(_logits(merged, run_dir["base"]), expected, atol=1e-4, rtol=1e-4)
    assert "merged" in (out / "README.md").read_text()

    only = export_adapter(run_dir["run"], tmp_path / "only", merge_only=True)
    assert (only / "config.json").is_file() and not (only / "adapter_config.json").exists()
    assert "library_name: transformers" in (only / "README.md").read_text()


def test_missing_adapter_config_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"adapter_config\.json is missing") as err:
        export_adapter(tmp_path, tmp_path / "out")
    assert str(tmp_path) in str(err.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_adapter_dir(tmp_path / "nope")
    assert not (tmp_path / "out").exists()


def test_checkpoints_only_run_dir(run_dir, tmp_path):
    run = tmp_path / "run"
    for step in (2, 10):
        ckpt = run / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copy2(run_dir["run"] / name, ckpt / name)
    with pytest.raises(FileNotFoundError, match=r"--checkpoint latest \(= checkpoint-10\)"):
        resolve_adapter_dir(run)
    assert resolve_adapter_dir(run, "latest") == run / "checkpoint-10"
    assert resolve_adapter_dir(run, "2") == run / "checkpoint-2"
    with pytest.raises(FileNotFoundError, match="available: checkpoint-2, checkpoint-10"):
        resolve_adapter_dir(run, "checkpoint-5")
    out = export_adapter(run, tmp_path / "out", checkpoint="latest")
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()  # from the base


def test_missing_base_and_bad_results_fail_before_writing(run_dir, tmp_path):
    adapter = tmp_path / "adapter"
    shutil.copytree(run_dir["run"], adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "moved_away" / "tiny")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="no longer exists; pass --base_model"):
        export_adapter(adapter, tmp_path / "out")
    out = export_adapter(adapter, tmp_path / "out", base_model=str(run_dir["base"]))  # the override fixes it
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(run_dir["base"])

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"arith": {"majority": 0.5}}))
    with pytest.raises(ValueError, match=r"results\['arith'\]\['majority'\] must map metric"):
        export_adapter(run_dir["run"], tmp_path / "out2", results_path=bad)
    assert not (tmp_path / "out2").exists()
    with pytest.raises(FileExistsError, match="--overwrite"):
        export_adapter(run_dir["run"], out)
    assert export_adapter(run_dir["run"], out, overwrite=True) == out  # an earlier export may be replaced
    (tmp_path / "keep" / "notes.txt").parent.mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="does not look like an earlier export"):
        export_adapter(run_dir["run"], tmp_path / "keep", overwrite=True)
    assert (tmp_path / "keep" / "notes.txt").read_text() == "precious"


def test_dataset_statistics(run_dir):
    stats = dataset_statistics(run_dir["data"])
    assert stats["rows"] == 6 and stats["questions"] == 3 and stats["splits"] == {"train": 4, "validation": 2}
    assert stats["eta_rate_per_round"] == {0: 1 / 3, 1: 2 / 3}
    assert stats["coverage"] == pytest.approx(2 / 3) and stats["simulated"] is True
    assert load_results is not None


class _ForbiddenApi:
    def __init__(self, *args, **kwargs):
        raise AssertionError("HfApi must not be constructed here")


def test_push_without_token_is_a_clear_error(run_dir, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(huggingface_hub, "HfApi", _ForbiddenApi)
    out = export_adapter(run_dir["run"], tmp_path / "out")
    with pytest.raises(HubUploadError, match="hf auth login"):
        push_to_hub(out, "org/moderator")
    argv = [
        "--adapter",
        str(run_dir["run"]),
        "--output_dir",
        str(tmp_path / "cli"),
        "--push_to_hub",
        "--repo_id",
        "o/m",
    ]
    from metamod.cli import main as cli

    assert cli(["export", *argv]) == 2  # R7: the one error path (exit 2, one line), not export's own exit 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("metamod export: error: no Hugging Face token"), err
    assert not (tmp_path / "cli").exists()  # checked before any export work


def test_push_offline_and_network_errors(run_dir, tmp_path, monkeypatch):
    import huggingface_hub

    out = export_adapter(run_dir["run"], tmp_path / "out")
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_fake")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "HfApi", _ForbiddenApi)
    with pytest.raises(HubUploadError, match="offline mode is on"):
        push_to_hub(out, "org/moderator")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))
            if repo_id == "org/down":
                raise httpx.ConnectError("no route to host")

        def upload_folder(self, **kwargs):
            calls.append(("upload_folder", kwargs))
            return "https://huggingface.co/org/moderator/commit/abc"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    with pytest.raises(HubUploadError, match="could not reach the Hugging Face Hub"):
        push_to_hub(out, "org/down")
    calls.clear()
    result = push_to_hub(out, "org/moderator", private=True)
    assert calls[0] == ("init", "hf_fake")
    assert calls[1] == ("create_repo", "org/moderator", {"private": True, "repo_type": "model", "exist_ok": True})
    assert calls[2][1]["folder_path"] == str(out) and calls[2][1]["repo_id"] == "org/moderator"
    assert result.url.endswith("/commit/abc") and not result.dry_run


def test_dry_run_lists_files_and_uploads_nothing(run_dir, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", _ForbiddenApi)
    monkeypatch.setattr(export_mod, "check_hub_ready", lambda: pytest.fail("dry run must not need the Hub"))
    out = export_adapter(run_dir["run"], tmp_path / "out")
    result = push_to_hub(out, "org/moderator", dry_run=True)
    sizes = dict(result.files)
    assert sizes["adapter_model.safetensors"] == (out / "adapter_model.safetensors").stat().st_size
    assert "README.md" in sizes and result.url is None and result.dry_run

    argv = ["--adapter", str(run_dir["run"]), "--output_dir", str(tmp_path / "cli"), "--push_to_hub",
            "--repo_id", "org/moderator", "--dry_run"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "would upload" in printed and "org/moderator" in printed and "adapter_model.safetensors" in printed
    card = (tmp_path / "cli" / "README.md").read_text()
    assert 'snapshot_download("org/moderator")' in card  # the card is written for the Hub repo


def test_config_checks():
    with pytest.raises(ValueError, match="merge_dtype must be one of"):
        export_mod.ExportConfig(adapter="a", output_dir="b", merge_dtype="int4")
    with pytest.raises(ValueError, match="dry_run previews a Hub upload"):
        export_mod.ExportConfig(adapter="a", output_dir="b", dry_run=True)
    with pytest.raises(ValueError, match="not a Hub repo id"):
        export_mod.ExportConfig(adapter="a", output_dir="b", push_to_hub=True, repo_id="a/b/c")
    assert export_mod.ExportConfig(adapter="a", output_dir="b", merge_only=True).merge is True


def test_cli_dispatch_reports_missing_adapter(tmp_path, capsys):
    from metamod.cli import main as cli_main

    assert cli_main(["export", "--adapter", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "adapter folder" in err and "does not exist" in err
    assert cli_main(["export"]) == 2
    assert "needs --adapter, --output_dir" in capsys.readouterr().err


@pytest.mark.slow
def test_export_a_real_training_run(tmp_path):
    """`metamod train` (2 GRPO steps on the tiny model) -> `metamod export` of the run and of its last checkpoint."""
    from datasets import Dataset, DatasetDict

    from metamod.rollout.state import moderator_messages
    from metamod.train.grpo import main as train_main

    rows = [
        dict(prompt=moderator_messages(f"What is {q}+{r}?", [f"<answer>{q + r}</answer>", f"<answer>{q}</answer>"],
                                       final=r == 2),
             eta=int(r >= q % 3), gold=str(q + r), kind="number", round=r, is_final_round=r == 2, id=f"q{q}",
             task="arith", answers=[str(q + r), str(q)], num_agents=2, simulated=True)
        for q in range(6) for r in range(3)
    ]  # fmt: skip
    DatasetDict(train=Dataset.from_list(rows[:12]), validation=Dataset.from_list(rows[12:])).save_to_disk(
        tmp_path / "data"
    )
    run = tmp_path / "run"
    argv = ["--dataset_path", str(tmp_path / "data"), "--output_dir", str(run), "--model_name_or_path",
            str(tmp_path / "tiny"), "--build_tiny_model", "true", "--max_steps", "2", "--per_device_train_batch_size",
            "4", "--num_generations", "2", "--max_completion_length", "8", "--report_to", "none", "--save_steps", "1",
            "--lora_r", "4", "--lora_alpha", "8"]  # fmt: skip
    assert train_main(argv) == 0
    out = export_adapter(run, tmp_path / "out", merge=True)
    text = (out / "README.md").read_text()
    assert "| steps trained | 2 |" in text and "| rows | 18 |" in text and "simulated" in text
    assert torch.equal(_peft_logits(tmp_path / "tiny", run), _peft_logits(tmp_path / "tiny", out))
    ckpt = export_adapter(run, tmp_path / "ckpt", checkpoint="latest")
    assert (ckpt / "adapter_model.safetensors").read_bytes() == (
        run / "checkpoint-2" / "adapter_model.safetensors"
    ).read_bytes()
