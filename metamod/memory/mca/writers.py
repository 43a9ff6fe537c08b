"""The three text operators of the MetaCognitive Accumulator: Distill (C.4), Consol (C.5) and the prompt composer (C.3).

Each operator has two implementations with the same inputs and outputs:

- :class:`LLMWriter`: prompted (templates ``mca_distill``, ``mca_consolidate``, ``mca_compose``), one batched
  ``Generator.chat`` call per operator and batch of jobs, parsed leniently with counted fallbacks;
- :class:`RuleWriter`: deterministic and offline (the simulated world and tests): lessons from the reflections'
  tags, consolidation by near-duplicate merging with support counts, composition by fitting items into the budget.

Shared types: a :class:`Lesson` (one micro-lesson item), a :class:`KnowledgeItem` (one meta-knowledge rule) and
the job and output dataclasses of each operator. Replies are read by :mod:`metamod.memory.mca.parse` (lessons,
rules, the composer's checks :func:`~metamod.memory.mca.parse.check_composed`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metamod.llm.base import chat_checked
from metamod.memory.mca.parse import (
    KIND_LABEL,
    NEAR_DUPLICATE,
    ROLE_TAGS,
    CountTokens,
    LessonDraft,
    check_composed,
    clean_item,
    fit,
    parse_lessons,
    parse_rules,
    scrub,
    word_count,
)
from metamod.memory.mca.reflect import Reflection
from metamod.prompts import render

logger = logging.getLogger(__name__)

#: A distiller prompt above this many tokens is logged as long (nothing is cut: Eq. 10 distils every selected
#: reflection; ``max_reflections`` is the user's cap). A prompt that cannot fit the memory LLM's known context
#: (``context_length``) with its completion budget is logged as such.
LONG_DISTILL_PROMPT_TOKENS = 4096


# ---------------------------------------------------------------- shared types
@dataclass
class Lesson:
    """One micro-lesson item of a role's batch-level lesson.

    Attributes:
        id: ``L<batch>.<role>.<n>`` (``n`` from 1).
        role: the stream.
        kind: ``do`` or ``avoid``.
        text: one sentence.
        tags: short topic words.
        batch: the batch index that wrote it.
        sources: ids of the examples whose reflections it came from.
    """

    id: str
    role: str
    kind: str
    text: str
    tags: list[str] = field(default_factory=list)
    batch: int = 0
    sources: list[str] = field(default_factory=list)

    def display(self) -> str:
        """``DO: text`` / ``AVOID: text``."""
        return f"{KIND_LABEL.get(self.kind, self.kind.upper())}: {self.text}"

    def serialised(self) -> str:
        """Kind, text and tags: what retrieval embeds (C.7).

        >>> Lesson("L0.reasoner.1", "reasoner", "do", "Check units.", ["units"]).serialised()
        'DO: Check units. (tags: units)'
        """
        tags = f" (tags: {', '.join(self.tags)})" if self.tags else ""
        return f"{self.display()}{tags}"


@dataclass
class KnowledgeItem:
    """One rule of a role's meta-knowledge ``K_b``: its text, how many lessons support it, when it was last seen."""

    text: str
    support: int = 1
    last_batch: int = 0


@dataclass
class DistillJob:
    """Distil one role's selected reflections (S+ and S-) into at most ``max_items`` lesson items."""

    role: str
    policy: str
    plus: list[Reflection]
    minus: list[Reflection]
    max_items: int = 4


@dataclass
class DistillOutput:
    """Lesson drafts and how they were read: ``rule``, ``tagged`` (the schema), ``json``, ``bullets``, ``empty``."""

    drafts: list[LessonDraft]
    how: str

    @property
    def fallback(self) -> bool:
        return self.how not in ("rule", "tagged")


@dataclass
class ConsolidateJob:
    """Consolidate ``K_{b-1}`` with the windowed lessons (newest first) into at most ``max_items`` rules."""

    role: str
    policy: str
    knowledge: list[KnowledgeItem]
    lessons: list[Lesson]
    batch: int
    max_items: int = 8


@dataclass
class ConsolidateOutput:
    """The new ``K_b`` (``None``: unparsable, keep ``K_{b-1}``) and how it was read (``rule``, ``list``, ``json``)."""

    knowledge: list[KnowledgeItem] | None
    how: str

    @property
    def fallback(self) -> bool:
        return self.knowledge is None


@dataclass
class RoleMaterial:
    """What the composer merges for one role: the base policy, the rules ``K`` and the retrieved lessons."""

    policy: str
    knowledge: list[str]
    lessons: list[str]


@dataclass
class ComposeJob:
    """Compose the updated prompts of ``roles`` for one instance (Eq. 13)."""

    example_id: str
    question: str
    roles: dict[str, RoleMaterial]
    budget: int


@dataclass
class ComposeOutput:
    """Per role: the composed text (``None``: every attempt failed) and the attempts ``[{"ok", "reason"}]``."""

    texts: dict[str, str | None]
    attempts: dict[str, list[dict[str, Any]]]
    regenerated: bool = False


def _bullets(items: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {i}" for i in items) if items else empty


# ---------------------------------------------------------------- rule writer
#: (role, kind, role quality) -> the rule writer's lesson sentence; S+ give DOs, S- give AVOIDs.
RULE_LESSONS: dict[tuple[str, str, str], str] = {
    ("reasoner", "do", "good"): "Number the steps, keep each intermediate result explicit and state one final answer.",
    ("reasoner", "do", "ok"): "When a step is challenged, repair that step rather than switching to a new method.",
    ("reasoner", "do", "poor"): "Redo the computation a reviewer flagged from scratch before answering again.",
    ("reasoner", "avoid", "good"): "Committing to a quick first answer without checking it against the question.",
    ("reasoner", "avoid", "ok"): "Resubmitting an approach a reviewer already rejected instead of changing the plan.",
    ("reasoner", "avoid", "poor"): "Handing in unchecked arithmetic; repeatedly flagged attempts never converged.",
    ("monitor", "do", "good"): "Clear a solution only after checking every step and the final computation.",
    ("monitor", "do", "ok"): "Name the first wrong step and what is wrong with it so the fix is actionable.",
    ("monitor", "do", "poor"): "Recheck a flagged step against the latest attempt before reporting it again.",
    ("monitor", "avoid", "good"): "Passing a tidy-looking solution without verifying its final result.",
    ("monitor", "avoid", "ok"): "Vague audits that give no step number and no description of the slip.",
    ("monitor", "avoid", "poor"): "Flagging an error again after the current attempt has already fixed it.",
    ("controller", "do", "good"): "Accept as soon as the audit finds no error and the answer fits the question.",
    ("controller", "do", "ok"): "Patch a single well-located slip yourself instead of asking for a full restart.",
    ("controller", "do", "poor"): "Give concrete, different suggestions with every restart.",
    ("controller", "avoid", "good"): "Accepting at once while the audit still reports an unresolved error.",
    ("controller", "avoid", "ok"): "Restarting when a small patch would fix the flagged step.",
    ("controller", "avoid", "poor"): "Restarting again and again with the same advice instead of replanning.",
}
_QUALITY_ORDER = ("good", "ok", "poor")


class RuleWriter:
    """Deterministic operators (see the module docstring).

    Args:
        embedder: the memory's embedder (near-duplicate merging in :meth:`consolidate`).
        count_tokens: the budget counter of composed prompts.

    >>> from metamod.memory.embed import build_embedder
    >>> w = RuleWriter(build_embedder("hashing", n_features=64))
    >>> r = Reflection("a", None, "single", "?", "success", 1, 1, "accepted", "A",
    ...                quality={"reasoner": "good"}, trajectories={"reasoner": ["1"]})
    >>> out = w.distill([DistillJob("reasoner", "Solve it.", [r], [])])[0]
    >>> out.how, out.drafts[0].kind, out.drafts[0].tags
    ('rule', 'do', ['R_good', 'success', 'task_A'])
    """

    name = "rule"
    model = "rule"

    def __init__(self, embedder: Any, count_tokens: CountTokens = word_count) -> None:
        self.embedder = embedder
        self.count_tokens = count_tokens

    def distill(self, jobs: Sequence[DistillJob]) -> list[DistillOutput]:
        """One DO per role quality seen in S+, one AVOID per role quality seen in S-, tagged with their tags."""
        out: list[DistillOutput] = []
        for job in jobs:
            drafts: list[LessonDraft] = []
            for kind, group in (("do", job.plus), ("avoid", job.minus)):
                for quality in _QUALITY_ORDER:
                    members = [r for r in group if r.quality.get(job.role, "ok") == quality]
                    if members:
                        tags = sorted({t for r in members for t in r.tags(job.role)})
                        drafts.append(LessonDraft(kind, RULE_LESSONS[(job.role, kind, quality)], tags))
            out.append(DistillOutput(drafts[: job.max_items], "rule"))
        return out

    def consolidate(self, jobs: Sequence[ConsolidateJob]) -> list[ConsolidateOutput]:
        """Merge near-duplicates (cosine >= 0.9) of the window's lessons and ``K_{b-1}``; keep the top rules.

        A window cluster that matches a rule of ``K_{b-1}`` keeps the rule's wording and adds the lessons of the
        newest batch to its support (older window lessons were counted before); a new cluster's support is its
        size; unmatched rules keep their support. Ranked by (support, last batch, text), capped at ``max_items``.
        """
        return [ConsolidateOutput(self._consolidate_one(job), "rule") for job in jobs]

    def _consolidate_one(self, job: ConsolidateJob) -> list[KnowledgeItem]:
        lessons = sorted(job.lessons, key=lambda item: (-item.batch, item.id))
        clusters: list[dict[str, Any]] = []
        vecs = self.embedder.embed([item.display() for item in lessons]) if lessons else []
        for lesson, vec in zip(lessons, vecs, strict=True):
            best = self._match(vec, [c["vec"] for c in clusters])
            if best is None:
                clusters.append({"text": lesson.display(), "vec": vec, "n": 1, "new": 0, "last": lesson.batch})
                best = len(clusters) - 1
            else:
                clusters[best]["n"] += 1
                clusters[best]["last"] = max(clusters[best]["last"], lesson.batch)
            clusters[best]["new"] += int(lesson.batch == job.batch)
        items: list[KnowledgeItem] = []
        matched: set[int] = set()
        prev_vecs = self.embedder.embed([k.text for k in job.knowledge]) if job.knowledge else []
        for item, vec in zip(job.knowledge, prev_vecs, strict=True):
            free = [i for i in range(len(clusters)) if i not in matched]
            best = self._match(vec, [clusters[i]["vec"] for i in free])
            if best is None:
                items.append(KnowledgeItem(item.text, item.support, item.last_batch))
                continue
            c = clusters[free[best]]
            matched.add(free[best])
            items.append(KnowledgeItem(item.text, item.support + c["new"], max(item.last_batch, c["last"])))
        for i, c in enumerate(clusters):
            if i not in matched:
                items.append(KnowledgeItem(c["text"], c["n"], c["last"]))
        items.sort(key=lambda k: (-k.support, -k.last_batch, k.text))
        return items[: job.max_items]

    @staticmethod
    def _match(vec: np.ndarray, rows: list[np.ndarray]) -> int | None:
        if not rows:
            return None
        sims = np.round(np.stack(rows) @ vec, 6)
        best = int(np.argmax(sims))
        return best if sims[best] >= NEAR_DUPLICATE else None

    def compose(self, jobs: Sequence[ComposeJob]) -> list[ComposeOutput]:
        """Base policy, then the rules, then the lessons, one per line, cut to the budget."""
        out: list[ComposeOutput] = []
        for job in jobs:
            parts = []
            for role, m in job.roles.items():
                lines = list(dict.fromkeys([m.policy, *(f"- {item}" for item in (*m.knowledge, *m.lessons))]))
                tag = ROLE_TAGS[role]
                parts.append(f"<{tag}>{fit(lines, job.budget, self.count_tokens)}</{tag}>")
            checked = check_composed("\n".join(parts), list(job.roles), job.question, job.budget, self.count_tokens)
            out.append(
                ComposeOutput(
                    texts={r: t for r, (t, _) in checked.items()},
                    attempts={r: [{"ok": t is not None, "reason": why}] for r, (t, why) in checked.items()},
                )
            )
        return out


# ---------------------------------------------------------------- LLM writer
class LLMWriter:
    """Prompted operators: one batched ``llm.chat`` per operator call (plus one for composer regenerations).

    Args:
        llm: a :class:`metamod.llm.base.Generator`.
        sampling: its :class:`metamod.llm.base.SamplingConfig` (one sample per conversation is used).
        count_tokens: the budget counter of composed prompts.

    Attributes:
        calls: how many ``chat`` calls were made.
    """

    name = "llm"

    def __init__(self, llm: Any, sampling: Any, count_tokens: CountTokens = word_count) -> None:
        if llm is None or not hasattr(llm, "chat"):
            raise ValueError("LLMWriter needs a Generator with a chat() method")
        self.llm = llm
        self.sampling = sampling
        self.count_tokens = count_tokens
        self.calls = 0

    @property
    def model(self) -> str:
        return str(getattr(self.llm, "name", "llm"))

    def _chat(self, conversations: list[list[dict[str, str]]]) -> list[str]:
        generations = chat_checked(self.llm, conversations, self.sampling, who="memory LLM")
        self.calls += 1
        n = self.sampling.n  # the first of each conversation's samples
        return [str(generations[i * n].text or "") for i in range(len(conversations))]

    def distill(self, jobs: Sequence[DistillJob]) -> list[DistillOutput]:
        """Parse DO/AVOID/TAGS lines (see :func:`parse_lessons`); answers of the reflections are scrubbed."""
        if not jobs:
            return []
        conversations = []
        for job in jobs:
            prompt = render(
                "mca_distill",
                role=job.role,
                policy=job.policy,
                max_items=job.max_items,
                successes="\n\n".join(r.summary(job.role) for r in job.plus) or "(none)",
                failures="\n\n".join(r.summary(job.role) for r in job.minus) or "(none)",
            )
            self._check_length(prompt, job)
            conversations.append([{"role": "user", "content": prompt}])
        out: list[DistillOutput] = []
        for job, text in zip(jobs, self._chat(conversations), strict=True):
            drafts, how = parse_lessons(text)
            answers = [a for r in (*job.plus, *job.minus) for a in r.answers()]
            kept: list[LessonDraft] = []
            for d in drafts:
                d.text = clean_item(scrub(d.text, answers))
                if d.text and all((d.kind, d.text.casefold()) != (k.kind, k.text.casefold()) for k in kept):
                    kept.append(d)
            if how != "tagged":
                logger.warning("mca distiller (%s): reply not in the DO/AVOID schema (read as %s)", job.role, how)
            out.append(DistillOutput(kept[: job.max_items], how))
        return out

    def _check_length(self, prompt: str, job: DistillJob) -> int:
        """Log a distiller prompt that is long, or too long for the memory LLM's context; never shorten it.

        Returns:
            The prompt's token count (``count_tokens``).
        """
        tokens = int(self.count_tokens(prompt))
        context = getattr(self.llm, "context_length", None)
        completion = int(getattr(self.sampling, "max_tokens", 0) or 0)
        sizes = f"{len(job.plus)} S+ and {len(job.minus)} S- reflections"
        if isinstance(context, int) and context > 0 and tokens + completion > context:
            logger.warning(
                "mca distiller (%s): the prompt is %d tokens (%s) and with %d completion tokens does not fit the "
                "memory LLM's context of %d tokens; set memory_options max_reflections to cap S+ and S-",
                job.role, tokens, sizes, completion, context,
            )  # fmt: skip
        elif tokens > LONG_DISTILL_PROMPT_TOKENS:
            logger.warning(
                "mca distiller (%s): the prompt is long, %d tokens (%s); memory_options max_reflections caps S+ and "
                "S- if needed",
                job.role, tokens, sizes,
            )  # fmt: skip
        return tokens

    def consolidate(self, jobs: Sequence[ConsolidateJob]) -> list[ConsolidateOutput]:
        """Parse a numbered or bulleted rule list (see :func:`parse_rules`); none -> ``None`` (keep ``K_{b-1}``)."""
        if not jobs:
            return []
        conversations = []
        for job in jobs:
            lessons = sorted(job.lessons, key=lambda item: (-item.batch, item.id))
            prompt = render(
                "mca_consolidate",
                role=job.role,
                policy=job.policy,
                knowledge="\n".join(f"{i + 1}. {k.text}" for i, k in enumerate(job.knowledge)) or "(none yet)",
                lessons=_bullets([lesson.serialised() for lesson in lessons]),
                max_items=job.max_items,
            )
            conversations.append([{"role": "user", "content": prompt}])
        out: list[ConsolidateOutput] = []
        for job, text in zip(jobs, self._chat(conversations), strict=True):
            rules = parse_rules(text)[: job.max_items]
            if not rules:
                logger.warning("mca consolidator (%s): no rule list in the reply; keeping the previous rules", job.role)
                out.append(ConsolidateOutput(None, "fallback"))
                continue
            previous = {k.text.casefold(): k for k in job.knowledge}
            items = [
                KnowledgeItem(r, previous[r.casefold()].support + 1 if r.casefold() in previous else 1, job.batch)
                for r in rules
            ]
            out.append(ConsolidateOutput(items, "list"))
        return out

    def compose(self, jobs: Sequence[ComposeJob]) -> list[ComposeOutput]:
        """One batched call over the jobs; jobs with a failing role get one regeneration (a second batched call)."""
        if not jobs:
            return []
        conversations = [[{"role": "user", "content": self._compose_prompt(job)}] for job in jobs]
        first = self._chat(conversations)
        results: list[dict[str, tuple[str | None, str | None]]] = [
            check_composed(text, list(job.roles), job.question, job.budget, self.count_tokens)
            for job, text in zip(jobs, first, strict=True)
        ]
        attempts = [{r: [{"ok": t is not None, "reason": why}] for r, (t, why) in res.items()} for res in results]
        retry = [i for i, res in enumerate(results) if any(t is None for t, _ in res.values())]
        retried = set(retry)
        if retry:
            again = []
            for i in retry:
                problems = "; ".join(why for _, why in results[i].values() if why)
                again.append(
                    [
                        *conversations[i],
                        {"role": "assistant", "content": first[i]},
                        {"role": "user", "content": render("mca_compose_retry", problems=problems)},
                    ]
                )
            for i, text in zip(retry, self._chat(again), strict=True):
                job = jobs[i]
                failing = [r for r, (t, _) in results[i].items() if t is None]
                second = check_composed(text, failing, job.question, job.budget, self.count_tokens)
                for role, (t, why) in second.items():
                    attempts[i][role].append({"ok": t is not None, "reason": why})
                    results[i][role] = (t, why)
        return [
            ComposeOutput(texts={r: t for r, (t, _) in res.items()}, attempts=attempts[i], regenerated=i in retried)
            for i, res in enumerate(results)
        ]

    @staticmethod
    def _compose_prompt(job: ComposeJob) -> str:
        blocks = [
            render(
                "mca_compose_role",
                tag=ROLE_TAGS[role],
                role=role,
                policy=m.policy,
                knowledge=_bullets(m.knowledge),
                lessons=_bullets(m.lessons),
            )
            for role, m in job.roles.items()
        ]
        schema = "\n".join(f"<{ROLE_TAGS[r]}>updated instructions for the {r}</{ROLE_TAGS[r]}>" for r in job.roles)
        return render("mca_compose", question=job.question, roles="\n\n".join(blocks), schema=schema, budget=job.budget)
