"""`metamod train` on the tiny model: GRPO + LoRA changes the adapter, saves, reloads, merges, resumes, logs."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from metamod.config import ConfigError
from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, main, train
from tests._train_data import save_dataset


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    return str(tiny_model_dir)  # the session's tiny model (tests/conftest.py)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return save_dataset(tmp_path_factory.mktemp("data") / "moderator")


def base_argv(model, data, out, *extra):
    return [
        "--model_name_or_path", model, "--dataset_path", data, "--output_dir", str(out),
        "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "8",
        "--learning_rate", "5e-3", "--beta", "0", "--lora_r", "8", "--logging_steps", "1",
        "--report_to", "none", "--seed", "0", "--save_strategy", "no", *extra,
    ]  # fmt: skip


def test_grpo_changes_adapter_then_reload_and_merge(tiny_model, dataset, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    argv = base_argv(tiny_model, dataset, out, "--max_steps", "3", "--warm_start", "true", "--warm_start_steps", "20",
                     "--warm_start_batch_size", "8", "--sample_log_steps", "1", "--sample_log_count", "2")  # fmt: skip
    assert main(argv) == 0
    before = load_file(out / "warm_start" / "adapter_model.safetensors")
    after = load_file(out / "adapter_model.safetensors")
    assert before.keys() == after.keys() and any("lora_B" in k for k in after)
    changed = [k for k in after if not torch.equal(before[k], after[k])]
    assert changed, "GRPO did not change any adapter weight"
    for name in ("adapter_config.json", "tokenizer.json", "metamod_train_config.yaml", "samples.jsonl"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["simulated"] is True and summary["warm_start"] is True
    assert summary["logged_steps"] == 3 and summary["first_logged"]["control_reward"] is not None
    sample = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert set(sample["rewards"]) == {"format_reward", "control_reward"}

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    base_weight = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    merged = PeftModel.from_pretrained(base, str(out)).merge_and_unload()
    assert not torch.equal(merged.model.layers[0].self_attn.q_proj.weight, base_weight)
    ids = torch.tensor([[1, 2, 3]])
    assert merged.generate(ids, max_new_tokens=2, do_sample=False).shape[1] == 5

    # init_adapter: GRPO starts from that warm start (a near-zero learning rate keeps it; a fresh LoRA has B = 0)
    shared = tmp_path / "from_warm_start"
    assert main(base_argv(tiny_model, dataset, shared, "--max_steps", "1", "--learning_rate", "1e-12",
                          "--init_adapter", str(out / "warm_start"), "--sample_log_steps", "0")) == 0  # fmt: skip
    started = load_file(shared / "adapter_model.safetensors")
    assert started.keys() == before.keys() and any(before[k].abs().sum() > 0 for k in before if "lora_B" in k)
    for key in before:
        torch.testing.assert_close(started[key], before[key], rtol=0, atol=1e-6)
    summary = json.loads((shared / "train_summary.json").read_text())
    assert summary["init_adapter"] == str(out / "warm_start") and summary["gold_use"] is None
    fingerprint = json.loads((shared / ".fingerprint.json").read_text())
    assert fingerprint["settings"]["init_adapter_signature"]


def test_init_adapter_refusals(tmp_path):
    from metamod.train.grpo import init_adapter_config

    with pytest.raises(ValueError, match="init_adapter replaces the warm start"):
        ModeratorGRPOConfig(dataset_path="d", per_device_train_batch_size=4, num_generations=2, report_to="none",
                            warm_start=True, init_adapter="x")  # fmt: skip
    adapter = tmp_path / "run" / "warm_start"
    adapter.mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no adapter_config.json"):
        init_adapter_config(adapter)
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="gold use"):
        init_adapter_config(adapter)
    (adapter.parent / "metamod_train_config.yaml").write_text("warm_start: true\nwarm_start_targets: reward_gold\n")
    assert init_adapter_config(adapter)["warm_start_targets"] == "reward_gold"


def test_resume_continues_step_count(tiny_model, dataset, tmp_path):
    out = tmp_path / "run"
    common = base_argv(tiny_model, dataset, out, "--save_strategy", "steps", "--save_steps", "1")
    assert main([*common, "--max_steps", "2"]) == 0
    assert (out / "checkpoint-2").is_dir()
    assert main([*common, "--max_steps", "4", "--resume_from_checkpoint", "true"]) == 0
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["global_step"] == 4 and summary["resumed"] is True
    assert (out / "checkpoint-4").is_dir()
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3, 4]


def test_wandb_offline_leaves_run_folder(tiny_model, dataset, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    out = tmp_path / "run"
    argv = base_argv(tiny_model, dataset, out, "--max_steps", "1")
    argv[argv.index("--report_to") + 1] = "wandb"
    assert main(argv) == 0
    runs = list((out / "wandb").glob("offline-run-*"))
    assert runs, f"no offline wandb run under {out / 'wandb'}"


def test_missing_columns_fail_early(tiny_model, tmp_path):
    data = save_dataset(tmp_path / "noeta", n_train=8, n_val=4, drop=("eta",))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['eta'\]"):
        main(base_argv(tiny_model, data, tmp_path / "run", "--max_steps", "1"))
    assert not (tmp_path / "run").exists()


def test_missing_dataset_and_model(tiny_model, dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="build-dataset"):
        main(base_argv(tiny_model, str(tmp_path / "nowhere"), tmp_path / "run", "--max_steps", "1"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        main(base_argv(str(tmp_path / "no_model"), dataset, tmp_path / "run", "--max_steps", "1"))


def test_bad_lora_target(tiny_model, dataset, tmp_path):
    with pytest.raises(ValueError, match="'qkv' matches no module.*q_proj"):
        main(base_argv(tiny_model, dataset, tmp_path / "run", "--lora_target_modules", "q_proj", "qkv"))
    with pytest.raises(ValueError, match="lm_head"):
        main(base_argv(tiny_model, dataset, tmp_path / "run", "--lora_target_modules", "lm_head", "q_proj"))


def test_batch_not_divisible_by_generations():
    with pytest.raises(
        ValueError, match=r"per_device_train_batch_size=6 .* num_generations=4.*per_device_train_batch_size=8"
    ):
        ModeratorGRPOConfig(dataset_path="x", per_device_train_batch_size=6, num_generations=4, report_to="none")
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        ModeratorGRPOConfig(dataset_path="x", per_device_train_batch_size=6, num_generations=1, report_to="none")


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="model_name_or_path is required"):
        ModeratorModelConfig()
    with pytest.raises(KeyError, match="Valid names: answer, control, format"):
        main(["--model_name_or_path", "m", "--dataset_path", "d", "--reward_funcs", "format", "ctrl",
              "--per_device_train_batch_size", "8", "--num_generations", "4", "--report_to", "none"])  # fmt: skip
    with pytest.raises(ValueError, match="reward_weights has 1 values"):
        main(["--model_name_or_path", "m", "--dataset_path", "d", "--reward_weights", "1.0",
              "--per_device_train_batch_size", "8", "--num_generations", "4", "--report_to", "none"])  # fmt: skip
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_name_or_path: m\nlearning_rat: 0.1\n")
    with pytest.raises(ConfigError, match="learning_rat"):
        main(["--config", str(bad)])


@pytest.mark.parametrize("name", sorted(p.name for p in Path("configs/train").glob("*.yaml")))
def test_shipped_configs_parse(name, monkeypatch):
    from metamod.config import parse_config
    from metamod.llm.tiny import TinyModelConfig

    monkeypatch.setenv("WORLD_SIZE", "1")
    args, model_args, _ = parse_config(
        [ModeratorGRPOConfig, ModeratorModelConfig, TinyModelConfig], ["--config", f"configs/train/{name}"]
    )
    assert args.dataset_path and model_args.model_name_or_path
    assert args.reward_funcs


def test_train_is_importable_function():
    assert callable(train)
