"""MRO evaluation methods: the Reasoner / Monitor / Controller loop (:mod:`metamod.rollout.mro`) as a method row.

==========================  ==========================================================================================
``mro``                     R + M + C: the prompted Controller (ACCEPT / PATCH / RESTART), budget ``max_iterations``.
``reasoner_only``           the Reasoner's first attempt alone (the MRO prompt, no audit, no control).
``mro_trained_controller``  R + M + the trained moderator as Controller (``moderator``: an adapter trained on
                            ``build-dataset --source mro`` snapshots; STOP = Accept/Patch, CONTINUE = Restart).
``mro_prompted_moderator``  R + M + the untrained base model on the same moderator-protocol prompt (the analogue of
                            Meta-Moderator*: what training adds).
``mc2``                     MC²: ``mro`` with its own MetaCognitive Accumulator (``memory: mca``; docs/memory.md).
``mro_micro``               R+M+C + Micro-update: ``mro`` with the MCA's retrieved micro-lessons only (no consolidation).
``reasoner_updates``        Reasoner + Updates: ``reasoner_only`` with the MCA's Reasoner stream.
==========================  ==========================================================================================

The rows are in :data:`metamod.evaluate.methods.METHODS`: ``mro``, ``mc2`` and ``mro_micro`` run :class:`MRO`,
the two moderator rows :class:`MROTrainedController`, ``reasoner_only`` and ``reasoner_updates``
:class:`ReasonerOnly`. A row with a memory of its own (``memory``) gets it from the harness (one per seed, saved in
``memory-seed<k>-<method>/``), built from ``memory_options`` over the row's ``memory_defaults``; it observes that
method's own traces.

Every role's calls for all questions of a batch go out in one batched call per iteration. With LLM debaters the
three roles share the debater model (``debater_model``; ``metamod rollout`` with ``loop: mro`` takes one model per
role); in the simulated world they are the simulated roles of :mod:`metamod.rollout.mro.simulated`
(``mro_simulation`` settings, ``mro_sim_seed`` offset by the evaluation seed).

The samples row of each question carries ``details["mro"]``: iterations used, terminal status, the action and the
candidate's correctness (``eta``) at each iteration, and which parse fallbacks fired; the metrics
(:mod:`metamod.evaluate.mro.metrics`) read it for action shares per iteration and control accuracy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from metamod.config import ConfigError
from metamod.llm.base import MAX_TOP_LOGPROBS
from metamod.memory.base import ask_guidance
from metamod.rollout.mro import MRORoles, MROStats, run_mro
from metamod.rollout.mro.roles import LLMController, LLMMonitor, LLMReasoner, ModeratorController, ReasonerRequest
from metamod.rollout.mro.simulated import MROSimulationConfig, simulated_roles
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

from ..baselines._common import read_options
from ..single import SingleAgentMethod, SingleOutcome
from .stopping import controller_stop_details


@dataclass
class MROOptions:
    """Options of an MRO method (``method_options: {mro: {monitor_max_tokens: 24}}``): per-role decoding budgets and
    what a retry after a Restart sees."""

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
    controller_top_logprobs: int = field(
        default=10,
        metadata={
            "help": "Top-k log-probs the prompted Controller's own call asks for, to read P(Accept) and P(STOP) at "
            "its ACTION value (p_accept, p_stop) at no extra generation; 0: ask for none (a server that rejects "
            "logprobs): both are then null. A moderator Controller asks for moderator_top_logprobs."
        },
    )
    retry_with_attempt: bool = field(
        default=False,
        metadata={
            "help": "Show the Reasoner its rejected attempt after a Restart, next to the feedback (False: MC2 Eq. 4, "
            "the retry sees the problem and the Controller's feedback only; true: a self-refinement variant)."
        },
    )

    def __post_init__(self) -> None:
        for name in ("reasoner_max_tokens", "monitor_max_tokens", "controller_max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        top = self.controller_top_logprobs
        if not isinstance(top, int) or isinstance(top, bool) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise ValueError(f"controller_top_logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}], got {top!r}")
        if not isinstance(self.retry_with_attempt, bool):
            raise ValueError(f"retry_with_attempt must be true or false, got {self.retry_with_attempt!r}")

    def sampling(self, base: Any, role: str) -> Any:
        """``base`` with this role's budget, when one is set."""
        budget = getattr(self, f"{role}_max_tokens")
        return base if budget is None else dataclasses.replace(base, max_tokens=budget)


def mro_details(trace: dict[str, Any]) -> dict[str, Any]:
    """The compact per-question MRO record kept in a samples row (``details["mro"]``).

    >>> from metamod.rollout.mro.traces import example_mro_trace
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
        **({"policy_update": updates} if (updates := _policy_updates(history)) else {}),
        **controller_stop_details(history),
    }


def _policy_updates(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Per role, the memory's prompt-update outcome at the first iteration (``used``, ``ok``, attempt reasons)."""
    out = {}
    for role in ("reasoner", "monitor", "controller"):
        update = history[0][role].get("policy_update") if history else None
        if update:
            out[role] = {
                "used": bool(update.get("used")),
                "ok": bool(update.get("ok")),
                "attempts": [a.get("reason") for a in update.get("attempts", [])],
            }
    return out


class AskingRole:
    """A simulated role that asks its memory for guidance the way an LLM role would, then answers as before.

    Simulated roles cannot read guidance, so their outputs do not change; asking still runs the memory's
    guidance path (retrieval, prompt composition, served ids, policy-update records in the trace), which is what
    the simulated world exercises.
    """

    def __init__(self, inner: Any, role: str, memory: Any, method: str) -> None:
        self.inner, self.role, self.memory, self.method = inner, role, memory, method

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _ask(self, requests: list[Any]) -> None:
        for r in requests:
            ask_guidance(self.memory, r.example, self.role, step=r.iteration - 1, method=self.method)

    def propose(self, requests: list[Any]) -> Any:
        self._ask(requests)
        return self.inner.propose(requests)

    def audit(self, requests: list[Any]) -> Any:
        self._ask(requests)
        return self.inner.audit(requests)

    def decide(self, requests: list[Any]) -> Any:
        self._ask(requests)
        return self.inner.decide(requests)

    def policy_update(self, example_id: str) -> dict[str, Any] | None:
        lookup = getattr(self.memory, "policy_update", None)
        return lookup(example_id, self.role) if lookup is not None else None


class _MROBase(SingleAgentMethod):
    """Shared plumbing: the roles for this context, run the loop, turn traces into outcomes."""

    controller_kind: ClassVar[str] = "prompted"

    def __init__(self, context: Any, spec: Any):
        self.context, self.spec, self.name = context, spec, spec.name
        simulated = context.agent is None
        if simulated and context.mro_simulation is None and context.simulated_agent is None:
            raise ConfigError(
                f"method {self.name!r} needs an agent: an LLM generator (debater backend) or the simulated world"
            )
        self.max_iterations = context.max_iterations
        self.options = read_options(MROOptions, self.name, context.method_options)

    def _sim_config(self) -> MROSimulationConfig:
        return self.context.mro_simulation or MROSimulationConfig(mro_sim_seed=self.context.seed)

    def _controller(self, sampling: Any) -> Any:
        return LLMController(
            self.context.agent,
            sampling,
            memory=self.context.memory,
            method=self.name,
            top_logprobs=self.options.controller_top_logprobs,
        )

    def roles(self) -> MRORoles:
        """The three roles this method runs with."""
        if self.context.agent is None:
            sim = simulated_roles(self._sim_config())
            controller = self._controller(None) if self.controller_kind != "prompted" else sim.controller
            memory = self.context.memory
            if memory is None:
                return MRORoles(sim.reasoner, sim.monitor, controller)
            return MRORoles(
                AskingRole(sim.reasoner, "reasoner", memory, self.name),
                AskingRole(sim.monitor, "monitor", memory, self.name),
                AskingRole(controller, "controller", memory, self.name) if controller is sim.controller else controller,
            )
        sampling, memory, opts = self.context.agent_sampling, self.context.memory, self.options
        return MRORoles(
            LLMReasoner(self.context.agent, opts.sampling(sampling, "reasoner"), memory=memory, method=self.name),
            LLMMonitor(self.context.agent, opts.sampling(sampling, "monitor"), memory=memory, method=self.name),
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
                retry_with_attempt=self.options.retry_with_attempt,
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
                prompt_tokens=tokens["reasoner"]["prompt"],  # the agent; Monitor + Controller are the meta layer
                completion_tokens=tokens["reasoner"]["completion"],
                meta_prompt_tokens=tokens["monitor"]["prompt"] + tokens["controller"]["prompt"],
                meta_completion_tokens=tokens["monitor"]["completion"] + tokens["controller"]["completion"],
                details={"mro": mro_details(trace)},
                trace=trace,
            )
            outcomes.append(outcome)
        return outcomes


class MRO(_MROBase):
    """The R + M + C loop (``mro``); with the row's own ``memory: mca`` it is MC² (``mc2``; ``mro_micro``: without
    windowed consolidation)."""


class MROTrainedController(_MROBase):
    """R + M + a moderator model as Controller: the row's ``needs[0]`` (the trained ``moderator``, or
    ``moderator_base``: the untrained base model on the trained Controller's prompt)."""

    controller_kind = "moderator"

    @property
    def generator_role(self) -> str:
        return self.spec.needs[0]

    def __init__(self, context: Any, spec: Any):
        super().__init__(context, spec)
        if getattr(context, self.generator_role) is None:
            raise ConfigError(
                f"method {self.name!r} needs the {self.generator_role} model (set moderator to a trained adapter "
                "folder, e.g. one trained on `metamod build-dataset --source mro` snapshots)"
            )

    def _controller(self, sampling: Any) -> Any:
        return ModeratorController(
            getattr(self.context, self.generator_role),
            self.context.moderator_sampling,
            top_logprobs=self.context.moderator_sampling.top_logprobs,  # EvalConfig.moderator_top_logprobs (0: none)
            memory=self.context.memory,
            method=self.name,
        )


class ReasonerOnly(_MROBase):
    """The Reasoner's first attempt only (one batched call): what the audit and control add on top; with the row's
    ``memory: mca`` restricted to the Reasoner stream it is Reasoner + Updates (``reasoner_updates``)."""

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        roles = self.roles()  # simulated roles ignore memories; LLM roles ask theirs
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
