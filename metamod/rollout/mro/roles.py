"""MRO roles backed by a generation backend: each answers ALL of one iteration's requests in ONE ``chat`` call.

A role is what the MRO engine (:mod:`metamod.rollout.mro`) batches on: at each iteration the engine hands the
Reasoner every active instance's request in one ``propose`` call, then the Monitor (``audit``), then the Controller
(``decide``). The three roles may use different backends and models, or share one generator.

* :class:`LLMReasoner` -- ``mro_reasoner`` at the first iteration, ``mro_reasoner_retry`` (the problem and the
  Controller's feedback, MC² Eq. 4) after a Restart; ``mro_reasoner_retry_with_attempt`` when the engine also
  passes the rejected attempt (its ``retry_with_attempt`` option).
* :class:`LLMMonitor` -- ``mro_monitor``; the output is parsed by :func:`~metamod.rollout.mro.parse.parse_monitor`.
* :class:`LLMController` -- the prompted Controller, ``mro_controller``: ACCEPT / PATCH / RESTART in tagged fields.
* :class:`ModeratorController` -- a (trained) moderator as Controller: the moderator protocol on
  :func:`~metamod.rollout.state.controller_messages`, parsed by :func:`~metamod.rewards.moderator.parse_decision`
  (the training rows of ``build-dataset --source mro`` are built by the same function).

The prompted roles' templates have a ``{policy}`` part, the role's policy prompt ``P_i`` (``mro_policy_<role>``).
A memory's composed policy (MC² Eq. 13, ``Guidance.policy``: the MetaCognitive Accumulator's composer output)
replaces that part and only that part; the task line, the problem, the solution and report under review and the
output format the parsers need are fixed parts of the template, so a composed policy cannot drop them. Other
memory guidance is prepended to the prompt, as for every other caller.

Simulated roles with the same methods live in :mod:`metamod.rollout.mro.simulated`.

>>> from metamod.llm.base import Generation, SamplingConfig
>>> class Echo:
...     name, context_length = "echo", None
...     def chat(self, conversations, sampling):
...         return [Generation("STOP <answer>4</answer>", 5, 3) for _ in conversations]
>>> from metamod.tasks.base import Example
>>> ex = Example(id="q", question="2+2?", gold="4", kind="math")
>>> turn = ModeratorController(Echo(), SamplingConfig(temperature=0)).decide(
...     [ControllerRequest(ex, 1, "Step 1: 2+2=4", "4", None, "ERROR_FOUND: no", final=False)])[0]
>>> turn.decision.action_name, turn.decision.answer
('accept', '4')
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from metamod.llm.base import Conversation, Generation, Generator, SamplingConfig
from metamod.rewards.moderator import DECISION_TOP_LOGPROBS, STOP, decision_probability, parse_decision
from metamod.rollout.mro.parse import (
    ACCEPT,
    PATCH,
    RESTART,
    ControllerDecision,
    MonitorReport,
    action_probabilities,
    controller_prompt_messages,
    monitor_messages,
    parse_controller,
    reasoner_messages,
)
from metamod.rollout.roles import LLMRole
from metamod.rollout.state import controller_messages
from metamod.tasks.base import Example
from metamod.tasks.grading import is_equivalent

logger = logging.getLogger(__name__)


@dataclass
class ReasonerRequest:
    """One Reasoner call: the instance, the 1-based iteration and, after a Restart, the feedback ``u^{k-1}``.

    ``previous`` (the rejected attempt) is set only when the engine runs with ``retry_with_attempt``; MC² Eq. 4
    conditions a retry on the feedback alone, so by default it is ``None``.
    """

    example: Example
    iteration: int
    previous: str | None = None
    feedback: str | None = None
    previous_correct: bool | None = None  # simulated roles only (they model recovery); LLM roles never read it


@dataclass
class MonitorRequest:
    """One Monitor call: audit ``solution`` (with its extracted ``answer``) for ``example``."""

    example: Example
    iteration: int
    solution: str
    answer: str | None
    correct: bool | None = None  # simulated roles only (their detection rates depend on it)


@dataclass
class ControllerRequest:
    """One Controller call: the candidate, the parsed Monitor report and its text; ``final`` at the last iteration."""

    example: Example
    iteration: int
    solution: str
    answer: str | None
    report: MonitorReport | None
    report_text: str
    final: bool = False
    correct: bool | None = None  # simulated roles only


@dataclass
class ControllerTurn:
    """A Controller's generation and the decision parsed from it, with what the same request says about its odds.

    ``p_stop`` (``reads_p_stop``): the probability that the Controller ends the loop, read from the top-k log-probs
    of the same request (``None`` when unreadable). For a moderator Controller it is its P(STOP) (Accept, or Patch
    when its answer differs; :func:`~metamod.rewards.moderator.decision_probability`); for the prompted Controller
    it is P(ACCEPT) + P(PATCH) at its ``ACTION`` value (:func:`~metamod.rollout.mro.parse.action_probabilities`).

    ``p_accept`` (``reads_p_accept``, the prompted Controller only): P(ACCEPT) at its ``ACTION`` value, over ACCEPT /
    PATCH / RESTART. A moderator Controller has none: its Accept is ``STOP`` with the candidate's answer, decided by
    the answer it writes after ``STOP``, so no single token's distribution gives it.
    """

    generation: Generation
    decision: ControllerDecision
    p_stop: float | None = None
    reads_p_stop: bool = False
    p_accept: float | None = None
    reads_p_accept: bool = False


@runtime_checkable
class Role(Protocol):
    """What every role offers the engine and the trace: ``backend``, ``model``, ``simulated`` and its settings."""

    backend: str
    model: str
    simulated: bool

    def settings(self) -> dict[str, Any]:
        """Settings recorded under ``roles.<role>.settings`` in each trace."""
        ...


class _LLMRole(LLMRole):
    """An MRO role: an :class:`~metamod.rollout.roles.LLMRole` with one output per request and the role's policy
    prompt (MC² Eq. 13); ONE ``generator.chat`` call per batch of requests."""

    role = "role"

    def __init__(
        self,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        backend: str = "hf",
        memory: Any = None,
        method: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        if sampling.n != 1:
            raise ValueError(f"MRO roles produce one output per call: sampling.n must be 1, got {sampling.n}")
        model = str(getattr(generator, "name", type(generator).__name__))
        super().__init__(
            generator,
            sampling,
            role=type(self).role,
            memory=memory,
            method=method,
            backend=backend,
            settings=settings,
            who=f"{model} ({type(self).role}): backend",
        )

    def policy_update(self, example_id: str) -> dict[str, Any] | None:
        """The memory's prompt-update record for this role on ``example_id`` (MC² C.3), or ``None``."""
        lookup = getattr(self.memory, "policy_update", None)
        return lookup(example_id, self.role) if lookup is not None else None

    def _policy_prompt(
        self, build: Callable[[str | None], Conversation], example: Example, iteration: int
    ) -> Conversation:
        """Build the conversation with the role's policy prompt for this call (MC² Eq. 13).

        ``build(policy)`` renders the role's template with ``policy`` in its ``{policy}`` part (``None``: the
        role's own, ``mro_policy_<role>``). A composed policy from the memory (``Guidance.policy``) replaces that
        part, and only that part: the task line, the problem and the output format are fixed parts of the
        template. Any other guidance is prepended to the prompt built with the role's own policy.
        """
        g = self.ask(example, step=iteration - 1)
        if g.policy and g.text.strip():
            return build(g.text)
        return g.prepend_to_first(build(None))


class LLMReasoner(_LLMRole):
    """The Reasoner: proposes a solution and an answer, conditioned on the last Restart's feedback."""

    role = "reasoner"

    def propose(self, requests: list[ReasonerRequest]) -> list[Generation]:
        conversations = [
            self._policy_prompt(
                lambda policy, r=r: reasoner_messages(
                    r.example.prompt_text(), feedback=r.feedback, previous=r.previous, policy=policy
                ),
                r.example,
                r.iteration,
            )
            for r in requests
        ]
        return self.chat(conversations)


class LLMMonitor(_LLMRole):
    """The Monitor: audits a solution (verdict, first wrong step, description, explanation)."""

    role = "monitor"

    def audit(self, requests: list[MonitorRequest]) -> list[Generation]:
        conversations = [
            self._policy_prompt(
                lambda policy, r=r: monitor_messages(r.example.prompt_text(), r.solution, r.answer, policy=policy),
                r.example,
                r.iteration,
            )
            for r in requests
        ]
        return self.chat(conversations)


class _ControllerRole(_LLMRole):
    """A Controller role whose one ``chat`` call also asks for the top ``top_logprobs`` log-probs of its decision
    tokens (default :data:`~metamod.rewards.moderator.DECISION_TOP_LOGPROBS`; nothing extra is generated; 0 asks
    for none, and its probabilities are then ``None``)."""

    role = "controller"

    def __init__(
        self,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        top_logprobs: int = DECISION_TOP_LOGPROBS,
        **kwargs: Any,
    ) -> None:
        super().__init__(generator, sampling, **kwargs)
        self.top_logprobs = top_logprobs

    def _asked_top_logprobs(self) -> int:
        return max(self.sampling.top_logprobs, self.top_logprobs) if self.top_logprobs else 0


class LLMController(_ControllerRole):
    """The prompted Controller: ACCEPT / PATCH / RESTART with tagged fields (``mro_controller``).

    At the last iteration a RESTART cannot run: the engine ends the loop with status ``max_iterations`` and the
    last candidate's answer, as in MC² (the budget is exhausted).

    The one ``chat`` call also asks for the top ``top_logprobs`` log-probs (default
    :data:`~metamod.rewards.moderator.DECISION_TOP_LOGPROBS`; nothing extra is generated; 0 asks for none), from
    which each turn carries ``p_accept`` = P(ACCEPT) and ``p_stop`` = P(ACCEPT) + P(PATCH) at the ``ACTION`` value
    (:func:`~metamod.rollout.mro.parse.action_probabilities`; ``None`` without the field or the log-probs).
    """

    def decide(self, requests: list[ControllerRequest]) -> list[ControllerTurn]:
        conversations = [
            self._policy_prompt(
                lambda policy, r=r: controller_prompt_messages(
                    r.example.prompt_text(), r.solution, r.answer, r.report_text, policy=policy
                ),
                r.example,
                r.iteration,
            )
            for r in requests
        ]
        generations = self.chat(conversations, top_logprobs=self._asked_top_logprobs())
        turns = []
        for r, g in zip(requests, generations, strict=True):
            decision = parse_controller(g.text, error_found=r.report.error_found if r.report else None)
            odds = action_probabilities(g.tokens, g.top_logprobs)
            p_accept = None if odds is None else odds["accept"]
            p_stop = None if odds is None else odds["accept"] + odds["patch"]
            turns.append(ControllerTurn(g, decision, p_stop, True, p_accept, True))
        return turns


def moderator_decision(text: str, request: ControllerRequest) -> ControllerDecision:
    """Map a moderator-protocol output onto the Controller's actions (one rule, used by every moderator Controller).

    * ``STOP <answer>a</answer>`` (read leniently at the last iteration, like the debate's forced answer): Accept
      when ``a`` is equivalent to the candidate's answer under the shared grader, else Patch with ``a``;
    * ``CONTINUE``, or anything without a STOP answer before the last iteration: Restart (the next Reasoner call
      gets the Monitor's error as feedback). At the last iteration an output without an answer ends the loop with
      the candidate's answer (status ``max_iterations``).

    >>> from metamod.tasks.base import Example
    >>> req = ControllerRequest(Example(id="q", question="?", gold="4", kind="math"), 1, "s", "4", None, "r")
    >>> [moderator_decision(t, req).action for t in ("STOP <answer>4.0</answer>", "STOP <answer>5</answer>", "x")]
    [1, 2, 3]
    """
    parsed = parse_decision(text)
    answer = parsed.answer if parsed.action == STOP else None
    if answer is None and request.final:
        from metamod.rewards.moderator import final_answer

        answer = final_answer(text)
    how = "ok" if parsed.valid else f"moderator_{parsed.reason}"
    if answer is None:
        return ControllerDecision(RESTART, None, "", None, None, how)
    ex = request.example
    same = request.answer is not None and is_equivalent(answer, request.answer, ex.kind, ex.choices)
    if same:
        return ControllerDecision(ACCEPT, request.answer, "", None, None, how)
    return ControllerDecision(PATCH, answer, "", None, None, how)


class ModeratorController(_ControllerRole):
    """A moderator model as Controller (``build-dataset --source mro`` trains one; the prompted base works too).

    The prompt is :func:`~metamod.rollout.state.controller_messages` (the forced variant at the last iteration);
    decisions follow :func:`moderator_decision`. ``settings()['protocol']`` is ``"moderator"``. This prompt is the
    one a trained moderator learned on, so it has no replaceable policy part: memory guidance, a composed policy
    too, is prepended to it. Its P(STOP) is read from the same call (``top_logprobs``, as for the prompted
    Controller).
    """

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "protocol": "moderator"}

    def decide(self, requests: list[ControllerRequest]) -> list[ControllerTurn]:
        conversations = [
            self.guided(
                controller_messages(r.example.prompt_text(), r.solution, r.report_text, final=r.final),
                r.example,
                step=r.iteration - 1,
            )
            for r in requests
        ]
        generations = self.chat(conversations, top_logprobs=self._asked_top_logprobs())
        return [
            ControllerTurn(
                g, moderator_decision(g.text, r), decision_probability(g.tokens, g.top_logprobs), reads_p_stop=True
            )
            for r, g in zip(requests, generations, strict=True)
        ]
