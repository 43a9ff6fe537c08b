"""Decision layers: what turns a debate (or a single agent) into one final answer, and when to stop.

Every debate method sees the SAME debaters, budget ``T_max`` and decoding; only the decision layer differs. A
debate layer is called once per round with every debate still active (batched: an LLM-based layer sends ONE
``generator.chat`` call per round) and returns, per debate, whether to stop after this round and with which
answer. At its last round (``T_max - 1``, 0-based; round ``2`` for ``adjudication_only``) a layer must stop every
debate (the forced decision).

=====================  =================================================================================
``majority_vote``      runs all ``T_max`` rounds; majority of the last round's normalised answers.
``consensus``          stops as soon as every debater gives the same parsable answer; majority at ``T_max``.
``judge``              runs all rounds; a prompted LLM judge (template ``judge``) reads the last round.
``moderator_prompted`` the untrained base model as moderator (the paper's Meta-Moderator*).
``moderator``          the trained moderator (base model + LoRA adapter).
``adjudication_only``  fixed 3 rounds, then the moderator's forced answer (ablation).
``stopping_only``      the moderator decides when to stop; majority vote of that round answers (ablation).
=====================  =================================================================================

Moderator protocol: after each round the moderator sees ``moderator_messages(question, responses, final=False)``
and answers ``CONTINUE`` or ``STOP <answer>..</answer>``, parsed by :func:`metamod.rewards.moderator.parse_decision`.
Format validity is always that strict parse (``StepDecision.valid``, the reported format-valid rate).
Only a *valid* ``STOP`` stops a debate before ``T_max``; an invalid or unparsable output counts as ``CONTINUE``.
At ``T_max`` the forced prompt (``final=True``) is used and, as in the paper, the moderator's final output is the
answer: :func:`final_answer` reads it leniently (the ``<answer>`` span even with extra text or no ``STOP``, else
the grader's :func:`~metamod.tasks.grading.extract_answer`, else a bare one-token answer); an output with no
answer in it gives ``None``, graded wrong. ``StepDecision.lenient`` marks answers taken from a format-invalid
output. The ``judge`` layer reads its output with the same :func:`final_answer`.

Every method, these layers and the ones that run themselves, is a row of :data:`metamod.evaluate.methods.METHODS`.

>>> from metamod.evaluate.methods import build_method
>>> ctx = LayerContext(max_rounds=3)
>>> debate = {"id": "q", "kind": "math", "choices": None, "question": "1+1?", "rounds": [
...     {"round": 0, "responses": [{"agent": 0, "text": "<answer>2</answer>", "answer": "2"},
...                                {"agent": 1, "text": "<answer>2</answer>", "answer": "2"}]}]}
>>> build_method("consensus", ctx).decide(0, [debate])[0]
StepDecision(stop=True, answer='2', raw=None, valid=None, lenient=False, prompt_tokens=0, completion_tokens=0, p_stop=None, answer_source=None)
>>> build_method("majority_vote", ctx).decide(0, [debate])[0].stop
False
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from metamod.llm.base import Generator, SamplingConfig
from metamod.prompts import format_responses, render
from metamod.rewards.moderator import (
    DECISION_TOP_LOGPROBS,
    STOP,
    decision_probability,
    final_answer,
    parse_decision,
)
from metamod.rollout.roles import LLMRole
from metamod.rollout.state import moderator_messages
from metamod.tasks.base import Example
from metamod.tasks.voting import all_agree, majority_answer

logger = logging.getLogger(__name__)


@dataclass
class StepDecision:
    """A decision layer's verdict on one debate after one round.

    Attributes:
        stop: whether the debate ends after this round.
        answer: the final answer when stopping (``None``: no answer, graded wrong).
        raw: the LLM output the decision was parsed from (``None`` for heuristic layers).
        valid: whether that output followed the moderator protocol (``None`` when no moderator call was made).
        lenient: ``True`` when the answer was taken by :func:`final_answer` at the forced last round from an output
            that was not format-valid (``valid=False``); always ``False`` before the last round and for the judge.
        prompt_tokens: prompt tokens the layer itself spent on this decision.
        completion_tokens: completion tokens the layer itself spent on this decision.
        p_stop: the moderator's P(STOP) read from the top-k log-probs of the same output
            (:func:`~metamod.rewards.moderator.decision_probability`); ``None`` without a moderator call or when it
            cannot be read. Written (``to_dict``) only for decisions that called the moderator.
        answer_source: where a ``moderator_threshold`` answer came from (``moderator``, ``majority``, ``forced``);
            ``None`` (and not written) for every other layer.
        details: layer-specific, JSON-ready extras written with the decision (a gate's signal and value,
            :mod:`metamod.evaluate.gate`); ``None``: none, and no key in :meth:`to_dict`.
        answers: answers the layer drew itself (a gate's self-consistency samples), counted in the record's
            ``seen_answers`` (coverage).
    """

    stop: bool
    answer: str | None = None
    raw: str | None = None
    valid: bool | None = None
    lenient: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    p_stop: float | None = None
    answer_source: str | None = None
    details: dict[str, Any] | None = field(default=None, repr=False)
    answers: list[str | None] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stop": self.stop,
            "answer": self.answer,
            "raw": self.raw,
            "valid": self.valid,
            "lenient": self.lenient,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if self.valid is not None:  # a moderator call
            out["p_stop"] = self.p_stop
        if self.answer_source is not None:
            out["answer_source"] = self.answer_source
        if self.details is not None:
            out["details"] = self.details
        return out


def _greedy(max_tokens: int) -> SamplingConfig:
    return SamplingConfig(temperature=0.0, max_tokens=max_tokens)


@dataclass
class LayerContext:
    """Everything a method may use; the harness fills only what the chosen methods need.

    Attributes:
        max_rounds: the debate budget ``T_max`` (number of rounds).
        seed: evaluation seed (majority tie-break, single-agent sampling).
        moderator: the trained moderator's generator (base + adapter).
        moderator_base: the untrained base model used as a prompted moderator.
        judge: the LLM judge's generator.
        moderator_sampling: decoding for moderator calls (greedy by default: replay == live).
        judge_sampling: decoding for judge calls.
        fixed_rounds: debate length of ``adjudication_only``.
        agent: generator of the single-agent baselines (an LLM debater model).
        agent_sampling: decoding for single-agent baselines (``single_cot_sc`` samples with it).
        simulated_agent: in the simulated world, the simulated debater the single-agent baselines replay.
        sc_samples: number of samples ``k`` of ``single_cot_sc``.
        memory: the method's memory (:mod:`metamod.memory`): its guidance is prepended to the prompts the method
            builds (single-agent, MRO roles, moderator, judge); ``None``: no memory.
        method_options: per-method settings by method name (``EvalConfig.method_options``); each method reads and
            checks its own entry.
        max_iterations: the MRO methods' iteration budget N.
        mro_simulation: in the simulated world, the simulated MRO roles' parameters (seed offset per eval seed).
        code_simulation: in the simulated world, the simulated coder's parameters for the code-reasoning methods
            (:class:`metamod.rollout.coding.simulated.CodeSimulationConfig`, seed offset per eval seed).
    """

    max_rounds: int
    seed: int = 0
    moderator: Generator | None = None
    moderator_base: Generator | None = None
    judge: Generator | None = None
    moderator_sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.0, max_tokens=64, top_logprobs=DECISION_TOP_LOGPROBS)
    )
    judge_sampling: SamplingConfig = field(default_factory=lambda: _greedy(512))
    fixed_rounds: int = 3
    agent: Generator | None = None
    agent_sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.7, max_tokens=512))
    simulated_agent: Any = None
    sc_samples: int = 5
    memory: Any = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_iterations: int = 3
    mro_simulation: Any = None
    code_simulation: Any = None

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if self.fixed_rounds < 1:
            raise ValueError(f"fixed_rounds must be >= 1, got {self.fixed_rounds}")
        if self.sc_samples < 1:
            raise ValueError(f"sc_samples must be >= 1, got {self.sc_samples}")


# --------------------------------------------------------------------------------------------- helpers


def round_texts(debate: dict[str, Any], round_index: int) -> list[str]:
    """Every debater's full response at ``round_index``, in agent order."""
    return [r["text"] for r in debate["rounds"][round_index]["responses"]]


def round_answers(debate: dict[str, Any], round_index: int) -> list[str | None]:
    """Every debater's extracted answer at ``round_index``, in agent order (``None`` when unparsable)."""
    return [r.get("answer") for r in debate["rounds"][round_index]["responses"]]


def round_majority(debate: dict[str, Any], round_index: int, seed: int) -> str | None:
    """Majority vote of one round's answers with the seeded tie rule of :mod:`metamod.tasks.voting`."""
    return majority_answer(
        round_answers(debate, round_index),
        kind=debate["kind"],
        choices=debate.get("choices"),
        seed=seed,
        question_id=str(debate["id"]),
    )


# --------------------------------------------------------------------------------------------- base


class DecisionLayer(ABC):
    """Base class of debate decision layers: ``Layer(context, spec)`` with its row of the method table
    (:class:`~metamod.evaluate.methods.MethodSpec`: name, label, the generators it ``needs``); subclasses implement
    :meth:`decide`.
    """

    def __init__(self, context: LayerContext, spec: Any):
        self.context, self.spec, self.name = context, spec, spec.name
        for need in spec.needs:
            if need == "agent" and context.simulated_agent is not None:  # simulated debaters stand in for it
                continue
            if getattr(context, need) is None:
                raise ValueError(
                    f"method {self.name!r} needs a {need} generator; configure it (see docs/evaluation.md)"
                )

    @property
    def last_round(self) -> int:
        """0-based index of the round at which this layer forces a decision."""
        return self.context.max_rounds - 1

    def _llm(self, generator: Generator, sampling: SamplingConfig, role: str) -> LLMRole:
        """The layer's LLM as a :class:`~metamod.rollout.roles.LLMRole` (``role``: ``moderator`` / ``judge``): one
        decision per debate, the memory's guidance asked for the debate's question and round."""
        if sampling.n != 1:
            raise ValueError(f"decision layers make one decision per debate: sampling.n must be 1, got {sampling.n}")
        return LLMRole(generator, sampling, role=role, memory=self.context.memory, method=self.name)

    @staticmethod
    def _question(debate: dict[str, Any]) -> Example:
        """The debate's question as the memory sees it: a gold-free :class:`~metamod.tasks.base.Example`."""
        return Example(id=str(debate["id"]), question=str(debate["question"]), gold="", kind=debate.get("kind", "math"))

    @abstractmethod
    def decide(self, round_index: int, debates: list[dict[str, Any]]) -> list[StepDecision]:
        """Decide for every active debate after round ``round_index`` (its rounds ``0..round_index`` are given).

        Args:
            round_index: the 0-based round just played.
            debates: trace dicts of the debates still active.

        Returns:
            One :class:`StepDecision` per debate, in order; at :attr:`last_round` every one has ``stop=True``.
        """
        raise NotImplementedError


class MajorityVote(DecisionLayer):
    """All ``T_max`` rounds, then the majority of the last round's answers."""

    def decide(self, round_index, debates):
        if round_index < self.last_round:
            return [StepDecision(stop=False) for _ in debates]
        return [StepDecision(stop=True, answer=round_majority(d, round_index, self.context.seed)) for d in debates]


class Consensus(DecisionLayer):
    """Stop as soon as every debater gives the same parsable answer; majority at ``T_max``."""

    def decide(self, round_index, debates):
        out = []
        for d in debates:
            answers = round_answers(d, round_index)
            agreed = all_agree(answers, kind=d["kind"], choices=d.get("choices"))
            if agreed or round_index >= self.last_round:
                out.append(StepDecision(stop=True, answer=round_majority(d, round_index, self.context.seed)))
            else:
                out.append(StepDecision(stop=False))
        return out


class Judge(DecisionLayer):
    """All rounds, then a prompted LLM judge reads the last round."""

    def decide(self, round_index, debates):
        if round_index < self.last_round:
            return [StepDecision(stop=False) for _ in debates]
        judge = self._llm(self.context.judge, self.context.judge_sampling, "judge")
        conversations = [
            judge.guided(
                [
                    {
                        "role": "user",
                        "content": render(
                            "judge", question=d["question"], responses=format_responses(round_texts(d, round_index))
                        ),
                    }
                ],
                self._question(d),
                step=round_index,
            )
            for d in debates
        ]
        outputs = judge.chat(conversations)
        return [
            StepDecision(
                stop=True,
                answer=final_answer(g.text),
                raw=g.text,
                prompt_tokens=g.prompt_tokens,
                completion_tokens=g.completion_tokens,
            )
            for g in outputs
        ]


class Moderator(DecisionLayer):
    """Meta-Moderator: CONTINUE/STOP after every round, forced answer at ``T_max``; the generator is the row's
    ``needs[0]`` (the trained ``moderator``, or ``moderator_base``: the untrained Meta-Moderator*)."""

    #: whether the last :meth:`ask` got top-k log-probs back (a backend without them gives ``p_stop=None``)
    top_logprobs_returned: bool = False

    @property
    def generator(self) -> Generator:
        return getattr(self.context, self.spec.needs[0])

    def ask(self, round_index: int, debates: list[dict[str, Any]], *, final: bool) -> list[StepDecision]:
        """One batched moderator call.

        Before the last round (``final=False``) only a format-valid ``STOP`` stops, with its answer; anything else
        continues. At the forced last round (``final=True``) every debate stops with :func:`final_answer` of the
        output. ``valid`` is the strict protocol verdict either way. The call asks for the top
        ``moderator_sampling.top_logprobs`` log-probs (EvalConfig ``moderator_top_logprobs``, default
        :data:`DECISION_TOP_LOGPROBS`; nothing extra is generated) and records ``p_stop`` (``None`` when 0).
        """
        moderator = self._llm(self.generator, self.context.moderator_sampling, "moderator")
        conversations = [
            moderator.guided(
                moderator_messages(d["question"], round_texts(d, round_index), final=final),
                self._question(d),
                step=round_index,
            )
            for d in debates
        ]
        top = self.context.moderator_sampling.top_logprobs  # EvalConfig.moderator_top_logprobs (0: not asked)
        outputs = moderator.chat(conversations, top_logprobs=top)
        self.top_logprobs_returned = any(g.top_logprobs is not None for g in outputs)
        decisions = []
        for g in outputs:
            parsed = parse_decision(g.text)
            valid = bool(parsed.valid)
            stop = valid and parsed.action == STOP
            answer = final_answer(g.text) if final else (parsed.answer if stop else None)
            decisions.append(
                StepDecision(
                    stop=stop or final,
                    answer=answer,
                    raw=g.text,
                    valid=valid,
                    lenient=final and not valid and answer is not None,
                    prompt_tokens=g.prompt_tokens,
                    completion_tokens=g.completion_tokens,
                    p_stop=decision_probability(g.tokens, g.top_logprobs),
                )
            )
        return decisions

    def decide(self, round_index, debates):
        return self.ask(round_index, debates, final=round_index >= self.last_round)


class AdjudicationOnly(Moderator):
    """Fixed debate length (``fixed_rounds``, capped by ``T_max``), then the moderator's forced answer."""

    @property
    def last_round(self) -> int:
        return min(self.context.fixed_rounds, self.context.max_rounds) - 1

    def decide(self, round_index, debates):
        if round_index < self.last_round:
            return [StepDecision(stop=False) for _ in debates]
        return self.ask(round_index, debates, final=True)


class StoppingOnly(Moderator):
    """The moderator's CONTINUE/STOP; the answer is the majority vote of the stopping round (no call at T_max)."""

    def decide(self, round_index, debates):
        seed = self.context.seed
        if round_index >= self.last_round:
            return [StepDecision(stop=True, answer=round_majority(d, round_index, seed)) for d in debates]
        decisions = self.ask(round_index, debates, final=False)
        for decision, d in zip(decisions, debates, strict=True):
            decision.answer = round_majority(d, round_index, seed) if decision.stop else None
        return decisions
