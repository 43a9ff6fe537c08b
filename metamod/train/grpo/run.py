"""``metamod train``: train the moderator with TRL's ``GRPOTrainer`` + a PEFT LoRA adapter.

One code path for both worlds: on this CPU machine the tiny offline model on simulated debates
(``configs/train/tiny_sim.yaml``), on GPU nodes bf16 + vLLM generation + ``accelerate launch`` with DeepSpeed
(``configs/train/paper_llama8b_moderator.yaml`` and friends). Every ``trl.GRPOConfig`` option passes through.

Outputs in ``output_dir`` (default ``checkpoints/<run_name>``): the LoRA adapter + tokenizer, ``checkpoint-N/``
folders (resume with ``--resume_from_checkpoint true``), ``metamod_train_config.yaml`` (the resolved config),
``samples.jsonl`` (a few completions with their rewards every ``sample_log_steps``), ``trainer_state.json`` (the
full log history) and ``train_summary.json``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from metamod.llm.adapter_files import check_resume_checkpoint
from metamod.llm.tiny import TinyModelConfig
from metamod.rewards import get_reward_funcs
from metamod.rewards.outcome import check_outcome_columns
from metamod.train import common, curves
from metamod.train.curriculum import oversample
from metamod.train.grpo.config import ModeratorGRPOConfig, ModeratorModelConfig
from metamod.train.grpo.model import (
    init_adapter_config,
    prepare_model_path,
    record_base_alias,
    trainable_adapter,
    warm_started_model,
)
from metamod.train.grpo.trainers import DynamicModeratorGRPOTrainer, ModeratorGRPOTrainer
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
from metamod.train.sft import warm_start_gold_use

logger = logging.getLogger(__name__)


def _setup_trackers(args: ModeratorGRPOConfig) -> None:
    if "wandb" in (args.report_to or []):
        os.environ.setdefault("WANDB_DIR", str(args.output_dir))
        os.environ.setdefault("WANDB_PROJECT", "metamod")
        if not os.environ.get("WANDB_API_KEY") and "WANDB_MODE" not in os.environ:
            logger.info("wandb: no WANDB_API_KEY, logging offline (sync later with `wandb sync`)")
            os.environ["WANDB_MODE"] = "offline"
        Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)


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

    from metamod.config import option_defaults, save_resolved_config

    started = time.time()
    defaults = option_defaults(type(args), type(model_args), TinyModelConfig)  # options added later resume at these
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
        check_run_folder(args, train_settings(args, model_args, tiny_args), defaults=defaults)
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
        settings = train_settings(args, model_args, tiny_args, model_path=model_path)
        check_run_folder(args, settings, record=True, defaults=defaults)
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
        model = warm_started_model(
            args, model_args, model_path, peft_config, warm_start_ds, tokenizer, model_init_kwargs
        )
        peft_config = None
    elif args.init_adapter:
        logger.info("Starting GRPO from the adapter in %s", args.init_adapter)
        model = trainable_adapter(args, model_path, Path(args.init_adapter), model_init_kwargs)
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
