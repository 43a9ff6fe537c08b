"""Calibrated stopping for the MRO loop's Controller: P(STOP) and P(Accept) per iteration, reliability, sweeps.

Both Controller kinds record, per iteration, ``p_stop``, the probability that the Controller ends the loop, read from
the top-k log-probs of the same request (``history[k].controller.p_stop`` in ``method-traces.jsonl``):

* a moderator Controller (``mro_trained_controller``, ``mro_prompted_moderator``): its P(STOP) at the decision word;
  ``STOP`` ends the loop (Accept when its answer is the candidate's, Patch otherwise), ``CONTINUE`` restarts;
* the prompted Controller (``mro``, ``mc2``, ``mro_micro``: ``ACTION: ACCEPT|PATCH|RESTART``): P(ACCEPT) + P(PATCH)
  at its ``ACTION`` value; it also records ``p_accept``, P(ACCEPT) there
  (:func:`~metamod.rollout.mro.parse.action_probabilities`). A moderator Controller has no ``p_accept``: its Accept
  is a STOP whose written answer equals the candidate's, so no single token's distribution gives it.

They are copied to the samples row's ``details["mro"]`` (:func:`controller_stop_details`). From those,
:func:`controller_stopping` gives, per method and task:

* ``controller_reliability``: P(STOP) of the non-forced iterations in 10 bins against the iteration's
  correctness (eta: the candidate is right, the Controller's target), with the ECE;
* ``controller_stop_curve``: per threshold ``tau``, the loop stopping at the first iteration with
  ``P(STOP) >= tau`` (answer: the Controller's own when it said ``STOP``, else the candidate's);
* with ``p_accept`` (the prompted Controller): ``controller_accept_reliability``, P(Accept) of the non-forced
  iterations against eta (the candidate being right is exactly when accepting it is right), and
  ``controller_accept_curve``, per ``tau`` the loop stopping and taking the CANDIDATE at the first iteration with
  ``P(Accept) >= tau`` (at the budget the last candidate is final, as in the live loop).

**What a recorded run can show.** Iterations after the live Controller stopped were never generated. A threshold
that would go on where the live Controller stopped cannot be evaluated on that question: such questions are
counted (``beyond_record``) and left out of that point's ``accuracy`` (over ``covered`` questions); only the points
with ``beyond_record == 0`` describe the whole set. In practice these are the thresholds up to the smallest
probability at which the live Controller stopped. A P(Accept) sweep also goes on past a live Patch (it never
patches): that question is ``beyond_record`` for every threshold above its P(Accept) there.

>>> d = {"p_stop": [0.2, 0.9], "stop_correct": [0, 1], "eta": [0, 1], "forced_last": False, "iterations": 2}
>>> [(p["threshold"], p["covered"], p["beyond_record"], p["accuracy"]) for p in stop_sweep([d], [0.1, 0.5, 0.95])]
[(0.1, 1, 0, 0.0), (0.5, 1, 0, 1.0), (0.95, 0, 1, None)]
>>> d["p_accept"] = [0.1, 0.8]
>>> [(p["threshold"], p["accuracy"], p["mean_iterations"]) for p in accept_sweep([d], [0.05, 0.5])]
[(0.05, 0.0, 1.0), (0.5, 1.0, 2.0)]
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
    out = {"p_stop": [r["controller"]["p_stop"] for r in history], "stop_correct": stop_correct}
    if "p_accept" in history[0]["controller"]:
        out["p_accept"] = [r["controller"]["p_accept"] for r in history]
    return out


def stop_sweep(
    details: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float],
    *,
    key: str = "p_stop",
    correct: str = "stop_correct",
) -> list[dict[str, Any]]:
    """Per threshold: covered questions, ``beyond_record``, accuracy over the covered ones, mean iterations.

    The loop stops at the first iteration whose ``d[key]`` is ``>= tau`` (``None`` never stops) and is right when
    ``d[correct]`` is there; at a forced last iteration (the budget) it stops whatever the probability.
    """
    points = []
    for tau in thresholds:
        outcomes = []
        beyond = 0
        for d in details:
            last = len(d[key]) - 1
            for k, p in enumerate(d[key]):
                if d["forced_last"] and k == last:  # the budget ended the loop: the recorded outcome
                    outcomes.append((k + 1, bool(d[correct][k])))
                    break
                if p is not None and p >= tau:
                    outcomes.append((k + 1, bool(d[correct][k])))
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


def accept_sweep(details: Sequence[Mapping[str, Any]], thresholds: Sequence[float]) -> list[dict[str, Any]]:
    """:func:`stop_sweep` on P(Accept): stop at the first iteration with ``p_accept >= tau`` and take the candidate
    (right when ``eta``); at the budget the last candidate. At ``tau = 0.5`` it is the live loop wherever the live
    Controller accepted exactly when P(Accept) >= 0.5 and never patched."""
    return stop_sweep(details, thresholds, key="p_accept", correct="eta")


def controller_reliability(details: Sequence[Mapping[str, Any]], bins: int = 10, key: str = "p_stop") -> dict[str, Any]:
    """``d[key]`` (P(STOP), or P(Accept) with ``key="p_accept"``) of the non-forced iterations binned against the
    iteration's correctness (eta), with the ECE; the output names the probability (``mean_<key>``,
    ``<key>_missing``)."""
    from ..stop_curve import reliability

    questions = []
    for d in details:
        steps = [{key: p, "eta": e} for p, e in zip(d[key], d["eta"], strict=True)]
        if not d["forced_last"]:
            steps.append({key: None, "eta": None})  # reliability() drops each question's last step
        questions.append({"steps": steps})
    return reliability(questions, bins, key=key)


def _grid(details: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    observed = [p for d in details for p in d[key]]
    return threshold_grid(observed) if observed else list(GRID)


def controller_stopping(details: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The MRO metrics' calibrated-stopping keys (``{}`` when no record carries a Controller's P(STOP)); the
    P(Accept) keys when the records carry ``p_accept`` (the prompted Controller)."""
    details = [d for d in details if d.get("p_stop") is not None]
    if not details:
        return {}
    out = {
        "controller_reliability": controller_reliability(details),
        "controller_stop_curve": stop_sweep(details, _grid(details, "p_stop")),
    }
    accepting = [d for d in details if d.get("p_accept") is not None]
    if accepting:
        out["controller_accept_reliability"] = controller_reliability(accepting, key="p_accept")
        out["controller_accept_curve"] = accept_sweep(accepting, _grid(accepting, "p_accept"))
    return out
