"""Seconds per GRPO step: ``metamod train`` (shared prompt prefixes on and off) vs a plain TRL script.

All arms run in this one process, alternating (metamod, metamod without shared prefixes, plain TRL, metamod, ...),
with the same model, data, LoRA and settings; the per-step time is ``train_runtime / max_steps`` as the HF Trainer
measures it (checks, dataset and model loading are excluded on every side), and each step is split into generation
(``_generate_single_turn``) and the rest (the loss forward and backward, the optimiser, the rewards). The CPU time
of this process per step (``cpu_s_per_step``, all its threads) is printed too: other jobs on the machine stretch
the wall time but hardly the CPU time, and with one thread on a quiet machine the two are the same.

* ``--model tiny`` (default): the offline tiny model on a hand-built dataset, 16 completions of <= 8 tokens: the
  overhead check (target ratio metamod / plain <= 1.02).
* ``--model smollm2-135m-instruct --dataset <moderator dataset>``: the real CPU world, 2 prompts x 4 completions of
  <= 16 tokens at temperature 0.7 (configs/train/smol_moderator.yaml), LoRA r 8 (target <= 12 s per step).

    .venv/bin/python benchmarks/bench_train_overhead.py [--steps 10] [--repeats 3]
    .venv/bin/python benchmarks/bench_train_overhead.py --model smollm2-135m-instruct \
        --dataset benchmarks/results/smol_world/dataset --threads 2 --steps 4 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

_THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv else "1"
os.environ.setdefault("OMP_NUM_THREADS", _THREADS)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(int(_THREADS))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results"
COMMON = dict(beta=0.0, logging_steps=1, seed=0, report_to="none", save_strategy="no")
SETTINGS = {
    "tiny": dict(per_device_train_batch_size=16, num_generations=4, max_completion_length=8, learning_rate=5e-3),
    "smol": dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=16, learning_rate=5e-5,
                 temperature=0.7),
}  # fmt: skip
#: seconds spent in generation, per arm and run (filled by the timer around ``_generate_single_turn``)
GENERATION: dict[str, float] = {}
#: CPU seconds (this process, all threads) of the last ``Trainer.train`` call: robust to other jobs on the machine
TRAIN_CPU: list[float] = []


def timed_train_cpu(cls: type) -> None:
    """Record the process CPU time of each ``cls.train`` call in ``TRAIN_CPU``."""
    original = cls.train

    def wrapper(self, *args, **kwargs):
        start = time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            TRAIN_CPU.append(time.process_time() - start)

    cls.train = wrapper


def timed_generation(cls: type, key: str) -> None:
    """Add the time of every outermost ``_generate_single_turn`` call of ``cls`` to ``GENERATION[key]``.

    metamod's trainer calls TRL's method through ``super()``: only the outermost timer of a call counts.
    """
    original = cls.__dict__.get("_generate_single_turn") or cls._generate_single_turn

    def wrapper(self, *args, **kwargs):
        if getattr(self, "_bench_timing", False):
            return original(self, *args, **kwargs)
        self._bench_timing = True
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            self._bench_timing = False
            GENERATION[key] = GENERATION.get(key, 0.0) + time.perf_counter() - start

    cls._generate_single_turn = wrapper


def run_metamod(model: str, data: str, out: Path, steps: int, settings: dict, share: bool = True) -> float:
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, train

    args = ModeratorGRPOConfig(output_dir=str(out), dataset_path=data, max_steps=steps, use_cpu=True, bf16=False,
                               gradient_checkpointing=False, share_prompt_prefix=share, dataset_eval_split=None,
                               max_prompt_tokens=None, sample_log_steps=0, **COMMON, **settings)  # fmt: skip
    model_args = ModeratorModelConfig(model_name_or_path=model, lora_r=8, lora_alpha=16, lora_dropout=0.0)
    summary = train(args=args, model_args=model_args)
    return summary["train_runtime_s"] / steps


def run_plain(model: str, data: str, out: Path, steps: int, settings: dict) -> float:
    from datasets import load_from_disk
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from metamod.rewards import control_reward, format_reward

    args = GRPOConfig(output_dir=str(out), max_steps=steps, use_cpu=True, bf16=False, gradient_checkpointing=False,
                      **COMMON, **settings)  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[format_reward, control_reward],
        args=args,
        train_dataset=load_from_disk(data)["train"],
        processing_class=AutoTokenizer.from_pretrained(model),
        peft_config=LoraConfig(
            r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        ),
    )
    result = trainer.train()
    return result.metrics["train_runtime"] / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="tiny", help="tiny, or a model name/path (smollm2-135m-instruct)")
    parser.add_argument("--dataset", default=None, help="moderator dataset folder (default: hand-built rows)")
    parser.add_argument("--threads", default="1", help="torch threads (read before torch is imported)")
    parser.add_argument("--arms", nargs="+", default=["metamod", "metamod_unshared", "plain_trl"])
    opts = parser.parse_args()

    from trl import GRPOTrainer

    from metamod.llm.embedded import resolve_model_ref
    from metamod.llm.tiny import ensure_tiny_model
    from metamod.train.grpo import ModeratorGRPOTrainer
    from tests._train_data import save_dataset

    work = Path(tempfile.mkdtemp(prefix="bench_overhead_"))
    tiny = opts.model == "tiny"
    model = str(ensure_tiny_model(work / "tiny")) if tiny else resolve_model_ref(opts.model)
    data = opts.dataset or save_dataset(work / "data", n_train=96, n_val=8)
    settings = SETTINGS["tiny" if tiny else "smol"]
    timed_generation(ModeratorGRPOTrainer, "metamod")
    timed_generation(GRPOTrainer, "plain")
    timed_train_cpu(GRPOTrainer)
    times: dict[str, list[float]] = {arm: [] for arm in opts.arms}
    generation: dict[str, list[float]] = {arm: [] for arm in opts.arms}
    cpu: dict[str, list[float]] = {arm: [] for arm in opts.arms}
    for rep in range(opts.repeats):
        for arm in opts.arms:
            GENERATION.clear()
            out = work / f"{arm}{rep}"
            if arm == "plain_trl":
                per_step = run_plain(model, data, out, opts.steps, settings)
            else:
                per_step = run_metamod(model, data, out, opts.steps, settings, share=arm == "metamod")
            times[arm].append(round(per_step, 4))
            generation[arm].append(round(sum(GENERATION.values()) / opts.steps, 4))
            cpu[arm].append(round(TRAIN_CPU[-1] / opts.steps, 4))
    med = {k: statistics.median(v) for k, v in times.items()}
    med_gen = {k: statistics.median(v) for k, v in generation.items()}
    result = {
        "model": opts.model, "dataset": opts.dataset or "hand-built", "threads": int(opts.threads),
        "steps": opts.steps, "repeats": opts.repeats, "settings": settings, "s_per_step": times,
        "generation_s_per_step": generation, "cpu_s_per_step": cpu, "median_s_per_step": med, "median_generation_s_per_step": med_gen,
        "ratios_over_plain": {k: round(v / med["plain_trl"], 4) for k, v in med.items()} if "plain_trl" in med else {},
    }  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "bench_train_overhead.json" if tiny else f"bench_train_overhead_{Path(opts.model).name}.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    for arm in opts.arms:
        print(
            f"{arm:18s} {med[arm]:7.3f} s/step (generation {med_gen[arm]:.3f} s, rest {med[arm] - med_gen[arm]:.3f} s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
