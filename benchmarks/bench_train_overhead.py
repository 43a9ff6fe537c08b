"""Seconds per GRPO step through ``metamod train`` vs a plain TRL script with the same model, data and config.

Both paths run in this one process, alternating (metamod, plain, metamod, plain, ...), on the offline tiny model and
a hand-built moderator dataset; the per-step time is ``train_runtime / max_steps`` as the HF Trainer measures it
(setup such as checks, dataset loading and model loading is excluded on both sides). Target ratio <= 1.05.

    .venv/bin/python benchmarks/bench_train_overhead.py [--steps 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).parent / "results"
SETTINGS = dict(per_device_train_batch_size=16, num_generations=4, max_completion_length=8, learning_rate=5e-3,
                beta=0.0, logging_steps=1, seed=0, report_to="none", save_strategy="no")  # fmt: skip


def run_metamod(model: str, data: str, out: Path, steps: int) -> float:
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig, train

    args = ModeratorGRPOConfig(output_dir=str(out), dataset_path=data, max_steps=steps, use_cpu=True, bf16=False,
                               gradient_checkpointing=False, **SETTINGS)  # fmt: skip
    model_args = ModeratorModelConfig(model_name_or_path=model, lora_r=8, lora_alpha=16, lora_dropout=0.0)
    summary = train(args=args, model_args=model_args)
    return summary["train_runtime_s"] / steps


def run_plain(model: str, data: str, out: Path, steps: int) -> float:
    from datasets import load_from_disk
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from metamod.rewards import control_reward, format_reward

    args = GRPOConfig(output_dir=str(out), max_steps=steps, use_cpu=True, bf16=False, gradient_checkpointing=False,
                      **SETTINGS)  # fmt: skip
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
    opts = parser.parse_args()

    from metamod.llm.tiny import ensure_tiny_model
    from tests._train_data import save_dataset

    work = Path(tempfile.mkdtemp(prefix="bench_overhead_"))
    model = str(ensure_tiny_model(work / "tiny"))
    data = save_dataset(work / "data", n_train=96, n_val=8)
    times: dict[str, list[float]] = {"metamod": [], "plain_trl": []}
    for rep in range(opts.repeats):
        times["metamod"].append(run_metamod(model, data, work / f"m{rep}", opts.steps))
        times["plain_trl"].append(run_plain(model, data, work / f"p{rep}", opts.steps))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["metamod"] / med["plain_trl"]
    result = {"steps": opts.steps, "repeats": opts.repeats, "s_per_step": times, "median_s_per_step": med,
              "ratio_metamod_over_plain": round(ratio, 4), "target": 1.05}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_train_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"\nmetamod train {med['metamod']:.3f} s/step vs plain TRL {med['plain_trl']:.3f} s/step: ratio {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
