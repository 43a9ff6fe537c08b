"""Eta statistics, counted in ONE place: the eta rate per round and the coverage of a set of debates.

``eta`` is 1 for a (question, round) when some debater's answer at that round matches gold. The eta rate of a
round is the share of rows (debates still running at that round) with ``eta = 1``; the coverage is the share of
questions where some round has ``eta = 1``. The rollout engine (:mod:`metamod.rollout.debate`), the moderator
dataset builder (:mod:`metamod.rollout.snapshots`), the debate-dynamics summary (:mod:`metamod.rollout.analysis`)
and the model card (:mod:`metamod.train.model_card`) all count with :class:`EtaTally`.

>>> tally = eta_tally([{"id": "a", "round": 0, "eta": 0}, {"id": "a", "round": 1, "eta": 1},
...                    {"id": "b", "round": 0, "eta": 0}])
>>> tally.eta_rate_by_round(), tally.rows_by_round, tally.coverage(), tally.questions
([0.0, 1.0], {0: 2, 1: 1}, 0.5, 2)
>>> EtaTally().coverage() is None
True
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


def _rate(num: float, den: float, digits: int | None) -> float | None:
    if not den:
        return None
    value = num / den
    return round(value, digits) if digits is not None else value


@dataclass
class EtaTally:
    """Running counts of ``eta`` per round and per question.

    Attributes:
        eta_by_round: rows with ``eta = 1``, per round.
        rows_by_round: rows (debates active at that round), per round.
        covered: per question key, whether some round had ``eta = 1``.
    """

    eta_by_round: dict[int, int] = field(default_factory=dict)
    rows_by_round: dict[int, int] = field(default_factory=dict)
    covered: dict[Hashable, bool] = field(default_factory=dict)

    def add(self, question: Hashable, round_index: int, eta: int | bool) -> None:
        """Count one (question, round) row.

        Args:
            question: a key unique to the debate (its id, or ``(id, position)`` when ids may repeat).
            round_index: the round (0-based).
            eta: the row's label (1: a correct answer is on the table).
        """
        t, hit = int(round_index), bool(int(eta))
        self.eta_by_round[t] = self.eta_by_round.get(t, 0) + int(hit)
        self.rows_by_round[t] = self.rows_by_round.get(t, 0) + 1
        self.covered[question] = self.covered.get(question, False) or hit

    def add_trace(self, trace: Mapping[str, Any], key: Hashable | None = None) -> None:
        """Count every round of a trace (schema version 1); ``key`` defaults to the trace's ``id``."""
        question = trace["id"] if key is None else key
        for rnd in trace["rounds"]:
            self.add(question, rnd["round"], rnd["eta"])

    @property
    def questions(self) -> int:
        """Questions counted."""
        return len(self.covered)

    @property
    def rows(self) -> int:
        """Rows counted (all rounds)."""
        return sum(self.rows_by_round.values())

    def eta_rate_by_round(self, digits: int | None = 4) -> list[float | None]:
        """Eta rate of each counted round, in round order (rounded to ``digits``; ``None`` digits: unrounded)."""
        return [_rate(self.eta_by_round[t], n, digits) for t, n in sorted(self.rows_by_round.items())]

    def eta_rate_per_round(self, digits: int | None = 4) -> dict[int, float | None]:
        """``{round: eta rate}`` (see :meth:`eta_rate_by_round`)."""
        return {t: _rate(self.eta_by_round[t], n, digits) for t, n in sorted(self.rows_by_round.items())}

    def eta_rate(self, digits: int | None = 4) -> float | None:
        """Eta rate over all rows (``None`` when nothing was counted)."""
        return _rate(sum(self.eta_by_round.values()), self.rows, digits)

    def coverage(self, digits: int | None = 4) -> float | None:
        """Share of questions with ``eta = 1`` at some round (``None`` when nothing was counted)."""
        return _rate(sum(self.covered.values()), self.questions, digits)


def eta_tally(rows: Iterable[Mapping[str, Any]], *, key: str = "id") -> EtaTally:
    """Count moderator-dataset rows (``id``, ``round``, ``eta`` columns) into an :class:`EtaTally`.

    Args:
        rows: mappings with the question key column, ``round`` and ``eta``.
        key: the column that identifies a question.

    Returns:
        The filled tally.
    """
    tally = EtaTally()
    for row in rows:
        tally.add(row[key], row["round"], row["eta"])
    return tally
