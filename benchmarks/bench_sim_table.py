"""The simulated-world table: accuracy, mean rounds and mis-aggregation of every method, 3 seeds, with intervals.

Simulated debaters on held-out arith questions (configs/eval/sim_debate.yaml), a trained tiny moderator adapter
(``metamod train --config configs/train/tiny_sim.yaml`` writes checkpoints/tiny). Each seed reruns the simulated
debates (``sim_seed`` = seed), the majority tie-breaks and the single-agent baselines. Everything printed is
SIMULATED; it measures the pipeline and the decision layers on a synthetic debate model, not real LLMs.

    .venv/bin/python benchmarks/bench_sim_table.py --adapter checkpoints/tiny --questions 200
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adapter", default="checkpoints/tiny", help="trained moderator adapter folder")
    parser.add_argument("--questions", type=int, default=200, help="held-out arith questions per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--config", default=str(ROOT / "configs" / "eval" / "sim_debate.yaml"))
    parser.add_argument("--output-dir", default="runs/bench/sim_table")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from metamod.config import parse_config, setup_logging
    from metamod.evaluate.config import EvalConfig
    from metamod.evaluate.harness import evaluate
    from metamod.memory import MemoryConfig

    setup_logging("WARNING")
    config, memory_config = parse_config(
        [EvalConfig, MemoryConfig],
        [
            "--config",
            args.config,
            "--moderator",
            args.adapter,
            "--limit",
            str(args.questions),
            "--seeds",
            *map(str, args.seeds),
            "--output_dir",
            args.output_dir,
        ],
    )
    start = time.perf_counter()
    doc = evaluate(config, memory_config)
    elapsed = time.perf_counter() - start
    print(
        f"SIMULATED debaters -- arith test, {args.questions} questions x seeds {args.seeds}, T_max "
        f"{config.max_rounds}, N={config.num_agents}, moderator {args.adapter} ({elapsed:.0f} s)\n"
    )
    print(
        "| Method | accuracy % [95% CI] | seed mean +- std | mean rounds | coverage % | mis-agg. | "
        "tokens/q | format-valid % | McNemar p vs moderator |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for by_method in doc["results"].values():
        for method, m in by_method.items():
            rounds = f"{m['mean_rounds']:.2f}" if "mean_rounds" in m else "-"
            valid = f"{100 * m['format_valid_rate']:.1f}" if "format_valid_rate" in m else "-"
            p = m.get("mcnemar_p_vs_moderator")
            print(
                f"| {doc['labels'][method]} | {100 * m['accuracy']:.1f} [{100 * m['accuracy_ci_low']:.1f}, "
                f"{100 * m['accuracy_ci_high']:.1f}] | {100 * m.get('accuracy_seed_mean', m['accuracy']):.1f} +- "
                f"{100 * m.get('accuracy_seed_std', 0.0):.1f} | {rounds} | {100 * m['coverage']:.1f} | "
                f"{m['mis_aggregation']} | {m['tokens_per_question']:.0f} | {valid} | "
                f"{'-' if p is None else f'{p:.3g}'} |"
            )
    print(f"\nfull outputs: {args.output_dir}/results.json, table.md, plots/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
