"""A flat bank of distilled behaviours with cosine top-k retrieval ("metacognitive reuse" baseline).

Each finished question is distilled into a few short behaviours (``name: instruction``, see
:mod:`metamod.memory.distill`). A behaviour remembers the questions it came from (its *keys*); a new question
retrieves the behaviours whose keys are most similar to it (cosine similarity of embeddings, top-k above a
threshold, restricted to the asking role), returned as ``- name: instruction`` lines (the caller wraps them in the
``memory_guidance`` template, see :func:`metamod.memory.base.render_guidance`).

Life cycle:

- ``observe`` only queues a gold-free record of the question (its text and :func:`~metamod.memory.distill.trace_facts`).
- ``end_batch`` distils the queued records (one batched LLM call with ``distiller="llm"``), merges each behaviour
  into the bank (a near-duplicate of an existing behaviour for the same roles, by embedding similarity of the
  ``name: instruction`` text, adds support and a key instead of a new entry), then evicts down to ``max_entries``
  (``fifo``: oldest entry first; ``usage``: fewest retrievals first, then least support, then oldest).
- Queued records are processed sorted by (example id, method, facts), so the bank after a batch does not depend
  on the order in which the batch's questions finished. Together with guidance reading only committed entries,
  this makes a batch's results independent of ordering, batching and sharding inside it.

>>> from metamod.tasks.base import Example
>>> bank = BehaviourBank(embedder_options={"n_features": 256})
>>> q = Example(id="a", question="Sam has 3 boxes of 12 pens. How many pens?", gold="36", kind="math")
>>> bank.observe(q, {"answer": None}, {"correct": False, "final_answer": None, "method": "cot"})
>>> bank.guidance(q, "single")  # nothing committed yet
''
>>> bank.end_batch()
>>> new = Example(id="b", question="Sam has 4 boxes of 12 pens. How many pens?", gold="48", kind="math")
>>> print(bank.guidance(new, "single").splitlines()[0])
- answer-format: End every response with exactly one final answer inside <answer></answer> tags; an answer that cannot be parsed counts as wrong.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from metamod.memory.base import BaseMemory, check_outcome, check_role
from metamod.memory.distill import LLMDistiller, RuleDistiller, trace_facts
from metamod.memory.embed import Embedder, build_embedder, top_k_scores
from metamod.tasks.base import Example

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


class BehaviourBank(BaseMemory):
    """Flat behaviour memory with embedding retrieval; see the module docstring.

    Args:
        top_k: the most behaviours shown per guidance request.
        min_similarity: a behaviour is shown only when its best key's cosine similarity to the question is at
            least this value.
        max_entries: bank size cap, enforced at ``end_batch``.
        eviction: ``"fifo"`` or ``"usage"`` (which entries go first when the bank is over ``max_entries``).
        dedup_threshold: a new behaviour whose text has at least this cosine similarity with an existing one for
            the same roles is merged into it.
        max_keys_per_entry: the most question keys an entry keeps (the oldest is dropped first).
        max_behaviours_per_question: the most behaviours distilled from one finished question.
        distiller: ``"rule"`` (deterministic, offline) or ``"llm"`` (needs ``generator``).
        generator: a :class:`metamod.llm.base.Generator` for the LLM distiller.
        distill_max_tokens: generation budget per question for the LLM distiller.
        embedder: an embedder registry name (see :data:`metamod.memory.embed.EMBEDDERS`) or an Embedder instance.
        embedder_options: constructor options for a named embedder.
    """

    name = "behaviour_bank"

    def __init__(
        self,
        top_k: int = 3,
        min_similarity: float = 0.2,
        max_entries: int = 256,
        eviction: str = "fifo",
        dedup_threshold: float = 0.9,
        max_keys_per_entry: int = 8,
        max_behaviours_per_question: int = 4,
        distiller: str = "rule",
        generator: Any = None,
        distill_max_tokens: int = 256,
        embedder: str | Embedder = "hashing",
        embedder_options: Mapping[str, Any] | None = None,
    ) -> None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if not -1.0 <= min_similarity <= 1.0:
            raise ValueError(f"min_similarity must be a cosine similarity in [-1, 1], got {min_similarity}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if eviction not in EVICTION_POLICIES:
            raise ValueError(f"eviction must be one of {EVICTION_POLICIES}, got {eviction!r}")
        if not 0.0 < dedup_threshold <= 1.0:
            raise ValueError(
                f"dedup_threshold must be in (0, 1] (1 merges only identical texts), got {dedup_threshold}"
            )
        if max_keys_per_entry < 1:
            raise ValueError(f"max_keys_per_entry must be >= 1, got {max_keys_per_entry}")
        if distiller not in DISTILLERS:
            raise ValueError(f"distiller must be one of {DISTILLERS}, got {distiller!r}")
        self.top_k = top_k
        self.min_similarity = min_similarity
        self.max_entries = max_entries
        self.eviction = eviction
        self.dedup_threshold = dedup_threshold
        self.max_keys_per_entry = max_keys_per_entry
        self.max_behaviours_per_question = max_behaviours_per_question
        self.distiller_name = distiller
        if distiller == "llm":
            self._distiller: Any = LLMDistiller(generator, max_behaviours_per_question, distill_max_tokens)
        else:
            self._distiller = RuleDistiller(max_behaviours_per_question)
        if isinstance(embedder, str):
            self.embedder: Embedder = build_embedder(embedder, **dict(embedder_options or {}))
        else:
            if embedder_options:
                raise ValueError("embedder_options only apply when embedder is a registry name, not an instance")
            self.embedder = embedder
        self.entries: list[BehaviourEntry] = []
        self.pending: list[dict[str, Any]] = []
        self.batch_index = 0
        self.next_uid = 0
        self._served: dict[tuple[str, str], list[int]] = {}
        self._reindex()

    @classmethod
    def from_config(cls, config: Any, *, generator: Any = None) -> BehaviourBank:
        """Build from a :class:`metamod.memory.registry.MemoryConfig`."""
        options: dict[str, Any] = {}
        if config.memory_embedder == "sentence-transformers":
            options["model_path"] = config.memory_embedder_model
        return cls(
            top_k=config.memory_top_k,
            min_similarity=config.memory_min_similarity,
            max_entries=config.memory_max_entries,
            eviction=config.memory_eviction,
            dedup_threshold=config.memory_dedup_threshold,
            max_behaviours_per_question=config.memory_max_behaviours_per_question,
            distiller=config.memory_distiller,
            generator=generator,
            embedder=config.memory_embedder,
            embedder_options=options,
        )

    # ------------------------------------------------------------------ protocol
    def guidance(self, example: Example, role: str) -> str:
        """Top-k committed behaviours for ``role`` whose keys resemble the question; "" when none qualify.

        Reads only ``example.prompt_text()`` (never the gold). Repeated requests for the same question and role
        within a batch return the same text and count once towards ``uses``.
        """
        check_role(role)
        query = example.prompt_text()
        key = (query, role)
        if key not in self._served:
            self._served[key] = self._retrieve(query, role)
            for uid in self._served[key]:
                self._by_uid[uid].uses += 1
        uids = self._served[key]
        if not uids:
            return ""
        return "\n".join(f"- {self._by_uid[uid].text}" for uid in uids)

    def observe(self, example: Example, trace: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
        """Queue a gold-free record of the finished question; it joins the bank at the next ``end_batch``."""
        check_outcome(example, outcome)
        if not isinstance(trace, Mapping):
            raise TypeError(f"observe(): trace for example {example.id!r} must be a dict, got {type(trace).__name__}")
        facts = trace_facts(trace, outcome)
        self.pending.append(
            {"id": example.id, "method": str(outcome["method"]), "question": example.prompt_text(), "facts": facts}
        )

    def end_batch(self) -> None:
        """Distil and merge the queued records, enforce the size cap, and start a new batch."""
        if self.pending:
            records = sorted(
                self.pending,
                key=lambda r: (r["id"], r["method"], json.dumps(r["facts"], sort_keys=True), r["question"]),
            )
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
        self.pending = []
        self.batch_index += 1
        self._served = {}
        self._reindex()

    # ------------------------------------------------------------------ state
    def config_dict(self) -> dict[str, Any]:
        return {
            "top_k": self.top_k,
            "min_similarity": self.min_similarity,
            "max_entries": self.max_entries,
            "eviction": self.eviction,
            "dedup_threshold": self.dedup_threshold,
            "max_keys_per_entry": self.max_keys_per_entry,
            "max_behaviours_per_question": self.max_behaviours_per_question,
            "distiller": self.distiller_name,
            "embedder": self.embedder.spec(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "batch_index": self.batch_index,
            "next_uid": self.next_uid,
            "entries": [asdict(e) for e in self.entries],
            "pending": list(self.pending),
            "served": [[q, r, uids] for (q, r), uids in self._served.items()],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            self.entries = [BehaviourEntry(**e) for e in state.get("entries", [])]
            self.pending = [dict(r) for r in state.get("pending", [])]
            self.batch_index = int(state.get("batch_index", 0))
            self.next_uid = int(state.get("next_uid", 0))
            self._served = {(q, r): [int(u) for u in uids] for q, r, uids in state.get("served", [])}
        except (TypeError, ValueError) as err:
            raise ValueError(f"behaviour bank state is malformed: {err}") from err
        known = {e.uid for e in self.entries}
        stale = sorted({u for uids in self._served.values() for u in uids} - known)
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
        return [self.entries[i].uid for i, _ in top_k_scores(best, self.top_k, min_score=self.min_similarity)]

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
                if round(float(sims[j]), 6) >= self.dedup_threshold:
                    match = self.entries[candidates[j]]
            if match is not None:
                match.support += 1
                match.last_batch = self.batch_index
                if question in match.keys:
                    match.keys.remove(question)
                match.keys.append(question)
                del match.keys[: max(0, len(match.keys) - self.max_keys_per_entry)]
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
        excess = len(self.entries) - self.max_entries
        if excess <= 0:
            return
        if self.eviction == "fifo":
            order = sorted(self.entries, key=lambda e: e.uid)
        else:
            order = sorted(self.entries, key=lambda e: (e.uses, e.support, e.uid))
        dropped = {e.uid for e in order[:excess]}
        self.entries = [e for e in self.entries if e.uid not in dropped]
        logger.debug("behaviour bank evicted %d entr(y/ies) by %s", excess, self.eviction)
