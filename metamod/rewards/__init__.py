"""Moderator rewards (TRL reward contract) and their registry.

``REWARDS`` maps a config name to a reward callable; :func:`get_reward_funcs` resolves the ``reward_funcs`` /
``reward_weights`` config keys into what ``trl.GRPOTrainer`` takes.

>>> sorted(REWARDS)
['answer', 'control', 'format', 'format_strict', 'outcome']
>>> funcs, weights = get_reward_funcs(["format", "control"])
>>> [f.__name__ for f in funcs], weights
(['format_reward', 'control_reward'], [1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metamod.registry import resolve, valid_names_help
from metamod.rewards.moderator import (
    Decision,
    FormatReward,
    answer_reward,
    completion_text,
    control_reward,
    format_reward,
    format_strict_reward,
    get_format_reward,
    parse_decision,
)
from metamod.rewards.outcome import OutcomeReward, outcome_reward

#: config name -> reward callable (TRL contract: ``f(completions, **columns) -> list[float | None]``)
REWARDS: dict[str, Callable] = {
    "format": format_reward,
    "format_strict": format_strict_reward,
    "control": control_reward,
    "answer": answer_reward,
    "outcome": outcome_reward,
}

#: the paper's reward: R = R_fmt + R_ctrl
DEFAULT_REWARDS = ("format", "control")


def get_reward_funcs(
    names: Sequence[str] | str, weights: Sequence[float] | None = None, *, outcome_round_cost: float | None = None
) -> tuple[list[Callable], list[float]]:
    """Resolve reward names (registry keys or ``package.module:attr``) and their weights.

    Args:
        names: reward names, or one comma-separated string (``"format,control"``).
        weights: one weight per reward; ``None`` gives every reward weight 1.
        outcome_round_cost: the per-round cost of the ``outcome`` reward (``None``: its default).

    Returns:
        ``(reward callables, weights)``.

    Raises:
        KeyError: an unknown name (the message lists the valid names).
        ValueError: no names, a duplicate name, or a weights list of the wrong length.

    >>> get_reward_funcs("format,control", [1.0, 2.0])[1]
    [1.0, 2.0]
    >>> get_reward_funcs(["format"], [1.0, 2.0])
    Traceback (most recent call last):
    ...
    ValueError: reward_weights has 2 values [1.0, 2.0] but reward_funcs has 1 names ['format']; give one weight per reward (or none for all 1.0).
    """
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    if not names:
        raise ValueError(f"reward_funcs is empty; give at least one of: {', '.join(REWARDS)}")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"reward_funcs lists {duplicates} more than once; list each reward once and use weights")
    funcs = [resolve(REWARDS, name, what="reward") for name in names]
    if outcome_round_cost is not None:
        funcs = [
            OutcomeReward(outcome_round_cost) if name == "outcome" else f for name, f in zip(names, funcs, strict=True)
        ]
    if weights is None or len(weights) == 0:
        return funcs, [1.0] * len(funcs)
    weights = [float(w) for w in weights]
    if len(weights) != len(names):
        raise ValueError(
            f"reward_weights has {len(weights)} values {weights} but reward_funcs has {len(names)} names {names}; "
            "give one weight per reward (or none for all 1.0)."
        )
    return funcs, weights


def rewards_help() -> str:
    """Help text for the ``reward_funcs`` option, generated from the registry."""
    return f"Reward names. {valid_names_help(REWARDS)}"


__all__ = [
    "DEFAULT_REWARDS",
    "REWARDS",
    "Decision",
    "FormatReward",
    "OutcomeReward",
    "answer_reward",
    "completion_text",
    "control_reward",
    "format_reward",
    "format_strict_reward",
    "get_format_reward",
    "get_reward_funcs",
    "outcome_reward",
    "parse_decision",
    "rewards_help",
]
