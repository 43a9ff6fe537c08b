"""MRO metrics from the ``details["mro"]`` of each record: iterations, action shares per iteration, control accuracy.

* ``mean_iterations``: iterations used per question (1..N).
* ``action_shares_by_iteration``: at iteration ``k`` (1-based, the list index + 1), the share of Accept / Patch /
  Restart among the questions still in the loop; ``action_counts_by_iteration`` the counts.
* ``status_counts``: questions ending ``accepted`` / ``corrected`` / ``max_iterations``.
* ``control_accuracy``: over the Controller's non-forced decisions, the share that agrees with the candidate's
  correctness (Accept or Patch when the candidate is right, Restart when it is wrong): the MRO analogue of the
  moderator's control accuracy against ``eta``. The forced last iteration (budget N reached) is left out, like the
  debate's forced round. ``control_decisions`` is its denominator.
* ``parse_fallbacks``: per role, the outputs read by a fallback (any parse code other than ``ok`` / ``tagged``).

>>> recs = [{"details": {"mro": {"iterations": 2, "max_iterations": 3, "status": "accepted", "actions": [3, 1],
...          "eta": [0, 1], "forced_last": False, "parse": {"controller": ["tagged", "keyword"]}}}}]
>>> m = mro_metrics(recs)
>>> m["mean_iterations"], m["control_accuracy"], m["action_shares_by_iteration"][0]["restart"], m["parse_fallbacks"]
(2, 1.0, 1.0, {'controller': 1})
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean
from typing import Any

from .stopping import controller_stopping

ACTIONS = {1: "accept", 2: "patch", 3: "restart"}
_OK_PARSES = frozenset({"ok", "tagged", "json"})


def mro_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """MRO metrics of one method's records on one task (``{}`` when no record has ``details["mro"]``)."""
    details = [(r.get("details") or {}).get("mro") for r in records]
    details = [d for d in details if d]
    if not details:
        return {}
    budget = max(d["max_iterations"] for d in details)
    counts = [dict.fromkeys(ACTIONS.values(), 0) for _ in range(budget)]
    agree = decisions = 0
    statuses: dict[str, int] = {}
    fallbacks: dict[str, int] = {}
    for d in details:
        statuses[d["status"]] = statuses.get(d["status"], 0) + 1
        for k, (action, eta) in enumerate(zip(d["actions"], d["eta"], strict=True)):
            counts[k][ACTIONS[action]] += 1
            forced = d.get("forced_last") and k == len(d["actions"]) - 1
            if not forced:
                decisions += 1
                agree += int((action in (1, 2)) == bool(eta))
        for role, codes in (d.get("parse") or {}).items():
            bad = sum(1 for c in codes if c not in _OK_PARSES)
            if bad:
                fallbacks[role] = fallbacks.get(role, 0) + bad
    shares = []
    for c in counts:
        n = sum(c.values())
        shares.append({a: (c[a] / n if n else None) for a in ACTIONS.values()})
    return {
        "mean_iterations": mean(d["iterations"] for d in details),
        "action_counts_by_iteration": counts,
        "action_shares_by_iteration": shares,
        "status_counts": statuses,
        "control_accuracy": agree / decisions if decisions else None,
        "control_decisions": decisions,
        "parse_fallbacks": fallbacks,
        **controller_stopping(details),
    }
