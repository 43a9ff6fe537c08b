"""The options of ``metamod train``: ``trl.GRPOConfig`` plus the moderator's, and ``trl.ModelConfig`` with LoRA on.

>>> from metamod.train.grpo import ModeratorGRPOConfig
>>> cfg = ModeratorGRPOConfig(dataset_path="data/x", per_device_train_batch_size=4, num_generations=2,
...                           report_to="none")
>>> cfg.output_dir, cfg.reward_funcs
('checkpoints/moderator', ['format', 'control'])
>>> ModeratorGRPOConfig(dataset_path="x", per_device_train_batch_size=4, num_generations=2, report_to="none",
...                     reward_funcs=["format,outcome"]).reward_funcs  # --reward_funcs format,outcome
['format', 'outcome']
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from trl import GRPOConfig, ModelConfig

from metamod.rewards import DEFAULT_REWARDS, rewards_help
from metamod.rewards.outcome import DEFAULT_ROUND_COST
from metamod.train import common

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
        # "format,control" (YAML string) and --reward_funcs format,control (one CLI token) name two rewards
        names = [self.reward_funcs] if isinstance(self.reward_funcs, str) else list(self.reward_funcs)
        self.reward_funcs = [n.strip() for item in names for n in str(item).split(",") if n.strip()]
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
