"""Metrics over memory batches: the "improves with experience" curve and the MRO actions as experience grows.

Rows of a run with a memory carry ``memory_batch`` (the question's batch number within its task) and each method
record with a memory ``memory_items`` (the ids its memory served). Per method:

* ``accuracy_by_batch``: accuracy of batch 0, 1, ... pooled over seeds (the curve MC² plots);
  ``accuracy_by_batch_per_seed``: the same per seed (``{"0": [...], ...}``);
* ``memory_items_per_question``: mean number of memory items shown per question (methods with a memory);
* MRO methods: ``mean_iterations_by_batch`` and ``action_shares_by_batch`` (per batch, the share of Accept / Patch /
  Restart at each iteration; :func:`metamod.evaluate.mro.metrics.mro_metrics`).

>>> rows = [{"seed": 0, "memory_batch": b, "methods": {"m": {"correct": c, "memory_items": ["L1"] * b}}}
...         for b, c in [(0, False), (0, True), (1, True), (1, True)]]
>>> m = batch_metrics(rows, "m")
>>> m["accuracy_by_batch"], m["memory_items_per_question"]
([0.5, 1.0], 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from .mro.metrics import mro_metrics


def batch_metrics(rows: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Per-batch metrics of ``method`` (``{}`` when its rows carry no ``memory_batch``)."""
    chosen = [r for r in rows if method in r.get("methods", {}) and r.get("memory_batch") is not None]
    if not chosen:
        return {}
    batches = sorted({int(r["memory_batch"]) for r in chosen})
    by_batch = {b: [r for r in chosen if int(r["memory_batch"]) == b] for b in batches}

    def accuracy(rs: list[dict[str, Any]]) -> float | None:
        return mean(float(bool(r["methods"][method]["correct"])) for r in rs) if rs else None

    seeds = sorted({int(r.get("seed", 0)) for r in chosen})
    out: dict[str, Any] = {
        "memory_batches": batches,
        "accuracy_by_batch": [accuracy(by_batch[b]) for b in batches],
        "accuracy_by_batch_per_seed": {
            str(s): [accuracy([r for r in by_batch[b] if int(r.get("seed", 0)) == s]) for b in batches] for s in seeds
        },
    }
    served = [r["methods"][method].get("memory_items") for r in chosen]
    if any(items is not None for items in served):
        out["memory_items_per_question"] = mean(len(items or []) for items in served)
    per_batch_mro = [mro_metrics([r["methods"][method] for r in by_batch[b]]) for b in batches]
    if any(per_batch_mro):
        out["mean_iterations_by_batch"] = [m.get("mean_iterations") for m in per_batch_mro]
        out["action_shares_by_batch"] = [m.get("action_shares_by_iteration") for m in per_batch_mro]
    return out


def half_gains(rows: Sequence[dict[str, Any]], method: str, reference: str | None) -> dict[str, Any]:
    """Accuracy gain of ``method`` over ``reference`` on the first and the second half of the question sequence.

    The sequence is the order the questions were solved in (the order of the rows of each seed); the halves are
    cut per seed (the first ``n // 2`` questions, then the rest) and pooled over seeds, on the questions both
    methods answered. A memory that learns shows a larger second-half gain (MARCO's figure 4, right).

    >>> rows = [{"seed": 0, "id": str(i), "methods": {"m": {"correct": i >= 2}, "ref": {"correct": False}}}
    ...         for i in range(4)]
    >>> half_gains(rows, "m", "ref")
    {'first_half_gain_vs_ref': 0.0, 'second_half_gain_vs_ref': 1.0}
    """
    if not reference or reference == method:
        return {}
    both = [r for r in rows if method in r.get("methods", {}) and reference in r.get("methods", {})]
    if not both:
        return {}
    halves: dict[str, list[float]] = {"first": [], "second": []}
    for seed in sorted({int(r.get("seed", 0)) for r in both}):
        order = [r for r in both if int(r.get("seed", 0)) == seed]
        cut = len(order) // 2
        for name, part in (("first", order[:cut]), ("second", order[cut:])):
            halves[name] += [
                float(bool(r["methods"][method]["correct"])) - float(bool(r["methods"][reference]["correct"]))
                for r in part
            ]
    return {f"{name}_half_gain_vs_{reference}": mean(values) for name, values in halves.items() if values}
