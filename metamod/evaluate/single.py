"""Single-agent baselines: one model answers alone (no debate), with its own batched generator calls.

=====================  =================================================================================
``single_naive``       template ``single_naive``: answer only.
``single_cot``         template ``single_cot``: step-by-step reasoning, then the answer.
``single_reflection``  a three-turn conversation: CoT answer, self-critique (``single_reflection_critique``),
                       revised answer (``single_reflection_revise``); the revised answer counts.
``single_cot_sc``      self-consistency: ``k`` CoT samples (``sampling.n = k``), majority vote of their answers;
                       the record's ``details.sample_completion_tokens`` lists each sample's completion tokens.
=====================  =================================================================================

With an LLM (``LayerContext.agent``) each step of each method is ONE batched ``generator.chat`` call over all
questions. Memory guidance (role ``single``, :func:`metamod.memory.base.ask_guidance`), when non-empty, is prepended through
the ``memory_guidance`` template.

In the simulated world (``LayerContext.simulated_agent``, a simulated debater group) there are no prompts to vary,
so each baseline is defined by which simulated turn it replays:

* ``single_naive`` and ``single_cot``: agent 0's round-0 response (the two coincide there by construction);
* ``single_reflection``: agent 0 at round 1 after seeing only its own round-0 response (no peers);
* ``single_cot_sc``: ``k`` independent round-0 responses of agent 0's simulated model: sample ``j`` is the
  round-0 turn of agent index ``j * P`` (``P`` = period of the per-agent parameter lists, so the same accuracy and
  the same per-question difficulty, but a different random stream: the simulation seeds each turn by
  ``(sim_seed, question id, agent, round)``), then a majority vote (seeded tie rule of
  :mod:`metamod.tasks.voting`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from metamod.llm.base import Conversation, Generation
from metamod.memory.base import ask_guidance
from metamod.prompts import render
from metamod.rollout.roles import LLMRole
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer
from metamod.tasks.voting import majority_answer

logger = logging.getLogger(__name__)


@dataclass
class SingleOutcome:
    """What a single-agent baseline produced for one question.

    Attributes:
        answer: the final answer (``None``: none parsable, graded wrong).
        answers: every answer the agent proposed on the way (for coverage), in order.
        texts: the raw responses, in order.
        prompt_tokens: prompt tokens the agent spent on this question (``debater_*`` in the record).
        completion_tokens: completion tokens the agent spent on this question.
        meta_prompt_tokens: prompt tokens of the method's decision layer, booked as ``moderator_*`` in the record
            (MRO: the Monitor and the Controller; the Reasoner is the agent). 0 for methods without one.
        meta_completion_tokens: completion tokens of that layer.
        details: method-specific, JSON-ready extras written to the samples row as ``details`` (e.g. the MRO
            iterations and actions, the strategy a meta-reasoner picked, a search tree's scores).
        trace: the method's full trace when it has one (an MRO trace); shown to the method's memory, never written
            to the samples row.
    """

    answer: str | None
    answers: list[str | None] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    meta_prompt_tokens: int = 0
    meta_completion_tokens: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] | None = field(default=None, repr=False)

    def add(self, generation: Generation) -> str | None:
        answer = extract_answer(generation.text)
        self.texts.append(generation.text)
        self.answers.append(answer)
        self.prompt_tokens += generation.prompt_tokens
        self.completion_tokens += generation.completion_tokens
        return answer


class SingleAgentMethod:
    """A method that runs itself: ``Method(context, spec)`` with its row of the method table
    (:class:`~metamod.evaluate.methods.MethodSpec`), ``run(examples) -> list[SingleOutcome]`` with an LLM agent or
    a simulated one. Run as is, it is one prompt per question (the row's ``settings["template"]``, default
    ``single_cot``): ``single_naive``, ``single_cot``, Buffer-of-Thought and the Bayesian Cheatsheet's rows.
    """

    def __init__(self, context: Any, spec: Any):
        self.context, self.spec, self.name = context, spec, spec.name
        self.template = str(spec.settings.get("template", "single_cot"))
        if context.agent is None and context.simulated_agent is None:
            raise ValueError(
                f"method {self.name!r} needs an agent: an LLM generator (debater backend) or simulated debaters"
            )
        #: the agent as an LLM role (``None`` in the simulated world): seeded, per-call ``n`` and decoding overrides
        self.llm = (
            None
            if context.agent is None
            else LLMRole(
                context.agent,
                dataclasses.replace(context.agent_sampling, seed=context.seed),
                role="single",
                memory=context.memory,
                method=self.name,
                who="agent",
            )
        )

    # ---- LLM helpers
    def _prompt(self, example: Example, template: str) -> str:
        text = render(template, question=example.prompt_text())
        return ask_guidance(self.context.memory, example, "single", method=self.name).prepend_to(text)

    def _chat(self, conversations: list[Conversation], *, n: int = 1) -> list[Generation]:
        return self.llm.chat(conversations, n=n)

    # ---- simulated helpers
    def _sim(self, requests: list[Any], group: Any = None) -> list[Generation]:
        group = self.context.simulated_agent if group is None else group
        for request in requests:  # the simulated agent cannot read guidance, but asks like an LLM one would (so
            ask_guidance(self.context.memory, request.example, "single", method=self.name)  # served ids are logged)
        return list(group.respond(requests)) if requests else []

    @staticmethod
    def _request(example: Example, round_index: int = 0, own_previous: str | None = None, agent: int = 0) -> Any:
        from metamod.rollout.debaters import DebateRequest

        return DebateRequest(example=example, agent=agent, round=round_index, own_previous=own_previous)

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        """Answer every example (one batched call per step).

        Args:
            examples: the questions.

        Returns:
            One :class:`SingleOutcome` per example, in order.
        """
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        if self.context.agent is not None:
            conversations = [[{"role": "user", "content": self._prompt(ex, self.template)}] for ex in examples]
            generations = self._chat(conversations)
        else:
            generations = self._sim([self._request(ex) for ex in examples])
        for outcome, g in zip(outcomes, generations, strict=True):
            outcome.answer = outcome.add(g)
        return outcomes


class SingleReflection(SingleAgentMethod):
    """Answer, self-critique, revision: three turns of one conversation; the revised answer counts."""

    def run(self, examples):
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        if self.context.agent is None:
            first = self._sim([self._request(ex) for ex in examples])
            for o, g in zip(outcomes, first, strict=True):
                o.add(g)
            revised = self._sim([self._request(ex, 1, g.text) for ex, g in zip(examples, first, strict=True)])
            for o, g in zip(outcomes, revised, strict=True):
                o.answer = o.add(g)
            return outcomes
        conversations = [[{"role": "user", "content": self._prompt(ex, "single_cot")}] for ex in examples]
        for step, follow_up in enumerate((None, "single_reflection_critique", "single_reflection_revise")):
            if follow_up is not None:
                for conv in conversations:
                    conv.append({"role": "user", "content": render(follow_up)})
            generations = self._chat(conversations)
            for o, conv, g in zip(outcomes, conversations, generations, strict=True):
                conv.append({"role": "assistant", "content": g.text})
                if step == 1:  # the critique is not an answer: count its tokens only
                    o.texts.append(g.text)
                    o.prompt_tokens += g.prompt_tokens
                    o.completion_tokens += g.completion_tokens
                else:
                    o.answer = o.add(g)
        return outcomes


class SingleCoTSC(SingleAgentMethod):
    """Self-consistency: ``sc_samples`` CoT samples in one call, majority vote of their answers."""

    def run(self, examples):
        k = self.context.sc_samples
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        if self.context.agent is not None:
            if self.context.agent_sampling.temperature == 0:
                logger.warning("single_cot_sc with temperature 0: the %d samples will be identical", k)
            conversations = [[{"role": "user", "content": self._prompt(ex, "single_cot")}] for ex in examples]
            generations = self._chat(conversations, n=k)
            per_example = [generations[i * k : (i + 1) * k] for i in range(len(examples))]
        else:
            stride = self._agent_stride()
            columns = [self._sim([self._request(ex, agent=j * stride) for ex in examples]) for j in range(k)]
            per_example = [[column[i] for column in columns] for i in range(len(examples))]
        for ex, o, gens in zip(examples, outcomes, per_example, strict=True):
            for g in gens:
                o.add(g)
            # per sample, in sample order: what vote@k at k < K costs (metamod.evaluate.frontier)
            o.details["sample_completion_tokens"] = [g.completion_tokens for g in gens]
            o.answer = majority_answer(
                o.answers, kind=ex.kind, choices=ex.choices, seed=self.context.seed, question_id=ex.id
            )
        return outcomes

    def _agent_stride(self) -> int:
        """Agent-index step that keeps agent 0's parameters: sample ``j`` is agent ``j * stride`` at round 0.

        The simulated debaters seed each turn by ``(sim_seed, question id, agent, round)`` and cycle their per-agent
        parameters (accuracy, stubbornness) by agent index, so agents ``0, stride, 2 * stride, ...`` are independent
        draws of the same simulated model on the same question (its shared difficulty included).
        """
        config = getattr(self.context.simulated_agent, "config", None)
        lengths = [len(getattr(config, name, None) or [1]) for name in ("agent_accuracy", "stubbornness")]
        return math.lcm(*lengths)
