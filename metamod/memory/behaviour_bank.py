"""A flat bank of distilled behaviours with cosine top-k retrieval ("metacognitive reuse" baseline).

Each finished question is distilled into a few short behaviours (``name: instruction``, see
:mod:`metamod.memory.distill`). A behaviour remembers the questions it came from (its *keys*); a new question
retrieves the behaviours whose keys are most similar to it (cosine similarity of embeddings, top-k above a
threshold, restricted to the asking role), returned as ``- name: instruction`` lines (the caller wraps them in the
``memory_guidance`` template, see :func:`metamod.memory.base.render_guidance`).

Life cycle:

- ``observe`` only queues a gold-free record of the question (its text and :func:`~metamod.memory.distill.trace_facts`).
- ``end_batch`` (``consolidate``) distils the queued records (one batched LLM call with ``distiller="llm"``), merges each behaviour
  into the bank (a near-duplicate of an existing behaviour for the same roles, by embedding similarity of the
  ``name: instruction`` text, adds support and a key instead of a new entry), then evicts down to ``max_entries``
  (``fifo``: oldest entry first; ``usage``: fewest retrievals first, then least support, then oldest).
- Queued records are processed in a canonical order (:class:`~metamod.memory.base.BaseMemory`), so the bank after a batch does not depend
  on the order in which the batch's questions finished. Together with guidance reading only committed entries,
  this makes a batch's results independent of ordering, batching and sharding inside it.

>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.tasks.base import Example
>>> bank = BehaviourBank(embedder_options={"n_features": 256})
>>> q = Example(id="a", question="Sam has 3 boxes of 12 pens. How many pens?", gold="36", kind="math")
>>> bank.observe(Observation(q, {"answer": None}, {"correct": False, "final_answer": None, "method": "cot"}))
>>> bank.guidance(GuidanceRequest(q, "single")).text  # nothing committed yet
''
>>> bank.end_batch()
>>> new = Example(id="b", question="Sam has 4 boxes of 12 pens. How many pens?", gold="48", kind="math")
>>> print(bank.guidance(GuidanceRequest(new, "single")).text.splitlines()[0])
- answer-format: End every response with exactly one final answer inside <answer></answer> tags; an answer that cannot be parsed counts as wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from metamod.memory.base import BaseMemory, Guidance, GuidanceRequest, MemoryOptions, Observation
from metamod.memory.distill import LLMDistiller, RuleDistiller, trace_facts
from metamod.memory.embed import Embedder, check_embedder, embedder_from, top_k_scores
from metamod.memory.items import evict_lowest

logger = logging.getLogger(__name__)

EVICTION_POLICIES = ("fifo", "usage")
DISTILLERS = ("rule", "llm")


@dataclass
class BehaviourEntry:
    """One behaviour in the bank.

    Attributes:
        uid: creation number (unique, increasing; FIFO order).
        name: short hyphenated label.
        instruction: one reusable sentence.
        roles: roles it is shown to (empty: every role).
        keys: texts of the questions it was distilled from (most recent last, at most ``max_keys_per_entry``).
        support: how many distilled behaviours were merged into it (1 when new).
        uses: how many distinct (question, role) guidance requests retrieved it.
        created_batch: the batch index that created it.
        last_batch: the last batch index that added support.
        source: ``"rule"`` or ``"llm"``.
    """

    uid: int
    name: str
    instruction: str
    roles: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    support: int = 1
    uses: int = 0
    created_batch: int = 0
    last_batch: int = 0
    source: str = "rule"

    @property
    def text(self) -> str:
        return f"{self.name}: {self.instruction}"

    def applies_to(self, role: str) -> bool:
        return not self.roles or role in self.roles


@dataclass
class BehaviourBankOptions(MemoryOptions):
    """Options of ``memory: behaviour_bank`` (``memory_options`` in a config)."""

    top_k: int = field(default=3, metadata={"help": "The most behaviours shown per guidance request."})
    min_similarity: float = field(
        default=0.2,
        metadata={
            "help": "A behaviour is shown only when its best key's cosine similarity to the question is at least "
            "this value (in [-1, 1])."
        },
    )
    max_entries: int = field(default=256, metadata={"help": "Bank size cap, enforced at end_batch."})
    eviction: str = field(
        default="fifo",
        metadata={
            "help": f"Which entries go when the bank is full, one of {EVICTION_POLICIES} (usage: least retrieved)."
        },
    )
    dedup_threshold: float = field(
        default=0.9,
        metadata={
            "help": "Cosine similarity in (0, 1] at or above which a new behaviour is merged into an existing one "
            "for the same roles (1 merges only identical texts)."
        },
    )
    max_keys_per_entry: int = field(default=8, metadata={"help": "The most question keys an entry keeps."})
    max_behaviours_per_question: int = field(
        default=4, metadata={"help": "The most behaviours distilled from one finished question."}
    )
    distiller: str = field(
        default="rule",
        metadata={
            "help": f"How behaviours are distilled, one of {DISTILLERS} (rule: deterministic, offline; llm: the "
            "memory LLM writes them with the memory_distill_behaviour prompt)."
        },
    )
    distill_max_tokens: int = field(default=256, metadata={"help": "LLM distiller budget per question."})
    embedder: str = field(default="hashing", metadata={"help": "Text embedder for retrieval (see memory/embed.py)."})
    embedder_model: str | None = field(
        default=None, metadata={"help": "Local model folder for embedder: sentence-transformers (never downloaded)."}
    )

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError(f"min_similarity must be a cosine similarity in [-1, 1], got {self.min_similarity}")
        if self.max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {self.max_entries}")
        if self.eviction not in EVICTION_POLICIES:
            raise ValueError(f"eviction must be one of {EVICTION_POLICIES}, got {self.eviction!r}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ValueError(
                f"dedup_threshold must be in (0, 1] (1 merges only identical texts), got {self.dedup_threshold}"
            )
        if self.max_keys_per_entry < 1:
            raise ValueError(f"max_keys_per_entry must be >= 1, got {self.max_keys_per_entry}")
        if self.max_behaviours_per_question < 1:
            raise ValueError(f"max_behaviours_per_question must be >= 1, got {self.max_behaviours_per_question}")
        if self.distiller not in DISTILLERS:
            raise ValueError(f"distiller must be one of {DISTILLERS}, got {self.distiller!r}")
        check_embedder(self.embedder, self.embedder_model)


class BehaviourBank(BaseMemory):
    """Flat behaviour memory with embedding retrieval; see the module docstring.

    Args:
        options: :class:`BehaviourBankOptions` (or pass its fields as keywords).
        llm: the memory LLM for ``distiller="llm"``.
        llm_sampling: unused (the LLM distiller decodes greedily with ``distill_max_tokens``).
        seed: unused (the bank is deterministic).
        embedder: an :class:`~metamod.memory.embed.Embedder` instance overriding ``options.embedder``.
    """

    name = "behaviour_bank"
    options_class = BehaviourBankOptions
    uses_llm = True

    def __init__(
        self,
        options: BehaviourBankOptions | None = None,
        *,
        llm: Any = None,
        llm_sampling: Any = None,
        seed: int = 0,
        embedder: Embedder | None = None,
        embedder_options: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> None:
        super().__init__()
        if options is not None and fields:
            raise ValueError("pass either options or option keywords, not both")
        self.options = options if options is not None else BehaviourBankOptions(**fields)
        opts = self.options
        if opts.distiller == "llm":
            self._distiller: Any = LLMDistiller(llm, opts.max_behaviours_per_question, opts.distill_max_tokens)
        else:
            self._distiller = RuleDistiller(opts.max_behaviours_per_question)
        self.embedder: Embedder = embedder if embedder is not None else embedder_from(opts, embedder_options)
        self.entries: list[BehaviourEntry] = []
        self.next_uid = 0
        self._counted: set[tuple[str, str]] = set()
        self._reindex()

    @classmethod
    def wants_llm(cls, options: BehaviourBankOptions) -> bool:
        return options.distiller == "llm"

    @classmethod
    def gold_use(cls, options: Any) -> str | None:
        """Both distillers draw behaviours from each observed question's correctness and per-round ``eta``."""
        return "learns from each observed question's correctness and per-round eta (metamod's behaviour bank)"

    # ------------------------------------------------------------------ protocol
    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        """Top-k committed behaviours for the role whose keys resemble the question (nothing when none qualify).

        Reads only ``example.prompt_text()`` (never the gold). A (question, role) pair counts once towards
        ``uses`` per batch, whatever agents, rounds or methods ask.
        """
        query = request.example.prompt_text()
        uids = self._retrieve(query, request.role)
        if (query, request.role) not in self._counted:
            self._counted.add((query, request.role))
            for uid in uids:
                self._by_uid[uid].uses += 1
        if not uids:
            return Guidance()
        text = "\n".join(f"- {self._by_uid[uid].text}" for uid in uids)
        return Guidance(text=text, item_ids=tuple(f"B{uid}" for uid in uids))

    def record(self, observation: Observation) -> dict[str, Any]:
        """A gold-free record of the finished question: its text and :func:`~metamod.memory.distill.trace_facts`."""
        ex, outcome = observation.example, observation.outcome
        facts = trace_facts(observation.trace, outcome)
        return {"id": ex.id, "method": str(outcome["method"]), "question": ex.prompt_text(), "facts": facts}

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        """Distil and merge the batch's records, then enforce the size cap."""
        if records:
            behaviours = self._distiller.distil([r["facts"] for r in records], [r["question"] for r in records])
            source = self._distiller.name
            flat = [(rec["question"], b) for rec, bs in zip(records, behaviours, strict=True) for b in bs]
            self._merge(flat, source)
            self._evict()
            logger.info(
                "behaviour bank: batch %d added %d behaviour(s) from %d question(s); %d entries",
                self.batch_index,
                len(flat),
                len(records),
                len(self.entries),
            )
        self._counted = set()
        self._reindex()

    # ------------------------------------------------------------------ state
    def config_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self.options).items() if k not in ("embedder", "embedder_model")}
        out["embedder"] = self.embedder.spec()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "next_uid": self.next_uid,
            "entries": [asdict(e) for e in self.entries],
            "counted": sorted([q, r] for q, r in self._counted),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            self.entries = [BehaviourEntry(**e) for e in state.get("entries", [])]
            self.next_uid = int(state.get("next_uid", 0))
            self._counted = {(str(q), str(r)) for q, r in state.get("counted", [])}
        except (TypeError, ValueError) as err:
            raise ValueError(f"behaviour bank state is malformed: {err}") from err
        known = {e.uid for e in self.entries}
        stale = sorted(
            {int(i[1:]) for g in self._served.values() for i in g.item_ids if i[:1] == "B" and i[1:].isdigit()} - known
        )
        if stale:
            raise ValueError(f"behaviour bank state is malformed: 'served' refers to unknown entry uid(s) {stale}")
        if self.entries and self.next_uid <= max(known):
            raise ValueError(
                f"behaviour bank state is malformed: next_uid {self.next_uid} is not above every entry uid"
            )
        self._reindex()

    # ------------------------------------------------------------------ internals
    def _reindex(self) -> None:
        """Recompute embeddings of the committed entries (they are never saved: the embedder is deterministic)."""
        self._by_uid = {e.uid: e for e in self.entries}
        keys = [(i, k) for i, e in enumerate(self.entries) for k in e.keys]
        texts = [e.text for e in self.entries]
        self._key_owner = np.array([i for i, _ in keys], dtype=np.int64)
        self._key_vecs = self.embedder.embed([k for _, k in keys]) if keys else None
        self._text_vecs = self.embedder.embed(texts) if texts else None

    def _retrieve(self, query: str, role: str) -> list[int]:
        if not self.entries or self._key_vecs is None:
            return []
        q = self.embedder.embed([query])[0]
        best = np.full(len(self.entries), -np.inf)
        np.maximum.at(best, self._key_owner, self._key_vecs @ q)
        allowed = np.array([e.applies_to(role) for e in self.entries])
        best[~allowed] = -np.inf
        top = top_k_scores(best, self.options.top_k, min_score=self.options.min_similarity)
        return [self.entries[i].uid for i, _ in top]

    def _merge(self, items: list[tuple[str, tuple[str, str, tuple[str, ...]]]], source: str) -> None:
        if not items:
            return
        new_vecs = self.embedder.embed([f"{name}: {instr}" for _, (name, instr, _) in items])
        dim = new_vecs.shape[1]
        vecs = self._text_vecs if self._text_vecs is not None else np.zeros((0, dim), dtype=np.float32)
        rows = list(vecs)
        for (question, (name, instruction, roles)), vec in zip(items, new_vecs, strict=True):
            roles_list = sorted(roles)
            candidates = [i for i, e in enumerate(self.entries) if sorted(e.roles) == roles_list]
            match = None
            if candidates:
                sims = np.stack([rows[i] for i in candidates]) @ vec
                j = int(np.argmax(np.round(sims, 6)))
                if round(float(sims[j]), 6) >= self.options.dedup_threshold:
                    match = self.entries[candidates[j]]
            if match is not None:
                match.support += 1
                match.last_batch = self.batch_index
                if question in match.keys:
                    match.keys.remove(question)
                match.keys.append(question)
                del match.keys[: max(0, len(match.keys) - self.options.max_keys_per_entry)]
                continue
            self.entries.append(
                BehaviourEntry(
                    uid=self.next_uid,
                    name=name,
                    instruction=instruction,
                    roles=roles_list,
                    keys=[question],
                    created_batch=self.batch_index,
                    last_batch=self.batch_index,
                    source=source,
                )
            )
            self.next_uid += 1
            rows.append(vec)

    def _evict(self) -> None:
        excess = len(self.entries) - self.options.max_entries
        if excess <= 0:
            return
        entries, fifo = self.entries, self.options.eviction == "fifo"
        self.entries = evict_lowest(
            entries, excess, lambda i: entries[i].uid if fifo else (entries[i].uses, entries[i].support, entries[i].uid)
        )
        logger.debug("behaviour bank evicted %d entr(y/ies) by %s", excess, self.options.eviction)
