"""Sandbox overhead per execution, and the throughput of a batch with ``run_many``.

Part 1, overhead: the same trivial program (``print(1)`` by default) run ``--rounds`` times each way, interleaved
(one of each per round, in a rotating order, so load changes hit all three alike):

- ``bare``: ``subprocess.run([sys.executable, "-c", code], capture_output=True)``, the plain way to run code;
- ``bare -I -S``: the same with ``-I -S`` (no site import): the floor any fresh interpreter pays;
- ``sandbox``: ``metamod.sandbox.run_python(code)`` with every protection on (namespaces, Landlock, rlimits,
  audit hook, temp work dir made and removed).

It reports the median and 90th percentile of each (ms) and the ratios sandbox / bare and sandbox / bare -I -S;
targets: sandbox median < 50 ms and <= 1.5x bare. A ``run_function`` row (one process, ``--calls`` calls) is
added for reference.

Part 2, batch: ``--batch`` trivial executions through ``run_many`` with ``workers=1`` and with ``workers=None``
(one per core), wall time and speedup.

    .venv/bin/python benchmarks/bench_sandbox.py --quick        # ~5 s (the smoke test runs a smaller one)
    .venv/bin/python benchmarks/bench_sandbox.py                # 200 rounds + a 1,000-run batch, ~2 min on 2 cores
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from metamod.sandbox import capabilities, run_function, run_many, run_python


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


def overhead(code: str, rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Interleaved timings (ms) of the three ways to run ``code``, plus run_function with ``calls`` calls."""
    ways: dict[str, Callable[[], Any]] = {
        "bare": lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, check=True),
        "bare -I -S": lambda: subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, check=True),
        "sandbox": lambda: _check(run_python(code)),
    }
    func_code = "def f(x):\n    return x * 2\n"
    inputs = [str(i) for i in range(calls)]
    expected = [str(2 * i) for i in range(calls)]
    ways[f"run_function ({calls} calls)"] = lambda: _check(run_function(func_code, "f", inputs, expected=expected))
    names = list(ways)
    for fn in ways.values():  # warm-up: the page cache, the probe
        fn()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(_timed(ways[name]))
    return {name: _stats(xs) for name, xs in times.items()}


def batch(code: str, n: int, workers: int | None) -> dict[str, float]:
    """Wall and CPU time of ``n`` executions of ``code`` through run_many with ``workers``; ``cores_busy`` is the
    CPU time (this process and its children) over the wall time."""
    cpu0 = _cpu_s()
    start = time.perf_counter()
    results = run_many([code] * n, workers=workers)
    wall = time.perf_counter() - start
    cpu = _cpu_s() - cpu0
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} of {n} batch runs failed, e.g. {bad[0].summary()}")
    return {
        "n": n,
        "workers": workers or os.cpu_count() or 1,
        "wall_s": wall,
        "per_run_ms": wall / n * 1000.0,
        "cpu_s": cpu,
        "cores_busy": cpu / wall,
    }


def _cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _check(result: Any) -> Any:
    inner = getattr(result, "result", result)
    if not inner.ok:
        raise RuntimeError(f"the sandboxed run failed: {inner.summary()}")
    return result


def _stats(xs: Sequence[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median": statistics.median(xs), "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))], "n": len(xs)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="30 rounds and a 100-run batch")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 200, quick 30)")
    parser.add_argument("--batch", type=int, default=None, help="batch size (default 1000, quick 100)")
    parser.add_argument("--calls", type=int, default=10, help="calls in the run_function row")
    parser.add_argument("--code", default="print(1)", help="the trivial program")
    args = parser.parse_args(argv)
    rounds = args.rounds or (30 if args.quick else 200)
    n_batch = args.batch or (100 if args.quick else 1000)
    caps = capabilities()
    print(
        f"machine: {os.cpu_count()} cores, {os.uname().sysname} {os.uname().release}, python {sys.version.split()[0]}"
    )
    print(f"platform: namespaces={caps.namespaces}, landlock abi={caps.landlock_abi}; load average: {_load()}")
    print(f"isolation: {run_python('pass').isolation}")
    over = overhead(args.code, rounds, args.calls)
    print(f"\n### overhead per execution of {args.code!r}, {rounds} interleaved rounds\n")
    print("| way | median ms | p90 ms |\n|---|---|---|")
    for name, s in over.items():
        print(f"| {name} | {s['median']:.1f} | {s['p90']:.1f} |")
    ratio = over["sandbox"]["median"] / over["bare"]["median"]
    ratio_floor = over["sandbox"]["median"] / over["bare -I -S"]["median"]
    print(f"\nsandbox / bare = {ratio:.2f} (target <= 1.5); sandbox / bare -I -S = {ratio_floor:.2f}")
    serial = batch(args.code, n_batch, 1)
    parallel = batch(args.code, n_batch, None)
    speedup = serial["wall_s"] / parallel["wall_s"]
    print(f"\n### batch of {n_batch} x {args.code!r} through run_many\n")
    print("| workers | wall s | ms per run | CPU s | cores busy |\n|---|---|---|---|---|")
    for row in (serial, parallel):
        print(
            f"| {row['workers']} | {row['wall_s']:.2f} | {row['per_run_ms']:.1f} | {row['cpu_s']:.1f} "
            f"| {row['cores_busy']:.2f} |"
        )
    print(f"\nspeedup = {speedup:.2f}x; load average after: {_load()}")
    return {
        "overhead": over,
        "ratio": ratio,
        "ratio_floor": ratio_floor,
        "batch": [serial, parallel],
        "speedup": speedup,
    }


if __name__ == "__main__":
    main()
