"""Smoke test of benchmarks/bench_sandbox.py: a tiny run in-process (about a second), every row and ratio present."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sandbox.py"


def test_tiny_benchmark_run_reports_every_number(capsys):
    spec = importlib.util.spec_from_file_location("bench_sandbox", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        res = module.main(["--rounds", "3", "--batch", "6", "--calls", "3"])
    finally:
        sys.modules.pop(spec.name, None)
    assert set(res["overhead"]) == {"bare", "bare -I -S", "sandbox", "run_function (3 calls)"}
    assert all(row["n"] == 3 and 0 < row["median"] <= row["p90"] for row in res["overhead"].values())
    assert res["ratio"] > 0 and res["ratio_floor"] > 0 and res["speedup"] > 0
    assert [row["n"] for row in res["batch"]] == [6, 6] and res["batch"][0]["workers"] == 1
    assert "sandbox / bare =" in capsys.readouterr().out
