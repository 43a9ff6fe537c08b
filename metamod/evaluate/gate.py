"""The gate baseline: decide once, after round 0, whether to debate at all.

Round 0 holds the debaters' independent answers (nobody has seen a peer yet). A gate reads one confidence signal
there; when it passes, the debate stops after round 0 with the gate's answer, otherwise the debate goes on and the
row's delegate layer (``then``: majority vote, consensus or a moderator row) decides every later round. The
delegate is never asked at round 0, and it forces the last decision as it would alone.

=====================  ===================================================================================
signal                 passes when (answer on passing)
=====================  ===================================================================================
``agree``              every round-0 answer is parsable and all are equal (their common answer)
``vote_share``         the plurality's share of the ``N`` round-0 answers ``>= threshold``; an unparsable answer
                       counts in ``N`` but never votes (the round-0 majority vote). No extra cost.
``self_consistency``   the plurality's share of ``k`` chain-of-thought samples of ONE agent ``>= threshold``:
                       the debater model with the ``single_cot`` template, ``k`` samples in one call, exactly as
                       ``single_cot_sc`` draws them (its runner is reused); the answer is that plurality and the
                       samples' tokens are the gate's cost (booked as the layer's tokens of round 0).
=====================  ===================================================================================

``agree`` is ``vote_share`` at threshold 1. A row fixes its signal and its delegate (``settings``); its
``method_options`` entry sets the signal's knobs (:class:`GateOptions`). Every round-0 decision records what the
gate saw in ``details["gate"]``: the signal, its value, the threshold, whether it fired, and for
``self_consistency`` the samples' answers (they also count in the record's ``seen_answers``, i.e. coverage).

>>> from metamod.evaluate.decision import LayerContext
>>> from metamod.evaluate.methods import build_method
>>> from metamod.evaluate.replay import replay
>>> from metamod.rollout.traces import example_trace
>>> agreed, split = example_trace("a", answers=("4", "4")), example_trace("b", answers=("4", "5"))
>>> split["rounds"].append({**split["rounds"][0], "round": 1})
>>> agreed["rounds"].append({**agreed["rounds"][0], "round": 1})
>>> out = replay(build_method("gate_agree_majority", LayerContext(max_rounds=2)), [agreed, split])
>>> [(r["stop_round"], r["final_answer"]) for r in out]
[(0, '4'), (1, '4')]
>>> out[1]["decisions"][0]["details"]["gate"]
{'signal': 'agree', 'value': 0.5, 'threshold': 1.0, 'fired': False}
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from metamod.errors import ConfigError
from metamod.tasks.voting import all_agree, vote_counts

from .baselines._common import read_options
from .decision import DecisionLayer, StepDecision, round_answers, round_majority
from .inputs import example_from_trace
from .methods import GATE_SIGNALS, method_spec
from .single import SingleCoTSC

logger = logging.getLogger(__name__)

#: the default threshold of each signal that takes one (``agree`` is share 1 by definition)
DEFAULT_THRESHOLDS = {"vote_share": 0.6, "self_consistency": 0.8}


@dataclass
class GateOptions:
    """Settings of a gate row (``method_options: {gate_sc_majority: {threshold: 0.6, samples: 5}}``)."""

    threshold: float | None = field(
        default=None,
        metadata={
            "help": "Share of the plurality answer at or above which the gate stops after round 0, in (0, 1] "
            "(None: 0.6 for vote_share, 0.8 for self_consistency; agree takes none: it is share 1)."
        },
    )
    samples: int | None = field(
        default=None,
        metadata={"help": "self_consistency only: samples k of the one agent (None: the evaluation's sc_samples)."},
    )

    def __post_init__(self) -> None:
        if self.threshold is not None:
            if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
                raise ValueError(f"threshold must be a number in (0, 1], got {self.threshold!r}")
            if not 0.0 < self.threshold <= 1.0:
                raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.samples is not None and (
            isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1
        ):
            raise ValueError(f"samples must be an integer >= 1, got {self.samples!r}")


def plurality_share(answers: list[str | None], *, kind: str, choices: Any = None) -> float:
    """The share of ``answers`` (unparsable ones included in the count) that the most frequent answer holds.

    >>> plurality_share(["4", "4.0", "5", None], kind="math"), plurality_share([None, None], kind="math")
    (0.5, 0.0)
    """
    counts = vote_counts(answers, kind=kind, choices=choices)
    return max((count for count, _ in counts.values()), default=0) / len(answers) if answers else 0.0


class Gate(DecisionLayer):
    """A gate row: the signal of ``spec.settings["signal"]`` at round 0, the layer ``spec.settings["then"]`` after.

    The delegate is built from its own row with this row's name and label (memory guidance and records are this
    method's); this row's ``needs`` must cover the delegate's, and the delegate must decide at round 1 or later
    (``max_rounds >= 2``: with one round there is nothing to gate).
    """

    def __init__(self, context: Any, spec: Any):
        super().__init__(context, spec)
        self.signal = str(spec.settings.get("signal"))
        then = str(spec.settings.get("then"))
        if self.signal not in GATE_SIGNALS:
            raise ConfigError(
                f"method {self.name!r}: gate signal must be one of {sorted(GATE_SIGNALS)}, got {self.signal!r}"
            )
        then_spec = method_spec(then)
        if not then_spec.replays_debates or then_spec.runner == spec.runner:
            raise ConfigError(
                f"method {self.name!r}: the gate's delegate {then!r} must be a debate decision layer that is not a gate"
            )
        self.options = read_options(GateOptions, self.name, context.method_options)
        if self.signal == "agree" and self.options.threshold is not None:
            raise ConfigError(
                f"method_options[{self.name!r}]: threshold does not apply to signal 'agree' (it stops only when every "
                "round-0 answer agrees); use a vote_share row for a threshold"
            )
        if self.signal != "self_consistency" and self.options.samples is not None:
            raise ConfigError(
                f"method_options[{self.name!r}]: samples applies only to signal 'self_consistency', not {self.signal!r}"
            )
        self.threshold = 1.0 if self.signal == "agree" else self.options.threshold or DEFAULT_THRESHOLDS[self.signal]
        delegate_spec = dataclasses.replace(then_spec, name=self.name, label=spec.label)
        self.then: DecisionLayer = delegate_spec.build(context)
        if self.then.last_round < 1:
            raise ConfigError(
                f"method {self.name!r}: the gate decides at round 0 and its delegate {then!r} from round 1 on, so "
                f"the delegate's budget must be >= 2 rounds (max_rounds={context.max_rounds})"
            )
        self.sampler = None
        if self.signal == "self_consistency":
            k = self.options.samples or context.sc_samples
            sc_spec = dataclasses.replace(method_spec("single_cot_sc"), name=self.name, label=spec.label)
            self.sampler = SingleCoTSC(dataclasses.replace(context, sc_samples=k), sc_spec)

    @property
    def last_round(self) -> int:
        """The delegate's last round: the gate forces nothing itself."""
        return self.then.last_round

    def decide(self, round_index, debates):
        if round_index > 0:
            return self.then.decide(round_index, debates)
        if self.sampler is not None:
            return self._self_consistency(debates)
        decisions = []
        for d in debates:
            answers = round_answers(d, 0)
            share = plurality_share(answers, kind=d["kind"], choices=d.get("choices"))
            if self.signal == "agree":
                fired = all_agree(answers, kind=d["kind"], choices=d.get("choices"))
            else:
                fired = share >= self.threshold
            answer = round_majority(d, 0, self.context.seed) if fired else None
            decisions.append(self._decision(fired, answer, share))
        return decisions

    def _self_consistency(self, debates: list[dict[str, Any]]) -> list[StepDecision]:
        """``k`` samples of one agent per debate (ONE batched call over the debates), through ``single_cot_sc``."""
        examples = [example_from_trace(d) for d in debates]
        decisions = []
        for ex, outcome in zip(examples, self.sampler.run(examples), strict=True):
            share = plurality_share(outcome.answers, kind=ex.kind, choices=ex.choices)
            fired = outcome.answer is not None and share >= self.threshold
            decision = self._decision(fired, outcome.answer if fired else None, share, samples=outcome.answers)
            decision.prompt_tokens, decision.completion_tokens = outcome.prompt_tokens, outcome.completion_tokens
            decision.answers = list(outcome.answers)
            decisions.append(decision)
        return decisions

    def _decision(self, fired: bool, answer: str | None, share: float, **extra: Any) -> StepDecision:
        gate = {"signal": self.signal, "value": share, "threshold": self.threshold, "fired": fired, **extra}
        return StepDecision(stop=fired, answer=answer, details={"gate": gate})
