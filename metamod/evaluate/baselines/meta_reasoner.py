"""Meta-reasoner: the backbone first picks ONE reasoning strategy from a menu, then the method applies it.

The menu (template ``meta_reasoner_select``, one line per strategy) is the reasoning pool of Meta-Reasoning
Prompting (Gao et al. 2024: CoT, Tree-of-Thoughts, Analogical prompting, Self-Refine, Solo Performance Prompting,
Step-Back prompting, SimToM) with CoT-SC in place of SimToM, because MC² appendix B says the selected strategy
can be CoT-SC; SimToM (perspective filtering for theory-of-mind stories) is the one that does not apply to the
math and QA tasks here. The seven, and how each is applied:

===============  ===============================================================================================
``cot``          template ``single_cot`` (the ``single_cot`` baseline's prompt)
``cot_sc``       :class:`~metamod.evaluate.single.SingleCoTSC` itself (``LayerContext.sc_samples``, default 5)
``tot``          :class:`~.tree_of_thought.TreeOfThought` itself (its ``method_options["tot"]`` settings)
``analogical``   template ``meta_reasoner_analogical``: recall similar solved problems, then solve
``self_refine``  :class:`~metamod.evaluate.single.SingleReflection` itself: draft, self-critique, revision
``spp``          template ``meta_reasoner_spp``: a staged discussion between imagined experts
``step_back``    template ``meta_reasoner_step_back``: state the general principle, then apply it
===============  ===============================================================================================

The choice is read by :func:`parse_strategy`; an unparsable choice falls back to ``cot`` (``details``:
``strategy_parsed: false``). Calls: ONE batched selection call over all questions; then ONE batched call for all
questions whose strategy is a single prompt (``cot``, ``analogical``, ``spp``, ``step_back``), and the delegated
methods each run once, batched over the questions that chose them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from metamod.tasks.base import Example

from ..methods import build_method
from ..single import SingleOutcome
from ._common import BaselineMethod, merge, spend

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Strategy:
    """One entry of the menu.

    Attributes:
        key: the name the model answers with.
        label: the usual name of the method.
        template: the prompt of a single-prompt strategy (``None`` for a delegated one).
        method: the method (a row of :data:`metamod.evaluate.methods.METHODS`) a delegated strategy runs
            (``None`` for a single-prompt one).
    """

    key: str
    label: str
    template: str | None = None
    method: str | None = None


#: the seven strategies, in menu order
STRATEGIES: dict[str, Strategy] = {
    s.key: s
    for s in (
        Strategy("cot", "Chain-of-Thought", template="single_cot"),
        Strategy("cot_sc", "Self-Consistency (CoT-SC)", method="single_cot_sc"),
        Strategy("tot", "Tree-of-Thought", method="tot"),
        Strategy("analogical", "Analogical prompting", template="meta_reasoner_analogical"),
        Strategy("self_refine", "Self-Refine", method="single_reflection"),
        Strategy("spp", "Solo Performance Prompting", template="meta_reasoner_spp"),
        Strategy("step_back", "Step-Back prompting", template="meta_reasoner_step_back"),
    )
}
#: what an unparsable choice becomes
FALLBACK_STRATEGY = "cot"

_ALIASES = {
    **{key: key for key in STRATEGIES},
    "chain_of_thought": "cot",
    "chain_of_thoughts": "cot",
    "self_consistency": "cot_sc",
    "cot_self_consistency": "cot_sc",
    "tree_of_thought": "tot",
    "tree_of_thoughts": "tot",
    "analogical_prompting": "analogical",
    "analogical_reasoning": "analogical",
    "self_refinement": "self_refine",
    "solo_performance_prompting": "spp",
    "step_back_prompting": "step_back",
    "stepback": "step_back",
}
_STRATEGY_TAG_RE = re.compile(r"<strategy>(.*?)</strategy>", re.IGNORECASE | re.DOTALL)


def _key(text: str) -> str | None:
    return _ALIASES.get(re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_"))


def parse_strategy(text: str | None) -> str | None:
    """The strategy key a selection output names, or ``None`` when it names none.

    Read: the LAST ``<strategy>`` span, else the whole output, else its first line; each must be exactly a key or
    a usual name (case, spaces, hyphens and punctuation aside). Prose that merely mentions strategies is ``None``.

    Args:
        text: the selection output.

    Returns:
        A key of :data:`STRATEGIES`, or ``None``.

    >>> [parse_strategy(t) for t in ["<strategy>tot</strategy>", "<strategy> Step-Back </strategy>", "CoT-SC"]]
    ['tot', 'step_back', 'cot_sc']
    >>> [parse_strategy(t) for t in ["Self-Refine\\nbecause drafts help", "maybe tot or cot", "<strategy>x</strategy>"]]
    ['self_refine', None, None]
    """
    if not text:
        return None
    spans = _STRATEGY_TAG_RE.findall(text)
    if spans:
        return _key(spans[-1])
    stripped = text.strip()
    return _key(stripped) or (_key(stripped.splitlines()[0]) if stripped else None)


@dataclass
class MetaReasonerOptions:
    """Settings of ``meta_reasoner`` (``method_options: {meta_reasoner: {...}}``); ToT and CoT-SC keep theirs."""

    select_max_tokens: int = field(default=64, metadata={"help": "Completion budget of the strategy choice."})

    def __post_init__(self) -> None:
        if self.select_max_tokens < 1:
            raise ValueError(f"select_max_tokens must be >= 1, got {self.select_max_tokens}")


class MetaReasoner(BaselineMethod):
    """Strategy selection by the backbone, then the chosen strategy (delegating to ToT / CoT-SC / reflection).

    >>> from metamod.evaluate.decision import LayerContext
    >>> from metamod.evaluate.methods import build_method
    >>> from metamod.llm.base import Generation
    >>> class Fake:
    ...     name, context_length = "fake", None
    ...     def chat(self, conversations, sampling):
    ...         def reply(c):
    ...             return "<strategy>step_back</strategy>" if "menu" in c[0]["content"] else "<answer>4</answer>"
    ...         return [Generation(reply(c), prompt_tokens=5, completion_tokens=3) for c in conversations]
    >>> [out] = build_method("meta_reasoner", LayerContext(max_rounds=1, agent=Fake())).run(
    ...     [Example(id="q", question="2+2?", gold="4", kind="math")])
    >>> out.answer, out.details["strategy"], out.details["strategy_parsed"], out.completion_tokens
    ('4', 'step_back', True, 6)
    """

    options_class = MetaReasonerOptions

    def __init__(self, context: Any, spec: Any):
        super().__init__(context, spec)
        # built now, so that a bad method_options["tot"] fails before any generation
        self.delegates = {key: build_method(s.method, context) for key, s in STRATEGIES.items() if s.method is not None}

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        """Select a strategy per question (one batched call), then apply each strategy to its questions.

        Args:
            examples: the questions.

        Returns:
            One outcome per question (``details``: ``strategy``, ``strategy_parsed``, ``strategy_details``).
        """
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        selection = [[{"role": "user", "content": self._prompt(ex, "meta_reasoner_select")}] for ex in examples]
        chosen: list[str] = []
        for outcome, g in zip(outcomes, self._call(selection, max_tokens=self.options.select_max_tokens), strict=True):
            spend(outcome, g)
            key = parse_strategy(g.text)
            outcome.details = {"strategy": key or FALLBACK_STRATEGY, "strategy_parsed": key is not None}
            chosen.append(key or FALLBACK_STRATEGY)
        prompted = [q for q, key in enumerate(chosen) if STRATEGIES[key].template is not None]
        conversations = [
            [{"role": "user", "content": self._prompt(examples[q], STRATEGIES[chosen[q]].template)}] for q in prompted
        ]
        for q, g in zip(prompted, self._call(conversations), strict=True):
            outcomes[q].answer = outcomes[q].add(g)
        for key, method in self.delegates.items():
            group = [q for q, k in enumerate(chosen) if k == key]
            if not group:
                continue
            for q, inner in zip(group, method.run([examples[q] for q in group]), strict=True):
                merge(outcomes[q], inner)
                outcomes[q].answer = inner.answer
                if inner.details:
                    outcomes[q].details["strategy_details"] = inner.details
        fallbacks = sum(not o.details["strategy_parsed"] for o in outcomes)
        counts = {key: chosen.count(key) for key in STRATEGIES if key in chosen}
        logger.info("meta_reasoner: strategies %s; %d unparsable choice(s) fell back to cot", counts, fallbacks)
        return outcomes
