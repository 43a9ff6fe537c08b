"""Prompt budgets: ONE mechanism that keeps every prompt of every model inside its context.

Every generator :func:`metamod.llm.build_generator` builds is wrapped in a :class:`BudgetedGenerator`, so every
prompt builder (debaters, single agents, MRO roles, moderator, judge, code agents, memory writers) is covered
without doing anything. Before a batch goes out, a conversation whose prompt would not leave room for the call's
``max_tokens`` inside the model's context (``budget = context - max_tokens``) is cut, in this order:

1. **memory guidance** (the block a prompt builder prepends with :func:`metamod.memory.base.with_guidance`): its
   items one at a time from the LAST one up (memories list their items most relevant / newest first, so the least
   relevant and the oldest go first), then the block's frame;
2. **conversation history**: the oldest exchange after the first user message (an assistant turn and the user turn
   that followed it), one exchange at a time;
3. never a system message, the first user message (the question and the task text) or the last message (the ask).

Builders that hold history inside one message cut it themselves after the guidance (the debaters shorten the oldest
peer response first: :mod:`metamod.rollout.debaters`), using :func:`cut_guidance` first so the order holds.

A conversation that still does not fit is NOT sent (a backend would fail the whole batch): it gets empty
generations with ``finish_reason == "prompt_too_long"`` (:data:`TOO_LONG`), which every parser reads as no answer.
Each cut and each such failure is a :class:`BudgetEvent`; ``metamod eval`` attributes them to the method and
question that made the prompt (:func:`question_of`) and records them per sample and per method in
``results.json`` (a question with a too-long prompt is graded wrong and named in the log), ``metamod rollout`` in
its summary.

The context is the backend's ``max_model_len`` when set, else the model's own (``Generator.context_length``; an
OpenAI-compatible server reports none: then nothing is checked). Tokens are counted with the model's tokenizer
(``count_tokens``), behind a cheap bound that skips the count when the prompt's bytes alone fit; with
``token_estimate`` a conservative estimate is used instead (:func:`estimate_tokens`), for runs whose tokenizer is not
the real model's (the CPU shape run of a paper config keeps the paper's context length).

>>> from metamod.llm.base import Generation, SamplingConfig
>>> class Echo:
...     name, context_length = "echo", None
...     def chat(self, conversations, sampling):
...         return [Generation(c[-1]["content"][:5], 1, 1) for c in conversations]
>>> gen = BudgetedGenerator(Echo(), context_length=40, token_estimate=True)
>>> short, long = [{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "word " * 100}]
>>> [g.finish_reason for g in gen.chat([short, long], SamplingConfig(max_tokens=8))]
[None, 'prompt_too_long']
>>> [e.kind for e in gen.take_events()]
['too_long']
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass
from typing import Any

from metamod.llm.base import Conversation, Generation, SamplingConfig

logger = logging.getLogger(__name__)

#: ``Generation.finish_reason`` of a prompt that could not fit its model's context even after every cut
TOO_LONG = "prompt_too_long"
#: estimate: tokens per UTF-8 byte (1/3 over-counts English prose ~1.4x and code ~1.2x for Llama-3 / Qwen tokenizers)
BYTES_PER_TOKEN = 3
#: estimate: tokens a chat template adds per message, and per conversation
MESSAGE_OVERHEAD, CONVERSATION_OVERHEAD = 8, 16

_ITEM_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s")


def estimate_tokens(conversation: Conversation) -> int:
    """A conservative token count: UTF-8 bytes / :data:`BYTES_PER_TOKEN` plus chat-template overhead.

    >>> estimate_tokens([{"role": "user", "content": "x" * 30}])
    34
    """
    chars = sum(-(-len(str(m.get("content") or "").encode("utf-8")) // BYTES_PER_TOKEN) for m in conversation)
    return chars + MESSAGE_OVERHEAD * len(conversation) + CONVERSATION_OVERHEAD


class GuidedText(str):
    """A message text whose first ``len(block)`` characters are a rendered memory-guidance block.

    Made by :func:`metamod.memory.base.with_guidance`; :func:`cut_guidance` reads ``block`` to drop its items.
    Any string operation on it gives a plain ``str`` (the span is then unknown and nothing is cut from it).

    >>> text = GuidedText.join_block("Guidance:\\n- a\\n- b", "Solve 2+2.")
    >>> str(text), text.block
    ('Guidance:\\n- a\\n- b\\n\\nSolve 2+2.', 'Guidance:\\n- a\\n- b')
    """

    block: str
    rest: str

    @classmethod
    def join_block(cls, block: str, rest: str) -> GuidedText:
        """``block`` + a blank line + ``rest``, remembering where the block ends."""
        out = cls(f"{block}\n\n{rest}")
        out.block, out.rest = block, rest
        return out


def guidance_items(block: str) -> tuple[list[str], list[list[str]]]:
    """``(frame lines, items)`` of a guidance block: an item starts at a bullet or numbered line, continuation lines
    join it; the lines before the first item are the frame.

    >>> guidance_items("Guidance:\\n- a\\n  more\\n- b")
    (['Guidance:'], [['- a', '  more'], ['- b']])
    """
    frame: list[str] = []
    items: list[list[str]] = []
    for line in block.splitlines():
        if _ITEM_RE.match(line):
            items.append([line])
        elif items:
            items[-1].append(line)
        else:
            frame.append(line)
    return frame, items


def _without_last_item(text: GuidedText) -> str:
    """``text`` with the last item of its guidance block dropped (the whole block when it has none left)."""
    frame, items = guidance_items(text.block)
    if len(items) <= 1:
        return text.rest
    block = "\n".join([*frame, *(line for item in items[:-1] for line in item)])
    return GuidedText.join_block(block, text.rest)


@dataclass
class BudgetEvent:
    """One prompt that was cut to fit (``kind == "cut"``) or could not fit (``"too_long"``).

    Attributes:
        kind: ``"cut"`` or ``"too_long"``.
        tokens: the prompt's tokens before any cut.
        budget: ``context - max_tokens``.
        guidance_items: guidance items dropped (the last item leaves together with the frame).
        turns: history messages dropped.
        text: the conversation's text (every message), to find the question it was about (:func:`question_of`).
    """

    kind: str
    tokens: int
    budget: int
    guidance_items: int = 0
    turns: int = 0
    text: str = ""


def cut_guidance(conversation: Conversation, budget: int, count: Any) -> tuple[Conversation, int, int]:
    """Drop guidance items (last first, then the frame) until ``count(conversation) <= budget``.

    Returns:
        ``(conversation, tokens, items dropped)``.
    """
    dropped = 0
    tokens = count(conversation)
    while tokens > budget:
        index = next((i for i, m in enumerate(conversation) if isinstance(m.get("content"), GuidedText)), None)
        if index is None:
            break
        message = conversation[index]
        conversation = [*conversation[:index], {**message, "content": _without_last_item(message["content"])}, *conversation[index + 1 :]]  # fmt: skip
        dropped += 1
        tokens = count(conversation)
    return conversation, tokens, dropped


def cut_history(conversation: Conversation, budget: int, count: Any, tokens: int) -> tuple[Conversation, int, int]:
    """Drop the oldest (assistant, user) exchange after the first user message until it fits (or none is left).

    >>> conv = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a" * 90},
    ...         {"role": "user", "content": "fix it"}, {"role": "assistant", "content": "b"},
    ...         {"role": "user", "content": "again"}]
    >>> cut, tokens, turns = cut_history(conv, 60, estimate_tokens, estimate_tokens(conv))
    >>> [m["content"] for m in cut], turns
    (['task', 'b', 'again'], 2)
    """
    first_user = next((i for i, m in enumerate(conversation) if m.get("role") == "user"), None)
    turns = 0
    while tokens > budget and first_user is not None:
        start = first_user + 1
        if len(conversation) - start < 3:  # keep the last message; drop whole exchanges only
            break
        conversation = [*conversation[:start], *conversation[start + 2 :]]
        turns += 2
        tokens = count(conversation)
    return conversation, tokens, turns


class BudgetedGenerator:
    """A :class:`~metamod.llm.base.Generator` that cuts or refuses prompts over its context (module docstring).

    Args:
        generator: the backend.
        context_length: the context to keep prompts in (``None``: the backend's ``context_length``; when both are
            ``None`` nothing is checked).
        token_estimate: count with :func:`estimate_tokens` instead of the backend's tokenizer.
        generation_cap: generate at most this many tokens (the budget still reserves the call's ``max_tokens``).
        prompt_log: a JSONL file every conversation sent is appended to (``None``: none).
    """

    def __init__(
        self,
        generator: Any,
        *,
        context_length: int | None = None,
        token_estimate: bool = False,
        generation_cap: int | None = None,
        prompt_log: str | None = None,
    ) -> None:
        self.generator = generator
        self._context = context_length
        self.generation_cap = generation_cap
        self.prompt_log = prompt_log
        self.token_estimate = token_estimate or not hasattr(generator, "count_tokens")
        self.events: list[BudgetEvent] = []
        self.totals = {"cut": 0, "too_long": 0}
        self._template_tokens: dict[tuple[str, ...], int] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "generator":
            raise AttributeError(name)
        return getattr(self.generator, name)

    @property
    def name(self) -> str:
        return self.generator.name

    @property
    def context_length(self) -> int | None:
        return self._context if self._context is not None else getattr(self.generator, "context_length", None)

    def count_tokens(self, conversation: Conversation) -> int:
        """The prompt's tokens as this budget counts them (the tokenizer's, or the estimate)."""
        if self.token_estimate:
            return estimate_tokens(conversation)
        return int(self.generator.count_tokens([{**m, "content": str(m.get("content") or "")} for m in conversation]))

    def _fits_by_bound(self, conversation: Conversation, budget: int) -> bool:
        """Whether the prompt fits without counting: a text never has more tokens than UTF-8 bytes (plus the chat
        template's own tokens for this message layout, counted once, and a margin per message)."""
        if self.token_estimate:
            return False
        roles = tuple(str(m.get("role")) for m in conversation)
        if roles not in self._template_tokens:
            self._template_tokens[roles] = self.count_tokens([{"role": r, "content": ""} for r in roles])
        size = sum(len(str(m.get("content") or "").encode("utf-8")) + 8 for m in conversation)
        return self._template_tokens[roles] + size <= budget

    def fit(self, conversation: Conversation, max_tokens: int) -> tuple[Conversation | None, BudgetEvent | None]:
        """``(conversation to send, event)``: unchanged and ``None`` when it fits; ``None`` and a ``too_long`` event
        when no cut makes it fit."""
        context = self.context_length
        if not context:
            return conversation, None
        budget = context - max_tokens
        if self._fits_by_bound(conversation, budget):
            return conversation, None
        tokens = self.count_tokens(conversation)
        if tokens <= budget:
            return conversation, None
        cut, left, items = cut_guidance(conversation, budget, self.count_tokens)
        cut, left, turns = cut_history(cut, budget, self.count_tokens, left)
        text = "\n".join(str(m.get("content") or "") for m in conversation)
        if left <= budget:
            return cut, BudgetEvent("cut", tokens, budget, items, turns, text)
        return None, BudgetEvent("too_long", tokens, budget, items, turns, text)

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Fit every conversation, send the ones that fit in ONE call, and give the others :data:`TOO_LONG`."""
        fitted = []
        for conversation in conversations:
            sent, event = self.fit(conversation, sampling.max_tokens)
            fitted.append(sent)
            if event is not None:
                self.events.append(event)
                self.totals[event.kind] += 1
                if event.kind == "too_long":
                    logger.warning(
                        "%s: a prompt of %d tokens does not fit context %d - max_tokens %d even without memory "
                        "guidance (%d items) and history (%d messages); not sent, answered empty (%s): %.80r",
                        self.name, event.tokens, self.context_length, sampling.max_tokens, event.guidance_items,
                        event.turns, TOO_LONG, event.text[-200:],
                    )  # fmt: skip
                else:
                    logger.info(
                        "%s: prompt cut from %d tokens to fit %d (%d guidance items, %d history messages dropped)",
                        self.name, event.tokens, event.budget, event.guidance_items, event.turns,
                    )  # fmt: skip
        sendable = [c for c in fitted if c is not None]
        if self.prompt_log and sendable:
            self._log(sendable, sampling)
        sent = sampling
        if self.generation_cap is not None and sampling.max_tokens > self.generation_cap:
            sent = dataclasses.replace(sampling, max_tokens=self.generation_cap)
        outputs = self.generator.chat(sendable, sent) if sendable else []
        n = sampling.n
        if len(outputs) != len(sendable) * n:
            raise RuntimeError(f"{self.name}: backend returned {len(outputs)} generations for {len(sendable)} x {n}")
        result: list[Generation] = []
        position = 0
        for conversation in fitted:
            if conversation is None:
                result += [Generation("", 0, 0, finish_reason=TOO_LONG) for _ in range(n)]
            else:
                result += outputs[position : position + n]
                position += n
        return result

    def _log(self, conversations: list[Conversation], sampling: SamplingConfig) -> None:
        """Append the conversations about to be sent to :attr:`prompt_log` (one JSON line each)."""
        from metamod.files import append_jsonl

        append_jsonl(
            self.prompt_log,
            [
                {
                    "model": self.name,
                    "context": self.context_length,
                    "max_tokens": sampling.max_tokens,
                    "tokens": self.count_tokens(c) if self.context_length else None,
                    "messages": [{"role": m.get("role"), "content": str(m.get("content") or "")} for m in c],
                }
                for c in conversations
            ],
            fsync=False,
        )

    def take_events(self) -> list[BudgetEvent]:
        """The events since the last call (then cleared)."""
        events, self.events = self.events, []
        return events


def budgeted(generator: Any) -> BudgetedGenerator | None:
    """The :class:`BudgetedGenerator` behind ``generator`` (also through a token counter's ``generator``), or None."""
    seen = 0
    while generator is not None and seen < 4:
        if isinstance(generator, BudgetedGenerator):
            return generator
        generator = getattr(generator, "__dict__", {}).get("generator")
        seen += 1
    return None


def question_of(text: str, questions: dict[str, str]) -> str | None:
    """The id of the question whose text the prompt contains (the longest match), or ``None``.

    >>> question_of("Solve: What is 12+30? Think.", {"a": "What is 12+3", "b": "What is 12+30?"})
    'b'
    """
    found = [(len(q), qid) for qid, q in questions.items() if q and q in text]
    return max(found)[1] if found else None
