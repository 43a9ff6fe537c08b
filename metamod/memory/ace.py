"""ACE memory (Agentic Context Engineering): generator, reflector and curator over a playbook of bullets.

The three ACE roles (Zhang et al.; the Bayesian Cheatsheet paper's ACE baseline, section 5.1) on the memory
protocol of :mod:`metamod.memory.base`:

1. **Generator**: the model being evaluated. Its guidance is the ``top_k`` playbook bullets most similar to the
   question (``- section: text`` lines; ties by ``helpful - harmful``, then the older bullet); the item ids are the
   bullet ids, so each observation carries the bullets it was served.
2. **Reflector** (``consolidate``, at ``end_batch``, ONE batched call for the batch's records): the question, the
   model's solution and the bullets served for it -> which served bullets helped, which misled, and one key
   insight (``ace_reflect``, parsed by :func:`parse_reflection`; tags for bullets that were not served are ignored).
   The tags update the bullets' ``helpful`` / ``harmful`` counters.
3. **Curator** (ONE batched call after the reflector): each insight with the ``top_k`` bullets closest to it ->
   at most ``max_new`` delta operations ``ADD section: text`` (``ace_curate``, parsed by :func:`parse_operations`).
   Operations are applied in the batch's canonical record order; a new bullet whose text is at least
   ``dedup_threshold`` similar (cosine) to an existing one is a duplicate and bumps that bullet's ``helpful``
   count instead of being added.

Then bullets with ``harmful - helpful > prune_threshold`` are pruned, and beyond ``max_entries`` the bullets with
the lowest ``helpful - harmful`` (then the oldest) go. ``corpus`` warm-starts the playbook with at most
``max_entries`` mined behaviours (round-robin over domains, as for DC-Cu; section = the behaviour's name, text = its
description, so a corpus bullet reads exactly like the corpus line); ``corpus: null`` is the cold start. No gold
answer is ever read, and the reflector sees whether a solution was correct only with ``use_correctness``.

>>> from metamod.llm.base import Generation
>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.tasks.base import Example
>>> class Scripted:  # a stand-in memory LLM: a reflection, then a curator operation
...     def chat(self, conversations, sampling):
...         reflect = "HELPFUL: none\\nHARMFUL: none\\nINSIGHT: Multiply the group size by the group count."
...         curate = "ADD strategy: Multiply the size of one group by the number of groups."
...         return [Generation(text=reflect if "INSIGHT" in c[0]["content"] else curate) for c in conversations]
>>> ace = ACEMemory(ACEOptions(), llm=Scripted())
>>> q = Example(id="a", question="Mia buys 3 boxes of 12 pens. How many pens?", gold="36", kind="math")
>>> trace = {"id": "a", "rounds": [], "single": {"texts": ["3 * 12 = 36 <answer>36</answer>"]}}
>>> ace.observe(Observation(q, trace, {"correct": True, "final_answer": "36", "method": "cot"}))
>>> ace.end_batch()
>>> ace.guidance(GuidanceRequest(q, "single"))
Guidance(text='- strategy: Multiply the size of one group by the number of groups.', item_ids=('A1',))
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from metamod.memory.base import Guidance, GuidanceRequest, MemoryOptions
from metamod.memory.curation import (
    MAX_TEXT_CHARS,
    CuratedMemory,
    chat_texts,
    lines,
    outcome_text,
    parse_entries,
    select_corpus,
)
from metamod.memory.embed import Embedder
from metamod.memory.items import ItemVectors, check_embedder_options, check_positive, evict_lowest
from metamod.prompts import render

logger = logging.getLogger(__name__)

_TAG = re.compile(
    r"^\s*(?:[-*\u2022]\s*)?\**\s*(helpful|harmful|insight|key insight|lesson)\s*\**\s*:\s*\**\s*(.*)$", re.I
)
_ID_TAG = re.compile(r"^\s*(?:[-*\u2022]\s*)?\[?([A-Za-z]*\d+)\]?\s*[:=-]?\s*(helpful|harmful)\b", re.I)
_ADD = re.compile(r"^\s*(?:[-*\u2022]\s*|\d+\s*[.)]\s*)*\**\s*add\b\s*:?\s*", re.I)
_COUNTERS: tuple[str, ...] = (
    "reflector_calls", "curator_calls", "reflections", "reflections_empty", "tagged_helpful", "tagged_harmful",
    "bullets_added", "bullets_deduplicated", "bullets_pruned", "bullets_evicted", "operations_rejected",
)  # fmt: skip


@dataclass
class ACEOptions(MemoryOptions):
    """Options of ``memory: ace`` (``memory_options`` in a config)."""

    max_new: int = field(default=3, metadata={"help": "The most ADD operations the curator makes per sample."})
    top_k: int = field(
        default=5, metadata={"help": "Bullets shown per question, and related bullets shown to the curator."}
    )
    max_entries: int = field(
        default=256, metadata={"help": "Playbook cap; the lowest helpful - harmful, then the oldest, go first."}
    )
    dedup_threshold: float = field(
        default=0.9,
        metadata={
            "help": "Cosine similarity in (0, 1] at or above which a new bullet is a duplicate of an existing one "
            "(the existing one's helpful count is bumped instead; 1: only identical texts)."
        },
    )
    prune_threshold: int = field(
        default=2, metadata={"help": "A bullet whose harmful - helpful count exceeds this is pruned (>= 0)."}
    )
    corpus: str | None = field(
        default=None,
        metadata={"help": "Mined behaviour corpus (folder or behaviours.jsonl) to warm-start from; null: cold start."},
    )
    cold_start: bool = field(
        default=False,
        metadata={"help": "Ignore corpus and start from an empty memory (the cold-start rows of the paper's table 2)."},
    )
    embedder: str | None = field(
        default=None,
        metadata={
            "help": "Text encoder for retrieval, shared by every row (memory_options; see memory/embed.py). None: the "
            "encoder the corpus was embedded with (cold starts too), or hashing without one. Set: must be the corpus's."
        },
    )
    embedder_model: str | None = field(
        default=None, metadata={"help": "Local model folder for embedder: sentence-transformers (never downloaded)."}
    )
    use_correctness: bool = field(
        default=False,
        metadata={"help": "Tell the reflector whether each solution was correct (off: a pure test-time method)."},
    )
    reflector_max_tokens: int = field(default=256, metadata={"help": "Reflector generation budget per sample."})
    curator_max_tokens: int = field(default=256, metadata={"help": "Curator generation budget per sample."})

    def __post_init__(self) -> None:
        for name in ("max_new", "top_k", "max_entries", "reflector_max_tokens", "curator_max_tokens"):
            check_positive(name, getattr(self, name))
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ValueError(f"dedup_threshold must be in (0, 1] (1: only identical texts), got {self.dedup_threshold}")
        if (
            isinstance(self.prune_threshold, bool)
            or not isinstance(self.prune_threshold, int)
            or self.prune_threshold < 0
        ):
            raise ValueError(f"prune_threshold must be an integer >= 0, got {self.prune_threshold!r}")
        check_embedder_options(self.embedder, self.embedder_model)


@dataclass
class Bullet:
    """One playbook bullet: ``id`` (the corpus id, or ``A<n>``), ``section`` (a hyphenated label), ``text``, the
    reflector's ``helpful`` / ``harmful`` counts, the batch that created it, the ``question`` it came from ("" when
    unknown; a retrieval key) and its ``source`` (``corpus`` or ``llm``)."""

    id: str
    section: str
    text: str
    helpful: int = 0
    harmful: int = 0
    created_batch: int = 0
    question: str = ""
    source: str = "llm"

    @property
    def score(self) -> int:
        return self.helpful - self.harmful


# ---------------------------------------------------------------------------------------------- parsing
def parse_reflection(text: str, served: Sequence[str]) -> dict[str, Any]:
    """A reflector reply -> ``{"helpful": [ids], "harmful": [ids], "insight": str}``.

    Reads ``HELPFUL:`` / ``HARMFUL:`` / ``INSIGHT:`` lines (bullets and markdown tolerated) and per-bullet lines
    such as ``[A3] helpful``. Only ``served`` ids count; an id tagged both ways counts as neither.

    >>> parse_reflection("**HELPFUL:** [A1], A7\\nHARMFUL: A2, A9\\nINSIGHT: Check the units.", ["A1", "A2"])
    {'helpful': ['A1'], 'harmful': ['A2'], 'insight': 'Check the units.'}
    >>> parse_reflection("I liked it!", ["A1"])
    {'helpful': [], 'harmful': [], 'insight': ''}
    """
    allowed = {s.lower(): s for s in served}
    tags: dict[str, set[str]] = {"helpful": set(), "harmful": set()}
    insight = ""
    for line in (text or "").splitlines():
        match = _TAG.match(line)
        if match:
            label, value = match.group(1).lower(), match.group(2).strip()
            if label in tags:
                tags[label].update(
                    allowed[i.lower()] for i in re.findall(r"[A-Za-z]*\d+", value) if i.lower() in allowed
                )
            elif not insight:
                insight = re.sub(r"\s+", " ", value).strip().strip("*`\"'").strip()[:MAX_TEXT_CHARS]
            continue
        match = _ID_TAG.match(line)
        if match and match.group(1).lower() in allowed:
            tags[match.group(2).lower()].add(allowed[match.group(1).lower()])
    both = tags["helpful"] & tags["harmful"]
    order = {s: i for i, s in enumerate(served)}
    return {
        "helpful": sorted(tags["helpful"] - both, key=order.__getitem__),
        "harmful": sorted(tags["harmful"] - both, key=order.__getitem__),
        "insight": insight if len(insight.split()) >= 3 else "",
    }


def parse_operations(text: str) -> list[tuple[str, str]]:
    """A curator reply -> ``[(section, text), ...]`` from ``ADD section: text`` lines (``ADD`` may be missing).

    >>> parse_operations("ADD mistake: Keep the sign when moving a term.\\n- add Formula: Area is base times height.")
    [('mistake', 'Keep the sign when moving a term.'), ('formula', 'Area is base times height.')]
    >>> parse_operations("NONE. The playbook is fine: nothing to add")
    []
    """
    found = []
    for line in (text or "").splitlines():
        line = _ADD.sub("", line, count=1)
        found += [(name, description) for op, name, description in parse_entries(line) if op == "add"]
    return found


# ---------------------------------------------------------------------------------------------- the memory
class ACEMemory(CuratedMemory):
    """ACE with a reflector and a curator over itemised bullets; see the module docstring.

    Args:
        options: :class:`ACEOptions` (None: the defaults).
        llm: the memory LLM (a :class:`metamod.llm.base.Generator`); required.
        llm_sampling: its decoding (None: greedy, ``seed``); max_tokens comes from the options per stage.
        seed: the memory's seed (the memory itself is deterministic).
        embedder: an :class:`~metamod.memory.embed.Embedder` overriding ``options.embedder`` (and the corpus's).

    Raises:
        ValueError: no ``llm`` (the message names memory_model).
    """

    name = "ace"
    options_class: ClassVar[type] = ACEOptions
    gold_reader: ClassVar[str] = "reflector"
    counter_names: ClassVar[tuple[str, ...]] = _COUNTERS

    @classmethod
    def wants_llm(cls, options: ACEOptions | None) -> bool:
        """The reflector and the curator write with the memory LLM."""
        return True

    def __init__(
        self,
        options: ACEOptions | None = None,
        *,
        llm: Any = None,
        llm_sampling: Any = None,
        seed: int = 0,
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(options, llm=llm, llm_sampling=llm_sampling, seed=seed, embedder=embedder, needs_llm=True)
        self.bullets: list[Bullet] = [
            Bullet(id=r["id"], section=r["name"], text=r["description"], question=r["question"], source="corpus")
            for r in select_corpus(self.corpus, self.options.max_entries)
        ]
        self.next_uid = 1
        self._vectors = ItemVectors(self.embedder)
        self._reindex()

    # ------------------------------------------------------------------ protocol
    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        """The ``top_k`` committed bullets most similar to the question (every role alike)."""
        chosen = self._related(request.example.prompt_text())
        if not chosen:
            return Guidance()
        return Guidance(text=lines([(b.section, b.text) for b in chosen]), item_ids=tuple(b.id for b in chosen))

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        """Reflect (one batched call), update counters, curate (one batched call), dedup/add, prune, cap."""
        if records:
            reflections = self._reflect(records)
            operations = self._curate(records, reflections)
            for rec, ops in zip(records, operations, strict=True):
                self._add(rec, ops)
            self._prune()
        self._reindex()
        logger.info(
            "ace: batch %d reflected on %d record(s); %d bullets", self.batch_index, len(records), len(self.bullets)
        )

    # ------------------------------------------------------------------ state
    def stats(self) -> dict[str, int]:
        """Counters (calls, tags, bullets added/deduplicated/pruned/evicted) and the playbook size."""
        return {**self.counters, "bullets": len(self.bullets)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "bullets": [asdict(b) for b in self.bullets],
            "next_uid": self.next_uid,
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            bullets = [Bullet(**b) for b in state.get("bullets", [])]
            next_uid = int(state.get("next_uid", 1))
            counters = self.saved_counters(state)
        except (TypeError, ValueError) as err:
            raise ValueError(f"ace memory state is malformed: {err}") from err
        ids = [b.id for b in bullets]
        made = [int(i[1:]) for i in ids if re.fullmatch(r"A\d+", i)]
        if len(set(ids)) != len(ids) or (made and max(made) >= next_uid):
            raise ValueError(
                f"ace memory state is malformed: bullet ids must be unique and A<n> below next_uid {next_uid}"
            )
        self.bullets, self.next_uid, self.counters = bullets, next_uid, counters
        self._reindex()

    # ------------------------------------------------------------------ stages
    def _reflect(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_id = {b.id: b for b in self.bullets}
        served = [[i for i in dict.fromkeys(r.get("served") or []) if i in by_id] for r in records]
        prompts = [
            render(
                "ace_reflect",
                bullets="\n".join(f"[{i}] {by_id[i].section}: {by_id[i].text}" for i in ids) or "(none)",
                question=rec["question"],
                solution=rec["solution"] or "(no solution text)",
                outcome=outcome_text(rec, self.options.use_correctness),
            )
            for rec, ids in zip(records, served, strict=True)
        ]
        replies = chat_texts(self.llm, self.llm_sampling, prompts, self.options.reflector_max_tokens)
        self.counters["reflector_calls"] += 1
        bare = render("ace_reflect", bullets="", question="", solution="", outcome="")
        out = []
        for ids, reply in zip(served, replies, strict=True):
            found = parse_reflection(reply, ids)
            if found["insight"] and found["insight"] in bare:  # the format example echoed back
                found["insight"] = ""
            for i in found["helpful"]:
                by_id[i].helpful += 1
            for i in found["harmful"]:
                by_id[i].harmful += 1
            self.counters["tagged_helpful"] += len(found["helpful"])
            self.counters["tagged_harmful"] += len(found["harmful"])
            self.counters["reflections" if found["insight"] else "reflections_empty"] += 1
            out.append(found)
        return out

    def _curate(self, records: list[dict[str, Any]], reflections: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
        jobs, prompts = [], []
        for n, (rec, found) in enumerate(zip(records, reflections, strict=True)):
            if not found["insight"]:
                continue  # nothing to curate from
            related = self._related(f"{found['insight']}\n{rec['question']}")
            prompts.append(
                render(
                    "ace_curate",
                    max_new=self.options.max_new,
                    bullets=lines([(b.section, b.text) for b in related]) or "(empty)",
                    insight=found["insight"],
                    question=rec["question"],
                )
            )
            jobs.append(n)
        replies = chat_texts(self.llm, self.llm_sampling, prompts, self.options.curator_max_tokens)
        self.counters["curator_calls"] += 1 if prompts else 0
        bare = render("ace_curate", max_new=self.options.max_new, bullets="", insight="", question="")
        out: list[list[tuple[str, str]]] = [[] for _ in records]
        for n, reply in zip(jobs, replies, strict=True):
            parsed = parse_operations(reply)
            ops = [op for op in parsed if f"{op[0]}: {op[1]}" not in bare]  # not the format example echoed
            self.counters["operations_rejected"] += len(parsed) - min(len(ops), self.options.max_new)
            out[n] = ops[: self.options.max_new]
        return out

    def _add(self, rec: Mapping[str, Any], ops: list[tuple[str, str]]) -> None:
        """Add ``ops`` as bullets; a near-duplicate of an existing bullet bumps its helpful count instead."""
        for section, text in ops:
            vec = self.embedder.embed([text])[0]
            if self.bullets:
                sims = np.round(self._vectors.matrices(self._items())[0] @ vec, 6)
                best = int(np.argmax(sims))
                if sims[best] >= self.options.dedup_threshold:
                    self.bullets[best].helpful += 1
                    self.counters["bullets_deduplicated"] += 1
                    continue
            bullet = Bullet(
                id=f"A{self.next_uid}",
                section=section,
                text=text,
                created_batch=self.batch_index,
                question=str(rec["question"]),
            )
            self.next_uid += 1
            self.bullets.append(bullet)
            self.counters["bullets_added"] += 1
            self._reindex()

    def _prune(self) -> None:
        keep = [b for b in self.bullets if b.harmful - b.helpful <= self.options.prune_threshold]
        self.counters["bullets_pruned"] += len(self.bullets) - len(keep)
        self.bullets = keep
        excess = len(self.bullets) - self.options.max_entries
        self.bullets = evict_lowest(self.bullets, excess, lambda i: (self.bullets[i].score, i))
        self.counters["bullets_evicted"] += max(excess, 0)

    # ------------------------------------------------------------------ retrieval
    def _reindex(self) -> None:
        """Embed new bullets (text, and source question as a key); never saved: the embedder is deterministic."""
        self._vectors.update(self._items())

    def _items(self) -> list[tuple[str, str, str]]:
        return [(b.id, b.text, b.question) for b in self.bullets]

    def _related(self, query: str) -> list[Bullet]:
        """The ``top_k`` bullets most similar to ``query``; ties by helpful - harmful, then the older bullet."""
        if not self.bullets:
            return []
        scores = np.round(self._vectors.scores(self._items(), query).astype(np.float64), 6)
        order = sorted(range(len(self.bullets)), key=lambda i: (-scores[i], -self.bullets[i].score, i))
        return [self.bullets[i] for i in order[: self.options.top_k]]
