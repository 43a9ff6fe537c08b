"""Smoke test of benchmarks/bench_cheatsheet_online.py: ``--quick`` in-process, table rows and birth bookkeeping."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cheatsheet_online.py"


@pytest.fixture(scope="module")
def quick_run():
    spec = importlib.util.spec_from_file_location("bench_cheatsheet_online", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    try:
        spec.loader.exec_module(module)
        return module, module.main(["--quick"])
    finally:
        sys.modules.pop(spec.name, None)


def test_tables_have_the_expected_rows(quick_run):
    module, res = quick_run
    tables = res["tables"]
    assert list(tables["refit_interval"]) == list(module.REFIT_INTERVALS)
    assert list(tables["tau_new"]) == list(module.TAUS)
    assert list(tables["churn"]) == list(module.CHURN_ORGANISERS)
    g = 50
    expected = [(0, "threshold", True), (0, "sample", True)] + [(g, b, m) for b, m in module.BIRTH_MERGE]
    assert list(tables["birth_merge"]) == expected


def test_births_add_up_per_configuration(quick_run):
    _, res = quick_run
    for table, rows in res["tables"].items():
        for key, r in rows.items():
            where = f"{table}[{key}]"
            assert r["K_final"] - r["K0"] == r["net"], where
            assert r["net"] == r["novelty"] + r["sample"] + r["refit_births"] - r["merges"] - r["removed"], where
            assert r["unaccounted"] == 0, where
            assert len(r["churn"]) == r["refits"] and all(0.0 <= c <= 1.0 for c in r["churn"]), where


def test_protocol_rules_show_in_the_counts(quick_run):
    _, res = quick_run
    t1, t2, t4 = res["tables"]["refit_interval"], res["tables"]["birth_merge"], res["tables"]["churn"]
    stream = 120  # --quick
    for g, r in t1.items():
        assert r["refits"] == (stream // g if g else 0)
        if g == 0:  # no refit: every birth is online, nothing merged or removed
            assert r["refit_births"] == r["merges"] == r["removed"] == 0
    for (_g, birth, merge), r in t2.items():
        assert r["novelty" if birth == "sample" else "sample"] == 0  # only the configured rule fires
        if not merge:
            assert r["merges"] == 0
    for name in ("kmeans_hard", "kmeans_soft"):  # k-means never creates components after fit
        assert t4[name]["births"] == 0 and t4[name]["K_final"] <= t4[name]["K0"] == res["K0"]
    # the same configuration (threshold, tau 0.5, merge, g = 50) run four times from one state gives one answer
    same = [t1[50], t2[(50, "threshold", True)], res["tables"]["tau_new"][0.5], t4["hdp"]]
    assert all(
        (r["K_final"], r["churn"], r["online"]) == (same[0]["K_final"], same[0]["churn"], same[0]["online"])
        for r in same
    )
