"""Gate metrics from the round-0 decision's ``details["gate"]`` of each record (:mod:`metamod.evaluate.gate`).

* ``gate_stops``, ``gate_stop_rate``: questions the gate stopped after round 0, and their share.
* ``gate_stop_accuracy``: accuracy over those questions; ``gate_debate_accuracy``: over the ones it let the debate
  go on (``None`` when there are none): how right the gate is when it skips the debate, and how hard the rest is.
* ``gate_signal_mean``: the mean signal value (the plurality share at round 0, or among the samples).

>>> gate = lambda fired, value: {"decisions": [{"details": {"gate": {"fired": fired, "value": value}}}]}
>>> recs = [{**gate(True, 1.0), "correct": True}, {**gate(True, 0.8), "correct": False},
...         {**gate(False, 0.4), "correct": True}]
>>> m = gate_metrics(recs)
>>> m["gate_stops"], round(m["gate_stop_rate"], 3), m["gate_stop_accuracy"], m["gate_debate_accuracy"]
(2, 0.667, 0.5, 1.0)
>>> gate_metrics([{"decisions": [{"stop": True}], "correct": True}])
{}
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any


def _gate(record: dict[str, Any]) -> dict[str, Any] | None:
    decisions = record.get("decisions") or []
    return ((decisions[0].get("details") or {}).get("gate")) if decisions else None


def gate_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Gate metrics of one method's records on one task (``{}`` when no record has a gate decision)."""
    gated = [(g, bool(r.get("correct"))) for r in records if (g := _gate(r))]
    if not gated:
        return {}
    stopped = [correct for g, correct in gated if g["fired"]]
    debated = [correct for g, correct in gated if not g["fired"]]
    return {
        "gate_stops": len(stopped),
        "gate_stop_rate": len(stopped) / len(gated),
        "gate_stop_accuracy": sum(stopped) / len(stopped) if stopped else None,
        "gate_debate_accuracy": sum(debated) / len(debated) if debated else None,
        "gate_signal_mean": mean(float(g["value"]) for g, _ in gated),
    }
