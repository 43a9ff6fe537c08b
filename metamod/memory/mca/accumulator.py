"""The MetaCognitive Accumulator (MC² section 2.2, Algorithm 1): reflections -> micro-lessons -> meta-knowledge.

Three role streams (``reasoner``, ``monitor``, ``controller``) are updated separately. Protocol roles map onto them:
``reasoner`` / ``single`` / ``debater`` -> reasoner, ``monitor`` -> monitor, ``controller`` / ``moderator`` /
``judge`` -> controller; a stream not in ``options.roles`` gets no guidance.

At the end of batch ``b`` (:meth:`MetaCognitiveAccumulator.consolidate`, no gold text anywhere):

1. every finished question becomes an instance reflection (:mod:`metamod.memory.mca.reflect`, Eq. 8);
2. per role, S+ (one iteration, accepted at once) and S- (budget used up, ending in a restart) are selected (Eq. 9);
3. ONE batched writer call distils each role's S+ and S- into a micro-lesson of DO / AVOID items (Eq. 10), with
   ids ``L<b>.<role>.<n>``; every selected reflection goes in (``max_reflections`` caps each set only when set),
   and a distiller prompt that gets long is logged by the writer;
4. with ``consolidate``, ONE batched call updates each role's meta-knowledge from the lessons of the last
   ``window`` batches: ``K_b = Consol(K_{b-1}, Win_w(...))`` (Eq. 11).

At the start of batch ``b + 1`` (:meth:`~MetaCognitiveAccumulator.prepare`, questions only), each question
retrieves, per role, the top-k lessons of the last ``window`` committed batches by cosine similarity (Eq. 12), and
with ``compose`` ONE batched composer call writes every role's updated prompt from the base policy, ``K`` and the
lessons (Eq. 13), checked and regenerated once, else that role falls back to its base prompt (no guidance). A
composed prompt is served as ``Guidance(policy=True)``: the MRO roles put it in place of their policy prompt
(``mro_policy_<role>``, which is also the base policy ``P_i`` the composer starts from), keeping the task line, the
problem and the output format; other callers (debaters, single-agent methods, moderator, judge) prepend it. With
``compose: false`` the rules and lessons are plain guidance lines, prepended. Batch 0 with an empty state is the
cold start: no guidance and no call.

>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.rollout.mro.traces import example_mro_trace
>>> from metamod.tasks.base import Example
>>> mem = MetaCognitiveAccumulator(MCAOptions(writer="rule"))
>>> q1 = Example(id="q1", question="What is 2 + 2?", gold="4", kind="math")
>>> mem.guidance(GuidanceRequest(q1, "reasoner"))  # cold start
Guidance(text='', item_ids=())
>>> t = example_mro_trace("q1"); t["history"] = t["history"][1:]; t.update(num_iterations=1, status="accepted")
>>> t["history"][0]["controller"]["action"] = 1; t["history"][0]["monitor"]["error_found"] = False
>>> mem.observe(Observation(q1, t, {"correct": True, "final_answer": "4", "method": "mc2"})); mem.end_batch()
>>> g = mem.guidance(GuidanceRequest(Example(id="q2", question="What is 3 + 5?", gold="8", kind="math"), "judge"))
>>> g.item_ids
('L0.controller.1', 'K0.controller')
>>> print(g.text.splitlines()[-1])
- DO: Accept as soon as the audit finds no error and the answer fits the question.
>>> mem.policy_update("q2", "controller")["ok"]
True
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from metamod.llm.base import SamplingConfig
from metamod.memory.base import BaseMemory, Guidance, GuidanceRequest, MemoryOptions, Observation
from metamod.memory.embed import Embedder, build_embedder, top_k_scores
from metamod.memory.mca.parse import remove_question, word_count
from metamod.memory.mca.reflect import ROLE_STREAM, STREAMS, Reflection, reflect, select
from metamod.memory.mca.writers import (
    ComposeJob,
    ConsolidateJob,
    DistillJob,
    KnowledgeItem,
    Lesson,
    LLMWriter,
    RoleMaterial,
    RuleWriter,
)
from metamod.prompts import render
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

WRITERS = ("llm", "rule")


@dataclass
class MCAOptions(MemoryOptions):
    """Options of the ``mca`` memory (``memory_options`` in a config)."""

    roles: list[str] = field(
        default_factory=lambda: list(STREAMS),
        metadata={"help": f"Role streams to update and guide, a non-empty subset of {list(STREAMS)}."},
    )
    window: int = field(default=3, metadata={"help": "w: batches of micro-lessons kept for retrieval and Consol."})
    top_k: int = field(default=3, metadata={"help": "k: micro-lessons retrieved per question and role."})
    consolidate: bool = field(
        default=True,
        metadata={"help": "Keep the global meta-knowledge K_b (False: the 'Micro-update' ablation, lessons only)."},
    )
    compose: bool = field(
        default=True,
        metadata={"help": "Compose each role prompt with the writer (False: show K_b and the lessons as lines)."},
    )
    writer: str = field(
        default="llm",
        metadata={"help": f"Who writes lessons, rules and prompts, one of {WRITERS} (rule: offline, deterministic)."},
    )
    max_lessons_per_batch: int = field(default=4, metadata={"help": "Most DO/AVOID items per role micro-lesson."})
    max_knowledge_items: int = field(default=8, metadata={"help": "Most rules in a role's meta-knowledge K_b."})
    max_reflections: int | None = field(
        default=None,
        metadata={
            "help": "Most S+ and most S- reflections (each) per role given to the distiller (None: all of them, as "
            "Eq. 10 distils every selected reflection; a long distiller prompt is logged, never cut)."
        },
    )
    context_budget: int = field(
        default=400,
        metadata={"help": "Most tokens of a composed role prompt (memory LLM tokens; whitespace words without one)."},
    )
    max_iterations: int = field(
        default=3, metadata={"help": "N for the S- rule when an MRO trace lacks max_iterations."}
    )
    embedder: str = field(default="hashing", metadata={"help": "Embedder of questions and lessons (retrieval)."})
    embedder_model: str | None = field(
        default=None,
        metadata={"help": "Local sentence-transformers folder, when embedder is 'sentence-transformers'."},
    )

    def __post_init__(self) -> None:
        if isinstance(self.roles, str) or not isinstance(self.roles, (list, tuple)) or not self.roles:
            raise ValueError(f"roles must be a non-empty list drawn from {list(STREAMS)}, got {self.roles!r}")
        unknown = [r for r in self.roles if r not in STREAMS]
        if unknown:
            raise ValueError(f"roles: unknown stream(s) {unknown}; expected a subset of {list(STREAMS)}")
        self.roles = [r for r in STREAMS if r in self.roles]
        for name in ("window", "top_k", "max_lessons_per_batch", "max_knowledge_items"):
            _check_int(name, getattr(self, name), 1)
        if self.max_reflections is not None:
            _check_int("max_reflections", self.max_reflections, 1, none_ok=True)
        _check_int("context_budget", self.context_budget, 8)
        _check_int("max_iterations", self.max_iterations, 1)
        for name in ("consolidate", "compose"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.writer not in WRITERS:
            raise ValueError(f"writer must be one of {WRITERS}, got {self.writer!r}")
        if not isinstance(self.embedder, str) or not self.embedder:
            raise ValueError(f"embedder must be an embedder name such as 'hashing', got {self.embedder!r}")
        if self.embedder == "sentence-transformers" and not self.embedder_model:
            raise ValueError(
                "embedder_model must name a local sentence-transformers folder when embedder is 'sentence-transformers'"
            )

    @classmethod
    def from_dict(cls, options: Mapping[str, Any] | None) -> MCAOptions:
        """Build from a dict, refusing unknown keys with the valid names.

        >>> MCAOptions.from_dict({"window": 2}).window
        2
        >>> MCAOptions.from_dict({"windw": 2})
        Traceback (most recent call last):
        ...
        ValueError: 'windw' is not an option of memory 'mca'; valid: compose, consolidate, context_budget, embedder, embedder_model, max_iterations, max_knowledge_items, max_lessons_per_batch, max_reflections, roles, top_k, window, writer
        """
        valid = sorted(f.name for f in dataclasses.fields(cls))
        for key in options or {}:
            if key not in valid:
                raise ValueError(f"{key!r} is not an option of memory 'mca'; valid: {', '.join(valid)}")
        return cls(**dict(options or {}))


def _check_int(name: str, value: Any, low: int, *, none_ok: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        also = " or null (no cap)" if none_ok else ""
        raise ValueError(f"{name} must be an integer >= {low}{also}, got {value!r}")


def base_policy(role: str) -> str:
    """The base policy prompt ``P_i`` of a stream: the MRO role's policy prompt (template ``mro_policy_<role>``), the
    text a composed prompt replaces (so the composer rewrites the very prompt the role would otherwise use)."""
    return " ".join(render(f"mro_policy_{role}").split())


def _counters(batch: int) -> dict[str, Any]:
    return {
        "batch": batch,
        "records": 0,
        "reflections": 0,
        "s_plus": {},
        "s_minus": {},
        "lessons": {},
        "knowledge_items": {},
        "distill_calls": 0,
        "distill_fallbacks": 0,
        "consolidate_calls": 0,
        "consolidate_fallbacks": 0,
        "compose_calls": 0,
        "compose_jobs": 0,
        "compose_attempts": 0,
        "compose_regenerations": 0,
        "compose_parse_fallbacks": 0,
        "compose_fallbacks": 0,
        "compose_updates": 0,
    }


class MetaCognitiveAccumulator(BaseMemory):
    """MC²'s MetaCognitive Accumulator as a protocol-v2 memory (see the module docstring).

    Args:
        options: :class:`MCAOptions` (or a dict of its fields); ``None``: the defaults.
        llm: the memory LLM (a :class:`metamod.llm.base.Generator`), needed when ``writer`` is ``"llm"``.
        llm_sampling: its decoding; ``None``: greedy, 256 tokens, seeded with ``seed``. One sample is used.
        seed: the memory's seed.

    Attributes:
        options: the options in use.
        lessons: the micro-lesson items still inside the window.
        knowledge: per stream, the meta-knowledge rules ``K_b``.
        composed: per example of the current batch and stream, ``{"text", "item_ids", "record", "logged"}``.
        guidance_log: ``{"batch", "id", "role", "question", "guidance"}`` per served stream guidance (appendix E).
    """

    name = "mca"
    uses_llm = True
    options_class = MCAOptions

    @classmethod
    def wants_llm(cls, options: MCAOptions) -> bool:
        """Whether these options call the memory LLM (the harness loads one only then)."""
        return options.writer == "llm"

    @classmethod
    def gold_use(cls, options: Any) -> str | None:
        """MC² tags each reflection success / failure from the correctness flag (C.1, C.4); never the gold text."""
        return "the correctness flag as each reflection's success/failure tag (MC2 C.1, C.4)"

    def __init__(
        self,
        options: MCAOptions | Mapping[str, Any] | None = None,
        *,
        llm: Any = None,
        llm_sampling: Any = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if options is None:
            options = MCAOptions()
        elif isinstance(options, Mapping):
            options = MCAOptions.from_dict(options)
        if options.writer == "llm" and llm is None:
            raise ValueError(
                "memory 'mca' with writer=llm needs a memory LLM (memory_model); or set memory_options writer: rule"
            )
        self.options = options
        self.llm = llm
        self.seed = seed
        sampling = (
            llm_sampling if llm_sampling is not None else SamplingConfig(temperature=0.0, max_tokens=256, seed=seed)
        )
        self.llm_sampling = dataclasses.replace(sampling, n=1) if getattr(sampling, "n", 1) != 1 else sampling
        spec = {"model_path": options.embedder_model} if options.embedder_model else {}
        self.embedder: Embedder = build_embedder(options.embedder, **spec)
        if options.writer == "llm":
            self.writer: Any = LLMWriter(llm, self.llm_sampling, self.count_tokens)
        else:
            self.writer = RuleWriter(self.embedder, self.count_tokens)
        self.lessons: list[Lesson] = []
        self.knowledge: dict[str, list[KnowledgeItem]] = {r: [] for r in STREAMS}
        self.knowledge_batch: dict[str, int | None] = {r: None for r in STREAMS}
        self.composed: dict[str, dict[str, dict[str, Any]]] = {}
        self.guidance_log: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []
        self._current = _counters(0)
        self._vectors: dict[str, np.ndarray] = {}
        self._windows: dict[tuple[str, int], tuple[list[Lesson], np.ndarray | None]] = {}

    # ------------------------------------------------------------------ helpers
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as one user message for the memory LLM; whitespace words without one."""
        counter = getattr(self.llm, "count_tokens", None)
        if counter is None:
            return word_count(text)
        return int(counter([{"role": "user", "content": text}]))

    def _calls(self) -> int:
        return int(getattr(self.writer, "calls", 0))

    def _vector(self, lesson: Lesson) -> np.ndarray:
        key = lesson.serialised()
        if key not in self._vectors:
            self._vectors[key] = self.embedder.embed([key])[0]
        return self._vectors[key]

    def window_lessons(self, role: str, last_batch: int) -> list[Lesson]:
        """The role's lessons of batches ``last_batch - w + 1 .. last_batch``, newest batch first, then by number."""
        low = last_batch - self.options.window + 1
        pool = [item for item in self.lessons if item.role == role and low <= item.batch <= last_batch]
        return sorted(pool, key=lambda item: (-item.batch, int(item.id.rsplit(".", 1)[1])))

    def retrieve(self, question: str, role: str, query: np.ndarray | None = None) -> list[Lesson]:
        """Top-k committed lessons of ``role`` within the window for ``question`` (Eq. 12; fewer when fewer exist).

        ``query`` is the question's embedding when the caller has it (``prepare`` embeds a batch at once).
        """
        pool, matrix = self._window(role)
        if not pool:
            return []
        if query is None:
            query = self.embedder.embed([question])[0]
        return [pool[i] for i, _ in top_k_scores(matrix @ query, self.options.top_k)]

    def _window(self, role: str) -> tuple[list[Lesson], np.ndarray | None]:
        """The role's retrievable lessons and their embedding rows, built once per batch (lessons change only at
        ``end_batch`` and ``load``, which clear this cache)."""
        key = (role, self.batch_index)
        if key not in self._windows:
            pool = self.window_lessons(role, self.batch_index - 1)
            missing = [item for item in pool if item.serialised() not in self._vectors]
            if missing:  # one embedding call for every lesson not seen yet
                for item, vec in zip(missing, self.embedder.embed([m.serialised() for m in missing]), strict=True):
                    self._vectors[item.serialised()] = vec
            self._windows[key] = (pool, np.stack([self._vector(item) for item in pool]) if pool else None)
        return self._windows[key]

    # ------------------------------------------------------------------ guidance
    def prepare(self, examples: Sequence[Example]) -> None:
        """Retrieve and compose every enabled role's guidance for ``examples`` (one batched composer call)."""
        jobs: list[ComposeJob] = []
        policies = {role: base_policy(role) for role in self.options.roles}
        unique = list({e.id: e for e in examples}.values())
        has_lessons = any(self._window(role)[0] for role in self.options.roles)
        # one embedding call for the whole batch (a call per question costs ~1000x more in fixed overhead)
        queries = self.embedder.embed([ex.prompt_text() for ex in unique]) if unique and has_lessons else None
        for i, ex in enumerate(unique):
            question = ex.prompt_text()
            query = queries[i] if queries is not None else None
            entry: dict[str, dict[str, Any]] = {}
            material: dict[str, RoleMaterial] = {}
            for role in self.options.roles:
                lessons = self.retrieve(question, role, query)
                rules = [k.text for k in self.knowledge[role]] if self.options.consolidate else []
                if not lessons and not rules:
                    continue
                ids = [item.id for item in lessons]
                if rules:
                    ids.append(f"K{self.knowledge_batch[role]}.{role}")
                entry[role] = {"text": None, "item_ids": ids, "record": None, "logged": False}
                material[role] = RoleMaterial(policies[role], rules, [item.display() for item in lessons])
            self.composed[ex.id] = entry
            if not material:
                continue
            if self.options.compose:
                jobs.append(ComposeJob(ex.id, question, material, self.options.context_budget))
                continue
            for role, m in material.items():
                lines = [f"- {line}" for line in (*m.knowledge, *m.lessons)]
                entry[role]["text"] = remove_question("\n".join(lines), question) or None
        if jobs:
            self._compose(jobs, policies)

    def _compose(self, jobs: list[ComposeJob], policies: dict[str, str]) -> None:
        before = self._calls()
        outputs = self.writer.compose(jobs)
        c = self._current
        c["compose_calls"] += self._calls() - before
        c["compose_jobs"] += len(jobs)
        for job, out in zip(jobs, outputs, strict=True):
            c["compose_attempts"] += 1 + int(out.regenerated)
            c["compose_regenerations"] += int(out.regenerated)
            for role in job.roles:
                text = out.texts.get(role)
                attempts = [dict(a) for a in out.attempts.get(role, [])]
                c["compose_parse_fallbacks"] += sum(not a["ok"] for a in attempts)
                c["compose_fallbacks"] += int(text is None)
                c["compose_updates"] += int(text is not None)
                entry = self.composed[job.example_id][role]
                entry["text"] = text
                if text is None:
                    entry["item_ids"] = []
                entry["record"] = {
                    "used": text is not None,
                    "ok": text is not None,
                    "model": self.writer.model,
                    "attempts": attempts,
                    "before": policies[role],
                    "after": text,
                }

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        stream = ROLE_STREAM[request.role]
        if stream not in self.options.roles:
            return Guidance()
        entry = self.composed.get(request.example.id, {}).get(stream)
        if not entry or not entry["text"]:
            return Guidance()
        if not entry["logged"]:
            entry["logged"] = True
            question = request.example.prompt_text()
            self.guidance_log.append(
                {
                    "batch": self.batch_index,
                    "id": request.example.id,
                    "role": stream,
                    "question": question,
                    "guidance": remove_question(entry["text"], question),
                }
            )
        # a composed prompt is the role's updated policy P_{t+1} (Eq. 13): it replaces the policy, not adds to it
        composed = entry.get("record") is not None
        return Guidance(text=entry["text"], item_ids=tuple(entry["item_ids"]), policy=composed)

    def record(self, observation: Observation) -> dict[str, Any]:
        """The queued record keeps only what the reflections read (C.1) of an MRO trace: no solution texts, no
        per-iteration correctness, so the queue and the saved state stay small."""
        trace = observation.trace
        if trace.get("loop") == "mro":
            slim: dict[str, Any] = {
                k: trace.get(k) for k in ("id", "loop", "max_iterations", "num_iterations", "status")
            }
            slim["history"] = [
                {
                    "reasoner": {"answer": (h.get("reasoner") or {}).get("answer")},
                    "monitor": {k: (h.get("monitor") or {}).get(k) for k in ("error_found", "error_step", "error")},
                    "controller": {k: (h.get("controller") or {}).get(k) for k in ("action", "justification")},
                }
                for h in trace.get("history") or []
                if isinstance(h, Mapping)
            ]
            observation = dataclasses.replace(observation, trace=slim)
        return super().record(observation)

    def policy_update(self, example_id: str, role: str) -> dict[str, Any] | None:
        """The composer's record for ``example_id`` and the stream of ``role`` in this batch (``None``: none tried).

        Shape: ``{"used", "ok", "model", "attempts": [{"ok", "reason"}], "before", "after"}``.
        """
        entry = self.composed.get(example_id, {}).get(ROLE_STREAM.get(role, role))
        record = entry.get("record") if entry else None
        return copy.deepcopy(record) if record else None

    # ------------------------------------------------------------------ consolidation
    def consolidate(self, records: list[dict[str, Any]]) -> None:
        b = self.batch_index
        c = self._current
        c["batch"] = b
        c["records"] = len(records)
        reflections: list[Reflection] = []
        for record in records:
            try:
                reflections.append(reflect(record, default_max_iterations=self.options.max_iterations))
            except ValueError as err:
                logger.warning("mca: skipping record %r: %s", record.get("id"), err)
        c["reflections"] = len(reflections)
        jobs: list[DistillJob] = []
        for role in self.options.roles:
            plus, minus = select(reflections, role, max_reflections=self.options.max_reflections)
            c["s_plus"][role], c["s_minus"][role], c["lessons"][role] = len(plus), len(minus), 0
            if plus or minus:
                jobs.append(DistillJob(role, base_policy(role), plus, minus, self.options.max_lessons_per_batch))
        before = self._calls()
        outputs = self.writer.distill(jobs)
        c["distill_calls"] = self._calls() - before
        for job, out in zip(jobs, outputs, strict=True):
            c["distill_fallbacks"] += int(out.fallback)
            every = sorted({r.id for r in (*job.plus, *job.minus)})
            for n, draft in enumerate(out.drafts, start=1):
                group = job.plus if draft.kind == "do" else job.minus
                sources = sorted({r.id for r in group}) or every
                self.lessons.append(
                    Lesson(f"L{b}.{job.role}.{n}", job.role, draft.kind, draft.text, list(draft.tags), b, sources)
                )
            c["lessons"][job.role] = len(out.drafts)
        if self.options.consolidate:
            self._consolidate_knowledge(b)
        keep_from = b + 1 - self.options.window  # batch b + 1 retrieves from here on (and consolidates later ones)
        self.lessons = [item for item in self.lessons if item.batch >= keep_from]
        live = {item.serialised() for item in self.lessons}
        self._vectors = {k: v for k, v in self._vectors.items() if k in live}
        self._windows = {}
        self.composed = {}
        self.guidance_log.sort(key=lambda e: (e["batch"], e["id"], STREAMS.index(e["role"])))
        c["knowledge_items"] = {role: len(self.knowledge[role]) for role in self.options.roles}
        self.history.append(c)
        self._current = _counters(b + 1)
        logger.info(
            "mca batch %d: %d record(s), S+ %s, S- %s, lessons %s",
            b,
            len(records),
            c["s_plus"],
            c["s_minus"],
            c["lessons"],
        )

    def _consolidate_knowledge(self, b: int) -> None:
        jobs = []
        for role in self.options.roles:
            window = self.window_lessons(role, b)
            if window:
                jobs.append(
                    ConsolidateJob(
                        role, base_policy(role), list(self.knowledge[role]), window, b, self.options.max_knowledge_items
                    )
                )
        before = self._calls()
        outputs = self.writer.consolidate(jobs)
        self._current["consolidate_calls"] = self._calls() - before
        for job, out in zip(jobs, outputs, strict=True):
            if out.knowledge is None:
                self._current["consolidate_fallbacks"] += 1
                logger.warning("mca batch %d: consolidation of %s failed; keeping K_%d", b, job.role, b - 1)
                continue
            self.knowledge[job.role] = out.knowledge
            self.knowledge_batch[job.role] = b

    # ------------------------------------------------------------------ reports
    def stats(self) -> dict[str, Any]:
        """Counters per finished batch (``batches``), of the batch in progress (``current``) and summed (``totals``).

        Keys of a batch: ``records``, ``reflections``, ``s_plus`` / ``s_minus`` / ``lessons`` / ``knowledge_items``
        (per role), ``distill_calls``, ``distill_fallbacks``, ``consolidate_calls``, ``consolidate_fallbacks``,
        ``compose_calls``, ``compose_jobs``, ``compose_attempts``, ``compose_regenerations``,
        ``compose_parse_fallbacks`` (failed checks), ``compose_fallbacks`` (roles left on the base prompt),
        ``compose_updates``.
        """
        totals: dict[str, Any] = {}
        for entry in [*self.history, self._current]:
            for key, value in entry.items():
                if key in ("batch", "knowledge_items"):  # an index and a level, not counts
                    continue
                if isinstance(value, dict):
                    slot = totals.setdefault(key, {})
                    for role, n in value.items():
                        slot[role] = slot.get(role, 0) + n
                else:
                    totals[key] = totals.get(key, 0) + value
        return {"batches": copy.deepcopy(self.history), "current": copy.deepcopy(self._current), "totals": totals}

    # ------------------------------------------------------------------ state
    def config_dict(self) -> dict[str, Any]:
        return {**asdict(self.options), "embedder_spec": self.embedder.spec()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "lessons": [asdict(item) for item in self.lessons],
            "knowledge": {r: [asdict(k) for k in items] for r, items in self.knowledge.items()},
            "knowledge_batch": dict(self.knowledge_batch),
            "composed": copy.deepcopy(self.composed),
            "guidance_log": copy.deepcopy(self.guidance_log),
            "history": copy.deepcopy(self.history),
            "current": copy.deepcopy(self._current),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            lessons = [Lesson(**item) for item in state.get("lessons", [])]
            knowledge = {r: [KnowledgeItem(**k) for k in (state.get("knowledge") or {}).get(r, [])] for r in STREAMS}
            batches = {r: (state.get("knowledge_batch") or {}).get(r) for r in STREAMS}
            composed = {
                str(i): {str(r): dict(e) for r, e in roles.items()} for i, roles in state.get("composed", {}).items()
            }
            log = [dict(e) for e in state.get("guidance_log", [])]
            history = [dict(h) for h in state.get("history", [])]
            current = dict(state.get("current") or _counters(self.batch_index))
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"mca memory state is malformed: {err}") from err
        self.lessons, self.knowledge, self.knowledge_batch = lessons, knowledge, batches
        self.composed, self.guidance_log, self.history, self._current = composed, log, history, current
        self._vectors = {}
        self._windows = {}


def guidance_relevance(log: Sequence[Mapping[str, Any]], embedder: Embedder, seed: int = 0) -> list[dict[str, Any]]:
    """Appendix E's check: per batch and role (with at least two guided examples), the mean cosine similarity of each
    question with its own guidance and with the guidance of a random other example of the same batch (seeded).

    Args:
        log: :attr:`MetaCognitiveAccumulator.guidance_log` entries.
        embedder: the embedder to compare with.
        seed: seed of the random pairing.

    Returns:
        ``[{"batch", "role", "n", "own", "random"}]`` sorted by batch and role.

    >>> from metamod.memory.embed import build_embedder
    >>> log = [{"batch": 1, "id": i, "role": "reasoner", "question": q, "guidance": g} for i, q, g in
    ...        [("a", "apples and pears", "count the apples"), ("b", "train speed", "speed is distance over time")]]
    >>> row = guidance_relevance(log, build_embedder("hashing", n_features=256))[0]
    >>> row["n"], row["own"] > row["random"]
    (2, True)
    """
    groups: dict[tuple[int, str], list[Mapping[str, Any]]] = {}
    for entry in log:
        if str(entry.get("guidance") or "").strip():
            groups.setdefault((int(entry["batch"]), str(entry["role"])), []).append(entry)
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for (batch, role), entries in sorted(groups.items(), key=lambda kv: (kv[0][0], STREAMS.index(kv[0][1]))):
        if len(entries) < 2:
            continue
        entries = sorted(entries, key=lambda e: str(e["id"]))
        n = len(entries)
        q = embedder.embed([str(e["question"]) for e in entries])
        g = embedder.embed([str(e["guidance"]) for e in entries])
        others = [(i + int(rng.integers(1, n))) % n for i in range(n)]
        own = float(np.mean(np.sum(q * g, axis=1)))
        rand = float(np.mean([q[i] @ g[j] for i, j in enumerate(others)]))
        out.append({"batch": batch, "role": role, "n": n, "own": round(own, 6), "random": round(rand, 6)})
    return out
