"""Dynamic Cheatsheet (DC) memory: an LLM curator grows a flat cheatsheet of tips while the model solves.

Two curators (Suzgun et al.; the Bayesian Cheatsheet paper's DC-Cu and DC-RS baselines, section 5.1):

- **DC-Cu** (``curator="cumulative"``): one cheatsheet of ``name: description`` entries. At ``end_batch`` the
  curator LLM reads, for every finished question in the batch's canonical order, the current cheatsheet (the
  entries most relevant to that question, up to ``max_chars``), the question and the model's solution, and writes
  at most ``max_new`` new entries plus at most ``max_new`` rewrites of shown entries (``REVISE name: text``).
  ``curation="sequential"`` (default) makes one curator call per question, each seeing the edits of the ones
  before it (the cumulative semantics exactly); ``curation="batched"`` makes one call for the whole batch from the
  cheatsheet as the batch began and applies the replies in canonical order (faster, the same edits rules).
  Guidance: the ``top_k`` entries most similar to the question (``top_k: null``: the whole cheatsheet, most
  similar first, up to ``max_chars``). Beyond ``max_entries`` the least recently used entries go (the last batch
  an entry was created, revised or served; then the one created earlier; then fewest uses; then the older one),
  so a fresh entry is never evicted in favour of an old one that was merely served in the same batch.
- **DC-RS** (``curator="retrieval_synthesis"``): the memory stores every finished (question, solution) pair. At
  ``begin_batch`` it retrieves, per new question, the ``top_k`` most similar past pairs and corpus behaviours and
  asks the LLM (ONE batched call for the batch) to synthesise a short question-specific cheatsheet (at most
  ``top_k`` lines), which is the guidance; its item ids are the retrieved items' ids. An unparsable synthesis falls
  back to the retrieved corpus behaviours themselves (counted). Beyond ``max_entries`` stored pairs the oldest go.

**Static DC-Cu** (``online: false``, the ``dc_cu_static`` row of the paper's table 1): the warm-start cheatsheet
below, served by the same ``top_k`` retrieval and never curated (no memory LLM). There is no static DC-RS option:
retrieving corpus behaviours without the synthesis is Metacognitive Reuse (the paper says so; ``metacognitive_reuse``).

Warm start: ``corpus`` (a mining folder or its ``behaviours.jsonl``) seeds DC-Cu's cheatsheet with at most
``max_entries`` behaviours, taken round-robin over the corpus domains in file order (so every domain is
represented; deterministic), and is DC-RS's static retrieval pool (all of it). ``corpus: null`` is the cold start.

Entries are matched to a question by ``max(cos(question, entry text), cos(question, entry's source question))``
(the source question is the mined question for a corpus behaviour, the curated question for a new entry), so a
behaviour is found both by what it says and by where it came from. Nothing here reads a gold answer, and unless
``use_correctness`` is set no prompt says whether a solution was correct (DC is a test-time method).

>>> from metamod.llm.base import Generation
>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.tasks.base import Example
>>> class Scripted:  # a stand-in memory LLM
...     def chat(self, conversations, sampling):
...         return [Generation(text="count-groups: Multiply the group size by the number of groups.")
...                 for _ in conversations]
>>> dc = DynamicCheatsheet(DCOptions(), llm=Scripted())
>>> q = Example(id="a", question="Mia buys 3 boxes of 12 pens. How many pens?", gold="36", kind="math")
>>> trace = {"id": "a", "rounds": [], "single": {"texts": ["3 * 12 = 36 <answer>36</answer>"]}}
>>> dc.observe(Observation(q, trace, {"correct": True, "final_answer": "36", "method": "cot"}))
>>> dc.end_batch()
>>> dc.guidance(GuidanceRequest(q, "single"))
Guidance(text='- count-groups: Multiply the group size by the number of groups.', item_ids=('C1',))
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
    CuratedMemory,
    chat_texts,
    corpus_embeddings,
    lines,
    outcome_text,
    parse_entries,
    select_corpus,
)
from metamod.memory.embed import Embedder, top_k_scores
from metamod.memory.items import (
    ItemVectors,
    best_scores,
    check_embedder_options,
    check_positive,
    embed_keys,
    evict_lowest,
)
from metamod.prompts import render
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

CURATORS: tuple[str, ...] = ("cumulative", "retrieval_synthesis")
CURATIONS: tuple[str, ...] = ("sequential", "batched")
_COUNTERS: tuple[str, ...] = (
    "curator_calls", "synthesis_calls", "entries_added", "entries_revised", "edits_rejected", "replies_empty",
    "entries_evicted", "pairs_added", "pairs_evicted", "syntheses", "synthesis_fallbacks",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------- options
@dataclass
class DCOptions(MemoryOptions):
    """Options of ``memory: dc`` (``memory_options`` in a config)."""

    curator: str = field(
        default="cumulative",
        metadata={"help": f"One of {CURATORS}: DC-Cu (a growing cheatsheet) or DC-RS (retrieve, then synthesise)."},
    )
    max_new: int = field(
        default=3, metadata={"help": "The most new entries (and revisions) the curator makes per sample."}
    )
    max_entries: int = field(
        default=128,
        metadata={
            "help": "Cap on stored items: DC-Cu cheatsheet entries (least recently used go first) or DC-RS past "
            "(question, solution) pairs (oldest go first)."
        },
    )
    top_k: int | None = field(
        default=5,
        metadata={
            "help": "Entries shown per question (DC-Cu) / past pairs and corpus behaviours retrieved and synthesis "
            "lines (DC-RS). null (DC-Cu only): the whole cheatsheet up to max_chars."
        },
    )
    max_chars: int = field(
        default=2000,
        metadata={
            "help": "Character budget of the cheatsheet the DC-Cu curator sees, and of guidance with top_k null."
        },
    )
    curation: str = field(
        default="sequential",
        metadata={
            "help": f"DC-Cu curator calls, one of {CURATIONS}: one call per sample seeing the previous edits, or "
            "one batched call per memory batch from the cheatsheet at the batch start."
        },
    )
    corpus: str | None = field(
        default=None,
        metadata={"help": "Mined behaviour corpus (folder or behaviours.jsonl) to warm-start from; null: cold start."},
    )
    cold_start: bool = field(
        default=False,
        metadata={"help": "Ignore corpus and start from an empty memory (the cold-start rows of the paper's table 2)."},
    )
    online: bool = field(
        default=True,
        metadata={
            "help": "Curate while solving (DC proper). false: static DC-Cu (table 1): the warm-start cheatsheet is "
            "served as it is, never curated, and no memory LLM is needed. (Static DC-RS is metacognitive_reuse.)"
        },
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
        metadata={"help": "Tell the curator whether each solution was correct (off: a pure test-time method)."},
    )
    curator_max_tokens: int = field(default=256, metadata={"help": "DC-Cu curator generation budget per call."})
    synthesis_max_tokens: int = field(default=256, metadata={"help": "DC-RS synthesis generation budget per question."})

    def __post_init__(self) -> None:
        if self.curator not in CURATORS:
            raise ValueError(f"curator must be one of {CURATORS}, got {self.curator!r}")
        if self.curation not in CURATIONS:
            raise ValueError(f"curation must be one of {CURATIONS}, got {self.curation!r}")
        for name in ("max_new", "max_entries", "max_chars", "curator_max_tokens", "synthesis_max_tokens"):
            check_positive(name, getattr(self, name))
        if not self.online and self.curator == "retrieval_synthesis":
            raise ValueError(
                "online: false is static DC-Cu; static DC-RS (retrieval without synthesis) is the metacognitive_reuse "
                "row (memory: cheatsheet, organiser: flat, space: raw)"
            )
        if not self.online and self.cold_start:
            raise ValueError("cold_start needs online: true (an empty cheatsheet only fills by curation)")
        if self.top_k is None:
            if self.curator == "retrieval_synthesis":
                raise ValueError("top_k: null (the whole cheatsheet) is for curator: cumulative; DC-RS needs a number")
        else:
            check_positive("top_k", self.top_k)
        check_embedder_options(self.embedder, self.embedder_model)


# ---------------------------------------------------------------------------------------------- state
@dataclass
class CheatsheetEntry:
    """One DC-Cu entry: ``id`` (the corpus id, or ``C<n>``), hyphenated ``name``, ``description``, the
    ``question`` it came from ("" when unknown), ``source`` (``corpus`` or ``llm``), the batches that created it and
    last used it (created, revised or served), how many questions it was served to and how often it was revised."""

    id: str
    name: str
    description: str
    question: str = ""
    source: str = "llm"
    created_batch: int = 0
    last_batch: int = 0
    uses: int = 0
    revisions: int = 0


@dataclass
class PastPair:
    """One DC-RS memory item: a finished question, the model's solution, whether it was correct, its batch."""

    id: str
    question: str
    solution: str
    correct: bool = False
    batch: int = 0


class DynamicCheatsheet(CuratedMemory):
    """Dynamic Cheatsheet (DC-Cu / DC-RS); see the module docstring.

    Args:
        options: :class:`DCOptions` (None: the defaults).
        llm: the memory LLM (a :class:`metamod.llm.base.Generator`); required.
        llm_sampling: its decoding (None: greedy, ``seed``); max_tokens comes from the options per stage.
        seed: the memory's seed (the memory itself is deterministic).
        embedder: an :class:`~metamod.memory.embed.Embedder` overriding ``options.embedder`` (and the corpus's).

    Raises:
        ValueError: no ``llm`` while ``online`` (the message names memory_model).
    """

    name = "dc"
    options_class: ClassVar[type] = DCOptions
    counter_names: ClassVar[tuple[str, ...]] = _COUNTERS

    @classmethod
    def wants_llm(cls, options: DCOptions | None) -> bool:
        """Both curators write with the memory LLM; static DC-Cu (``online: false``) never calls it."""
        return options is None or bool(options.online)

    def __init__(
        self,
        options: DCOptions | None = None,
        *,
        llm: Any = None,
        llm_sampling: Any = None,
        seed: int = 0,
        embedder: Embedder | None = None,
    ) -> None:
        online = options is None or options.online
        super().__init__(options, llm=llm, llm_sampling=llm_sampling, seed=seed, embedder=embedder, needs_llm=online)
        self.cumulative = self.options.curator == "cumulative"
        self.entries: list[CheatsheetEntry] = []
        self.pairs: list[PastPair] = []
        self.next_uid = 1
        self.synth: dict[str, dict[str, Any]] = {}  # example id -> this batch's DC-RS synthesis
        self._corpus_vecs: tuple[np.ndarray, np.ndarray] | None = None
        self._vectors = ItemVectors(self.embedder)
        if self.cumulative:
            self.entries = [
                CheatsheetEntry(
                    id=r["id"], name=r["name"], description=r["description"], question=r["question"], source="corpus"
                )
                for r in select_corpus(self.corpus, self.options.max_entries)
            ]
        elif self.corpus:
            saved = corpus_embeddings(self.options.corpus, self.embedder, len(self.corpus))
            self._corpus_vecs = saved or (
                self.embedder.embed([f"{r['name']}: {r['description']}" for r in self.corpus]),
                embed_keys(self.embedder, [r["question"] for r in self.corpus]),
            )
        self._reindex()

    # ------------------------------------------------------------------ protocol
    def prepare(self, examples: Sequence[Example]) -> None:
        """DC-RS: retrieve and synthesise every new question's cheatsheet in ONE batched LLM call (no gold read)."""
        if self.cumulative:
            return
        fresh = list({ex.id: ex for ex in examples}.values())
        jobs, prompts = [], []
        for ex in fresh:
            question = ex.prompt_text()
            pairs, behaviours = self._retrieve_rs(question)
            entry: dict[str, Any] = {
                "ids": [p.id for p in pairs] + [b["id"] for b in behaviours],
                "behaviours": [[b["name"], b["description"]] for b in behaviours],
                "lines": [],
                "fallback": False,
            }
            self.synth[ex.id] = entry
            if not entry["ids"]:
                continue
            examples_text = "\n\n".join(
                render(
                    "dc_past_example",
                    question=p.question,
                    solution=p.solution,
                    outcome=outcome_text({"correct": p.correct}, self.options.use_correctness),
                )
                for p in pairs
            )
            prompts.append(
                render(
                    "dc_synthesise",
                    max_lines=self.options.top_k,
                    examples=examples_text or "(none yet)",
                    behaviours=lines([(b["name"], b["description"]) for b in behaviours]) or "(none)",
                    question=question,
                )
            )
            jobs.append(entry)
        replies = chat_texts(self.llm, self.llm_sampling, prompts, self.options.synthesis_max_tokens)
        self.counters["synthesis_calls"] += 1 if prompts else 0
        bare = render("dc_synthesise", max_lines=self.options.top_k, examples="", behaviours="", question="")
        for entry, reply in zip(jobs, replies, strict=True):
            found = [(n, d) for _, n, d in parse_entries(reply) if f"{n}: {d}" not in bare]  # no echoed example
            found = list(dict.fromkeys(found))[: self.options.top_k]
            if not found:
                found = [tuple(b) for b in entry["behaviours"]]
                entry["fallback"] = True
                self.counters["synthesis_fallbacks"] += 1
            entry["lines"] = [list(f) for f in found]
            self.counters["syntheses"] += 1

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        """DC-Cu: the most relevant committed entries; DC-RS: this question's synthesis (every role alike)."""
        if not self.cumulative:
            entry = self.synth.get(request.example.id) or {}
            if not entry.get("lines"):
                return Guidance()
            return Guidance(text=lines([tuple(x) for x in entry["lines"]]), item_ids=tuple(entry["ids"]))
        chosen = self._relevant(request.example.prompt_text(), self.options.top_k)
        if not chosen:
            return Guidance()
        return Guidance(text=lines([(e.name, e.description) for e in chosen]), item_ids=tuple(e.id for e in chosen))

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        """DC-Cu: count uses, then curate every record (sequentially or batched); DC-RS: store the pairs.
        Static DC-Cu (``online: false``) changes nothing."""
        if not self.options.online:
            self.synth = {}
            return
        if self.cumulative:
            by_id = {e.id: e for e in self.entries}
            for rec in records:
                for item in dict.fromkeys(rec.get("served") or []):
                    if item in by_id:
                        by_id[item].uses += 1
                        by_id[item].last_batch = self.batch_index
            if self.options.curation == "sequential":
                for rec in records:
                    self._curate([rec])
            else:
                self._curate(records)
        else:
            for rec in records:
                self.pairs.append(
                    PastPair(f"P{self.next_uid}", rec["question"], rec["solution"], rec["correct"], self.batch_index)
                )
                self.next_uid += 1
                self.counters["pairs_added"] += 1
            excess = len(self.pairs) - self.options.max_entries
            if excess > 0:
                del self.pairs[:excess]
                self.counters["pairs_evicted"] += excess
        self.synth = {}
        self._reindex()
        logger.info(
            "dc (%s): batch %d curated %d record(s); %d entries, %d pairs",
            self.options.curator,
            self.batch_index,
            len(records),
            len(self.entries),
            len(self.pairs),
        )

    # ------------------------------------------------------------------ state
    def stats(self) -> dict[str, int]:
        """Counters (calls, entries added/revised/evicted, rejected edits, fallbacks) and the store sizes."""
        return {**self.counters, "entries": len(self.entries), "pairs": len(self.pairs)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "entries": [asdict(e) for e in self.entries],
            "pairs": [asdict(p) for p in self.pairs],
            "next_uid": self.next_uid,
            "synth": {k: dict(v) for k, v in sorted(self.synth.items())},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            entries = [CheatsheetEntry(**e) for e in state.get("entries", [])]
            pairs = [PastPair(**p) for p in state.get("pairs", [])]
            next_uid = int(state.get("next_uid", 1))
            synth = {str(k): dict(v) for k, v in (state.get("synth") or {}).items()}
            counters = self.saved_counters(state)
        except (TypeError, ValueError) as err:
            raise ValueError(f"dc memory state is malformed: {err}") from err
        made = [int(i.id[1:]) for i in [*entries, *pairs] if re.fullmatch(r"[CP]\d+", i.id)]
        if made and max(made) >= next_uid:
            raise ValueError(f"dc memory state is malformed: next_uid {next_uid} is not above every C<n>/P<n> id")
        self.entries, self.pairs, self.next_uid, self.synth, self.counters = entries, pairs, next_uid, synth, counters
        self._reindex()

    # ------------------------------------------------------------------ internals
    def _reindex(self) -> None:
        """Embed entries that are new or changed (never saved: the embedder is deterministic)."""
        self._vectors.update(self._items())
        if self.pairs:
            self._pair_vecs = self.embedder.embed([p.question for p in self.pairs])
        else:
            self._pair_vecs = None

    def _items(self) -> list[tuple[str, str, str]]:
        return [(e.id, f"{e.name}: {e.description}", e.question) for e in self.entries]

    def _relevant(self, question: str, top_k: int | None) -> list[CheatsheetEntry]:
        """Entries most similar to ``question``: ``top_k`` of them, or (None) as many as fit in ``max_chars``."""
        if not self.entries:
            return []
        scores = self._vectors.scores(self._items(), question)
        order = [self.entries[i] for i, _ in top_k_scores(scores, top_k or len(self.entries))]
        if top_k is not None:
            return order
        return _within_budget(order, self.options.max_chars)

    def _retrieve_rs(self, question: str) -> tuple[list[PastPair], list[dict[str, Any]]]:
        q = self.embedder.embed([question])[0]
        k = int(self.options.top_k or 1)
        pairs = [self.pairs[i] for i, _ in top_k_scores(self._pair_vecs @ q, k)] if self._pair_vecs is not None else []
        behaviours = []
        if self._corpus_vecs is not None:
            behaviours = [self.corpus[i] for i, _ in top_k_scores(best_scores(q, *self._corpus_vecs), k)]
        return pairs, behaviours

    def _curate(self, records: list[dict[str, Any]]) -> None:
        """One curator call for ``records`` (all from the current cheatsheet), edits applied in order."""
        prompts = []
        for rec in records:
            shown = self._relevant(rec["question"], None)
            prompts.append(
                render(
                    "dc_curate",
                    max_new=self.options.max_new,
                    cheatsheet=lines([(e.name, e.description) for e in shown]) or "(empty)",
                    question=rec["question"],
                    solution=rec["solution"] or "(no solution text)",
                    outcome=outcome_text(rec, self.options.use_correctness),
                )
            )
        replies = chat_texts(self.llm, self.llm_sampling, prompts, self.options.curator_max_tokens)
        self.counters["curator_calls"] += 1 if prompts else 0
        for rec, reply, prompt in zip(records, replies, prompts, strict=True):
            self._apply(rec, parse_entries(reply), prompt)
            self._reindex()

    def _apply(self, rec: Mapping[str, Any], edits: list[tuple[str, str, str]], prompt: str) -> None:
        """Apply one reply: the first ``max_new`` new entries and revisions; echoes and unknown targets rejected."""
        if not edits:
            self.counters["replies_empty"] += 1
            return
        by_name = {e.name: e for e in self.entries}
        added = revised = 0
        for op, name, description in edits:
            if f"{name}: {description}" in prompt:  # copied from the prompt (its example or the cheatsheet)
                self.counters["edits_rejected"] += 1
                continue
            if op == "revise":
                target = by_name.get(name)
                if target is None or revised >= self.options.max_new:
                    self.counters["edits_rejected"] += 1
                    continue
                target.description, target.last_batch = description, self.batch_index
                target.revisions += 1
                revised += 1
                self.counters["entries_revised"] += 1
                continue
            if name in by_name or added >= self.options.max_new:
                self.counters["edits_rejected"] += 1
                continue
            entry = CheatsheetEntry(
                id=f"C{self.next_uid}",
                name=name,
                description=description,
                question=str(rec["question"]),
                created_batch=self.batch_index,
                last_batch=self.batch_index,
            )
            self.next_uid += 1
            self.entries.append(entry)
            by_name[name] = entry
            added += 1
            self.counters["entries_added"] += 1
        entries, excess = self.entries, len(self.entries) - self.options.max_entries
        self.entries = evict_lowest(
            entries, excess, lambda i: (entries[i].last_batch, entries[i].created_batch, entries[i].uses, i)
        )
        self.counters["entries_evicted"] += max(excess, 0)


def _within_budget(entries: list[CheatsheetEntry], max_chars: int) -> list[CheatsheetEntry]:
    """The leading entries whose ``- name: description`` lines fit in ``max_chars`` (at least one)."""
    out, used = [], 0
    for e in entries:
        size = len(e.name) + len(e.description) + 5
        if out and used + size > max_chars:
            break
        out.append(e)
        used += size
    return out
