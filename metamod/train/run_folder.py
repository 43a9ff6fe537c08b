"""A training run folder's resume fingerprint and ownership: what a rerun may reuse, and who may write.

``metamod train`` records the settings its adapter depends on (every option except :data:`_TRAIN_FREE_KEYS`, plus
signatures of the local dataset and base-model folders) in ``output_dir/.fingerprint.json``; a rerun with other
settings is refused (``--overwrite true`` deletes :data:`_RUN_OUTPUTS` and starts over). Only the main process of a
distributed job checks and locks (docs/contracts.md, "Resume and locking").
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from metamod.train.sft import WARM_START_DIR

logger = logging.getLogger(__name__)

CONFIG_FILE = "metamod_train_config.yaml"
SUMMARY_FILE = "train_summary.json"
SAMPLES_FILE = "samples.jsonl"

#: options that change nothing in the trained adapter (logging, saving, pushing, evaluation, workers, the order of
#: the same computation: share_prompt_prefix, equal to float rounding), and the run
#: length: a run may be resumed from its checkpoint to train longer (``--max_steps 60 --resume_from_checkpoint true``)
_TRAIN_FREE_KEYS = frozenset(
    {
        "output_dir", "overwrite", "resume_from_checkpoint", "max_steps", "num_train_epochs", "build_dataset_config", "prompts_file", "run_name",
        "project", "report_to", "logging_dir", "logging_steps", "logging_first_step", "logging_strategy",
        "logging_nan_inf_filter", "log_level", "log_level_replica", "log_on_each_node", "disable_tqdm",
        "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id", "save_steps", "save_strategy",
        "save_total_limit", "save_on_each_node", "save_only_model", "push_to_hub", "hub_model_id", "hub_strategy",
        "hub_private_repo", "hub_always_push", "hub_revision", "hub_token", "sample_log_steps", "sample_log_count",
        "log_completions", "log_completions_hub_repo", "num_completions_to_print", "log_unique_prompts",
        "log_multimodal", "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_prefetch_factor",
        "dataloader_pin_memory", "local_rank", "do_train", "do_eval", "do_predict", "eval_strategy", "eval_steps",
        "eval_delay", "eval_on_start", "per_device_eval_batch_size", "eval_accumulation_steps",
        "skip_memory_metrics", "include_num_input_tokens_seen", "ddp_timeout", "share_prompt_prefix",
    }
)  # fmt: skip
#: options added after run folders existed: left out of the fingerprint while at their default, so a folder recorded
#: before the option existed still resumes (a non-default value is recorded and compared like any other option)
_ADDED_OPTIONS = (
    "init_adapter", "curriculum_oversample", "drop_constant_groups", "constant_reward_tolerance", "max_refill_batches",
    "curve_eval_steps", "curve_eval_rows",
)  # fmt: skip
#: what a run folder holds that a rerun would reuse or mix (overwrite deletes these)
_RUN_OUTPUTS = ("checkpoint-*", WARM_START_DIR, SAMPLES_FILE, SUMMARY_FILE, "trainer_state.json")


def is_main_process() -> bool:
    """Rank 0 of an ``accelerate launch`` / ``torchrun`` job (or a plain process): the one that locks the folder."""
    return int(os.environ.get("RANK", "0")) == 0


def train_settings(
    args: Any,
    model_args: Any,
    tiny_args: Any = None,
    *,
    model_path: str | None = None,
) -> dict[str, Any]:
    """The settings a run's adapter depends on (``output_dir/.fingerprint.json``): every option except
    :data:`_TRAIN_FREE_KEYS`, plus signatures of a local dataset folder and base-model folder (local paths are
    made absolute: naming the same folder another way is the same setting)."""
    from metamod.config import config_to_dict, resolve_local_paths, resume_settings
    from metamod.files import path_signature

    settings = resolve_local_paths(resume_settings(config_to_dict(model_args, tiny_args, args), _TRAIN_FREE_KEYS))
    if "outcome" not in (settings.get("reward_funcs") or []):  # only the outcome reward reads it: runs without it
        settings.pop("outcome_round_cost", None)  # keep the fingerprints they had before the option existed
    defaults = {f.name: f.default for f in dataclasses.fields(args)} if dataclasses.is_dataclass(args) else {}
    for name in _ADDED_OPTIONS:
        if name in settings and name in defaults and settings[name] == defaults[name]:
            del settings[name]
    dataset = path_signature(args.dataset_path, depth=1) if args.dataset_path else None
    if dataset:
        settings["dataset_signature"] = dataset
    init_adapter = getattr(args, "init_adapter", None)
    if init_adapter:
        settings["init_adapter_signature"] = path_signature(init_adapter)
    model = path_signature(model_path) if model_path else None
    if model:
        settings["model_signature"] = model
    return settings


def _has_run_outputs(output_dir: Path) -> bool:
    return output_dir.is_dir() and any(any(output_dir.glob(p)) for p in (*_RUN_OUTPUTS, "adapter_config.json"))


def check_run_folder(
    args: Any, settings: dict[str, Any], *, record: bool = False, defaults: dict[str, Any] | None = None
) -> None:
    """Refuse an output_dir holding a run with other settings (``record``: also write our fingerprint).

    Without ``record`` (the early check, before the dataset is built and the model prepared) the dataset and
    model signatures are not compared yet.
    """
    from metamod.config import check_fingerprint

    output_dir = Path(args.output_dir)
    check_fingerprint(
        output_dir,
        settings,
        overwrite=args.overwrite,
        record=record,
        outputs=_has_run_outputs(output_dir),
        ignore=() if record else ("dataset_signature", "model_signature"),
        defaults=defaults,
        command="train",
        what="a training run (checkpoints, warm start, adapter)",
    )


def clear_run_folder(output_dir: Path) -> None:
    import shutil

    for pattern in _RUN_OUTPUTS:
        for path in output_dir.glob(pattern):
            logger.info("overwrite: deleting %s", path)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
