"""Run every benchmark in sequence (``make bench``); each prints its own side-by-side numbers.

The measured numbers are recorded by hand in benchmarks/README.md (with the machine's load at the time).
``--only NAME ...`` picks some; ``--skip NAME ...`` leaves some out. The simulated-table benchmark needs a
trained adapter: it uses ``checkpoints/demo/moderator`` (from ``make demo``) when no ``--adapter`` is given and
trains nothing itself.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> extra arguments (the scripts' own defaults are the recorded settings)
BENCHMARKS: dict[str, list[str]] = {
    "bench_sim_throughput": [],
    "bench_engine_overhead": [],
    "bench_mro_engine": [],
    "bench_mca": [],
    "bench_train_overhead": [],
    "bench_shared_transcripts": [],
    "bench_learns": [],
    "bench_sim_table": [],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(BENCHMARKS), help="leave these out")
    parser.add_argument("--adapter", default="checkpoints/demo/moderator", help="adapter for bench_sim_table")
    args = parser.parse_args(argv)
    names = [n for n in (args.only or BENCHMARKS) if n not in args.skip]
    failures = []
    for name in names:
        extra = list(BENCHMARKS[name])
        if name == "bench_sim_table":
            if not Path(args.adapter, "adapter_config.json").is_file():
                print(f"== {name}: SKIP (no adapter at {args.adapter}; run `make demo` or pass --adapter)")
                continue
            extra += ["--adapter", args.adapter]
        print(f"== {name} {' '.join(extra)}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / f"{name}.py"), *extra])
        print(f"== {name}: exit {code} after {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failures.append(name)
    if failures:
        print(f"failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
