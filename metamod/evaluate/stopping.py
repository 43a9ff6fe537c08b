"""Calibrated stopping: deploy a threshold on the moderator's P(STOP) as a decision layer.

Every moderator call reads ``p_stop``, the moderator's probability of ``STOP`` at its decision word, from the top-k
log-probs of the same request (:func:`metamod.rewards.moderator.decision_probability`). The ``moderator_threshold``
row deploys one operating point ``tau`` (``method_options: {moderator_threshold: {stop_threshold: 0.7}}``) by
:func:`threshold_rule`, the ONE rule that the layer and the replayed sweep (:mod:`metamod.evaluate.stop_curve`)
share:

* before ``T_max``: stop iff ``p_stop >= tau`` (a ``p_stop`` that cannot be read, ``None``, continues);
  the answer is the moderator's span when its output was a format-valid ``STOP`` (``answer_source: moderator``),
  otherwise the majority vote of that round (``majority``: the moderator was sure enough it would stop, but did
  not write a usable answer, or wrote ``CONTINUE`` with less than ``1 - tau`` on it);
* at ``T_max``: the forced prompt and its answer, as the ``moderator`` row (``forced``).

At ``tau = 0.5`` with greedy decoding the layer stops wherever the moderator's greedy first token is a ``STOP``
prefix, up to ties, i.e. almost exactly where ``moderator`` stops, but it answers from the majority when that
``STOP`` had no valid span.

>>> threshold_rule(0.8, "4", "5", 0.5)
(True, '4', 'moderator')
>>> threshold_rule(0.8, None, "5", 0.5)
(True, '5', 'majority')
>>> threshold_rule(0.3, "4", "5", 0.5)
(False, None, None)
>>> threshold_rule(None, "4", "5", 0.0)
(False, None, None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metamod.errors import ConfigError

from .baselines._common import read_options
from .decision import Moderator, StepDecision, round_majority

#: where a ``moderator_threshold`` answer came from
ANSWER_SOURCES = ("moderator", "majority", "forced")


@dataclass
class ThresholdOptions:
    """Settings of ``moderator_threshold`` (``method_options: {moderator_threshold: {stop_threshold: 0.7}}``)."""

    stop_threshold: float = field(
        default=0.5,
        metadata={
            "help": "tau: before T_max, stop iff the moderator's P(STOP) >= tau (read from its decision word's "
            "top-k log-probs); in [0, 1]. Choose it from the eval's stop_curve."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.stop_threshold, bool) or not isinstance(self.stop_threshold, (int, float)):
            raise ValueError(f"stop_threshold must be a number in [0, 1], got {self.stop_threshold!r}")
        if not 0.0 <= float(self.stop_threshold) <= 1.0:
            raise ValueError(f"stop_threshold must be in [0, 1], got {self.stop_threshold}")


def threshold_rule(
    p_stop: float | None, stop_answer: str | None, majority: str | None, tau: float
) -> tuple[bool, str | None, str | None]:
    """The threshold decision before ``T_max``: ``(stop, answer, answer_source)``.

    Args:
        p_stop: the moderator's P(STOP) this round (``None``: unreadable, never stops).
        stop_answer: the span of a format-valid ``STOP`` output, else ``None``.
        majority: the majority vote of this round's answers.
        tau: the threshold.
    """
    if p_stop is None or p_stop < tau:
        return False, None, None
    if stop_answer is not None:
        return True, stop_answer, "moderator"
    return True, majority, "majority"


class ModeratorThreshold(Moderator):
    """The moderator's P(STOP) against a threshold ``tau`` (:func:`threshold_rule`); forced answer at ``T_max``."""

    def __init__(self, context: Any, spec: Any):
        super().__init__(context, spec)
        self.options = read_options(ThresholdOptions, self.name, context.method_options)

    @property
    def tau(self) -> float:
        return float(self.options.stop_threshold)

    def decide(self, round_index: int, debates: list[dict[str, Any]]) -> list[StepDecision]:
        final = round_index >= self.last_round
        decisions = self.ask(round_index, debates, final=final)
        if final:
            for decision in decisions:
                decision.answer_source = "forced"
            return decisions
        if debates and not self.top_logprobs_returned:
            name = getattr(self.generator, "name", type(self.generator).__name__)
            raise ConfigError(
                f"method {self.name!r} needs the moderator's top-k log-probs, but backend {name!r} returned none; "
                "use the hf, vllm or openai backend (SamplingConfig.top_logprobs, docs/backends.md)"
            )
        for decision, debate in zip(decisions, debates, strict=True):
            stop_answer = decision.answer if decision.stop else None  # ask(): only a valid STOP stops
            majority = round_majority(debate, round_index, self.context.seed) if stop_answer is None else None
            decision.stop, decision.answer, decision.answer_source = threshold_rule(
                decision.p_stop, stop_answer, majority, self.tau
            )
        return decisions
