"""Test-time Prompt Intervention (TTPI): step-level stages, one candidate branch per trigger, the lowest-PPL wins.

Per question, the reasoning grows one stage at a time:

1. stage 1: the model starts solving (template ``ttpi_solve``) and the stage ends at a step boundary (a stop
   string, a blank line by default) or after ``stage_max_tokens``;
2. each later stage builds one candidate continuation per intervention trigger (progress / summarise / verify /
   conclude by default; each a short phrase the step starts from), generates ALL candidates of all questions in
   ONE batched call with ``SamplingConfig(logprobs=True)``, and keeps the branch with the lowest perplexity
   (:meth:`~metamod.llm.base.Generation.perplexity`; ties: the earlier trigger; a branch with no tokens never
   wins over one with tokens);
3. a question is done when its reasoning states a final answer inside ``<answer>`` tags; after ``max_stages``
   stages without one, the model is asked once for the final answer (template ``ttpi_final``).

Approximations (documented in docs/baselines.md): the :class:`~metamod.llm.base.Generator` protocol is chat-only,
with no raw continuation of a partial assistant turn, so the reasoning so far is passed back as an assistant
message followed by a user turn (template ``ttpi_continue``) asking for the next step after the trigger words; the
kept step is ``trigger + " " + continuation`` and its perplexity is that of the continuation given the trigger.
Branches are selected by PPL only (no Reasoning Depth Score: it needs internal layers, as in MC²'s own runs). A
backend that returns no per-token log-probs (``token_logprobs is None``) cannot run TTPI: a one-line
:class:`~metamod.errors.ConfigError` names it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from metamod.errors import ConfigError
from metamod.llm.base import Generation
from metamod.prompts import render
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

from ..single import SingleOutcome
from ._common import BaselineMethod, tagged_answer

logger = logging.getLogger(__name__)

#: the default intervention triggers, name -> the phrase a candidate step starts from
DEFAULT_TRIGGERS: dict[str, str] = {
    "progress": "Next,",
    "summarise": "To sum up what we have so far,",
    "verify": "Let me double-check this:",
    "conclude": "So the final answer is",
}


def lowest_perplexity(candidates: list[Generation], backend: str = "agent") -> tuple[int, list[float | None]]:
    """Index of the candidate with the lowest perplexity (ties: the first), and every candidate's perplexity.

    Args:
        candidates: the branches of one question at one stage, in trigger order.
        backend: the generator's name, for the error message.

    Returns:
        ``(best index, perplexities)``; an empty completion has perplexity ``None`` and only wins when all are empty.

    Raises:
        ConfigError: a candidate without log-probs (``token_logprobs is None``).

    >>> gens = [Generation("a", token_logprobs=[-2.0]), Generation("b", token_logprobs=[-0.5, -0.5]),
    ...         Generation("c", token_logprobs=[-0.5])]
    >>> best, ppl = lowest_perplexity(gens)
    >>> best, [round(p, 3) for p in ppl]
    (1, [7.389, 1.649, 1.649])
    >>> lowest_perplexity([Generation("x")], backend="demo")
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: method 'ttpi' needs per-token log-probs, but backend 'demo' returned none (token_logprobs=None); use a backend that returns them for SamplingConfig(logprobs=True)
    """
    if any(g.token_logprobs is None for g in candidates):
        raise ConfigError(
            f"method 'ttpi' needs per-token log-probs, but backend {backend!r} returned none (token_logprobs=None); "
            "use a backend that returns them for SamplingConfig(logprobs=True)"
        )
    perplexities = [g.perplexity() for g in candidates]
    ranked = sorted(range(len(candidates)), key=lambda i: (perplexities[i] is None, perplexities[i] or 0.0, i))
    return ranked[0], perplexities


@dataclass
class TTPIOptions:
    """Settings of ``ttpi`` (``method_options: {ttpi: {...}}``)."""

    triggers: dict[str, str] = field(
        default_factory=lambda: dict(DEFAULT_TRIGGERS),
        metadata={"help": "Intervention triggers, name -> phrase a candidate step starts from (one branch each)."},
    )
    max_stages: int = field(
        default=8, metadata={"help": "Stages per question (the first included) before the final answer is asked."}
    )
    stage_max_tokens: int = field(default=128, metadata={"help": "Completion budget of one stage (one step)."})
    step_stop: list[str] = field(
        default_factory=lambda: ["\n\n"], metadata={"help": "Stop strings that end a stage (a step boundary)."}
    )

    def __post_init__(self) -> None:
        if not isinstance(self.triggers, dict) or not self.triggers:
            raise ValueError(f"triggers must be a non-empty mapping of name -> phrase, got {self.triggers!r}")
        bad = [name for name, phrase in self.triggers.items() if not isinstance(phrase, str) or not phrase.strip()]
        if bad:
            raise ValueError(f"triggers {bad} need a non-empty phrase")
        if self.max_stages < 1:
            raise ValueError(f"max_stages must be >= 1, got {self.max_stages}")
        if self.stage_max_tokens < 1:
            raise ValueError(f"stage_max_tokens must be >= 1, got {self.stage_max_tokens}")
        if not isinstance(self.step_stop, list) or not all(isinstance(s, str) and s for s in self.step_stop):
            raise ValueError(f"step_stop must be a list of non-empty strings, got {self.step_stop!r}")


def _join(trigger: str, text: str) -> str:
    """The kept step: the trigger phrase and the continuation (unless the model repeated the phrase itself)."""
    text = text.strip()
    return text if text.lower().startswith(trigger.lower()) else f"{trigger} {text}".strip()


class TTPI(BaselineMethod):
    """TTPI with PPL-only branch selection; one batched call per stage over every question and trigger.

    >>> from metamod.evaluate.decision import LayerContext
    >>> from metamod.evaluate.methods import build_method
    >>> class Fake:  # "verify" continuations are the most likely; the third stage states the answer
    ...     name, context_length = "fake", None
    ...     def chat(self, conversations, sampling):
    ...         def reply(c):
    ...             if len(c) == 1:
    ...                 return Generation("First, 2+2.", completion_tokens=3)
    ...             text = "it is <answer>4</answer>" if len(c[1]["content"]) > 40 else "fine."
    ...             sure = "double-check" in c[-1]["content"]
    ...             return Generation(text, completion_tokens=2, token_logprobs=[-0.1 if sure else -1.0] * 2)
    ...         return [reply(c) for c in conversations]
    >>> [out] = build_method("ttpi", LayerContext(max_rounds=1, agent=Fake())).run([Example(id="q", question="2+2?", gold="4",
    ...                                                                     kind="math")])
    >>> out.answer, [s["chosen"] for s in out.details["stages"]], out.details["forced_final"]
    ('4', ['verify', 'verify'], False)
    """

    options_class = TTPIOptions

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        """Grow every question's reasoning stage by stage, batched over questions and triggers.

        Args:
            examples: the questions.

        Returns:
            One outcome per question (``details``: per stage the trigger kept and every branch's perplexity,
            ``forced_final``).
        """
        opts: TTPIOptions = self.options
        names, phrases = list(opts.triggers), list(opts.triggers.values())
        backend = str(getattr(self.context.agent, "name", type(self.context.agent).__name__))
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        questions = [self._prompt(ex, "ttpi_solve") for ex in examples]
        reasoning = [""] * len(examples)
        details: list[dict[str, Any]] = [{"stages": [], "forced_final": False} for _ in examples]
        first = self._call(
            [[{"role": "user", "content": text}] for text in questions],
            max_tokens=opts.stage_max_tokens,
            stop=opts.step_stop,
        )
        for q, g in enumerate(first):
            outcomes[q].add(g)
            reasoning[q] = g.text.strip()
        active = [q for q in range(len(examples)) if tagged_answer(reasoning[q]) is None]
        for _ in range(1, opts.max_stages):
            if not active:
                break
            conversations = [
                self._history(questions[q], reasoning[q], render("ttpi_continue", trigger=phrase))
                for q in active
                for phrase in phrases
            ]
            generations = self._call(
                conversations, max_tokens=opts.stage_max_tokens, stop=opts.step_stop, logprobs=True
            )
            for a, q in enumerate(active):
                branches = generations[a * len(phrases) : (a + 1) * len(phrases)]
                for g in branches:
                    outcomes[q].add(g)
                best, perplexities = lowest_perplexity(branches, backend)
                step = _join(phrases[best], branches[best].text)
                reasoning[q] = f"{reasoning[q]}\n\n{step}".strip()
                details[q]["stages"].append(
                    {
                        "chosen": names[best],
                        "perplexity": dict(zip(names, [_finite(p) for p in perplexities], strict=True)),
                    }
                )
            active = [q for q in active if tagged_answer(reasoning[q]) is None]
        if active:
            finals = self._call([self._history(questions[q], reasoning[q], render("ttpi_final")) for q in active])
            for q, g in zip(active, finals, strict=True):
                outcomes[q].add(g)
                reasoning[q] = f"{reasoning[q]}\n\n{g.text.strip()}".strip()
                details[q]["forced_final"] = True
        for q, outcome in enumerate(outcomes):
            outcome.answer = extract_answer(reasoning[q])
            outcome.details = details[q]
        logger.info("ttpi: %d questions, %d forced to answer", len(examples), len(active))
        return outcomes

    @staticmethod
    def _history(question: str, reasoning: str, follow_up: str) -> list[dict[str, str]]:
        """The chat-only stand-in for a raw continuation: question, reasoning so far (assistant), the request."""
        return [
            {"role": "user", "content": question},
            {"role": "assistant", "content": reasoning},
            {"role": "user", "content": follow_up},
        ]


def _finite(value: float | None) -> float | None:
    """A JSON-ready perplexity (``None`` for a missing or non-finite one)."""
    return value if value is not None and math.isfinite(value) else None
