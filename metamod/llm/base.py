"""The one generation protocol every backend implements.

A backend takes a *batch* of chat conversations and returns one :class:`Generation` per conversation and sample
(``sampling.n`` samples per conversation, conversation-major: all samples of conversation 0, then 1, ...).
Backends batch internally: vLLM sends one ``LLM.chat`` call, hf one left-padded ``generate`` per micro-batch, the
OpenAI-compatible client bounded concurrent requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Message = dict[str, str]
#: the most alternatives per position ``SamplingConfig.top_logprobs`` may ask for (the OpenAI API's limit)
MAX_TOP_LOGPROBS = 20
Conversation = list[Message]


@dataclass
class SamplingConfig:
    """Decoding settings shared by every backend."""

    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature; 0 means greedy decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling probability mass."})
    max_tokens: int = field(default=512, metadata={"help": "Maximum number of new tokens per generation."})
    n: int = field(default=1, metadata={"help": "Number of samples per conversation."})
    seed: int | None = field(default=None, metadata={"help": "Random seed for sampling (None: not seeded)."})
    stop: list[str] | None = field(default=None, metadata={"help": "Strings that end a generation (not included)."})
    logprobs: bool = field(
        default=False,
        metadata={
            "help": "Also return the log-probability of every completion token (Generation.token_logprobs); "
            "backends that cannot raise an error naming the backend."
        },
    )

    top_logprobs: int = field(
        default=0,
        metadata={
            "help": "Also return, at every completion position, the k most likely tokens with their raw log-probs "
            "(Generation.top_logprobs) and the chosen tokens' texts (Generation.tokens), from the same request; "
            "0: off. At most 20 (the OpenAI API's limit); backends that cannot raise an error naming the backend."
        },
    )

    def __post_init__(self) -> None:
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {self.top_logprobs}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclass
class Generation:
    """One generated completion with its token accounting.

    ``token_logprobs`` (only with ``SamplingConfig.logprobs``, else ``None``): the log-probability of each completion
    token under the model's raw distribution (before temperature / top-p), one per token counted in
    ``completion_tokens`` (docs/backends.md, "Token log-probabilities").

    ``tokens`` and ``top_logprobs`` (only with ``SamplingConfig.top_logprobs = k > 0``, else ``None``): the text of
    each completion token, and at each of those positions the ``k`` most likely tokens' texts mapped to their raw
    log-probabilities (docs/backends.md, "Top-k log-probabilities"); both are aligned with ``completion_tokens``.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    token_logprobs: list[float] | None = None
    tokens: list[str] | None = None
    top_logprobs: list[dict[str, float]] | None = None

    def perplexity(self) -> float | None:
        """``exp(-mean token log-prob)`` of the completion, or ``None`` without log-probs (or tokens).

        >>> round(Generation("ab", completion_tokens=2, token_logprobs=[-1.0, -1.0]).perplexity(), 3)
        2.718
        >>> Generation("ab").perplexity() is None
        True
        """
        import math

        if not self.token_logprobs:
            return None
        return math.exp(-sum(self.token_logprobs) / len(self.token_logprobs))


@runtime_checkable
class Generator(Protocol):
    """A batched chat-completion backend.

    Attributes:
        name: a short identifier used in traces (e.g. the model id or path).
        context_length: the model's maximum context in tokens, or ``None`` when unknown.
    """

    name: str
    context_length: int | None

    def chat(self, conversations: list[Conversation], sampling: SamplingConfig) -> list[Generation]:
        """Generate ``sampling.n`` completions for each conversation in ONE batched call (conversation-major)."""
        ...

    def count_tokens(self, conversation: Conversation) -> int:
        """Number of prompt tokens the conversation takes once the chat template is applied."""
        ...


def chat_checked(
    generator: Generator, conversations: list[Conversation], sampling: SamplingConfig, *, who: str | None = None
) -> list[Generation]:
    """``generator.chat`` (nothing for no conversations), checked to return ``sampling.n`` generations per
    conversation: the one output-count check every prompt builder shares.

    >>> class Echo:
    ...     name = "echo"
    ...     def chat(self, conversations, sampling):
    ...         return [Generation(text=c[-1]["content"], prompt_tokens=1, completion_tokens=1) for c in conversations]
    >>> [g.text for g in chat_checked(Echo(), [[{"role": "user", "content": "hi"}]], SamplingConfig())]
    ['hi']
    >>> chat_checked(Echo(), [[{"role": "user", "content": "hi"}]], SamplingConfig(n=2), who="agent")
    Traceback (most recent call last):
    ...
    RuntimeError: agent returned 1 generations for 1 prompt(s) x 2 samples
    """
    if not conversations:
        return []
    outputs = list(generator.chat(conversations, sampling))
    if len(outputs) != len(conversations) * sampling.n:
        name = who or f"generator {getattr(generator, 'name', type(generator).__name__)!r}"
        raise RuntimeError(
            f"{name} returned {len(outputs)} generations for {len(conversations)} prompt(s) x {sampling.n} samples"
        )
    return outputs
