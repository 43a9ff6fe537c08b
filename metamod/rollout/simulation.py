"""What every simulated world is made of (the debaters of :mod:`metamod.rollout.simulated`, the MRO roles of
:mod:`metamod.rollout.mro.simulated`, the coder of :mod:`metamod.rollout.coding.simulated`): seeded random streams,
the logit scale their probabilities move on, and what a simulated agent answers when it is right or wrong.

>>> seeded_rng("q1", 0).random() == seeded_rng("q1", 0).random()
True
>>> round(sigmoid(logit(0.8)), 6)
0.8
"""

from __future__ import annotations

import hashlib
import math
import random
import string
from functools import lru_cache

from metamod.tasks.base import Example
from metamod.tasks.grading import is_equivalent, normalize_answer


def check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


@lru_cache(maxsize=1 << 16)
def normalized(answer: str | None, kind: str, choices: tuple[str, ...] | None) -> str | None:
    """Memoised :func:`normalize_answer` (the simulation compares the same few answers many times)."""
    return normalize_answer(answer, kind, choices)


@lru_cache(maxsize=1 << 16)
def graded(answer: str, gold: str, kind: str, choices: tuple[str, ...] | None) -> bool:
    """Memoised :func:`is_equivalent` (the shared grader)."""
    return is_equivalent(answer, gold, kind, choices)


def correct_answer(example: Example) -> str:
    """The answer a simulated agent gives when it is right: ``meta["solution"]`` when the task records one, else gold.

    A recorded solution is used only when the gold is not itself a right answer (game24: the gold lists the puzzle's
    numbers, ``"4 7 8 8"``, and any valid expression is right), so a task whose ``meta`` happens to carry a worked
    solution still answers with its gold.

    Args:
        example: the task example.

    Returns:
        The answer text.

    >>> correct_answer(Example(id="a", question="?", gold="17", kind="math", meta={"solution": "3 * 4 + 5 = 17"}))
    '17'
    >>> correct_answer(Example(id="b", question="?", gold="4 7 8 8", kind="game24", meta={"solution": "(7 - 8 / 8) * 4"}))
    '(7 - 8 / 8) * 4'
    """
    solution = example.meta.get("solution")
    if solution and not graded(example.gold, example.gold, example.kind, example.choices):
        return str(solution)
    return example.gold


def is_right(answer: str | None, example: Example) -> bool:
    """Whether a simulated agent's ``answer`` is right.

    Normalised equality with :func:`correct_answer` when that is the gold (every task but game24; cheap, and the
    rule the simulation was calibrated with), else the shared grader (game24: two different valid expressions are
    both right).
    """
    right = correct_answer(example)
    if right == example.gold:
        return normalized(answer, example.kind, example.choices) == normalized(right, example.kind, example.choices)
    return answer is not None and graded(answer, example.gold, example.kind, example.choices)


def check_nonnegative(name: str, value: float) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def level_of(example: Example) -> int:
    """The example's difficulty level (``meta["level"]``; 1 when absent)."""
    return int(example.meta.get("level", 1) or 1)


def words(text: str) -> int:
    """The token count of a simulated text: its whitespace-separated words."""
    return len(text.split())


def seeded_rng(*parts: object) -> random.Random:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode("utf-8"), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def question_accuracy(
    seed: object, example: Example, accuracy: float, level: int, slope: float, sd: float, bonus: float = 0.0
) -> float:
    """P(a first attempt is right): ``sigmoid(logit(accuracy) - slope * (level - 1) + sd * z_q + bonus)``, with
    ``z_q ~ N(0, 1)`` from the question's own stream, shared by every agent and attempt (hard for everyone)."""
    z_q = seeded_rng(seed, example.id, "question").gauss(0.0, 1.0)
    return sigmoid(logit(accuracy) - slope * (level - 1) + sd * z_q + bonus)


def wrong_answers(example: Example) -> list[str]:
    """Plausible wrong answers for an example: ``meta["distractors"]``, else other options / nearby numbers.

    >>> wrong_answers(Example(id="a", question="?", gold="B", kind="mc", choices=("x", "y", "z")))
    ['A', 'C']
    >>> wrong_answers(Example(id="b", question="?", gold="yes", kind="yesno"))
    ['no']
    """
    gold_key = normalized(correct_answer(example), example.kind, example.choices)
    candidates: list[str] = [str(d) for d in (example.meta.get("distractors") or [])]
    if not candidates:
        if example.choices:
            candidates = [string.ascii_uppercase[i] for i in range(len(example.choices))]
        elif example.kind == "yesno":
            candidates = ["no" if gold_key == "yes" else "yes"]
        else:
            try:
                value = int(float(example.gold))
                candidates = [str(value + d) for d in (1, -1, 10, 2)]
            except ValueError:
                candidates = [f"not {example.gold}"]
    out: list[str] = []
    for cand in candidates:
        key = normalized(cand, example.kind, example.choices)
        if key is not None and not is_right(cand, example) and cand not in out:
            out.append(cand)
    return out or [f"not {example.gold}"]


def wrong_answer(
    rng: random.Random, example: Example, *, avoid: str | None = None, concentration: float | None = None
) -> str:
    """A plausible wrong answer other than ``avoid`` (where another exists): the first with probability
    ``concentration``, else one of the others; uniformly among all without a ``concentration``."""
    options = wrong_answers(example)
    if avoid is not None:
        key = normalized(avoid, example.kind, example.choices)
        options = [o for o in options if normalized(o, example.kind, example.choices) != key] or options
    if concentration is None:
        return rng.choice(options)
    if len(options) == 1 or rng.random() < concentration:
        return options[0]
    return rng.choice(options[1:])


def garbled(lines: list[str], cut: int) -> str:
    """A response cut off after its first ``cut`` lines, before its answer (unparsable)."""
    return "\n".join(lines[:cut]) + "\nSo the result should be"


def slip(step: str, wrong: str) -> str:
    """Rewrite the result of a step ``lhs = value`` so that it reads ``lhs = wrong``."""
    if "=" in step:
        return step.rsplit("=", 1)[0].rstrip() + f" = {wrong}"
    return f"{step}, which gives {wrong}"
