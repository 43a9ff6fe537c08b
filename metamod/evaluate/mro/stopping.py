"""Calibrated stopping for the MRO loop's moderator Controller: P(STOP) per iteration, its reliability, a sweep.

A moderator Controller (``mro_trained_controller``, ``mro_prompted_moderator``) answers each iteration with the
moderator protocol; ``STOP`` ends the loop (Accept when its answer is the candidate's, Patch otherwise),
``CONTINUE`` restarts. Its P(STOP), read from the top-k log-probs of the same request, is recorded per iteration
(``history[k].controller.p_stop`` in ``method-traces.jsonl``) and copied to the samples row's ``details["mro"]``
(:func:`controller_stop_details`). From those, :func:`controller_stopping` gives, per method and task:

* ``controller_reliability``: P(STOP) of the non-forced iterations in 10 bins against the iteration's
  correctness (eta: the candidate is right, the Controller's target), with the ECE;
* ``controller_stop_curve``: per threshold ``tau``, the loop stopping at the first iteration with
  ``P(STOP) >= tau`` (answer: the Controller's own when it said ``STOP``, else the candidate's).

**What a recorded run can show.** Iterations after the live Controller stopped were never generated. A threshold
that would go on where the live Controller stopped cannot be evaluated on that question: such questions are
counted (``beyond_record``) and left out of that point's ``accuracy`` (over ``covered`` questions); only the points
with ``beyond_record == 0`` describe the whole set. In practice these are the thresholds up to the smallest
P(STOP) at which the live Controller stopped.

>>> d = {"p_stop": [0.2, 0.9], "stop_correct": [0, 1], "eta": [0, 1], "forced_last": False, "iterations": 2}
>>> [(p["threshold"], p["covered"], p["beyond_record"], p["accuracy"]) for p in stop_sweep([d], [0.1, 0.5, 0.95])]
[(0.1, 1, 0, 0.0), (0.5, 1, 0, 1.0), (0.95, 0, 1, None)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..stop_curve import GRID, threshold_grid

#: the Controller's actions (MC² trace schema)
_ACCEPT, _PATCH = 1, 2


def controller_stop_details(history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``p_stop`` and ``stop_correct`` per iteration for ``details["mro"]`` (``{}`` without a moderator Controller).

    ``stop_correct[k]``: whether stopping at iteration ``k`` would be right: the Controller's answer when it said
    ``STOP`` (Accept / Patch), else the candidate's (``eta``).
    """
    if not history or "p_stop" not in history[0]["controller"]:
        return {}
    stop_correct = []
    for record in history:
        controller = record["controller"]
        if controller["action"] in (_ACCEPT, _PATCH):
            stop_correct.append(int(bool(controller["answer_correct"])))
        else:
            stop_correct.append(int(record["eta"]))
    return {"p_stop": [r["controller"]["p_stop"] for r in history], "stop_correct": stop_correct}


def stop_sweep(details: Sequence[Mapping[str, Any]], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """Per threshold: covered questions, ``beyond_record``, accuracy over the covered ones, mean iterations."""
    points = []
    for tau in thresholds:
        outcomes = []
        beyond = 0
        for d in details:
            last = len(d["p_stop"]) - 1
            for k, p in enumerate(d["p_stop"]):
                if d["forced_last"] and k == last:  # the budget ended the loop: the recorded outcome
                    outcomes.append((k + 1, bool(d["stop_correct"][k])))
                    break
                if p is not None and p >= tau:
                    outcomes.append((k + 1, bool(d["stop_correct"][k])))
                    break
                if k == last:  # the live Controller stopped here; this threshold would go on
                    beyond += 1
        n = len(outcomes)
        points.append(
            {
                "threshold": tau,
                "covered": n,
                "beyond_record": beyond,
                "accuracy": sum(c for _, c in outcomes) / n if n else None,
                "mean_iterations": sum(i for i, _ in outcomes) / n if n else None,
            }
        )
    return points


def controller_reliability(details: Sequence[Mapping[str, Any]], bins: int = 10) -> dict[str, Any]:
    """P(STOP) of the non-forced iterations binned against the iteration's correctness (eta), with the ECE."""
    from ..stop_curve import reliability

    questions = []
    for d in details:
        steps = [{"p_stop": p, "eta": e} for p, e in zip(d["p_stop"], d["eta"], strict=True)]
        if not d["forced_last"]:
            steps.append({"p_stop": None, "eta": None})  # reliability() drops each question's last step
        questions.append({"steps": steps})
    return reliability(questions, bins)


def controller_stopping(details: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The MRO metrics' calibrated-stopping keys (``{}`` when no record carries a moderator Controller's P(STOP))."""
    details = [d for d in details if d.get("p_stop") is not None]
    if not details:
        return {}
    observed = [p for d in details for p in d["p_stop"]]
    grid = threshold_grid(observed) if observed else list(GRID)
    return {
        "controller_reliability": controller_reliability(details),
        "controller_stop_curve": stop_sweep(details, grid),
    }
