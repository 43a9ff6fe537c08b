"""Tree-of-Thought (ToT) as a breadth-first search over reasoning steps, scored by the backbone itself.

MC² appendix B settings: 5 candidate thoughts per expanded node, the best 2 kept per level, depth 2, a generic
self-evaluation prompt (no task-specific evaluator). For each question:

1. level ``1 .. depth-1``: every frontier node gets ``candidates`` thoughts (ONE batched call, ``sampling.n =
   candidates``; templates ``tot_step`` for the first step, ``tot_next_step`` after it). A thought that already
   states a final answer inside ``<answer>`` tags is terminal: it becomes a leaf instead of being expanded;
2. every new node is scored by the same model (ONE batched call, template ``tot_evaluate``, a 1-10 rating in
   ``<score>`` tags, parsed by :func:`parse_score`; an unparsable rating gets :data:`LOWEST_SCORE`);
3. the ``keep`` best-scored nodes of the question (ties: the earlier node) are kept; the rest are pruned;
4. the last level (``depth``) continues each kept node to a final answer (template ``tot_finish``; with
   ``depth=1`` the ``single_cot`` prompt), and those leaves are scored the same way.

The answer is the one of the best-scored leaf that has a parsable answer (ties: the leaf found first: lower level,
then higher-ranked parent, then lower candidate index); ``None`` when no leaf has one. ``details["levels"]`` holds,
per level: ``scores`` (every new node's), ``parents`` (each node's parent, as its position among the nodes expanded
at that level: the previous level's kept, non-terminal nodes, best first), ``kept`` (indices, best first; at the
last level every leaf, ranked) and ``terminal`` (kept nodes that already state an answer); ``details["best"]`` is
the chosen leaf (``level``, ``index``, ``score``) and ``details["unparsed_scores"]`` counts unparsable ratings.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from metamod.prompts import render
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

from ..single import SingleOutcome
from ._common import BaselineMethod, spend, tagged_answer

logger = logging.getLogger(__name__)

#: the score of a node whose self-evaluation could not be parsed (below every valid rating)
LOWEST_SCORE = 0.0
#: words of the "sure / likely / impossible" style of rating, mapped onto the 1-10 scale
VERBAL_SCORES = {"sure": 10.0, "likely": 5.0, "impossible": 1.0}

_SCORE_TAG_RE = re.compile(r"<score>(.*?)</score>", re.IGNORECASE | re.DOTALL)
_NUMBER_RE = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")
_LABELLED_RE = re.compile(r"\b(?:score|rating)\b\s*(?:is|of|:|=)?\s*\**\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_VERBAL_RE = re.compile(r"\b(sure|likely|impossible)\b", re.IGNORECASE)


def parse_score(text: str | None) -> float | None:
    """A self-evaluation rating on the 1-10 scale, or ``None`` when the output holds none.

    Precedence: the first number in the LAST ``<score>`` span; else the last ``score: N`` / ``rating N``; else the
    last of the words sure / likely / impossible (10 / 5 / 1). Numbers outside 1-10 are not ratings.

    Args:
        text: the evaluator's output.

    Returns:
        The rating, or ``None``.

    >>> [parse_score(t) for t in ["<score>7</score>", "<score> 8/10 </score>", "Score: 6.5", "likely", "<score>42"]]
    [7.0, 8.0, 6.5, 5.0, None]
    >>> [parse_score(t) for t in ["<score>0</score>", "unlikely", "I do not know", None]]
    [None, None, None, None]
    """
    if not text:
        return None
    spans = _SCORE_TAG_RE.findall(text)
    if spans:
        number = _NUMBER_RE.search(spans[-1])
        if number is not None:
            return _in_range(float(number.group(0)))
        words = _VERBAL_RE.findall(spans[-1])
        return VERBAL_SCORES[words[-1].lower()] if words else None
    labelled = _LABELLED_RE.findall(text)
    if labelled:
        return _in_range(float(labelled[-1]))
    words = _VERBAL_RE.findall(text)
    return VERBAL_SCORES[words[-1].lower()] if words else None


def _in_range(value: float) -> float | None:
    return value if 1.0 <= value <= 10.0 else None


@dataclass
class ToTOptions:
    """Settings of ``tot`` (``method_options: {tot: {...}}``); defaults are MC² appendix B's."""

    candidates: int = field(default=5, metadata={"help": "Candidate thoughts per expanded node (sampling.n)."})
    keep: int = field(default=2, metadata={"help": "Best-scored nodes kept per question and level (the beam)."})
    depth: int = field(
        default=2,
        metadata={"help": "Maximum depth: levels 1..depth-1 add one reasoning step, level depth finishes."},
    )
    eval_samples: int = field(
        default=1, metadata={"help": "Self-evaluation samples per node; the node's score is their mean."}
    )
    eval_max_tokens: int = field(default=128, metadata={"help": "Completion budget of one self-evaluation."})
    thought_max_tokens: int | None = field(
        default=None, metadata={"help": "Completion budget of one thought (None: the agent's max_tokens)."}
    )

    def __post_init__(self) -> None:
        for name in ("candidates", "keep", "depth", "eval_samples", "eval_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.thought_max_tokens is not None and self.thought_max_tokens < 1:
            raise ValueError(f"thought_max_tokens must be >= 1 or None, got {self.thought_max_tokens}")


@dataclass
class _Node:
    steps: list[str]
    answer: str | None = None
    score: float = LOWEST_SCORE
    level: int = 0
    index: int = 0


def format_steps(steps: list[str]) -> str:
    """The path from the root as numbered steps (the ``{steps}`` of the ToT templates).

    >>> print(format_steps(["Add 2 and 3.", "That is 5."]))
    Step 1: Add 2 and 3.
    Step 2: That is 5.
    """
    return "\n".join(f"Step {i + 1}: {step}" for i, step in enumerate(steps))


class TreeOfThought(BaselineMethod):
    """ToT breadth-first search: generate, self-evaluate, keep the best; 4 batched calls at the default depth 2.

    >>> from metamod.evaluate.decision import LayerContext
    >>> from metamod.evaluate.methods import build_method
    >>> from metamod.llm.base import Generation
    >>> class Fake:  # thoughts answer at once; the evaluator likes every other one
    ...     name, context_length, calls = "fake", None, []
    ...     def chat(self, conversations, sampling):
    ...         self.calls.append(len(conversations))
    ...         texts = [f"<score>{3 + 5 * (i % 2)}</score>" if "Judge" in c[-1]["content"] else f"<answer>{i}</answer>"
    ...                  for i, c in enumerate(conversations) for _ in range(sampling.n)]
    ...         return [Generation(t, prompt_tokens=4, completion_tokens=2) for t in texts]
    >>> ctx = LayerContext(max_rounds=1, agent=Fake())
    >>> [out] = build_method("tot", ctx).run([Example(id="q", question="1+1?", gold="2", kind="math")])
    >>> out.answer, Fake.calls, out.details["levels"][0]["scores"], out.details["levels"][0]["kept"]
    ('0', [1, 5], [3.0, 8.0, 3.0, 8.0, 3.0], [1, 3])
    """

    options_class = ToTOptions

    def run(self, examples: list[Example]) -> list[SingleOutcome]:
        """Search a tree per question, all questions batched together.

        Args:
            examples: the questions.

        Returns:
            One outcome per question (``details``: ``levels``, ``best``, ``unparsed_scores``).
        """
        opts: ToTOptions = self.options
        outcomes = [SingleOutcome(answer=None) for _ in examples]
        frontier: list[list[_Node]] = [[_Node(steps=[])] for _ in examples]
        leaves: list[list[_Node]] = [[] for _ in examples]
        levels: list[list[dict[str, Any]]] = [[] for _ in examples]
        unparsed = [0] * len(examples)
        for level in range(1, opts.depth + 1):
            last = level == opts.depth
            requests = [(q, p, node) for q, nodes in enumerate(frontier) for p, node in enumerate(nodes)]
            if not requests:
                break
            conversations = [
                [{"role": "user", "content": self._expand_prompt(examples[q], node, last)}] for q, _, node in requests
            ]
            generations = self._call(conversations, n=opts.candidates, max_tokens=opts.thought_max_tokens)
            children: list[list[_Node]] = [[] for _ in examples]
            parents: list[list[int]] = [[] for _ in examples]
            for r, (q, p, node) in enumerate(requests):
                for g in generations[r * opts.candidates : (r + 1) * opts.candidates]:
                    outcomes[q].add(g)
                    answer = extract_answer(g.text) if last else tagged_answer(g.text)
                    kids = children[q]
                    kids.append(_Node(steps=[*node.steps, g.text.strip()], answer=answer, level=level, index=len(kids)))
                    parents[q].append(p)
            self._score(examples, children, outcomes, unparsed)
            for q, kids in enumerate(children):
                ranked = sorted(range(len(kids)), key=lambda i, kids=kids: (-kids[i].score, i))
                record: dict[str, Any] = {
                    "level": level,
                    "scores": [k.score for k in kids],
                    "parents": parents[q],
                    "kept": ranked if last else ranked[: opts.keep],
                    "terminal": [i for i in ranked[: opts.keep] if kids[i].answer is not None] if not last else [],
                }
                levels[q].append(record)
                if last:
                    leaves[q].extend(kids)
                    frontier[q] = []
                else:
                    kept = [kids[i] for i in ranked[: opts.keep]]
                    leaves[q].extend(k for k in kept if k.answer is not None)
                    frontier[q] = [k for k in kept if k.answer is None]
        for q, outcome in enumerate(outcomes):
            answered = [leaf for leaf in leaves[q] if leaf.answer is not None]
            best = max(answered, key=lambda leaf: leaf.score) if answered else None  # max keeps the first of ties
            outcome.answer = best.answer if best is not None else None
            outcome.details = {
                "levels": levels[q],
                "best": None if best is None else {"level": best.level, "index": best.index, "score": best.score},
                "unparsed_scores": unparsed[q],
            }
        logger.info("tot: %d questions, %d answered", len(examples), sum(o.answer is not None for o in outcomes))
        return outcomes

    def _expand_prompt(self, example: Example, node: _Node, last: bool) -> str:
        if not node.steps:
            return self._prompt(example, "single_cot" if last else "tot_step")
        template = "tot_finish" if last else "tot_next_step"
        return render(template, question=example.prompt_text(), steps=format_steps(node.steps))

    def _score(
        self,
        examples: list[Example],
        children: list[list[_Node]],
        outcomes: list[SingleOutcome],
        unparsed: list[int],
    ) -> None:
        """Self-evaluate every new node of every question in ONE batched call; set ``node.score``."""
        k = self.options.eval_samples
        nodes = [(q, node) for q, kids in enumerate(children) for node in kids]
        conversations = [
            [
                {
                    "role": "user",
                    "content": render(
                        "tot_evaluate", question=examples[q].prompt_text(), steps=format_steps(node.steps)
                    ),
                }
            ]
            for q, node in nodes
        ]
        generations = self._call(conversations, n=k, max_tokens=self.options.eval_max_tokens)
        for r, (q, node) in enumerate(nodes):
            values = []
            for g in generations[r * k : (r + 1) * k]:
                spend(outcomes[q], g)
                value = parse_score(g.text)
                if value is None:
                    unparsed[q] += 1
                    value = LOWEST_SCORE
                values.append(value)
            node.score = sum(values) / len(values)
