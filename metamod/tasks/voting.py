"""Heuristic aggregation shared by the decision layers: majority vote with a seeded tie rule, and agreement.

Answers are compared through :func:`metamod.tasks.grading.normalize_answer`, so ``"1,000"`` and ``"1000"`` vote
together and an unparsable answer (``None``) never votes. Ties between equally frequent answers are broken by a
deterministic hash of ``(seed, question id, normalised answer)``: the tied answer with the smallest SHA-256 digest
wins. That rule is independent of agent order (no debater is privileged) and is reproducible across runs,
processes and machines (Python's ``hash`` is salted per process; SHA-256 is not). With ``tie_break="first"`` the
tied answer given first in agent order wins instead (the rollout analysis and the warm-start heuristic use it).

The returned answer is the original text of the first agent (in agent order) whose answer falls in the winning
class, so the grader sees a real model answer rather than the normalised key.

>>> majority_answer(["4", "four", "4.0"], kind="math", seed=0, question_id="q")
'4'
>>> majority_answer([None, "x y", None], kind="text", seed=0, question_id="q")
'x y'
>>> majority_answer([None, None], kind="math", seed=0, question_id="q") is None
True
>>> all_agree(["(B)", "b"], kind="mc", choices=["cat", "dog"]), all_agree(["7", None], kind="math")
(True, False)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from metamod.tasks.grading import normalize_answer

#: tie rules of :func:`majority_answer`
TIE_BREAKS = ("hash", "first")


def _tie_key(seed: int, question_id: str, key: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{question_id}\x1f{key}".encode()).hexdigest()


def vote_counts(
    answers: Sequence[str | None], *, kind: str, choices: Sequence[str] | None = None
) -> dict[str, tuple[int, str]]:
    """Count normalised answers.

    Args:
        answers: extracted answers, one per agent (``None`` for unparsable ones).
        kind: the task's answer kind.
        choices: the options of a multiple-choice item.

    Returns:
        ``{normalised answer: (count, first original answer in agent order)}``; unparsable answers are skipped.

    >>> vote_counts(["0.5", "1/2", "3", None], kind="math")
    {'1/2': (2, '0.5'), '3': (1, '3')}
    """
    counts: dict[str, tuple[int, str]] = {}
    for answer in answers:
        key = normalize_answer(answer, kind, choices)
        if key is None or answer is None:
            continue
        count, first = counts.get(key, (0, answer))
        counts[key] = (count + 1, first)
    return counts


def majority_answer(
    answers: Sequence[str | None],
    *,
    kind: str,
    choices: Sequence[str] | None = None,
    seed: int = 0,
    question_id: str = "",
    tie_break: str = "hash",
) -> str | None:
    """The most frequent parsable answer; ties broken by the seeded hash rule of this module (or agent order).

    This is THE majority vote of metamod: the evaluation's decision layers, the debate-dynamics summary
    (:mod:`metamod.rollout.analysis`) and the warm-start targets (:mod:`metamod.train.sft`) all call it.

    Args:
        answers: extracted answers (``None`` for unparsable ones).
        kind: the task's answer kind.
        choices: the options of a multiple-choice item.
        seed: the evaluation seed (part of the tie-break hash).
        question_id: the question's id (part of the tie-break hash).
        tie_break: ``"hash"`` (the seeded rule above, independent of agent order) or ``"first"`` (the tied answer
            given first in agent order wins: the lowest-index agent).

    Returns:
        The winning answer as one agent wrote it, or ``None`` when no answer is parsable.

    Raises:
        ValueError: an unknown ``tie_break``.

    >>> a = majority_answer(["3", "5"], kind="math", seed=0, question_id="q1")
    >>> a in {"3", "5"} and a == majority_answer(["5", "3"], kind="math", seed=0, question_id="q1")
    True
    >>> majority_answer(["5", "3", "3.0", "5"], kind="math", tie_break="first")
    '5'
    >>> majority_answer(["(B)", "cat", "dog"], kind="mc", choices=["cat", "dog"], tie_break="first")
    '(B)'
    """
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break must be one of {list(TIE_BREAKS)}, got {tie_break!r}")
    counts = vote_counts(answers, kind=kind, choices=choices)
    if not counts:
        return None
    best = max(count for count, _ in counts.values())
    tied = [key for key, (count, _) in counts.items() if count == best]  # in order of first appearance
    if tie_break == "first":
        return counts[tied[0]][1]
    winner = min(tied, key=lambda key: _tie_key(seed, question_id, key))
    return counts[winner][1]


def all_agree(answers: Sequence[str | None], *, kind: str, choices: Sequence[str] | None = None) -> bool:
    """Whether every answer is parsable and all normalise to the same value (an empty list never agrees)."""
    if not answers:
        return False
    keys = [normalize_answer(a, kind, choices) for a in answers]
    return all(k is not None for k in keys) and len(set(keys)) == 1
