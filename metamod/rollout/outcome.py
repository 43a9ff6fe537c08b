"""The recorded future of each snapshot: the columns the outcome reward reads (:mod:`metamod.rewards.outcome`).

For a row at round ``t`` of a recorded debate, ``future_correct`` lists whether the debaters' majority answer
(:func:`metamod.tasks.voting.majority_answer`, the evaluation's rule: seeded hash tie-break, seed 0, the question's
id) is correct under the shared grader at each recorded later round ``t+1, ...`` (over the kept agents when the
dataset keeps fewer); ``[]`` at the last round of the budget (nothing to continue to) and ``None`` at the last
recorded round of a recording that stopped before its budget (the future is unknown). For an MRO trace the
"majority" of an iteration is its one candidate, so ``future_correct`` lists the ``eta`` of the later iterations
(recorded only after a Restart). ``continue_value`` is the build's estimator applied with no round cost (the
reward subtracts its own ``outcome_round_cost``); ``outcome_estimator`` names the estimator on every row.

Nothing is generated: everything is read from the traces on disk.

>>> from metamod.rollout.traces import example_trace
>>> majority_correct(example_trace("q1"), [["4", "4", "5"], ["5", "5", "4"], [None, None]])
[1, 0, 0]
>>> futures([1, 0, 1], at_budget=True), futures([1, 0], at_budget=False)
([[0, 1], [1], []], [[0], None])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metamod.rewards.outcome import DEFAULT_ESTIMATOR, check_estimator, continue_value
from metamod.tasks.grading import is_equivalent
from metamod.tasks.voting import majority_answer

#: the columns this module adds to every moderator-dataset row
OUTCOME_COLUMNS = ("future_correct", "continue_value", "outcome_estimator")


def majority_correct(trace: dict, answers_by_round: Sequence[Sequence[str | None]]) -> list[int]:
    """1 when the majority of a round's answers is correct under the shared grader, per round (no answer: 0)."""
    choices = list(trace["choices"]) if trace.get("choices") else None
    out = []
    for answers in answers_by_round:
        winner = majority_answer(list(answers), kind=trace["kind"], choices=choices, seed=0, question_id=trace["id"])
        out.append(int(winner is not None and is_equivalent(winner, trace["gold"], trace["kind"], choices)))
    return out


def futures(correct: Sequence[int], *, at_budget: bool) -> list[list[int] | None]:
    """Per row, the correctness at the later rows; the last row gets ``[]`` at the budget, else ``None``."""
    rows: list[list[int] | None] = [list(correct[i + 1 :]) for i in range(len(correct))]
    if rows and not at_budget:
        rows[-1] = None
    return rows


def add_outcome_columns(
    rows: list[dict[str, Any]], correct: Sequence[int], *, at_budget: bool, estimator: str = DEFAULT_ESTIMATOR
) -> list[dict[str, Any]]:
    """Add :data:`OUTCOME_COLUMNS` to one trace's rows (in round order) from the per-row correctness ``correct``.

    Args:
        rows: the trace's dataset rows, one per kept round or iteration.
        correct: per row, whether stopping there with the majority (the MRO candidate) is correct.
        at_budget: whether the last row is the last round of the budget (else the recording stopped early).
        estimator: the outcome estimator (:data:`metamod.rewards.outcome.ESTIMATORS`).

    Returns:
        ``rows``, updated in place.

    >>> add_outcome_columns([{"round": 0}, {"round": 1}], [0, 1], at_budget=True, estimator="next_majority")
    [{'round': 0, 'future_correct': [1], 'continue_value': 1.0, 'outcome_estimator': 'next_majority'}, \
{'round': 1, 'future_correct': [], 'continue_value': None, 'outcome_estimator': 'next_majority'}]
    """
    check_estimator(estimator)
    if len(rows) != len(correct):
        raise ValueError(f"add_outcome_columns got {len(rows)} rows but {len(correct)} correctness values")
    for row, future in zip(rows, futures(correct, at_budget=at_budget), strict=True):
        row["future_correct"] = future
        row["continue_value"] = continue_value(future, estimator)
        row["outcome_estimator"] = estimator
    return rows


def outcome_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean ``continue_value`` per round (rows where it is known) and the counts of rows without one.

    >>> outcome_summary([{"round": 0, "continue_value": 1.0, "future_correct": [1], "outcome_estimator": "x"},
    ...                  {"round": 0, "continue_value": 0.0, "future_correct": [0], "outcome_estimator": "x"},
    ...                  {"round": 1, "continue_value": None, "future_correct": None, "outcome_estimator": "x"}])
    {'estimator': 'x', 'continue_value_by_round': [0.5, None], 'rows_at_budget_end': 0, 'rows_future_unknown': 1}
    """
    by_round: dict[int, list[float]] = {}
    for row in rows:
        values = by_round.setdefault(int(row["round"]), [])
        if row["continue_value"] is not None:
            values.append(float(row["continue_value"]))
    means = [
        round(sum(by_round[t]) / len(by_round[t]), 4) if by_round.get(t) else None
        for t in range(max(by_round) + 1 if by_round else 0)
    ]
    return {
        "estimator": rows[0]["outcome_estimator"] if rows else None,
        "continue_value_by_round": means,
        "rows_at_budget_end": sum(row["future_correct"] == [] for row in rows),
        "rows_future_unknown": sum(row["future_correct"] is None for row in rows),
    }
