"""MRO traces -> controller snapshots: one moderator-dataset row per (instance, iteration).

The state is what the Controller sees at iteration ``k``: the question, the Reasoner's candidate solution and the
Monitor's report, rendered by :func:`metamod.rollout.state.controller_messages` (the function the
``mro_trained_controller`` evaluation method prompts with). ``eta`` is 1 when the candidate's answer is correct
(the trace's per-iteration correctness, graded by the shared grader), so the moderator's rewards apply unchanged:
STOP (= Accept with the answer) pays when the candidate is right, CONTINUE (= Restart) when it is wrong. The last
iteration of the budget gets the forced-answer prompt (``is_final_round``; the control reward skips it), unless
``single_template``.

The outcome reward (:mod:`metamod.rewards.outcome`) reads the recorded later iterations: STOP (Accept, or Patch
with the Controller's own answer: both write ``STOP <answer>...</answer>``) is paid by that answer's correctness,
CONTINUE (Restart) by the next recorded candidate's correctness (``next_majority``; the others likewise) minus the
round cost. A trace records a later iteration only after a Restart: at the iteration where the recording Controller
accepted or patched, the value of restarting is unknown (``future_correct`` ``None``; the reward gives CONTINUE
``None`` there, leaving it to the other rewards), and at the last iteration of the budget there is nothing to
restart to (``[]``: CONTINUE scores 0).

>>> from metamod.rollout.mro.traces import example_mro_trace
>>> rows = mro_snapshot_rows(example_mro_trace("q1"))
>>> [(r["round"], r["eta"], r["answers"], r["is_final_round"]) for r in rows]
[(0, 0, ['5'], False), (1, 0, ['3'], False)]
>>> "Auditor's report" in rows[0]["prompt"][0]["content"]
True
"""

from __future__ import annotations

from typing import Any

from metamod.rewards.outcome import DEFAULT_ESTIMATOR
from metamod.rollout.mro.parse import MonitorReport, report_text
from metamod.rollout.outcome import add_outcome_columns
from metamod.rollout.state import controller_messages


def _report(monitor: dict[str, Any]) -> str:
    report = MonitorReport(
        error_found=monitor["error_found"],
        error_step=monitor["error_step"],
        error=monitor["error"],
        explanation=monitor["explanation"],
        parse=monitor["parse"],
    )
    return report_text(report, monitor["text"])


def mro_snapshot_rows(
    trace: dict,
    *,
    max_rounds: int | None = None,
    single_template: bool = False,
    outcome_estimator: str = DEFAULT_ESTIMATOR,
) -> list[dict[str, Any]]:
    """The controller rows of one MRO trace (columns of :data:`metamod.rollout.snapshots.COLUMNS`).

    Args:
        trace: a schema-valid MRO trace.
        max_rounds: optional iteration budget of the dataset (longer traces are truncated; its last iteration is
            the forced one). ``None``: the trace's ``max_iterations``.
        single_template: the STOP/CONTINUE prompt on every row and ``is_final_round`` false everywhere.
        outcome_estimator: how ``continue_value`` values the recorded later iterations (Restart); see the module
            docstring.

    Returns:
        One row per iteration.
    """
    budget = max_rounds if max_rounds is not None else int(trace["max_iterations"])
    choices = list(trace["choices"]) if trace.get("choices") else None
    rows = []
    for record in trace["history"][:budget]:
        final = not single_template and record["iteration"] == budget
        rows.append(
            {
                "prompt": controller_messages(
                    trace["question"], record["reasoner"]["text"], _report(record["monitor"]), final=final
                ),
                "eta": int(record["eta"]),
                "gold": trace["gold"],
                "kind": trace["kind"],
                "round": record["iteration"] - 1,
                "is_final_round": final,
                "id": trace["id"],
                "task": trace["task"],
                "answers": [record["reasoner"]["answer"]],
                "num_agents": 1,
                "simulated": bool(trace["simulated"]),
                "choices": choices,
            }
        )
    at_budget = bool(rows) and trace["history"][len(rows) - 1]["iteration"] == budget
    return add_outcome_columns(rows, [row["eta"] for row in rows], at_budget=at_budget, estimator=outcome_estimator)
