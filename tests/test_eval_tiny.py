"""End to end with real generators: the tiny model + a LoRA adapter as moderator, judge and prompted moderator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metamod.evaluate.cells import read_samples
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate

MODEL_METHODS = ["judge", "moderator_prompted", "moderator", "adjudication_only", "stopping_only", "majority_vote"]


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory, tiny_model_dir) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    base = tiny_model_dir  # the session's tiny model (tests/conftest.py)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    model.save_pretrained(root / "adapter")
    return root / "adapter"


def _config(tmp_path: Path, adapter: Path, mode: str) -> EvalConfig:
    return EvalConfig(
        methods=MODEL_METHODS,
        limit=6,
        max_rounds=3,
        output_dir=str(tmp_path / mode),
        mode=mode,
        moderator=str(adapter),
        moderator_backend_options={"device": "cpu"},
        moderator_max_tokens=8,
        judge_max_tokens=8,
        plots=False,
    )


def test_tiny_moderator_replay_equals_live(tmp_path, tiny_adapter):
    replayed = evaluate(_config(tmp_path, tiny_adapter, "replay"))
    live = evaluate(_config(tmp_path, tiny_adapter, "live"))
    assert replayed["results"] == live["results"]
    a = {r["id"]: r["methods"] for r in read_samples(tmp_path / "replay" / "samples.jsonl")}
    b = {r["id"]: r["methods"] for r in read_samples(tmp_path / "live" / "samples.jsonl")}
    assert a == b
    res = replayed["results"]["arith"]
    # the untrained tiny model never follows the protocol: every call is invalid, so it runs to T_max, no answer
    assert res["moderator"]["format_valid_rate"] == 0.0 and res["moderator"]["mean_rounds"] == 3
    assert res["moderator"]["accuracy"] == 0.0 and res["moderator"]["moderator_prompt_tokens_per_question"] > 0
    assert res["adjudication_only"]["mean_rounds"] == 3
    assert "mcnemar_p_vs_moderator" in res["majority_vote"]
    assert json.loads((tmp_path / "replay" / "results.json").read_text())["config"]["moderator"] == str(tiny_adapter)
