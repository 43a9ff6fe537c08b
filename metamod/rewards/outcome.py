"""The outcome reward: STOP is paid by the moderator's OWN answer, CONTINUE by the recorded future of the debate.

The paper's control reward reads ``eta`` (some debater's answer at this round is correct): it pays STOP whenever a
correct answer is on the table, even when the moderator then picks a wrong one, and pays CONTINUE only when none
is, whatever the later rounds bring. The outcome reward prices both actions by what they lead to:

* ``STOP <answer>a</answer>`` (format-valid): 1 when ``a`` is correct under the shared grader
  (:func:`metamod.tasks.grading.is_equivalent`, the grader of ``eta`` and of the evaluation), else 0. It reads the
  gold answer, so a moderator trained with it is labelled as gold-supervised (``gold_use``), like ``answer``.
* ``CONTINUE``: the value of the recorded future of the same debate under an estimator chosen when the dataset is
  built (``metamod build-dataset --outcome_estimator``), minus a per-round cost ``lambda``
  (``metamod train --outcome_round_cost``) for each round the estimate spends.
* anything else (an unparsable or format-invalid output): 0. On the forced-answer round (``is_final_round``) and on
  the last round of the budget (no later round exists) CONTINUE scores 0, as the format reward treats it there.
  When the recording stopped before its budget (a debate ended by a hook; an MRO trace after a live Accept or
  Patch) the value of continuing is unknown: CONTINUE gets ``None`` (TRL leaves this reward out for that
  completion; the other configured rewards still score it).

The recorded future is the column ``future_correct``: for a row at round ``t``, the correctness (0/1) of the
debaters' majority answer (:func:`metamod.tasks.voting.majority_answer`, graded by the shared grader; no parsable
answer is 0) at each recorded later round ``t+1, t+2, ...``; ``[]`` at the budget's last round, ``None`` when the
recording stopped early. For MRO controller rows it is the Reasoner's candidate's correctness at each recorded
later iteration. With ``c_r`` that correctness and ``lambda`` the cost, an estimator picks a stopping round ``r*``
and values continuing at ``c_{r*} - lambda * (r* - t)``:

* ``next_majority`` (default): ``r* = t + 1``, the majority one round later (what stopping at the next decision
  point with the majority gives; the moderator's own future answer was never recorded).
* ``best_later``: the best ``r > t`` of ``c_r - lambda * (r - t)`` (an oracle stopping time: optimistic).
* ``final_majority``: ``r* =`` the last recorded round (what running to ``T_max`` gives).

Bias. The future was recorded under the rollout's own policy (no moderator, every debate run to ``T_max``), so
each estimate is the value of continuing under that recording policy, not under the learner's later decisions
(off-policy). ``best_later`` is optimistic (it stops at the best round in hindsight; no policy can, and it rewards
continuing whenever any later majority is right). ``next_majority`` and ``final_majority`` are pessimistic with
respect to a good moderator (one that would pick a correct minority answer, or stop at the better round), and
``final_majority`` carries the most variance from rounds far away. The default, ``next_majority``, is the one-step
look-ahead: the least off-policy of the three (one recorded round instead of all of them) and neither an oracle
nor a pure end-of-budget bet. Its cost default 0.05 makes a round worth paying for only when it makes the majority
right with probability above 5% more than stopping now would: small beside the 0/1 outcome, large enough to break
the tie toward stopping when continuing changes nothing.

>>> r = OutcomeReward(round_cost=0.1)
>>> r(["STOP <answer>4</answer>", "STOP <answer>5</answer>", "CONTINUE", "CONTINUE.", "CONTINUE"],
...   gold=["4"] * 5, kind=["math"] * 5, future_correct=[[1], [1], [0, 1], [0, 1], None],
...   outcome_estimator=["best_later"] * 5)
[1.0, 0.0, 0.8, 0.0, None]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metamod.rewards.moderator import CONTINUE, STOP, completion_text, parse_decision

#: estimator name -> what it values continuing at (``metamod build-dataset --outcome_estimator``)
ESTIMATORS = {
    "next_majority": "the debaters' majority one round later (one-step look-ahead)",
    "best_later": "the best later round's majority, each round priced (an oracle stopping time: optimistic)",
    "final_majority": "the majority at the last recorded round (running to T_max)",
}
DEFAULT_ESTIMATOR = "next_majority"
#: the default per-round cost lambda (``metamod train --outcome_round_cost``)
DEFAULT_ROUND_COST = 0.05
#: the dataset columns the reward reads beyond ``gold`` / ``kind`` (written by ``metamod build-dataset``)
OUTCOME_COLUMNS = ("future_correct", "outcome_estimator")
REBUILD_HINT = (
    "rebuild it with `metamod build-dataset --traces <traces.jsonl> --output_dir <dir> --overwrite true` "
    "(datasets built before the outcome reward lack these columns)"
)


def check_estimator(name: str) -> str:
    """Return ``name`` when it is a known estimator, else fail in one line naming the valid ones.

    >>> check_estimator("best_later")
    'best_later'
    """
    if name not in ESTIMATORS:
        raise ValueError(f"outcome_estimator must be one of {list(ESTIMATORS)}, got {name!r}")
    return name


def continue_value(future_correct: Sequence[int] | None, estimator: str, round_cost: float = 0.0) -> float | None:
    """The value of CONTINUE at round ``t`` given the recorded later correctness ``c_{t+1}, c_{t+2}, ...``.

    Each later round ``r`` is worth ``c_r - round_cost * (r - t)``; the estimator picks the next one, the best one
    or the last one (module docstring). ``None`` when no later round was recorded (``[]``: the budget's last round;
    ``None``: the recording stopped early).

    >>> [continue_value([0, 1, 0], e, 0.1) for e in ("next_majority", "best_later", "final_majority")]
    [-0.1, 0.8, -0.3]
    >>> continue_value([], "next_majority") is None, continue_value(None, "best_later") is None
    (True, True)
    """
    check_estimator(estimator)
    if not future_correct:
        return None
    values = [float(c) - round_cost * (k + 1) for k, c in enumerate(future_correct)]
    if estimator == "next_majority":
        value = values[0]
    elif estimator == "final_majority":
        value = values[-1]
    else:
        value = max(values)
    return round(value, 10)


def check_outcome_columns(column_names: Sequence[str], *, where: str) -> None:
    """Fail in one line when a dataset lacks a column the outcome reward reads (before any model loads).

    >>> check_outcome_columns(["prompt", "eta"], where="data/x[train]")
    Traceback (most recent call last):
    ...
    ValueError: reward 'outcome' needs dataset column(s) ['future_correct', 'outcome_estimator', 'gold', 'kind']; data/x[train] lacks them: rebuild it with `metamod build-dataset --traces <traces.jsonl> --output_dir <dir> --overwrite true` (datasets built before the outcome reward lack these columns)
    """
    missing = [c for c in (*OUTCOME_COLUMNS, "gold", "kind") if c not in column_names]
    if missing:
        raise ValueError(f"reward 'outcome' needs dataset column(s) {missing}; {where} lacks them: {REBUILD_HINT}")


def _flag(values: Sequence[Any] | None, index: int) -> bool:
    return bool(values[index]) if values is not None and values[index] is not None else False


class OutcomeReward:
    """R_out: a format-valid ``STOP`` scores 1 when its own answer is correct under the shared grader (else 0), a
    ``CONTINUE`` the recorded future's value minus ``round_cost`` per round it spends; invalid outputs score 0.

    The rules (forced-answer and last rounds, unknown futures, the estimators) are in this module's docstring. The
    instance is picklable and named ``outcome_reward`` (TRL logs ``rewards/outcome_reward/mean``).
    """

    def __init__(self, round_cost: float = DEFAULT_ROUND_COST):
        if not 0.0 <= float(round_cost) < 1.0:
            raise ValueError(f"outcome_round_cost must be in [0, 1), got {round_cost}")
        self.round_cost = float(round_cost)
        self.__name__ = "outcome_reward"

    def __call__(
        self,
        completions: Sequence[Any],
        gold: Sequence[str] | None = None,
        kind: Sequence[str] | None = None,
        future_correct: Sequence[Sequence[int] | None] | None = None,
        outcome_estimator: Sequence[str] | None = None,
        is_final_round: Sequence[bool] | None = None,
        choices: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        from metamod.tasks.grading import is_equivalent

        given = {"future_correct": future_correct, "outcome_estimator": outcome_estimator, "gold": gold, "kind": kind}
        check_outcome_columns([name for name, values in given.items() if values is not None], where="the dataset")
        rewards: list[float | None] = []
        for i, completion in enumerate(completions):
            decision = parse_decision(completion_text(completion))
            if not decision.valid:
                rewards.append(0.0)
            elif decision.action == STOP:
                row_choices = choices[i] if choices is not None else None
                correct = is_equivalent(decision.answer, str(gold[i]), str(kind[i]), row_choices or None)
                rewards.append(1.0 if correct else 0.0)
            elif decision.action == CONTINUE and _flag(is_final_round, i):
                rewards.append(0.0)  # the forced-answer prompt allows STOP + answer only
            elif future_correct[i] is None:
                rewards.append(None)  # the recording stopped early: the value of continuing is unknown
            else:
                value = continue_value(future_correct[i], str(outcome_estimator[i]), self.round_cost)
                rewards.append(0.0 if value is None else value)  # no later round: nothing to continue to
        return rewards

    def __repr__(self) -> str:
        return f"OutcomeReward(round_cost={self.round_cost})"


#: the registered instance (default cost); ``metamod train`` builds its own with ``outcome_round_cost``
outcome_reward = OutcomeReward(DEFAULT_ROUND_COST)
