"""MRO evaluation methods: the Reasoner / Monitor / Controller loop (:mod:`metamod.rollout.mro`) as a method row.

==========================  ==========================================================================================
``mro``                     R + M + C: the prompted Controller (ACCEPT / PATCH / RESTART), budget ``max_iterations``.
``reasoner_only``           the Reasoner's first attempt alone (the MRO prompt, no audit, no control).
``mro_trained_controller``  R + M + the trained moderator as Controller (``moderator``: an adapter trained on
                            ``build-dataset --source mro`` snapshots; STOP = Accept/Patch, CONTINUE = Restart).
``mro_prompted_moderator``  R + M + the untrained base model on the same moderator-protocol prompt (the analogue of
                            Meta-Moderator*: what training adds).
==========================  ==========================================================================================

Every role's calls for all questions of a batch go out in one batched call per iteration. With LLM debaters the
three roles share the debater model (``debater_model``; ``metamod rollout`` with ``loop: mro`` takes one model per
role); in the simulated world they are the simulated roles of :mod:`metamod.rollout.mro_simulated`
(``mro_simulation`` settings, ``mro_sim_seed`` offset by the evaluation seed).

The samples row of each question carries ``details["mro"]``: iterations used, terminal status, the action and the
candidate's correctness (``eta``) at each iteration, and which parse fallbacks fired; the metrics
(:mod:`metamod.evaluate.mro_metrics`) read it for action shares per iteration and control accuracy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from metamod.config import ConfigError
from metamod.rollout.mro import MRORoles, MROStats, run_mro
from metamod.rollout.mro_roles import LLMController, LLMMonitor, LLMReasoner, ModeratorController, ReasonerRequest
from metamod.rollout.mro_simulated import MROSimulationConfig, simulated_roles
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

from .baselines._common import read_options
from .single import SingleAgentMethod, SingleOutcome


@dataclass
class MROOptions:
    """Per-role decoding budgets of an MRO method (``method_options: {mro: {monitor_max_tokens: 24}}``)."""

    reasoner_max_tokens: int | None = field(
        default=None, metadata={"help": "Reasoner completion budget (None: the agent's max_tokens)."}
    )
    monitor_max_tokens: int | None = field(
        default=None, metadata={"help": "Monitor completion budget (None: the agent's max_tokens)."}
    )
    controller_max_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Prompted Controller's completion budget (None: the agent's max_tokens); a moderator Controller "
            "uses moderator_max_tokens."
        },
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and value < 1:
                raise ValueError(f"{f.name} must be >= 1 or None, got {value}")

    def sampling(self, base: Any, role: str) -> Any:
        """``base`` with this role's budget, when one is set."""
        budget = getattr(self, f"{role}_max_tokens")
        return base if budget is None else dataclasses.replace(base, max_tokens=budget)


def mro_details(trace: dict[str, Any]) -> dict[str, Any]:
    """The compact per-question MRO record kept in a samples row (``details["mro"]``).

    >>> from metamod.rollout.mro_traces import example_mro_trace
    >>> d = mro_details(example_mro_trace())
    >>> d["iterations"], d["status"], d["actions"], d["eta"], d["forced_last"]
    (2, 'corrected', [3, 2], [0, 0], False)
    """
    history = trace["history"]
    return {
        "iterations": trace["num_iterations"],
        "max_iterations": trace["max_iterations"],
        "status": trace["status"],
        "actions": [r["controller"]["action"] for r in history],
        "eta": [r["eta"] for r in history],
        "forced_last": trace["num_iterations"] == trace["max_iterations"],
        "parse": {role: [r[role]["parse"] for r in history] for role in ("reasoner", "monitor", "controller")},
        "tokens": trace["tokens"],
    }


class _MROBase(SingleAgentMethod):
    """Shared plumbing: the roles for this context, run the loop, turn traces into outcomes."""

    controller_kind: ClassVar[str] = "prompted"

    def __init__(self, context: Any):
        self.context = context
        simulated = context.agent is None
        if simulated and getattr(context, "mro_simulation", None) is None and context.simulated_agent is None:
            raise ConfigError(
                f"method {self.name!r} needs an agent: an LLM generator (debater backend) or the simulated world"
            )
        self.max_iterations = int(getattr(context, "max_iterations", 3))
        self.options = read_options(MROOptions, self.name, getattr(context, "method_options", None))

    def _sim_config(self) -> MROSimulationConfig:
        return getattr(self.context, "mro_simulation", None) or MROSimulationConfig(mro_sim_seed=self.context.seed)

    def _controller(self, sampling: Any) -> Any:
        return LLMController(self.context.agent, sampling, memory=self.context.memory)

    def roles(self) -> MRORoles:
        """The three roles this method runs with."""
        if self.context.agent is None:
            sim = simulated_roles(self._sim_config())
            controller = self._controller(None) if self.controller_kind != "prompted" else sim.controller
            return MRORoles(sim.reasoner, sim.monitor, controller)
        sampling, memory, opts = self.context.agent_sampling, self.context.memory, self.options
        return MRORoles(
            LLMReasoner(self.context.agent, opts.sampling(sampling, "reasoner"), memory=memory),
            LLMMonitor(self.context.agent, opts.sampling(sampling, "monitor"), memory=memory),
            self._controller(opts.sampling(sampling, "controller")),
        )

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        stats = MROStats()
        traces = list(
            run_mro(
                examples,
                self.roles(),
                max_iterations=self.max_iterations,
                batch_questions=max(len(examples), 1),
                stats=stats,
                progress=False,
            )
        )
        outcomes = []
        for trace in traces:
            history = trace["history"]
            tokens = trace["tokens"]
            outcome = SingleOutcome(
                answer=trace["final_answer"],
                answers=[r["reasoner"]["answer"] for r in history]
                + [r["controller"]["answer"] for r in history if r["controller"]["action"] == 2],
                texts=[r["reasoner"]["text"] for r in history],
                prompt_tokens=sum(t["prompt"] for t in tokens.values()),
                completion_tokens=sum(t["completion"] for t in tokens.values()),
                details={"mro": mro_details(trace)},
            )
            outcomes.append(outcome)
        return outcomes


class MRO(_MROBase):
    name, label = "mro", "MRO (R+M+C)"


class MROTrainedController(_MROBase):
    """R + M + the trained moderator (``LayerContext.moderator``) as Controller."""

    name, label = "mro_trained_controller", "MRO + trained Controller"
    needs: ClassVar[tuple[str, ...]] = ("moderator",)
    controller_kind = "moderator"
    generator_role: ClassVar[str] = "moderator"

    def __init__(self, context: Any):
        super().__init__(context)
        if getattr(context, self.generator_role) is None:
            raise ConfigError(
                f"method {self.name!r} needs the {self.generator_role} model (set moderator to a trained adapter "
                "folder, e.g. one trained on `metamod build-dataset --source mro` snapshots)"
            )

    def _controller(self, sampling: Any) -> Any:
        return ModeratorController(getattr(self.context, self.generator_role), self.context.moderator_sampling)


class MROPromptedModerator(MROTrainedController):
    """R + M + the untrained base model (``moderator_base``) on the trained Controller's prompt."""

    name, label = "mro_prompted_moderator", "MRO + prompted moderator"
    needs = ("moderator_base",)
    generator_role = "moderator_base"


class ReasonerOnly(_MROBase):
    """The Reasoner's first attempt only (one batched call): what the audit and control add on top."""

    name, label = "reasoner_only", "Reasoner only"

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        roles = self.roles()
        generations = roles.reasoner.propose([ReasonerRequest(ex, 1) for ex in examples]) if examples else []
        outcomes = []
        for g in generations:
            answer = extract_answer(g.text)
            outcomes.append(
                SingleOutcome(
                    answer=answer,
                    answers=[answer],
                    texts=[g.text],
                    prompt_tokens=int(g.prompt_tokens),
                    completion_tokens=int(g.completion_tokens),
                )
            )
        return outcomes


#: MRO methods, merged into :data:`metamod.evaluate.decision.DECISION_LAYERS`
MRO_METHODS: dict[str, type[SingleAgentMethod]] = {
    cls.name: cls for cls in (ReasonerOnly, MRO, MROTrainedController, MROPromptedModerator)
}
