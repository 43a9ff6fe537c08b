"""What the meta-reasoning baselines share: settings from ``method_options``, the LLM-only check, a sampling helper
with per-call overrides, token accounting for calls that propose no answer, and the tagged-answer rule.

>>> from dataclasses import dataclass, field
>>> @dataclass
... class Demo:
...     width: int = field(default=2, metadata={"help": "How wide."})
>>> read_options(Demo, "demo", {"demo": {"width": 3}})
Demo(width=3)
>>> try:
...     read_options(Demo, "demo", {"demo": {"wdth": 3}})
... except ConfigError as err:
...     print(err)
method_options['demo']: unknown setting(s) ['wdth']; valid settings: ['width']
>>> tagged_answer("so the answer is 4"), tagged_answer("<answer>4</answer>"), tagged_answer("<answer> </answer>")
(None, '4', None)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from metamod.errors import ConfigError
from metamod.llm.base import Conversation, Generation
from metamod.tasks.grading import extract_answer

from ..single import SingleAgentMethod, SingleOutcome

T = TypeVar("T")

_ANSWER_OPEN_RE = re.compile(r"<answer>", re.IGNORECASE)


def read_options(cls: type[T], method: str, method_options: Mapping[str, Any] | None) -> T:
    """Build a method's settings dataclass from its ``method_options`` entry (missing: the paper's defaults).

    Args:
        cls: the settings dataclass (every field has a default).
        method: the method name (its key in ``method_options``).
        method_options: settings by method name (``LayerContext.method_options``).

    Returns:
        An instance of ``cls``.

    Raises:
        ConfigError: unknown keys (naming them and the valid ones), a non-mapping entry, or a value the dataclass's
            ``__post_init__`` rejects.
    """
    raw = (method_options or {}).get(method) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"method_options[{method!r}] must be a mapping of settings, got {raw!r}")
    valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(valid))
    if unknown:
        raise ConfigError(f"method_options[{method!r}]: unknown setting(s) {unknown}; valid settings: {valid}")
    try:
        return cls(**dict(raw))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"method_options[{method!r}]: {err}") from err


def tagged_answer(text: str | None) -> str | None:
    """The answer of a text that states one inside ``<answer>`` tags (parsed by the shared grader), else ``None``.

    Args:
        text: a model output.

    Returns:
        :func:`~metamod.tasks.grading.extract_answer` of ``text`` when it has an ``<answer>`` tag, else ``None``.
    """
    if not text or not _ANSWER_OPEN_RE.search(text):
        return None
    return extract_answer(text)


def spend(outcome: SingleOutcome, generation: Generation) -> None:
    """Count a call that proposes no answer (a score, a strategy choice): its text and tokens, no answer.

    Args:
        outcome: the question's outcome.
        generation: the output.
    """
    outcome.texts.append(generation.text)
    outcome.prompt_tokens += generation.prompt_tokens
    outcome.completion_tokens += generation.completion_tokens


def merge(outer: SingleOutcome, inner: SingleOutcome) -> None:
    """Fold the outcome of a method run inside another one into ``outer`` (answers, texts, tokens; not ``answer``).

    Args:
        outer: the calling method's outcome (updated in place).
        inner: the delegated method's outcome.
    """
    outer.answers.extend(inner.answers)
    outer.texts.extend(inner.texts)
    outer.prompt_tokens += inner.prompt_tokens
    outer.completion_tokens += inner.completion_tokens


class BaselineMethod(SingleAgentMethod):
    """Base of the meta-reasoning baselines: an LLM agent is required and settings come from ``method_options``.

    Subclasses set ``options_class`` (a dataclass with defaults); the instance gets ``self.options``.
    """

    options_class: ClassVar[type] = object

    def __init__(self, context: Any, spec: Any):
        if context.agent is None:
            raise ConfigError(
                f"method {spec.name!r} needs an LLM agent (debaters: hf, vllm or openai); the simulated world has no "
                "prompts for it to search, intervene in or select between"
            )
        super().__init__(context, spec)
        self.options = read_options(self.options_class, self.name, context.method_options)

    def _call(
        self,
        conversations: list[Conversation],
        *,
        n: int = 1,
        max_tokens: int | None = None,
        stop: list[str] | None = None,
        logprobs: bool = False,
    ) -> list[Generation]:
        """ONE batched ``agent.chat`` call with the agent's sampling, seeded, plus per-call overrides.

        Args:
            conversations: the conversations of this step (all questions, all branches).
            n: samples per conversation.
            max_tokens: completion budget (``None``: the agent's).
            stop: stop strings (``None``: the agent's).
            logprobs: ask for per-token log-probs.

        Returns:
            ``len(conversations) * n`` generations, conversation-major.
        """
        if not conversations:
            return []
        base = self.context.agent_sampling
        return self.llm.chat(
            conversations,
            n=n,
            max_tokens=base.max_tokens if max_tokens is None else max_tokens,
            stop=base.stop if stop is None else list(stop),
            logprobs=logprobs or base.logprobs,
        )
