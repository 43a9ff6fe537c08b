"""Meta-reasoning baselines of MC² appendix B, as evaluation methods that run themselves (rows of
:data:`metamod.evaluate.methods.METHODS`).

==================  ====================================================================================
``tot``             Tree-of-Thought, breadth-first: 5 thoughts per node, self-evaluated (1-10), the best 2
                    kept, depth 2 (:mod:`.tree_of_thought`).
``meta_prompting``  a Meta Model consults one "fresh-eyes" expert per round (``Expert <Name>: \"\"\"...\"\"\"``)
                    until it gives ``<answer>`` tags; 6 rounds by default (:mod:`.meta_prompting`).
``meta_reasoner``   the backbone picks one of seven strategies (cot, cot_sc, tot, analogical, self_refine,
                    spp, step_back), then it is applied (:mod:`.meta_reasoner`).
``ttpi``            Test-time Prompt Intervention: step-level stages, one branch per trigger, the branch with
                    the lowest perplexity is kept; needs per-token log-probs (:mod:`.ttpi`).
==================  ====================================================================================

All four need an LLM agent (``LayerContext.agent``); in the simulated world they fail with a ``ConfigError``. Each
reads its settings from ``LayerContext.method_options[name]`` (unknown keys fail listing the valid ones) and sends
one batched ``generator.chat`` call per step over all questions. Details: docs/baselines.md.

>>> from metamod.evaluate.decision import LayerContext
>>> from metamod.evaluate.methods import build_method
>>> try:
...     build_method("tot", LayerContext(max_rounds=1))
... except ConfigError as err:
...     print(str(err).split(";")[0])
method 'tot' needs an LLM agent (debaters: hf, vllm or openai)
"""

from __future__ import annotations

from metamod.errors import ConfigError

from ._common import BaselineMethod, read_options
from .meta_prompting import MetaPrompting, MetaPromptingOptions, parse_meta_reply
from .meta_reasoner import STRATEGIES, MetaReasoner, MetaReasonerOptions, parse_strategy
from .tree_of_thought import ToTOptions, TreeOfThought, parse_score
from .ttpi import DEFAULT_TRIGGERS, TTPI, TTPIOptions, lowest_perplexity

__all__ = [
    "BaselineMethod",
    "ConfigError",
    "DEFAULT_TRIGGERS",
    "MetaPrompting",
    "MetaPromptingOptions",
    "MetaReasoner",
    "MetaReasonerOptions",
    "STRATEGIES",
    "TTPI",
    "TTPIOptions",
    "ToTOptions",
    "TreeOfThought",
    "lowest_perplexity",
    "parse_meta_reply",
    "parse_score",
    "parse_strategy",
    "read_options",
]
