"""`metamod export` checks what it ships: the adapter loads, a failed export leaves nothing, no token is published."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from metamod.config import ConfigError
from metamod.llm.adapter_files import check_adapter, lora_problems
from metamod.train import hub
from metamod.train.export import export_adapter, main, merge_adapter

FAKE_TOKEN = "hf_FAKEexporttoken0123456789abcdefghij"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, tiny_model_dir):
    """A LoRA adapter of the session's tiny model (r=4 on q_proj/v_proj, v_proj at rank 2) + its tokenizer."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("checks")
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], rank_pattern={"v_proj": 2},
                      init_lora_weights=False)  # fmt: skip
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora)
    model.save_pretrained(root / "adapter")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(root / "adapter")
    return root / "adapter"


def _copy(adapter, tmp_path):
    return shutil.copytree(adapter, tmp_path / "adapter")


def _rewrite(folder, change):
    path = folder / "adapter_model.safetensors"
    save_file(change(load_file(path)), str(path))


def test_a_good_adapter_passes(adapter):
    shapes = check_adapter(adapter)
    assert len(shapes) == 8 and all(("lora_A" in k) or ("lora_B" in k) for k in shapes)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda raw: b"\0" * len(raw),  # overwritten
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: b"",  # empty
    ],
    ids=["zeros", "truncated", "empty"],
)
def test_corrupt_weights_fail_before_anything_is_written(adapter, tmp_path, corrupt, capsys):
    folder = _copy(adapter, tmp_path)
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(corrupt(weights.read_bytes()))
    with pytest.raises(ConfigError, match="not a readable safetensors file") as err:
        export_adapter(folder, tmp_path / "out")
    assert str(weights) in str(err.value)
    for merge in (False, True):
        with pytest.raises(ConfigError):
            export_adapter(folder, tmp_path / "out", merge=merge)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["adapter"]  # no hidden staging folder left either

    from metamod.cli import main as cli_main

    assert cli_main(["export", "--adapter", str(folder), "--output_dir", str(tmp_path / "cli"), "--merge"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "metamod export" in lines[0] and "adapter_model.safetensors" in lines[0]
    assert not (tmp_path / "cli").exists()


def test_rank_and_names_must_match_the_config(adapter, tmp_path):
    folder = _copy(adapter, tmp_path)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    with pytest.raises(ConfigError, match=r"q_proj: lora_A.weight has shape \(4, 64\) but r = 8"):
        export_adapter(folder, tmp_path / "out")
    (folder / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["q_proj"]}))
    with pytest.raises(ConfigError, match=r"v_proj: adapted but not in target_modules \[q_proj\]"):
        check_adapter(folder)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    _rewrite(
        folder, lambda t: {k: v for k, v in t.items() if not k.endswith("layers.1.self_attn.q_proj.lora_B.weight")}
    )
    with pytest.raises(ConfigError, match="layers.1.self_attn.q_proj: has lora_A but no lora_B"):
        check_adapter(folder)
    _rewrite(folder, lambda t: {k.replace("lora_", "lorx_"): v for k, v in t.items()})
    with pytest.raises(ConfigError, match="no LoRA weights"):
        check_adapter(folder)
    assert not (tmp_path / "out").exists()


def test_nan_weights_are_refused(adapter, tmp_path):
    folder = _copy(adapter, tmp_path)
    _rewrite(folder, lambda t: {k: torch.full_like(v, float("nan")) if "lora_B" in k else v for k, v in t.items()})
    with pytest.raises(ConfigError, match="NaN or inf"):
        export_adapter(folder, tmp_path / "out")


def test_lora_problems_handles_rank_pattern_and_regex_targets():
    shapes = {
        "base_model.model.layers.0.v_proj.lora_A.weight": (2, 8),
        "base_model.model.layers.0.v_proj.lora_B.weight": (8, 2),
    }
    assert lora_problems(shapes, {"r": 4, "rank_pattern": {"v_proj": 2}, "target_modules": ".*v_proj"}) == []
    assert lora_problems(shapes, {"r": 4, "target_modules": ["v_proj"]})[0].endswith(
        "(the rank must be its first dimension)"
    )
    assert lora_problems(shapes, {"peft_type": "IA3", "r": 4}) == []  # other PEFT types: only the file is checked


def test_failed_merge_leaves_no_partial_folder(adapter, tmp_path, monkeypatch, tiny_model_dir):
    from transformers import PreTrainedModel

    def half_then_fail(self, save_directory, *args, **kwargs):
        (save_directory / "config.json").write_text("{}")  # something was written before the failure
        raise OSError("No space left on device")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        merge_adapter(adapter, str(tiny_model_dir), tmp_path / "merged")
    for merge_only in (False, True):
        with pytest.raises(OSError, match="No space left"):
            export_adapter(adapter, tmp_path / "out", merge=True, merge_only=merge_only)
    assert list(tmp_path.iterdir()) == []  # neither the folders nor hidden staging folders


def test_failed_overwrite_keeps_the_old_export(adapter, tmp_path, monkeypatch):
    out = export_adapter(adapter, tmp_path / "out")
    before = sorted(p.name for p in out.iterdir())
    from metamod.train import model_card

    monkeypatch.setattr(model_card, "build_model_card", lambda **kw: (_ for _ in ()).throw(RuntimeError("card")))
    with pytest.raises(RuntimeError, match="card"):
        export_adapter(adapter, out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_token_in_the_run_config_is_masked_in_the_export(adapter, tmp_path):
    folder = _copy(adapter, tmp_path)
    config = {"learning_rate": 0.1, "hub_token": FAKE_TOKEN, "push_to_hub": True}
    (folder / "metamod_train_config.yaml").write_text(yaml.safe_dump(config))
    out = export_adapter(folder, tmp_path / "out")
    assert yaml.safe_load((out / "metamod_train_config.yaml").read_text())["hub_token"] == "<HUB_TOKEN>"
    assert hub.find_secrets(out, [FAKE_TOKEN]) == []
    # a token anywhere else in a shipped file fails the export, and nothing is left behind
    (folder / "train_summary.json").write_text(json.dumps({"note": f"pushed with {FAKE_TOKEN}"}))
    with pytest.raises(ConfigError, match=r"train_summary.json \(a Hub token"):
        export_adapter(folder, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_push_refuses_files_holding_a_token(adapter, tmp_path, monkeypatch):
    import huggingface_hub

    out = export_adapter(adapter, tmp_path / "out")
    (out / "notes.bin").write_bytes(b"\x80\x04pickle" + FAKE_TOKEN.encode() + b"\x00")
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: pytest.fail("nothing may be uploaded"))
    with pytest.raises(hub.HubUploadError, match=r"notes.bin \(a Hub token"):
        hub.push_to_hub(out, "org/moderator", dry_run=True)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_short")  # the token in use, whatever its shape
    monkeypatch.setattr(hub, "_offline", lambda: False)
    (out / "notes.bin").write_text("token=hf_short\n")
    with pytest.raises(hub.HubUploadError, match=r"notes.bin \(the Hub token in use\)"):
        hub.push_to_hub(out, "org/moderator")


def test_push_checks_the_adapter_it_uploads(adapter, tmp_path):
    out = export_adapter(adapter, tmp_path / "out")
    (out / "adapter_model.safetensors").write_bytes(b"junk")
    with pytest.raises(ConfigError, match="not a readable safetensors file"):
        hub.push_to_hub(out, "org/moderator", dry_run=True)
    argv = ["--adapter", str(adapter), "--output_dir", str(tmp_path / "cli"), "--push_to_hub", "--repo_id", "o/m",
            "--dry_run"]  # fmt: skip
    assert main(argv) == 0  # a good adapter previews fine
