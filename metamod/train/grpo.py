"""``metamod train``: train the moderator with TRL's ``GRPOTrainer`` + a PEFT LoRA adapter.

One code path for both worlds: on this CPU machine the tiny offline model on simulated debates
(``configs/train/tiny_sim.yaml``), on GPU nodes bf16 + vLLM generation + ``accelerate launch`` with DeepSpeed
(``configs/train/paper_llama8b_moderator.yaml`` and friends). Every ``trl.GRPOConfig`` option passes through.

Outputs in ``output_dir`` (default ``checkpoints/<run_name>``): the LoRA adapter + tokenizer, ``checkpoint-N/``
folders (resume with ``--resume_from_checkpoint true``), ``metamod_train_config.yaml`` (the resolved config),
``samples.jsonl`` (a few completions with their rewards every ``sample_log_steps``), ``trainer_state.json`` (the
full log history) and ``train_summary.json``.

>>> from metamod.train.grpo import ModeratorGRPOConfig
>>> cfg = ModeratorGRPOConfig(dataset_path="data/x", per_device_train_batch_size=4, num_generations=2,
...                           report_to="none")
>>> cfg.output_dir, cfg.reward_funcs
('checkpoints/moderator', ['format', 'control'])
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig, GRPOTrainer, ModelConfig

from metamod.llm.adapter_files import ADAPTER_CONFIG, check_resume_checkpoint, read_adapter_config
from metamod.llm.tiny import TinyModelConfig
from metamod.rewards import DEFAULT_REWARDS, get_reward_funcs, rewards_help
from metamod.rewards.outcome import DEFAULT_ROUND_COST, check_outcome_columns
from metamod.train import common, curves
from metamod.train.curriculum import oversample
from metamod.train.dynamic_sampling import DynamicSamplingGRPOTrainer
from metamod.train.run_folder import (
    CONFIG_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    check_run_folder,
    clear_run_folder,
    is_main_process,
    train_settings,
)
from metamod.train.sample_log import SampleLogger
from metamod.train.sft import WARM_START_DIR, warm_start_gold_use
from metamod.train.shared_prefix import SharedPrefixMixin

logger = logging.getLogger(__name__)


@dataclass
class ModeratorGRPOConfig(GRPOConfig):
    """``trl.GRPOConfig`` plus the moderator's data, reward, warm-start and logging options."""

    output_dir: str | None = field(
        default=None, metadata={"help": "Run folder (adapter, checkpoints, summary). Default: checkpoints/<run_name>."}
    )
    dataset_path: str | None = field(
        default=None, metadata={"help": "Moderator dataset: a `save_to_disk` folder or a Hub dataset id."}
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_eval_split: str | None = field(
        default="validation", metadata={"help": "Split to evaluate on when eval_strategy is not 'no'."}
    )
    build_dataset_config: str | None = field(
        default=None,
        metadata={
            "help": "Rollout YAML (e.g. configs/rollout/sim_arith.yaml) used to build dataset_path when it is "
            "missing: runs the debates and `build-dataset`, then trains. Leave unset to require the dataset."
        },
    )
    dataset_validation_fraction: float = field(
        default=0.1,
        metadata={
            "help": "build-dataset option (validation_fraction) used when build_dataset_config builds dataset_path; "
            "an existing dataset built with another value is refused (with the rebuild command). The paper: 0."
        },
    )
    dataset_single_template: bool = field(
        default=False,
        metadata={
            "help": "build-dataset option (single_template): the STOP/CONTINUE prompt on every row, so the control "
            "reward applies to every row (the paper). Used and checked like dataset_validation_fraction."
        },
    )
    dataset_keep_agents: int | None = field(
        default=None,
        metadata={
            "help": "build-dataset option (keep_agents): keep the first this many agents per round (the paper: 2). "
            "Used and checked like dataset_validation_fraction."
        },
    )
    max_train_examples: int | None = field(default=None, metadata={"help": "Use at most this many training rows."})
    max_prompt_tokens: int | None = field(
        default=2048,
        metadata={"help": "Drop rows whose chat-formatted prompt is longer (TRL no longer truncates prompts)."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: list(DEFAULT_REWARDS),
        metadata={"help": rewards_help() + " Weights come from reward_weights (default all 1.0)."},
    )
    outcome_round_cost: float = field(
        default=DEFAULT_ROUND_COST,
        metadata={
            "help": "Reward 'outcome': the per-round cost lambda subtracted from the recorded future's value for "
            "each round a CONTINUE spends, in [0, 1) (docs/training.md, 'The outcome reward')."
        },
    )
    warm_start: bool = field(
        default=False, metadata={"help": "Run a short SFT pass on heuristic moderator targets before GRPO."}
    )
    warm_start_steps: int = field(default=30, metadata={"help": "Optimiser steps of the warm start."})
    warm_start_learning_rate: float = field(default=5e-3, metadata={"help": "Learning rate of the warm start."})
    warm_start_batch_size: int = field(default=16, metadata={"help": "Per-device batch size of the warm start."})
    warm_start_max_examples: int | None = field(default=2000, metadata={"help": "Cap on warm-start rows."})
    init_adapter: str | None = field(
        default=None,
        metadata={
            "help": "Start GRPO from this LoRA adapter instead of a fresh LoRA or a warm start: a folder of another "
            "metamod run (its warm_start/ or the run itself), so GRPO variants can share one bootstrap. Its files "
            "are in the run fingerprint; its run's gold use (metamod_train_config.yaml) carries into this run's."
        },
    )
    warm_start_targets: str = field(
        default="consensus",
        metadata={
            "help": "Warm-start targets: consensus (STOP on unanimous debaters, no labels), reward (the policy the "
            "configured rewards score highest: decision from eta, answer by majority unless an answer reward is "
            "configured) or reward_gold (gold-correct answers: gold-supervised adjudication, marked uses_gold)."
        },
    )
    sample_log_steps: int = field(
        default=10, metadata={"help": "Every this many steps, log a few completions to samples.jsonl (0: never)."}
    )
    sample_log_count: int = field(default=4, metadata={"help": "Completions logged each time."})
    curriculum_oversample: int = field(
        default=1,
        metadata={
            "help": "Repeat each training row whose GRPO group can carry signal (debaters disagree, or eta flips "
            "against the same debate's previous/next round) this many times: a weighting, not new data (1 = off). "
            "See docs/training.md, Zero-variance groups."
        },
    )
    drop_constant_groups: bool = field(
        default=False,
        metadata={
            "help": "Dynamic sampling (DAPO): drop groups whose total reward is constant (within "
            "constant_reward_tolerance) from the update and refill the batch with groups of other prompts; groups "
            "still constant after max_refill_batches extra generation calls stay with zero advantage, masked out."
        },
    )
    constant_reward_tolerance: float = field(
        default=1e-6,
        metadata={"help": "A group whose total rewards span at most this is constant (float noise; >= 0)."},
    )
    max_refill_batches: int = field(
        default=2, metadata={"help": "Extra generation calls per step at most, with drop_constant_groups (>= 1)."}
    )
    curve_eval_steps: int = field(
        default=0,
        metadata={
            "help": "Every this many steps (and at the start), score greedy decisions of the current adapter on "
            "curve_eval_rows held-out rounds (validation split, else train rows left out): heldout/control_accuracy,"
            " heldout/stop_rate, heldout/format_valid in curves.json (0 = off)."
        },
    )
    curve_eval_rows: int = field(
        default=64, metadata={"help": "Held-out rounds scored each time (a fixed, seeded sample)."}
    )
    auto_cpu: bool = field(
        default=True,
        metadata={
            "help": "Without CUDA, switch to use_cpu=true, bf16=false, gradient_checkpointing=false (logged), so "
            "GPU configs still start on a CPU machine. use_vllm is never switched off: it fails instead."
        },
    )
    share_prompt_prefix: bool = field(
        default=True,
        metadata={
            "help": "Run each group's prompt through the model once (generation prefill and the loss forward/backward) "
            "instead of once per completion; same results to float rounding. Off, or multi-process, vision or "
            "gradient checkpointing: TRL's own path (metamod/train/shared_prefix.py)."
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={
            "help": "Start over in an output_dir that holds a run with other settings: delete its checkpoints, warm "
            "start, samples and summary (without it such a folder is refused)."
        },
    )

    def __post_init__(self) -> None:
        if self.output_dir is None:
            self.output_dir = f"checkpoints/{self.run_name or 'moderator'}"
        if isinstance(self.reward_funcs, str):
            self.reward_funcs = [n.strip() for n in self.reward_funcs.split(",") if n.strip()]
        if self.auto_cpu:
            import torch

            if not torch.cuda.is_available() and (not self.use_cpu or self.bf16 or self.gradient_checkpointing):
                logger.info("No CUDA device: training on CPU in fp32 without gradient checkpointing")
                self.use_cpu, self.bf16, self.fp16, self.gradient_checkpointing = True, False, False, False
        self._check_batch()
        from metamod.train.sft import TARGETS

        if self.warm_start_targets not in TARGETS:
            raise ValueError(f"warm_start_targets must be one of {sorted(TARGETS)}, got {self.warm_start_targets!r}")
        if self.init_adapter and self.warm_start:
            raise ValueError("init_adapter replaces the warm start: set warm_start=false (or drop init_adapter)")
        for name in ("warm_start_steps", "warm_start_batch_size", "sample_log_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.outcome_round_cost < 1.0:
            raise ValueError(f"outcome_round_cost must be in [0, 1), got {self.outcome_round_cost}")
        if self.curriculum_oversample < 1:
            raise ValueError(f"curriculum_oversample must be >= 1 (1 = off), got {self.curriculum_oversample}")
        if not self.constant_reward_tolerance >= 0:
            raise ValueError(f"constant_reward_tolerance must be >= 0, got {self.constant_reward_tolerance}")
        if self.max_refill_batches < 1:
            raise ValueError(f"max_refill_batches must be >= 1, got {self.max_refill_batches}")
        if self.curve_eval_steps < 0 or self.curve_eval_rows < 1:
            raise ValueError(
                f"curve_eval_steps must be >= 0 (0 = off) and curve_eval_rows >= 1, got {self.curve_eval_steps} and "
                f"{self.curve_eval_rows}"
            )
        if self.sample_log_steps < 0:
            raise ValueError(f"sample_log_steps must be >= 0 (0 turns sample logging off), got {self.sample_log_steps}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1 or null, got {self.max_prompt_tokens}")
        if not 0.0 <= self.dataset_validation_fraction < 1.0:
            raise ValueError(f"dataset_validation_fraction must be in [0, 1), got {self.dataset_validation_fraction}")
        if self.dataset_keep_agents is not None and self.dataset_keep_agents < 1:
            raise ValueError(f"dataset_keep_agents must be >= 1 or null (all agents), got {self.dataset_keep_agents}")
        for name in ("max_train_examples", "warm_start_max_examples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or null (all rows), got {getattr(self, name)}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("learning_rate", "warm_start_learning_rate"):  # torch refuses only after the warm start wrote
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("num_train_epochs", "max_grad_norm"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        super().__post_init__()
        if isinstance(self.resume_from_checkpoint, str) and self.resume_from_checkpoint.lower() in ("false", "none"):
            self.resume_from_checkpoint = None

    def _check_batch(self) -> None:
        """GRPO groups num_generations completions per prompt: the generation batch must hold whole groups."""
        if self.num_generations is None or self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 (GRPO compares completions of one prompt), got {self.num_generations}"
            )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if self.generation_batch_size is not None:
            batch, how = self.generation_batch_size, f"generation_batch_size={self.generation_batch_size}"
        else:
            steps = self.steps_per_generation or self.gradient_accumulation_steps
            batch = self.per_device_train_batch_size * world * steps
            how = (
                f"per_device_train_batch_size={self.per_device_train_batch_size} x {world} process(es) x "
                f"{steps} step(s) per generation = {batch}"
            )
        if batch % self.num_generations:
            raise ValueError(
                f"The generation batch ({how}) is not divisible by num_generations={self.num_generations}: GRPO needs "
                f"whole groups of {self.num_generations} completions per prompt. Fix: set per_device_train_batch_size="
                f"{common.suggest_batch_size(self.per_device_train_batch_size, self.num_generations)} (a multiple of "
                f"num_generations), or choose num_generations dividing {batch}."
            )
        if self.drop_constant_groups and (batch // world) % self.num_generations:
            raise ValueError(
                f"drop_constant_groups decides per process: each of the {world} processes' {batch // world} "
                f"completions must form whole groups of num_generations={self.num_generations}; change the batch size"
            )


class ModeratorGRPOTrainer(SharedPrefixMixin, GRPOTrainer):
    """``trl.GRPOTrainer`` with shared prompt prefixes (``share_prompt_prefix``); everything else is TRL's."""


class DynamicModeratorGRPOTrainer(SharedPrefixMixin, DynamicSamplingGRPOTrainer):
    """:class:`ModeratorGRPOTrainer` with dynamic sampling (``drop_constant_groups``: constant groups dropped and
    refilled, :mod:`metamod.train.dynamic_sampling`)."""


@dataclass
class ModeratorModelConfig(ModelConfig):
    """``trl.ModelConfig`` (model path, dtype, LoRA) with LoRA on by default and the offline tiny-model switch."""

    use_peft: bool = field(default=True, metadata={"help": "Train a LoRA adapter (false: full fine-tuning)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (scaling = alpha / r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(
        default_factory=lambda: ["all-linear"],
        metadata={"help": "Modules to adapt: 'all-linear' or a list of module names (lm_head is not allowed)."},
    )
    build_tiny_model: bool = field(
        default=False,
        metadata={"help": "Build the offline tiny model in model_name_or_path when missing (tiny_* options)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is required (a model folder or a Hub id)")
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be >= 1, got {self.lora_r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


def _setup_trackers(args: ModeratorGRPOConfig) -> None:
    if "wandb" in (args.report_to or []):
        os.environ.setdefault("WANDB_DIR", str(args.output_dir))
        os.environ.setdefault("WANDB_PROJECT", "metamod")
        if not os.environ.get("WANDB_API_KEY") and "WANDB_MODE" not in os.environ:
            logger.info("wandb: no WANDB_API_KEY, logging offline (sync later with `wandb sync`)")
            os.environ["WANDB_MODE"] = "offline"
        Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)


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


def refuse_hub_token(args: ModeratorGRPOConfig) -> None:
    """Refuse ``hub_token``: the Trainer pickles its arguments, token included, into every ``training_args.bin``.

    Those files sit in the run folder and in each checkpoint, and ``push_to_hub`` uploads them, so a token passed
    here would be published. ``huggingface_hub`` finds the token on its own (``hf auth login`` or ``HF_TOKEN``)
    and keeps it out of every file.

    >>> args = ModeratorGRPOConfig(dataset_path="d", per_device_train_batch_size=4, num_generations=2,
    ...                            report_to="none", hub_token="hf_x")
    >>> try:
    ...     refuse_hub_token(args)
    ... except ValueError as err:  # metamod's ConfigError
    ...     print(str(err).split(";")[1].strip())
    drop it and log in with `hf auth login` or set HF_TOKEN instead
    """
    from metamod.config import ConfigError

    if args.hub_token:
        raise ConfigError(
            "--hub_token would be written into training_args.bin (in the run folder and every checkpoint, which "
            "push_to_hub uploads); drop it and log in with `hf auth login` or set HF_TOKEN instead"
        )


def prepare_dataset(args: ModeratorGRPOConfig) -> None:
    """Build ``dataset_path`` from ``build_dataset_config`` when it is missing (saying so in the log).

    An existing local dataset whose ``build_summary.json`` records other ``dataset_*`` options is refused, naming
    the differences and the rebuild command (:func:`metamod.train.common.check_dataset_options`).
    """
    if args.dataset_path is None:
        raise ValueError("dataset_path is required (a `metamod build-dataset` folder or a Hub dataset id)")
    options = {
        "validation_fraction": args.dataset_validation_fraction,
        "single_template": args.dataset_single_template,
        "keep_agents": args.dataset_keep_agents,
    }
    if Path(args.dataset_path).exists():
        common.check_dataset_options(args.dataset_path, options)
        return
    if not args.build_dataset_config:
        return
    logger.info("Dataset %s is missing: building it from %s", args.dataset_path, args.build_dataset_config)
    common.build_missing_dataset(args.dataset_path, rollout_config=args.build_dataset_config, **options)


def train(
    *, args: ModeratorGRPOConfig, model_args: ModeratorModelConfig, tiny_args: TinyModelConfig | None = None
) -> dict[str, Any]:
    """Run GRPO (with an optional warm start) and return the run summary (also written to train_summary.json).

    The run folder is locked by the main process (a second writer fails at once, naming the holder) and
    fingerprinted: a rerun with other settings is refused before any work unless ``overwrite``.

    Args:
        args: trainer, data, reward and logging options.
        model_args: base model and LoRA options.
        tiny_args: shape of the offline tiny model (used when ``model_args.build_tiny_model``).

    Returns:
        The summary dict (steps, time, first/last logged rewards, paths).

    Raises:
        FolderLockedError: another process writes to ``output_dir``.
        SettingsMismatchError: ``output_dir`` holds a run with other settings (the keys are named).
    """
    from metamod.files import FolderLock

    lock = FolderLock(args.output_dir)
    try:
        return _train(args=args, model_args=model_args, tiny_args=tiny_args, lock=lock)
    finally:
        lock.release()


def _train(
    *, args: ModeratorGRPOConfig, model_args: ModeratorModelConfig, tiny_args: TinyModelConfig | None, lock: Any
) -> dict[str, Any]:
    """The body of :func:`train`; the main process takes ``lock`` just before the first file lands."""
    from transformers import AutoTokenizer
    from trl import get_peft_config

    from metamod.config import save_resolved_config

    started = time.time()
    # ---- cheap checks first: secrets, rewards, environment, data, model
    refuse_hub_token(args)
    reward_funcs, weights = get_reward_funcs(
        args.reward_funcs, args.reward_weights, outcome_round_cost=args.outcome_round_cost
    )
    args.reward_weights = weights
    if args.init_adapter:
        init_adapter_config(args.init_adapter)  # a folder without an adapter or a run config: one line, now
    reward_funcs = curves.with_protocol_metrics(reward_funcs)  # logs format validity / STOP rate; values unchanged
    if args.use_vllm:
        from metamod.llm import is_vllm_available

        if not is_vllm_available():
            raise ImportError("use_vllm=true needs vLLM: pip install -e '.[vllm]' (on a CUDA node)")
    if is_main_process():  # another writer or other settings: fail before building data or loading models
        from metamod.files import check_unlocked

        check_unlocked(args.output_dir)
        if args.overwrite and args.resume_from_checkpoint:
            from metamod.config import ConfigError

            raise ConfigError(
                "overwrite=true deletes the checkpoints that resume_from_checkpoint would resume from; drop one"
            )
        check_run_folder(args, train_settings(args, model_args, tiny_args))
    # a missing or corrupt checkpoint: one line, before any model loads or any file lands
    resume = check_resume_checkpoint(args.resume_from_checkpoint, args.output_dir)
    prepare_dataset(args)
    train_ds = common.load_split(args.dataset_path, args.dataset_train_split)
    common.check_columns(train_ds, where=f"{args.dataset_path}[{args.dataset_train_split}]")
    for name in ("gold", "kind") if "answer" in args.reward_funcs else ():
        if name not in train_ds.column_names:
            raise ValueError(f"reward 'answer' needs dataset column {name!r}; {args.dataset_path} lacks it")
    if "outcome" in args.reward_funcs:
        check_outcome_columns(train_ds.column_names, where=f"{args.dataset_path}[{args.dataset_train_split}]")
    model_path = prepare_model_path(model_args, tiny_args, trust_remote_code=args.trust_remote_code)

    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=args.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    full_train_ds = train_ds
    train_ds = common.drop_long_prompts(train_ds, tokenizer, args.max_prompt_tokens, where="train split")
    unused_train_ds = None
    if args.max_train_examples is not None and len(train_ds) > args.max_train_examples:
        shuffled = train_ds.shuffle(seed=args.seed)
        train_ds = shuffled.select(range(args.max_train_examples))
        unused_train_ds = shuffled.select(range(args.max_train_examples, len(shuffled)))
    warm_start_ds = train_ds  # the warm start sees each row once: the curriculum weights GRPO only
    train_ds, curriculum_rows = oversample(train_ds, times=args.curriculum_oversample, source_rows=full_train_ds)
    eval_ds = None
    if args.eval_strategy != "no" and args.dataset_eval_split:
        eval_ds = common.load_split(args.dataset_path, args.dataset_eval_split)
        common.check_columns(eval_ds, where=f"{args.dataset_path}[{args.dataset_eval_split}]")
        eval_ds = common.drop_long_prompts(eval_ds, tokenizer, args.max_prompt_tokens, where="eval split")

    output_dir = Path(args.output_dir)
    if is_main_process():  # the folder is ours from here on
        lock.acquire()
        if args.overwrite:
            clear_run_folder(output_dir)
        check_run_folder(args, train_settings(args, model_args, tiny_args, model_path=model_path), record=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_resolved_config(output_dir / CONFIG_FILE, model_args, tiny_args, args)
    _setup_trackers(args)
    simulated = bool("simulated" in train_ds.column_names and any(train_ds["simulated"]))
    logger.info(
        "Training %s on %d rows of %s%s (rewards %s, weights %s)",
        model_path, len(train_ds), args.dataset_path, " (simulated debates)" if simulated else "",
        args.reward_funcs, weights,
    )  # fmt: skip

    # ---- model: fresh LoRA, or the warm-started adapter
    model_init_kwargs = dict(args.model_init_kwargs or {})
    if model_args.dtype:
        model_init_kwargs.setdefault("dtype", model_args.dtype)
    if model_args.attn_implementation:
        model_init_kwargs.setdefault("attn_implementation", model_args.attn_implementation)
    args.model_init_kwargs = model_init_kwargs or None
    peft_config = get_peft_config(model_args)
    model: Any = model_path
    if (args.warm_start or args.init_adapter) and not model_args.use_peft:
        raise ValueError("warm_start / init_adapter train a LoRA adapter: set use_peft=true")
    if args.warm_start:
        model = _warm_started_model(
            args, model_args, model_path, peft_config, warm_start_ds, tokenizer, model_init_kwargs
        )
        peft_config = None
    elif args.init_adapter:
        logger.info("Starting GRPO from the adapter in %s", args.init_adapter)
        model = _trainable_adapter(args, model_path, Path(args.init_adapter), model_init_kwargs)
        peft_config = None

    trainer_class, ds_kwargs = ModeratorGRPOTrainer, {}
    if args.drop_constant_groups:
        trainer_class = DynamicModeratorGRPOTrainer
        ds_kwargs = dict(
            constant_reward_tolerance=args.constant_reward_tolerance, max_refill_batches=args.max_refill_batches
        )
    trainer = trainer_class(
        **ds_kwargs,
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.share_prompt_prefix = args.share_prompt_prefix
    sample_logger = None
    if args.sample_log_steps:
        sample_logger = SampleLogger(
            trainer, output_dir / SAMPLES_FILE, every=args.sample_log_steps, count=args.sample_log_count,
            resume=bool(resume),
        )  # fmt: skip
        trainer.add_callback(sample_logger)
    elif not resume and is_main_process():  # a fresh start: samples of an earlier run would read as this run's
        (output_dir / SAMPLES_FILE).unlink(missing_ok=True)
    heldout = curves.add_heldout_callback(trainer, args, tokenizer=tokenizer, unused_train=unused_train_ds)
    try:
        result = trainer.train(resume_from_checkpoint=resume)
    finally:
        if sample_logger is not None:
            sample_logger.close()
    trainer.save_model(str(output_dir))
    record_base_alias(output_dir, model_args.model_name_or_path)
    trainer.save_state()  # trainer_state.json (full log history) beside the adapter
    summary = summarize(trainer.state.log_history, reward_names=trainer.reward_func_names)
    if trainer.accelerator.is_main_process:
        curves.write_curves(
            output_dir, trainer.state.log_history, reward_names=trainer.reward_func_names, heldout=heldout
        )
    summary.update(
        curriculum_signal_rows=curriculum_rows,
        run=Path(output_dir).name,
        output_dir=str(output_dir),
        model=model_path,
        dataset=args.dataset_path,
        simulated=simulated,
        train_rows=len(train_ds),
        global_step=trainer.state.global_step,
        train_runtime_s=round(float(result.metrics.get("train_runtime", 0.0)), 2),
        wall_time_s=round(time.time() - started, 2),
        resumed=bool(resume),
        warm_start=args.warm_start,
        warm_start_targets=args.warm_start_targets if args.warm_start else None,
        init_adapter=args.init_adapter,
        gold_use=_gold_use(args),
    )
    if trainer.accelerator.is_main_process:
        from metamod.files import atomic_write_json

        atomic_write_json(output_dir / SUMMARY_FILE, summary, indent=2, sort_keys=False)
    return summary


def _warm_started_model(args, model_args, model_path, peft_config, train_ds, tokenizer, model_init_kwargs):
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
    return _trainable_adapter(args, model_path, warm_dir, model_init_kwargs)


def _trainable_adapter(args, model_path, adapter_dir: Path, model_init_kwargs):
    """The base model with the LoRA adapter in ``adapter_dir``, trainable."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    kwargs = dict(model_init_kwargs)
    dtype = kwargs.pop("dtype", "float32")
    kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
    base = AutoModelForCausalLM.from_pretrained(model_path, trust_remote_code=args.trust_remote_code, **kwargs)
    return PeftModel.from_pretrained(base, str(adapter_dir), is_trainable=True)


def _gold_use(args: ModeratorGRPOConfig) -> str | None:
    """This run's gold use, with that of the run an ``init_adapter`` came from (its own config, conservatively)."""
    own = warm_start_gold_use(args.warm_start_targets if args.warm_start else None, args.reward_funcs)
    if not args.init_adapter:
        return own
    source = init_adapter_config(args.init_adapter)
    targets = source.get("warm_start_targets") if source.get("warm_start") else None
    inherited = warm_start_gold_use(targets, source.get("reward_funcs") or [])
    parts = [p for p in (own, inherited and f"init_adapter: {inherited}") if p]
    return "; ".join(parts) or None


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


def summarize(log_history: list[dict[str, Any]], *, reward_names: list[str]) -> dict[str, Any]:
    """First vs last logged training rewards from a ``trainer.state.log_history``.

    >>> hist = [{"step": 1, "reward": 0.5, "rewards/control_reward/mean": 0.25},
    ...         {"step": 9, "reward": 1.5, "rewards/control_reward/mean": 0.75}, {"step": 9, "train_runtime": 3.0}]
    >>> s = summarize(hist, reward_names=["control_reward"])
    >>> s["first_logged"]["control_reward"], s["last_logged"]["reward"], s["reward_change"]
    (0.25, 1.5, 1.0)
    """
    logged = [h for h in log_history if "reward" in h]

    def pick(entry: dict[str, Any] | None) -> dict[str, Any] | None:
        if entry is None:
            return None
        out = {"step": entry.get("step"), "reward": entry.get("reward")}
        out.update({name: entry.get(f"rewards/{name}/mean") for name in reward_names})
        return out

    first, last = pick(logged[0] if logged else None), pick(logged[-1] if logged else None)
    change = None
    if first and last and first["reward"] is not None and last["reward"] is not None:
        change = round(last["reward"] - first["reward"], 6)
    return {
        "logged_steps": len(logged), "first_logged": first, "last_logged": last, "reward_change": change,
        **curves.zero_variance_summary(log_history),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``metamod train --config configs/train/tiny_sim.yaml [--key value ...]``."""
    from metamod.config import parse_config

    args, model_args, tiny_args = parse_config(
        [ModeratorGRPOConfig, ModeratorModelConfig, TinyModelConfig], argv, prog="metamod train"
    )
    summary = train(args=args, model_args=model_args, tiny_args=tiny_args)
    print(json.dumps(summary, indent=2))
    label = " (simulated debates)" if summary["simulated"] else ""
    print(
        f"Trained {summary['global_step']} steps in {summary['wall_time_s']:.1f}s{label}; mean reward "
        f"{_fmt(summary['first_logged'])} -> {_fmt(summary['last_logged'])}; frac_reward_zero_std "
        f"{_fmt_stats(summary.get('frac_reward_zero_std'))}, reward_std {_fmt_stats(summary.get('reward_std'))}; "
        f"adapter in {summary['output_dir']}"
    )
    return 0


def _fmt(entry: dict[str, Any] | None) -> str:
    return "n/a" if not entry or entry.get("reward") is None else f"{entry['reward']:.3f} (step {entry['step']})"


def _fmt_stats(stats: dict[str, float] | None) -> str:
    """``first -> last (mean m)`` of a per-step metric, ``n/a`` when it was never logged."""
    if not stats:
        return "n/a"
    return f"{stats['first']:.3f} -> {stats['last']:.3f} (mean {stats['mean']:.3f})"
