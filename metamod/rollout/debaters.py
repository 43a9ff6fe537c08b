"""Debater groups: one object answers a whole round's batch of (question, agent) requests in one call.

A *group* is what the engine batches on: every agent that points at the same group object is served by the same
``respond`` call at each round. :class:`LLMDebaters` wraps one :class:`~metamod.llm.base.Generator` (one backend
and model) and sends exactly ONE ``generator.chat`` call per ``respond``; the simulated group lives in
:mod:`metamod.rollout.simulated`.

Debater conversations follow the usual debate protocol: round 0 is the ``debater_initial`` prompt; at round
``t >= 1`` the conversation is ``[user: initial prompt, assistant: own previous response, user: debater_round
prompt with the peers' previous responses]``.

>>> from metamod.tasks.base import Example
>>> ex = Example(id="q", question="What is 2 + 3?", gold="5", kind="math")
>>> req = DebateRequest(example=ex, agent=0, round=1, own_previous="<answer>5</answer>",
...                     peer_previous=["<answer>6</answer>"])
>>> [m["role"] for m in debater_conversation(req)]
['user', 'assistant', 'user']
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from metamod.llm.base import Conversation, Generation, Generator, SamplingConfig
from metamod.llm.budget import cut_guidance
from metamod.memory.base import Guidance
from metamod.prompts import format_responses, render
from metamod.rollout.roles import LLMRole
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

TRIM_MARKER = "[... earlier text trimmed to fit the context ...] "


@dataclass
class DebateRequest:
    """One debater turn to produce.

    Attributes:
        example: the question.
        agent: the agent's index in the debate (0-based).
        round: the round index (0-based).
        own_previous: this agent's response at the previous round (``None`` at round 0).
        peer_previous: the other agents' responses at the previous round, in agent order (empty at round 0).
        peer_agents: the other agents' indices, aligned with ``peer_previous``.
    """

    example: Example
    agent: int
    round: int
    own_previous: str | None = None
    peer_previous: list[str] = field(default_factory=list)
    peer_agents: list[int] = field(default_factory=list)


@dataclass
class DebaterGeneration(Generation):
    """A :class:`Generation` plus whether the prompt had to be shortened to fit the model's context."""

    trimmed: bool = False


@runtime_checkable
class DebaterGroup(Protocol):
    """What the debate engine needs from a group of debaters.

    Attributes:
        backend: backend name written to traces (``"sim"``, ``"hf"``, ``"vllm"``, ``"openai"``, ...).
        model: model id or path written to traces.
        simulated: ``True`` for simulated debaters (their traces are labelled simulated).
    """

    backend: str
    model: str
    simulated: bool

    def respond(self, requests: list[DebateRequest]) -> list[Generation]:
        """Answer every request of one round in one batched call, in request order."""
        ...

    def agent_settings(self, agent: int) -> dict[str, Any]:
        """Settings of one agent, recorded in the trace's ``agents`` list."""
        ...


def _confidence(with_confidence: bool) -> str:
    return "\n" + render("confidence_instruction") if with_confidence else ""


def debater_conversation(
    request: DebateRequest,
    *,
    confidence: bool = False,
    guidance: Guidance | None = None,
    peer_texts: list[str] | None = None,
    own_text: str | None = None,
) -> Conversation:
    """The chat conversation a debater sees for one request.

    Args:
        request: the turn.
        confidence: append the ``confidence_instruction`` to the prompts.
        guidance: the memory's guidance for this turn, put in front of the first message
            (:meth:`~metamod.memory.base.Guidance.prepend_to`).
        peer_texts: override the peers' responses (used after trimming).
        own_text: override the own previous response (used after trimming).

    Returns:
        A list of ``{"role", "content"}`` messages.
    """
    question = request.example.prompt_text()
    conf = _confidence(confidence)
    initial = render("debater_initial", question=question, confidence=conf)
    if guidance is not None:
        initial = guidance.prepend_to(initial)
    if request.round == 0:
        return [{"role": "user", "content": initial}]
    peers = request.peer_previous if peer_texts is None else peer_texts
    own = request.own_previous if own_text is None else own_text
    round_prompt = render("debater_round", question=question, confidence=conf, peer_responses=format_responses(peers))
    return [
        {"role": "user", "content": initial},
        {"role": "assistant", "content": own or ""},
        {"role": "user", "content": round_prompt},
    ]


def _cut_front(text: str, words: int) -> str:
    """Drop the first ``words`` whitespace-separated words (the answer sits at the end, so keep the tail)."""
    parts = text.removeprefix(TRIM_MARKER).split()
    if words >= len(parts):
        return TRIM_MARKER.strip()
    return TRIM_MARKER + " ".join(parts[words:])


class LLMDebaters(LLMRole):
    """Debaters backed by one generation backend (an :class:`~metamod.rollout.roles.LLMRole` in role ``debater``);
    one ``generator.chat`` call per round.

    Args:
        generator: any :class:`~metamod.llm.base.Generator`.
        sampling: decoding settings (``n`` must be 1: one response per agent turn).
        backend: backend name recorded in traces (e.g. ``"hf"``).
        confidence: add the confidence instruction to every prompt.
        memory: optional memory (:mod:`metamod.memory`), asked per agent and round (role ``debater``); its guidance
            is prepended to the agent's first message.
        settings: extra per-agent settings recorded in traces.

    Attributes:
        num_calls: number of batched ``chat`` calls made so far.
        num_trimmed: number of prompts shortened to fit the context.
    """

    def __init__(
        self,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        backend: str = "hf",
        confidence: bool = False,
        memory: Any = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        if sampling.n != 1:
            raise ValueError(f"debaters produce one response per agent turn: sampling.n must be 1, got {sampling.n}")
        model = str(getattr(generator, "name", type(generator).__name__))
        super().__init__(
            generator,
            sampling,
            role="debater",
            memory=memory,
            backend=backend,
            settings=settings,
            who=f"{model}: backend",
        )
        self.confidence = confidence
        self.num_trimmed = 0
        self._template_tokens: dict[tuple[str, ...], int] = {}

    def agent_settings(self, agent: int) -> dict[str, Any]:
        return {
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "max_tokens": self.sampling.max_tokens,
            "seed": self.sampling.seed,
            "confidence": self.confidence,
            **self.extra,
        }

    def _fits_by_bound(self, conversation: Conversation, budget: int) -> bool:
        """Cheap check that skips exact token counting: a text never has more tokens than UTF-8 bytes.

        The bound is the chat template's own tokens for this message layout (counted once, with empty contents)
        plus the bytes of every message, plus a small margin per message for tokenizers that add a prefix token.
        """
        roles = tuple(m["role"] for m in conversation)
        if roles not in self._template_tokens:
            empty = [{"role": role, "content": ""} for role in roles]
            self._template_tokens[roles] = self.generator.count_tokens(empty)
        bound = self._template_tokens[roles] + sum(len(m["content"].encode("utf-8")) + 8 for m in conversation)
        return bound <= budget

    def _fit(self, request: DebateRequest, guidance: Guidance) -> tuple[Conversation, bool]:
        """Build the conversation; to fit, drop memory guidance first (the prompt budget's order,
        :mod:`metamod.llm.budget`), then shorten the oldest peer text, then the own previous one."""
        conversation = debater_conversation(request, confidence=self.confidence, guidance=guidance)
        context = getattr(self.generator, "context_length", None)
        if not context or request.round == 0:  # round 0 has no history: the generator's budget cuts guidance
            return conversation, False
        budget = context - self.sampling.max_tokens
        if self._fits_by_bound(conversation, budget):
            return conversation, False
        used = self.generator.count_tokens(conversation)
        if used <= budget:
            return conversation, False
        conversation, used, _ = cut_guidance(conversation, budget, self.generator.count_tokens)
        if used <= budget:
            return conversation, True
        guidance = Guidance()  # every guidance item is gone; the history is next
        texts = list(request.peer_previous) + [request.own_previous or ""]
        position = 0  # oldest (first-listed) peer first, the agent's own previous response last
        while used > budget and position < len(texts):
            overflow = used - budget
            words = len(texts[position].removeprefix(TRIM_MARKER).split())
            if words == 0 or texts[position] == TRIM_MARKER.strip():
                position += 1
                continue
            texts[position] = _cut_front(texts[position], max(overflow, words // 8, 1))
            conversation = debater_conversation(
                request, confidence=self.confidence, guidance=guidance, peer_texts=texts[:-1], own_text=texts[-1]
            )
            used = self.generator.count_tokens(conversation)
        if used > budget:
            logger.warning(
                "question %r agent %d round %d: prompt still has %d tokens after trimming every response "
                "(budget %d = context %d - max_tokens %d); sending it anyway",
                request.example.id,
                request.agent,
                request.round,
                used,
                budget,
                context,
                self.sampling.max_tokens,
            )
        return conversation, True

    def respond(self, requests: list[DebateRequest]) -> list[DebaterGeneration]:
        """Build every prompt, then send them all in ONE ``generator.chat`` call."""
        if not requests:
            return []
        conversations, trimmed = [], []
        for request in requests:
            conversation, was_trimmed = self._fit(
                request, self.ask(request.example, agent=request.agent, step=request.round)
            )
            conversations.append(conversation)
            trimmed.append(was_trimmed)
        num_trimmed = sum(trimmed)
        if num_trimmed:
            self.num_trimmed += num_trimmed
            logger.warning(
                "%s: trimmed %d of %d prompt(s) to fit context %s - max_tokens %d (oldest peer text first); "
                "%d trimmed so far",
                self.model,
                num_trimmed,
                len(requests),
                self.generator.context_length,
                self.sampling.max_tokens,
                self.num_trimmed,
            )
        generations = self.chat(conversations)
        return [
            DebaterGeneration(
                text=g.text,
                prompt_tokens=g.prompt_tokens,
                completion_tokens=g.completion_tokens,
                finish_reason=g.finish_reason,
                trimmed=t,
            )
            for g, t in zip(generations, trimmed, strict=True)
        ]
