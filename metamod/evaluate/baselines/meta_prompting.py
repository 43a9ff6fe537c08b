"""Meta-Prompting: one backbone plays a Meta Model (controller) that consults "fresh-eyes" experts, then answers.

Per question the Meta Model keeps a growing message history: the ``meta_prompting_meta`` prompt (the question and
the protocol), then its own replies and what came back. Each round (ONE batched call over every unfinished
question) the Meta Model's reply is read by :func:`parse_meta_reply`:

* a **final answer**: an ``<answer>...</answer>`` span outside any triple-quoted block, parsed by the shared
  grader (:func:`~metamod.tasks.grading.extract_answer`); the question is done;
* else an **expert call**: ``Expert <Name>:`` followed by an instruction between triple quotes ``\"\"\"...\"\"\"``;
  only the first call of a reply is honoured (one expert per round). The expert sees ONLY its role line and the
  instruction (template ``meta_prompting_expert``), never the question or the history; all expert calls of a
  round are ONE batched call. The reply goes back into the history (``meta_prompting_expert_reply``);
* else an **error**: the ``meta_prompting_error`` message is appended and the Meta Model tries again.

There is no Python/code expert (MC² removes code execution). After ``max_rounds`` Meta-Model rounds without a
final answer, the answer is the last one found in the history (a tagged answer in Meta-Model text outside the
instructions, or an expert reply's answer as the grader reads it), or ``None``. A question whose history would no longer fit the agent's context also stops there.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from metamod.prompts import render
from metamod.tasks.base import Example

from ..single import SingleOutcome
from ._common import BaselineMethod, spend, tagged_answer

logger = logging.getLogger(__name__)

_QUOTED_RE = re.compile(r'"""(.*?)"""', re.DOTALL)
_EXPERT_CALL_RE = re.compile(r'\bExpert\s+([^\n:"]{1,60}?)\s*:\s*"""(.*?)"""', re.DOTALL)


@dataclass
class MetaCall:
    """What one Meta-Model reply asks for.

    Attributes:
        kind: ``"final"``, ``"expert"`` or ``"error"``.
        answer: the final answer (``kind="final"``).
        expert: the expert's name as written, ``"Expert <Name>"`` (``kind="expert"``).
        instruction: the triple-quoted instruction, stripped (``kind="expert"``).
    """

    kind: str
    answer: str | None = None
    expert: str | None = None
    instruction: str | None = None


def parse_meta_reply(text: str) -> MetaCall:
    '''Read a Meta-Model reply: a final answer outside the quotes first, else the first expert call, else an error.

    Args:
        text: the reply.

    Returns:
        The :class:`MetaCall`.

    >>> parse_meta_reply('Expert Mathematician: """Compute 2+3. Put it in <answer></answer> tags."""').expert
    'Expert Mathematician'
    >>> parse_meta_reply('The experts agree. <answer>5</answer>')
    MetaCall(kind='final', answer='5', expert=None, instruction=None)
    >>> [parse_meta_reply(t).kind for t in ['Expert Poet: """unclosed', "I think it is 5", 'Expert : """x"""']]
    ['error', 'error', 'error']
    '''
    answer = tagged_answer(_QUOTED_RE.sub(" ", text))
    if answer is not None:
        return MetaCall(kind="final", answer=answer)
    match = _EXPERT_CALL_RE.search(text)
    if match is not None and match.group(1).strip() and match.group(2).strip():
        return MetaCall(kind="expert", expert=f"Expert {match.group(1).strip()}", instruction=match.group(2).strip())
    return MetaCall(kind="error")


@dataclass
class MetaPromptingOptions:
    """Settings of ``meta_prompting`` (``method_options: {meta_prompting: {...}}``)."""

    max_rounds: int = field(
        default=6,
        metadata={
            "help": "Meta-Model rounds per question (each may consult one expert); at the budget the last answer "
            "in the history counts."
        },
    )
    expert_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of an expert reply (None: the agent's max_tokens)."}
    )

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")
        if self.expert_max_tokens is not None and self.expert_max_tokens < 1:
            raise ValueError(f"expert_max_tokens must be >= 1 or None, got {self.expert_max_tokens}")


class MetaPrompting(BaselineMethod):
    '''Meta Model + fresh-eyes experts; per round one batched Meta-Model call and at most one batched expert call.

    >>> from metamod.evaluate.decision import LayerContext
    >>> from metamod.evaluate.methods import build_method
    >>> from metamod.llm.base import Generation
    >>> class Fake:  # the Meta Model consults once, then answers with what the expert said
    ...     name, context_length = "fake", None
    ...     def chat(self, conversations, sampling):
    ...         def reply(c):
    ...             if c[0]["content"].startswith("You are Expert"):
    ...                 return "It is <answer>4</answer>."
    ...             return "<answer>4</answer>" if len(c) > 1 else 'Expert Arithmetician: """What is 2+2?"""'
    ...         return [Generation(reply(c), prompt_tokens=5, completion_tokens=3) for c in conversations]
    >>> [out] = build_method("meta_prompting", LayerContext(max_rounds=1, agent=Fake())).run(
    ...     [Example(id="q", question="2+2?", gold="4", kind="math")])
    >>> out.answer, out.details["experts"], out.details["stop"], out.prompt_tokens
    ('4', ['Expert Arithmetician'], 'final', 15)
    '''

    options_class = MetaPromptingOptions

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        """Run the Meta-Model loop for every question, batched per round.

        Args:
            examples: the questions.

        Returns:
            One outcome per question (``details``: ``rounds``, ``experts``, ``errors``, ``stop``).
        """
        opts: MetaPromptingOptions = self.options
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        histories = [[{"role": "user", "content": self._prompt(ex, "meta_prompting_meta")}] for ex in examples]
        details: list[dict[str, Any]] = [{"rounds": 0, "experts": [], "errors": 0, "stop": "budget"} for _ in examples]
        active = list(range(len(examples)))
        for _ in range(opts.max_rounds):
            active = [q for q in active if self._fits(histories[q], q, details)]
            if not active:
                break
            replies = self._call([histories[q] for q in active])
            consults: list[tuple[int, MetaCall]] = []
            for q, g in zip(active, replies, strict=True):
                call = parse_meta_reply(g.text)
                spend(outcomes[q], g)
                outcomes[q].answers.append(tagged_answer(_QUOTED_RE.sub(" ", g.text)))
                histories[q].append({"role": "assistant", "content": g.text})
                details[q]["rounds"] += 1
                if call.kind == "final":
                    outcomes[q].answer = call.answer
                    details[q]["stop"] = "final"
                elif call.kind == "expert":
                    consults.append((q, call))
                    details[q]["experts"].append(call.expert)
                else:
                    details[q]["errors"] += 1
                    histories[q].append({"role": "user", "content": render("meta_prompting_error")})
            expert_conversations = [
                [
                    {
                        "role": "user",
                        "content": render("meta_prompting_expert", expert=c.expert, instruction=c.instruction),
                    }
                ]
                for _, c in consults
            ]
            expert_replies = self._call(expert_conversations, max_tokens=opts.expert_max_tokens)
            for (q, call), g in zip(consults, expert_replies, strict=True):
                outcomes[q].add(g)
                histories[q].append(
                    {"role": "user", "content": render("meta_prompting_expert_reply", expert=call.expert, reply=g.text)}
                )
            active = [q for q in active if details[q]["stop"] != "final"]
        for q, outcome in enumerate(outcomes):
            if details[q]["stop"] != "final":
                found = [a for a in outcome.answers if a is not None]
                outcome.answer = found[-1] if found else None
            outcome.details = details[q]
        logger.info(
            "meta_prompting: %d questions, %d answered", len(examples), sum(o.answer is not None for o in outcomes)
        )
        return outcomes

    def _fits(self, history: list[dict[str, str]], q: int, details: list[dict[str, Any]]) -> bool:
        """Whether the next Meta-Model call fits the agent's context (an unknown context length: always)."""
        limit = getattr(self.context.agent, "context_length", None)
        if limit is None or self.context.agent.count_tokens(history) + self.context.agent_sampling.max_tokens <= limit:
            return True
        details[q]["stop"] = "context"
        return False
