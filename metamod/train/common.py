"""Checks and data helpers shared by GRPO training and its warm start (cheap, run before any expensive work).

>>> suggest_batch_size(6, 4)
8
>>> lora_target_problems(["q_proj", "nope"], ["model.layers.0.self_attn.q_proj", "lm_head"])
["LoRA target module 'nope' matches no module of the model"]
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metamod.llm.hf import looks_local

logger = logging.getLogger(__name__)

#: columns every moderator training dataset must have (docs/contracts.md)
REQUIRED_COLUMNS = ("prompt", "eta")


def suggest_batch_size(batch_size: int, num_generations: int) -> int:
    """The smallest multiple of ``num_generations`` that is >= ``batch_size``."""
    return max(num_generations, -(-batch_size // num_generations) * num_generations)


def module_names(model_name_or_path: str, *, trust_remote_code: bool = False) -> list[str]:
    """Names of every module of a model, built on the meta device (no weights loaded, cheap even for 8B).

    Raises:
        FileNotFoundError: the path does not exist or the Hub id cannot be resolved (offline, typo).
    """
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    if looks_local(model_name_or_path) and not Path(model_name_or_path).expanduser().is_dir():
        raise FileNotFoundError(
            f"model_name_or_path {model_name_or_path!r} does not exist. Give a model folder or a Hub id, or set "
            "build_tiny_model=true to build the offline tiny model there."
        )
    try:
        config = AutoConfig.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise FileNotFoundError(
            f"Could not load the model config of {model_name_or_path!r}: {err}. Check the path / Hub id (and "
            "network or HF_HUB_OFFLINE with a populated cache)."
        ) from err
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return [name for name, _ in model.named_modules() if name]


def lora_target_problems(target_modules: str | Sequence[str] | None, names: Sequence[str]) -> list[str]:
    """Problems with LoRA target modules against a model's module names (empty when fine).

    A list entry matches a module whose name equals it or ends with ``.<entry>`` (PEFT's rule); a string other than
    ``"all-linear"`` is a regular expression that must fully match some module name.
    """
    if target_modules is None or target_modules == "all-linear":
        return []
    if isinstance(target_modules, str):
        if not any(re.fullmatch(target_modules, n) for n in names):
            return [f"LoRA target regex {target_modules!r} matches no module of the model"]
        return []
    problems = []
    for target in target_modules:
        if target == "lm_head":
            problems.append("LoRA cannot target 'lm_head'; list it in lora_modules_to_save to train it fully")
        elif not any(n == target or n.endswith("." + target) for n in names):
            problems.append(f"LoRA target module {target!r} matches no module of the model")
    return problems


def check_lora_targets(model_name_or_path: str, target_modules: Any, *, trust_remote_code: bool = False) -> None:
    """Fail early (before loading weights) when a LoRA target module is missing from the model."""
    names = module_names(model_name_or_path, trust_remote_code=trust_remote_code)
    problems = lora_target_problems(target_modules, names)
    if problems:
        leaves = sorted({n.rsplit(".", 1)[-1] for n in names if not n.rsplit(".", 1)[-1].isdigit()})
        raise ValueError(
            f"{'; '.join(problems)}. Module names in {model_name_or_path}: {', '.join(leaves)}. Use some of these "
            "or lora_target_modules=all-linear."
        )


def load_split(dataset_path: str, split: str):
    """Load one split of a moderator dataset: a ``save_to_disk`` folder or a Hub dataset id.

    Raises:
        FileNotFoundError: the folder is missing (and the name is not a Hub id), or the split is absent.
    """
    from datasets import DatasetDict, load_dataset, load_from_disk

    path = Path(dataset_path).expanduser()
    if path.is_dir():
        data = load_from_disk(str(path))
    elif looks_local(dataset_path) or not dataset_path.count("/") == 1:
        raise FileNotFoundError(
            f"dataset_path {dataset_path!r} does not exist. Build it with `metamod build-dataset` (or set "
            "build_dataset_config to build it automatically), or give a Hub dataset id 'org/name'."
        )
    else:
        data = load_dataset(dataset_path)
    if isinstance(data, DatasetDict):
        if split not in data:
            raise FileNotFoundError(f"dataset {dataset_path!r} has splits {list(data)}, not {split!r}")
        return data[split]
    return data


def check_columns(dataset, *, where: str, required: Sequence[str] = REQUIRED_COLUMNS) -> None:
    """Fail when a moderator dataset lacks a required column or has an unusable ``prompt``/``eta``."""
    missing = [c for c in required if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{where} lacks column(s) {missing} (has {dataset.column_names}). A moderator dataset needs "
            f"{list(required)} (see docs/contracts.md); build one with `metamod build-dataset`."
        )
    if len(dataset) == 0:
        from metamod.errors import InputError

        raise InputError(
            f"{where} is empty (0 rows); expected at least 1 row. Rebuild the dataset with `metamod build-dataset "
            "--traces <traces.jsonl>` from traces that hold debates, and check the options that filter rows "
            "(build-dataset's validation_fraction for the validation split; train's max_prompt_tokens, "
            "max_train_examples)"
        )
    first = dataset[0]
    prompt = first["prompt"]
    if not (isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) and "content" in prompt[0]):
        raise ValueError(
            f"{where} row 0: 'prompt' must be a list of {{'role', 'content'}} messages, got {prompt!r:.80}"
        )
    bad = [i for i, e in enumerate(dataset["eta"]) if e not in (0, 1)]
    if bad:
        raise ValueError(f"{where} row {bad[0]}: 'eta' must be 0 or 1, got {dataset['eta'][bad[0]]!r}")


def prompt_lengths(dataset, tokenizer) -> list[int]:
    """Token count of each row's chat-formatted prompt (with the generation prompt)."""
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in dataset["prompt"]]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def drop_long_prompts(dataset, tokenizer, max_prompt_tokens: int | None, *, where: str):
    """Drop rows whose prompt is longer than ``max_prompt_tokens`` (TRL no longer truncates prompts).

    Dropping (rather than cutting) keeps every prompt a complete debate state; the count is logged.
    """
    if max_prompt_tokens is None:
        return dataset
    lengths = prompt_lengths(dataset, tokenizer)
    keep = [i for i, n in enumerate(lengths) if n <= max_prompt_tokens]
    if not keep:
        raise ValueError(
            f"{where}: every prompt is longer than max_prompt_tokens={max_prompt_tokens} (shortest "
            f"{min(lengths)} tokens); raise max_prompt_tokens"
        )
    if len(keep) < len(lengths):
        logger.warning(
            "%s: dropped %d of %d rows with prompts over max_prompt_tokens=%d (longest %d tokens)",
            where,
            len(lengths) - len(keep),
            len(lengths),
            max_prompt_tokens,
            max(lengths),
        )
        dataset = dataset.select(keep)
    return dataset


def check_dataset_options(dataset_path: str, options: dict[str, Any]) -> list[str]:
    """Refuse a local dataset whose recorded build options (``build_summary.json``) differ from ``options``.

    A paper train config names the rows it must train on (``dataset_*``: one template on every snapshot, the first N
    agents, no validation split); a dataset built otherwise would train another method without an error, so it is
    refused, with the rebuild command.

    Returns:
        ``[]`` when they agree, or when the dataset records nothing (a Hub dataset, or one built elsewhere).

    Raises:
        ConfigError: naming each differing option, its recorded and asked values, and the fix.
    """
    summary_path = Path(dataset_path).expanduser() / "build_summary.json"
    try:
        recorded = json.loads(summary_path.read_text()).get("options")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(recorded, dict):
        return []
    differ = sorted(k for k, v in options.items() if k in recorded and recorded[k] != v)
    if differ:
        from metamod.errors import ConfigError

        raise ConfigError(
            f"{dataset_path} was built with {', '.join(f'{k}={recorded[k]!r}' for k in differ)}, but this config "
            f"asks for {', '.join(f'{k}={options[k]!r}' for k in differ)} (dataset_* options). Rebuild it: "
            f"`metamod build-dataset --traces <rollout> --output_dir {dataset_path} "
            + " ".join(f"--{k} {options[k]}" for k in differ)
            + "` (or set the config's dataset_* options to what it was built with)"
        )
    return differ


def build_missing_dataset(dataset_path: str, *, rollout_config: str, **build_options: Any) -> Path:
    """Build a moderator dataset at ``dataset_path``: run the rollout config, then the dataset builder.

    Uses the rollout stage's own entry points (``metamod.rollout.run.rollout`` with the YAML parsed exactly as
    ``metamod rollout --config`` would, then ``metamod.rollout.snapshots.build_dataset``). The rollout resumes, so
    an interrupted build continues where it stopped.

    Args:
        dataset_path: where to save the ``DatasetDict``.
        rollout_config: a rollout YAML (e.g. ``configs/rollout/sim_arith.yaml``).
        **build_options: options of :func:`metamod.rollout.snapshots.build_dataset` (``validation_fraction``,
            ``single_template``, ``keep_agents``, ...).

    Returns:
        ``dataset_path`` as a ``Path``.
    """
    from metamod.config import parse_config
    from metamod.rollout.run import RolloutConfig, moved_keys, rollout
    from metamod.rollout.snapshots import build_dataset

    if not Path(rollout_config).is_file():
        raise FileNotFoundError(
            f"build_dataset_config {rollout_config!r} does not exist; give a rollout YAML from configs/rollout/ "
            f"or build {dataset_path} yourself with `metamod rollout` + `metamod build-dataset`"
        )
    (config,) = parse_config([RolloutConfig], ["--config", rollout_config], prog="metamod rollout", moved=moved_keys())
    what = "MRO loops" if config.loop == "mro" else "debates"
    logger.info("Running the %s of %s into %s", what, rollout_config, config.output_dir)
    summary = rollout(config=config)
    logger.info("Building the moderator dataset %s from %s", dataset_path, summary["traces_file"])
    source = "mro" if config.loop == "mro" else "debate"  # an MRO rollout gives controller snapshots
    build_dataset(summary["traces_file"], dataset_path, **{"source": source, **build_options})
    return Path(dataset_path)
