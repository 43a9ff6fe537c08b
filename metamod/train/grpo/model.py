"""The policy ``metamod train`` starts from: the base model path (embedded alias or tiny model, LoRA targets checked),
the SFT warm-start adapter or an ``init_adapter`` from another run, and the base model's alias recorded in the
saved adapter."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from metamod.llm.adapter_files import ADAPTER_CONFIG, read_adapter_config
from metamod.llm.tiny import TinyModelConfig
from metamod.train import common
from metamod.train.grpo.config import ModeratorModelConfig
from metamod.train.run_folder import CONFIG_FILE
from metamod.train.sft import WARM_START_DIR

logger = logging.getLogger(__name__)


def prepare_model_path(
    model_args: ModeratorModelConfig, tiny_args: TinyModelConfig | None, *, trust_remote_code: bool = False
) -> str:
    """Build the tiny model when asked (logged), then check the path and the LoRA targets on a meta-device model."""
    from metamod.llm.embedded import resolve_model_ref

    path = resolve_model_ref(model_args.model_name_or_path)  # an embedded alias -> its prepared folder
    if model_args.build_tiny_model:
        from metamod.llm.tiny import ensure_tiny_model

        tiny_args = tiny_args or TinyModelConfig()
        path = str(ensure_tiny_model(path, **tiny_args.to_kwargs()))
    if model_args.use_peft:
        common.check_lora_targets(path, model_args.lora_target_modules, trust_remote_code=trust_remote_code)
    else:
        common.module_names(path, trust_remote_code=trust_remote_code)
    return path


def record_base_alias(adapter_dir: str | Path, model_name_or_path: str) -> None:
    """Name an embedded base model by its alias in ``adapter_config.json`` (not by this machine's cache folder).

    Then ``metamod eval --moderator <adapter>`` finds the base on any machine with metamod installed.
    """
    from metamod.llm.embedded import embedded_name_of, is_embedded

    config_path = Path(adapter_dir) / ADAPTER_CONFIG
    if not is_embedded(model_name_or_path) or not config_path.is_file():
        return
    config = read_adapter_config(Path(adapter_dir))
    config["base_model_name_or_path"] = embedded_name_of(model_name_or_path)
    from metamod.files import atomic_write_json

    atomic_write_json(config_path, config, indent=2, sort_keys=True)  # a crash keeps the old, loadable file


def warm_started_model(args, model_args, model_path, peft_config, train_ds, tokenizer, model_init_kwargs):
    """Run the SFT warm start (or reuse its saved adapter) and return the trainable PEFT model."""
    from metamod.train.sft import run_warm_start

    warm_dir = Path(args.output_dir) / WARM_START_DIR
    if (warm_dir / ADAPTER_CONFIG).is_file():
        logger.info("Warm start: reusing the adapter in %s", warm_dir)
    else:
        run_warm_start(
            model_name_or_path=model_path,
            peft_config=peft_config,
            dataset=train_ds,
            output_dir=warm_dir,
            max_steps=args.warm_start_steps,
            learning_rate=args.warm_start_learning_rate,
            batch_size=args.warm_start_batch_size,
            max_examples=args.warm_start_max_examples,
            max_length=(args.max_prompt_tokens or 0) + (args.max_completion_length or 0) or None,
            seed=args.seed,
            use_cpu=args.use_cpu,
            bf16=bool(args.bf16),
            model_init_kwargs=model_init_kwargs or None,
            tokenizer=tokenizer,
            targets=args.warm_start_targets,
            answer_reward=bool({"answer", "outcome"} & set(args.reward_funcs)),
            outcome_round_cost=args.outcome_round_cost if _outcome_decides(args.reward_funcs) else None,
        )
    return trainable_adapter(args, model_path, warm_dir, model_init_kwargs)


def trainable_adapter(args, model_path, adapter_dir: Path, model_init_kwargs):
    """The base model with the LoRA adapter in ``adapter_dir``, trainable."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    kwargs = dict(model_init_kwargs)
    dtype = kwargs.pop("dtype", "float32")
    kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
    base = AutoModelForCausalLM.from_pretrained(model_path, trust_remote_code=args.trust_remote_code, **kwargs)
    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)


def init_adapter_config(adapter: str | os.PathLike) -> dict[str, Any]:
    """The ``metamod_train_config.yaml`` of the run an adapter folder belongs to (in it, or its parent).

    Raises:
        ConfigError: not a LoRA adapter folder, or no metamod run config beside it (its gold use would be unknown).
    """
    import yaml

    from metamod.config import ConfigError

    folder = Path(adapter)
    if not (folder / ADAPTER_CONFIG).is_file():
        raise ConfigError(f"init_adapter: {folder} holds no {ADAPTER_CONFIG} (expected a LoRA adapter folder)")
    for candidate in (folder / CONFIG_FILE, folder.parent / CONFIG_FILE):
        if candidate.is_file():
            return yaml.safe_load(candidate.read_text()) or {}
    raise ConfigError(
        f"init_adapter: no {CONFIG_FILE} in {folder} or its parent, so what the adapter learned from (its gold use) "
        "is unknown; use a metamod run folder or its warm_start/"
    )


def _outcome_decides(reward_funcs: list[str]) -> bool:
    """Whether the outcome reward, not eta, decides the warm start's reward targets (outcome without control)."""
    return "outcome" in reward_funcs and "control" not in reward_funcs
