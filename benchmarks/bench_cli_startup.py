"""How long ``metamod <command> --help`` takes: the import cost a user pays before any command starts.

Each command's help is timed ``--repeats`` times in fresh interpreters (``python -m metamod.cli <command> --help``)
and the fastest run is kept (the least disturbed by other load). With ``--baseline DIR`` (a checkout of another
revision, e.g. ``git worktree add /tmp/before <rev>``) the same commands run from that folder too, interleaved with
this checkout's runs, and the ratio is printed: both sides are measured in one run, on the same machine state.

    python benchmarks/bench_cli_startup.py --baseline /tmp/before --commands eval rollout
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

logger = logging.getLogger("bench_cli_startup")
ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["eval", "rollout", "build-dataset", "fit-cheatsheet", "mine-behaviours", "export", "sweep"]


def time_help(folder: Path, command: str) -> float:
    """Seconds for one ``python -m metamod.cli <command> --help`` run from ``folder`` (its ``metamod`` first)."""
    env = {**os.environ, "PYTHONPATH": str(folder)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "metamod.cli", command, "--help"],
        cwd=folder,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", nargs="*", default=COMMANDS, help="commands to time")
    parser.add_argument("--repeats", type=int, default=5, help="runs per command and side (the fastest is kept)")
    parser.add_argument("--baseline", type=Path, default=None, help="a checkout of another revision to compare")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sides = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    logger.info(
        "%-16s %s", "command", "  ".join(f"{name:>10}" for name in sides) + ("   ratio" if args.baseline else "")
    )
    for command in args.commands:
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(args.repeats):
            for name, folder in sides.items():  # interleaved: both sides see the same load
                best[name] = min(best[name], time_help(folder, command))
        ratio = f"   {best['this'] / best['baseline']:.2f}x" if args.baseline else ""
        logger.info("%-16s %s%s", command, "  ".join(f"{best[n]:>9.3f}s" for n in sides), ratio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
