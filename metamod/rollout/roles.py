"""The ONE type through which an LLM plays a role: debater, MRO role, code agent, single agent, moderator, judge.

An :class:`LLMRole` holds a generator, its decoding, the role's name, the memory it asks and the method asking.
Every prompt builder goes through it:

* :meth:`LLMRole.ask` / :meth:`LLMRole.guided`: the one guidance path (the memory's
  :class:`~metamod.memory.base.Guidance` for this role, question, step and agent, put in front of the first message:
  :meth:`~metamod.memory.base.Guidance.prepend_to_first`; the item ids stay on the ``Guidance``);
* :meth:`LLMRole.chat`: ONE batched ``generator.chat`` call, checked to return ``n`` generations per conversation
  (:func:`~metamod.llm.base.chat_checked`), with per-call decoding overrides; the prompt budget
  (:mod:`metamod.llm.budget`) sits in the generator, so every role's prompts are cut the same way;
* :meth:`LLMRole.settings`: the decoding settings a trace records.

Simulated roles offer the same methods where their loop calls them (``propose`` / ``audit`` / ``decide``,
``respond``), with ``simulated = True``.

>>> from metamod.llm.base import Generation, SamplingConfig
>>> from metamod.tasks.base import Example
>>> class Echo:
...     name = "echo"
...     def chat(self, conversations, sampling):
...         return [Generation(c[0]["content"], 3, 1) for c in conversations for _ in range(sampling.n)]
>>> judge = LLMRole(Echo(), SamplingConfig(temperature=0), role="judge", method="judge")
>>> ex = Example(id="q", question="2+2?", gold="4", kind="math")
>>> [g.text for g in judge.chat([judge.guided([{"role": "user", "content": "2+2?"}], ex, step=0)], n=2)]
['2+2?', '2+2?']
>>> judge.num_calls, judge.settings()["temperature"], judge.model
(1, 0, 'echo')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from metamod.llm.base import Conversation, Generation, Generator, SamplingConfig, chat_checked
from metamod.memory.base import Guidance, ask_guidance, check_role
from metamod.tasks.base import Example


class LLMRole:
    """A role played by one generator (see the module docstring).

    Args:
        generator: any :class:`~metamod.llm.base.Generator`.
        sampling: its decoding settings (per-call overrides go to :meth:`chat`).
        role: the memory role (one of :data:`metamod.memory.base.ROLES`).
        memory: the memory this role asks (``None``: no guidance).
        method: the evaluation method asking (``None``: shared by every method, e.g. rollout debaters).
        backend: the backend name recorded in traces.
        settings: extra settings recorded in traces.
        who: how errors name this role (default: the generator's name).

    Attributes:
        num_calls: batched ``chat`` calls made so far.
    """

    simulated = False

    def __init__(
        self,
        generator: Generator,
        sampling: SamplingConfig,
        *,
        role: str,
        memory: Any = None,
        method: str | None = None,
        backend: str = "hf",
        settings: dict[str, Any] | None = None,
        who: str | None = None,
    ) -> None:
        self.generator = generator
        self.sampling = sampling
        self.role = check_role(role)
        self.memory = memory
        self.method = method
        self.backend = backend
        self.model = str(getattr(generator, "name", type(generator).__name__))
        self.extra = dict(settings or {})
        self.who = who
        self.num_calls = 0

    def ask(self, example: Example, *, step: int | None = None, agent: int | None = None) -> Guidance:
        """The memory's guidance for this role on ``example`` (empty without a memory)."""
        return ask_guidance(self.memory, example, self.role, agent=agent, step=step, method=self.method)

    def guided(
        self, conversation: Conversation, example: Example, *, step: int | None = None, agent: int | None = None
    ) -> Conversation:
        """``conversation`` with :meth:`ask`'s guidance in front of its first message."""
        return self.ask(example, step=step, agent=agent).prepend_to_first(conversation)

    def chat(self, conversations: Sequence[Conversation], **overrides: Any) -> list[Generation]:
        """ONE batched call (nothing for no conversations): ``sampling.n`` generations per conversation, in order.

        Args:
            conversations: the prompts of this step.
            **overrides: :class:`~metamod.llm.base.SamplingConfig` fields for this call (``n``, ``max_tokens``,
                ``stop``, ``logprobs``, ...).
        """
        if not conversations:
            return []
        sampling = dataclasses.replace(self.sampling, **overrides) if overrides else self.sampling
        generations = chat_checked(self.generator, list(conversations), sampling, who=self.who)
        self.num_calls += 1
        return generations

    def settings(self) -> dict[str, Any]:
        """The decoding settings recorded in traces (plus the extra ``settings`` given)."""
        s = self.sampling
        return {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "seed": s.seed,
            **self.extra,
        }
