"""Simulated debate throughput and peak memory at 1k / 5k / 20k questions (streaming must keep memory flat).

Each size runs in a fresh subprocess (so peak RSS is that run's own): arith questions stream through the debate
engine with simulated debaters (N=2, T_max=5) and every trace is written to a JSONL file, exactly as
``metamod rollout`` does. Prints debate-rounds/s and peak RSS per size, side by side.

    .venv/bin/python benchmarks/bench_sim_throughput.py [--sizes 1000 5000 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child(num_questions: int, output: str) -> dict:
    from metamod.rollout.debate import DebateStats, run_debates
    from metamod.rollout.simulated import SimulatedDebaters
    from metamod.rollout.traces import TraceWriter
    from metamod.tasks import load_task

    examples = load_task("arith", num_examples=num_questions, seed=0).examples()
    sim = SimulatedDebaters()
    stats = DebateStats()
    start = time.perf_counter()
    with TraceWriter(output, resume=False) as writer:
        for trace in run_debates(examples, [sim, sim], max_rounds=5, stats=stats, progress=False, task="arith"):
            writer.write(trace)
    elapsed = time.perf_counter() - start
    return {
        "questions": stats.questions,
        "debate_rounds": stats.debate_rounds,
        "seconds": round(elapsed, 2),
        "debate_rounds_per_s": round(stats.debate_rounds / elapsed, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trace_file_mb": round(os.path.getsize(output) / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--output", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.output)))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            out = Path(tmp) / f"traces-{size}.jsonl"
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(size), "--output", str(out)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            out.unlink()
    print("simulated debates (N=2, T_max=5), streamed to JSONL; one subprocess per size")
    print(f"{'questions':>10} {'debate-rounds':>14} {'seconds':>8} {'rounds/s':>10} {'peak RSS MB':>12} {'file MB':>8}")
    for r in rows:
        print(
            f"{r['questions']:>10} {r['debate_rounds']:>14} {r['seconds']:>8} {r['debate_rounds_per_s']:>10} "
            f"{r['peak_rss_mb']:>12} {r['trace_file_mb']:>8}"
        )
    base = rows[0]
    print(
        f"peak RSS ratio largest/smallest: {rows[-1]['peak_rss_mb'] / base['peak_rss_mb']:.2f}; "
        f"throughput ratio: {rows[-1]['debate_rounds_per_s'] / base['debate_rounds_per_s']:.2f}"
    )
    ok = all(r["peak_rss_mb"] < 1024 for r in rows)
    print("peak RSS < 1 GB at every size:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
