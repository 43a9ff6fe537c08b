"""Curriculum by oversampling: repeat the training snapshots whose GRPO groups can carry signal.

A GRPO group has a learning signal only when its completions get different rewards. Under the control reward that
happens most often on the snapshots where the right decision is not obvious from the round alone: the debaters
disagree (a ``None`` answer counts as disagreeing), or ``eta`` flips between this round and the same debate's
previous or next recorded round (a correct answer appears or disappears). :func:`signal_keys` finds them (rows are
grouped by ``id`` and ordered by ``round``; MRO controller rows carry one answer, the Reasoner's, so there only a
missing answer or an ``eta`` flip between iterations counts), and :func:`oversample` repeats them.

It is a weighting, not new data: the repeated rows are the same prompts, so the policy sees the same information;
only how often each prompt is drawn (and so its share of the gradient) changes.

>>> rows = [
...     {"id": "a", "round": 0, "eta": 1, "answers": ["4", "4"], "kind": "math"},
...     {"id": "a", "round": 1, "eta": 1, "answers": ["4", "4.0"], "kind": "math"},
...     {"id": "b", "round": 0, "eta": 0, "answers": ["3", "5"], "kind": "math"},
...     {"id": "c", "round": 0, "eta": 0, "answers": ["2", "2"], "kind": "math"},
...     {"id": "c", "round": 1, "eta": 1, "answers": ["4", "4"], "kind": "math"},
... ]
>>> sorted(signal_keys(rows))
[('b', 0), ('c', 0), ('c', 1)]
>>> oversample_indices([False, True, False], 3)
[0, 1, 1, 1, 2]
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from metamod.tasks.grading import normalize_answer

logger = logging.getLogger(__name__)


def answers_disagree(
    answers: Sequence[str | None] | None, kind: str | None, choices: Sequence[str] | None = None
) -> bool:
    """Whether the debaters' answers at one round differ after the shared grader's normalisation.

    A ``None`` answer (the debater gave none) counts as disagreeing; no ``answers`` at all counts as agreeing (no
    evidence either way).

    >>> answers_disagree(["1/2", "0.5"], "math"), answers_disagree(["4", None], "math"), answers_disagree([], "math")
    (False, True, False)
    """
    if not answers:
        return False
    normalised = [normalize_answer(a, kind or "text", choices) if a is not None else None for a in answers]
    return any(n is None for n in normalised) or len(set(normalised)) > 1


def signal_keys(rows: Iterable[Mapping[str, Any]]) -> set[tuple[str, int]]:
    """The ``(id, round)`` of every row whose group can carry signal (module docstring).

    Args:
        rows: dataset rows with ``id``, ``round`` and ``eta``; ``answers`` (and ``kind``, ``choices``) optional.

    Returns:
        The set of ``(id, round)`` keys of the signal rows.
    """
    by_id: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    keys: set[tuple[str, int]] = set()
    for row in rows:
        by_id[str(row["id"])].append(row)
        if answers_disagree(row.get("answers"), row.get("kind"), row.get("choices")):
            keys.add((str(row["id"]), int(row["round"])))
    for qid, debate in by_id.items():
        debate = sorted(debate, key=lambda r: int(r["round"]))
        for before, after in zip(debate, debate[1:], strict=False):
            if int(before["eta"]) != int(after["eta"]):
                keys.update({(qid, int(before["round"])), (qid, int(after["round"]))})
    return keys


def oversample_indices(signal: Sequence[bool], times: int) -> list[int]:
    """Row indices with every signal row repeated ``times`` times (its copies next to it: deterministic; the
    trainer's seeded sampler shuffles them)."""
    return [i for i, flag in enumerate(signal) for _ in range(times if flag else 1)]


def oversample(
    dataset: Any, *, times: int, source_rows: Iterable[Mapping[str, Any]] | None = None
) -> tuple[Any, int | None]:
    """Repeat the signal rows of a ``datasets.Dataset`` ``times`` times (``times == 1``: the dataset unchanged).

    Args:
        dataset: the training split (after any row filters).
        times: copies of each signal row (``curriculum_oversample``).
        source_rows: the rows signal is judged on (default: ``dataset``); pass the unfiltered split so that a
            neighbouring round dropped by ``max_prompt_tokens`` still reveals an ``eta`` flip.

    Returns:
        ``(oversampled dataset, number of signal rows)``, ``(dataset, None)`` when ``times == 1``; the count is logged.

    Raises:
        ConfigError: a column the detection needs (``id``, ``round``, ``eta``) is missing.
    """
    if times == 1:
        return dataset, None
    missing = [c for c in ("id", "round", "eta") if c not in dataset.column_names]
    if missing:
        from metamod.errors import ConfigError

        raise ConfigError(
            f"curriculum_oversample={times} needs dataset columns {missing} (has {dataset.column_names}); rebuild "
            "the dataset with `metamod build-dataset` or set curriculum_oversample: 1"
        )
    columns = [c for c in ("id", "round", "eta", "answers", "kind", "choices") if c in dataset.column_names]
    source = dataset if source_rows is None else source_rows
    if hasattr(source, "select_columns"):  # a datasets.Dataset: read only the columns the detection needs
        source = source.select_columns([c for c in columns if c in source.column_names])
    keys = signal_keys(source)
    signal = [(str(i), int(r)) in keys for i, r in zip(dataset["id"], dataset["round"], strict=True)]
    qualified = sum(signal)
    logger.info(
        "Curriculum: %d of %d training rows carry signal (disagreeing debaters or an eta flip); each is repeated "
        "%d times -> %d rows", qualified, len(signal), times, len(signal) + qualified * (times - 1),
    )  # fmt: skip
    return dataset.select(oversample_indices(signal, times)), qualified
