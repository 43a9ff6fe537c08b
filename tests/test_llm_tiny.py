"""The offline tiny model: build, reload, determinism, chat template, rebuild logic."""

import json

import pytest
import torch

from metamod.llm.tiny import BUILD_ARGS_FILE, TinyModelConfig, build_tiny_model, ensure_tiny_model

SMALL = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py): build_tiny_model(seed=0)


def test_reload_and_chat_template(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen3"
    assert model.config.initializer_range == 0.2 and not model.config.tie_word_embeddings
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.padding_side == "left"
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    assert len(tok) <= model.config.vocab_size == 512
    conv = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    no_gen = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
    assert not no_gen.endswith("assistant\n")
    # Protocol words are cheap to write, and byte-level BPE round-trips any text.
    assert len(tok.tokenize("CONTINUE")) == 1
    sample = "STOP <answer>42</answer> é ✓"
    assert tok.decode(tok(sample, add_special_tokens=False)["input_ids"]) == sample
    ids = tok(text, add_special_tokens=False, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_same_seed_same_files(tmp_path, tiny_dir):
    again = build_tiny_model(tmp_path / "again", seed=0)
    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    other = build_tiny_model(tmp_path / "other", seed=1)
    from safetensors.torch import load_file

    a, b = load_file(tiny_dir / "model.safetensors"), load_file(other / "model.safetensors")
    assert a["lm_head.weight"].shape == b["lm_head.weight"].shape
    assert not torch.equal(a["lm_head.weight"], b["lm_head.weight"])


def test_ensure_builds_only_when_needed(tmp_path, caplog):
    out = tmp_path / "m"
    ensure_tiny_model(out, seed=3, **SMALL)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    with caplog.at_level("INFO", logger="metamod.llm.tiny"):
        ensure_tiny_model(out, seed=3, **SMALL)
    assert "already built" in caplog.text
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    caplog.clear()
    with caplog.at_level("INFO", logger="metamod.llm.tiny"):
        ensure_tiny_model(out, seed=3, arch="llama", **SMALL)
    assert "Rebuilding" in caplog.text and "arch" in caplog.text
    assert json.loads((out / BUILD_ARGS_FILE).read_text())["arch"] == "llama"
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    caplog.clear()
    with caplog.at_level("INFO", logger="metamod.llm.tiny"):
        ensure_tiny_model(out, seed=3, arch="llama", extra_texts=["a new task's questions"], **SMALL)
    assert "corpus_sha256" in caplog.text  # new tokenizer text (or an edited template) rebuilds
    kwargs = TinyModelConfig(tiny_hidden_size=32, tiny_num_layers=1).to_kwargs()
    assert ensure_tiny_model(out, **kwargs) == out
    assert json.loads((out / BUILD_ARGS_FILE).read_text())["num_layers"] == 1
    with pytest.raises(TypeError, match="unknown argument"):
        ensure_tiny_model(out, hidden=3)


def test_extra_texts_change_tokenizer(tmp_path):
    a = build_tiny_model(tmp_path / "a", **SMALL)
    b = build_tiny_model(tmp_path / "b", extra_texts=["zebra quokka " * 50] * 20, **SMALL)
    assert (a / "tokenizer.json").read_bytes() != (b / "tokenizer.json").read_bytes()


def test_config_checks():
    assert TinyModelConfig().to_kwargs()["initializer_range"] == 0.2
    with pytest.raises(ValueError, match="divisible"):
        TinyModelConfig(tiny_hidden_size=30, tiny_num_heads=4)
    with pytest.raises(ValueError, match="arch"):
        TinyModelConfig(tiny_arch="gpt2")
