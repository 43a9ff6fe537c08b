"""MARCO's meta-reflection memory (``memory: marco``): a knowledge bank of agents' takeaways and a periodic condenser.

After each problem, every agent of a MARCO method (:mod:`metamod.rollout.marco`) reflects on its own reasoning path
and the interpreter's verdict and writes one transferable takeaway (the ``marco_summarise`` prompt, answered by the
agent's own model); the trace carries them as ``trace["takeaways"]``. This memory collects them:

* **Bank.** ``observe`` queues the takeaways; ``end_batch`` adds them to the bank ``K`` (each entry keeps the
  problem id and agent). Nothing a takeaway says depends on the gold: the agents saw only the interpreter's check.
* **Condenser** (``condense: true``, the default). Every ``condense_every`` problems (``T_c``, default 8; counted in
  whole memory batches, so with ``memory_batch_size`` dividing ``T_c`` the period is exact) the condenser rewrites
  the current knowledge plus the bank entries since the last condensation into at most ``max_knowledge`` general
  guidelines, which *replace* them (the bank stays small). ``condenser: llm`` asks the memory LLM with the
  ``marco_condense`` prompt in one call and reads its ``- `` lines; an unusable reply (no guideline lines) falls
  back to the rule condenser, counted in ``condense_fallbacks``. ``condenser: rule`` is deterministic: near-duplicate
  takeaways (token Jaccard >= 0.6) are grouped and the ``max_knowledge`` largest groups kept, most recent first on
  ties (for the simulated world and tests).
* **Guidance.** The condensed knowledge, one ``- `` line per guideline (ids ``K<n>``), the same for every agent.
  Entries waiting for the next condensation are not shown unless ``serve_pending`` is set. With ``condense: false``
  (MARCO v2, no condenser) the guidance is the raw bank itself, the ``max_served`` most recent entries, newest first
  (ids ``R<n>``; the prompt budget drops items from the end, so the oldest go first).

* **Scope** (``scope: dataset``, the default): one bank, knowledge and condensation schedule per code-reasoning
  dataset and sub-task (``meta["code"]``'s ``dataset`` and ``subtask``), as the paper runs each dataset on its own;
  an evaluation over several tasks then keeps them apart. ``scope: run`` shares one bank across everything.

Batch-synchronous like every memory: a batch's takeaways reach guidance after its ``end_batch``.

>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.tasks.base import Example
>>> mem = MarcoMemory(MarcoOptions(condenser="rule", condense_every=2))
>>> ex = Example(id="p1", question="...", gold="1", kind="math")
>>> trace = {"id": "p1", "takeaways": [{"agent": 0, "text": "Check empty lists first."},
...                                    {"agent": 1, "text": "Check empty lists first!"}]}
>>> mem.observe(Observation(ex, trace, {"correct": False, "final_answer": None, "method": "marco"}))
>>> mem.end_batch(); mem.guidance(GuidanceRequest(ex, "debater", agent=0)).text
''
>>> mem.observe(Observation(Example(id="p2", question="...", gold="1", kind="math"),
...                         {"id": "p2", "takeaways": [{"agent": 0, "text": "Trace loops step by step."}]},
...                         {"correct": True, "final_answer": "1", "method": "marco"}))
>>> mem.end_batch(); print(mem.guidance(GuidanceRequest(ex, "debater", agent=1)).text)
- Check empty lists first!
- Trace loops step by step.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from metamod.llm.base import chat_checked
from metamod.memory.base import BaseMemory, Guidance, GuidanceRequest, MemoryOptions, Observation
from metamod.prompts import render

logger = logging.getLogger(__name__)

CONDENSERS: tuple[str, ...] = ("llm", "rule")
SCOPES: tuple[str, ...] = ("dataset", "run")
_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(.*\S)\s*$")
_WORD_RE = re.compile(r"[a-z0-9]+")
_COUNTERS: tuple[str, ...] = ("takeaways_added", "takeaways_empty", "condensations", "condense_fallbacks")


@dataclass
class MarcoOptions(MemoryOptions):
    """Options of ``memory: marco`` (``memory_options`` in a config; docs/marco.md)."""

    condense: bool = field(
        default=True, metadata={"help": "Condense the bank every condense_every problems (false: MARCO v2)."}
    )
    condense_every: int = field(
        default=8, metadata={"help": "T_c: problems between condensations (counted in whole memory batches)."}
    )
    max_knowledge: int = field(default=10, metadata={"help": "The most guidelines the condensed knowledge keeps."})
    condenser: str = field(
        default="llm", metadata={"help": f"One of {CONDENSERS}: the memory LLM, or the deterministic rule condenser."}
    )
    condense_max_tokens: int = field(default=256, metadata={"help": "Memory LLM budget of one condensation."})
    max_served: int | None = field(
        default=None,
        metadata={
            "help": "Without condensation (or with serve_pending): the most raw bank entries shown, most recent "
            "first. None: all of them."
        },
    )
    serve_pending: bool = field(
        default=False, metadata={"help": "Also show the bank entries waiting for the next condensation."}
    )
    max_takeaway_chars: int = field(default=300, metadata={"help": "A takeaway longer than this is cut."})
    scope: str = field(
        default="dataset",
        metadata={
            "help": f"One of {SCOPES}: a bank per code-reasoning dataset and sub-task (meta['code']), or one bank "
            "for the whole run."
        },
    )

    def __post_init__(self) -> None:
        if self.condenser not in CONDENSERS:
            raise ValueError(f"condenser must be one of {CONDENSERS}, got {self.condenser!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, got {self.scope!r}")
        for name in ("condense_every", "max_knowledge", "condense_max_tokens", "max_takeaway_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_served is not None and self.max_served < 1:
            raise ValueError(f"max_served must be >= 1 or None (all), got {self.max_served}")


def clean_takeaway(text: str, max_chars: int = 300) -> str:
    """One takeaway line from an agent's reply: the first non-empty line, label and bullet removed, cut.

    >>> clean_takeaway("Lesson: **Check edge cases.**\\nMore text")
    'Check edge cases.'
    >>> clean_takeaway("   \\n- Watch integer division.")
    'Watch integer division.'
    """
    for line in str(text or "").splitlines():
        line = line.strip()
        bullet = _BULLET_RE.match(line)
        line = bullet.group(1) if bullet else line
        line = re.sub(r"^(?:\*\*)?(?:lesson|takeaway|key takeaway)\s*[:：]\s*", "", line, flags=re.IGNORECASE)
        line = line.strip().strip("*").strip()
        if line:
            return line[:max_chars].rstrip()
    return ""


def parse_guidelines(text: str, max_items: int) -> list[str]:
    """The ``- `` (or numbered) lines of a condenser reply, duplicates dropped, at most ``max_items``.

    >>> parse_guidelines("Here you go:\\n- Check types.\\n2) Trace loops.\\n- check types.", 5)
    ['Check types.', 'Trace loops.']
    """
    out: list[str] = []
    seen: set[str] = set()
    for line in str(text or "").splitlines():
        match = _BULLET_RE.match(line)
        if not match:
            continue
        item = match.group(1).strip().strip("*").strip()
        key = " ".join(_WORD_RE.findall(item.lower()))
        if len(key.split()) >= 2 and key not in seen:
            seen.add(key)
            out.append(item)
        if len(out) >= max_items:
            break
    return out


def _tokens(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))


def rule_condense(texts: list[str], max_items: int) -> list[str]:
    """Deterministic condenser: group near-duplicates (token Jaccard >= 0.6), keep the largest groups.

    Each group is represented by its most recent member; ties in size go to the more recent group.

    >>> rule_condense(["Check empty lists.", "Trace loops.", "check empty lists!", "Use types."], 2)
    ['check empty lists!', 'Use types.']
    """
    groups: list[dict[str, Any]] = []
    for position, text in enumerate(texts):
        words = _tokens(text)
        if not words:
            continue
        for group in groups:
            union = words | group["words"]
            if union and len(words & group["words"]) / len(union) >= 0.6:
                group.update(size=group["size"] + 1, text=text, last=position, words=words | group["words"])
                break
        else:
            groups.append({"size": 1, "text": text, "last": position, "words": words})
    ranked = sorted(groups, key=lambda g: (-g["size"], -g["last"]))[:max_items]
    return [g["text"] for g in sorted(ranked, key=lambda g: g["last"])]


class MarcoMemory(BaseMemory):
    """MARCO's knowledge bank with the periodic condenser (see the module docstring)."""

    name = "marco"
    options_class: ClassVar[type] = MarcoOptions
    uses_llm: ClassVar[bool] = True

    @classmethod
    def wants_llm(cls, options: MarcoOptions | None) -> bool:
        """Only the LLM condenser writes with the memory LLM."""
        options = options or MarcoOptions()
        return options.condense and options.condenser == "llm"

    def __init__(
        self, options: MarcoOptions | None = None, *, llm: Any = None, llm_sampling: Any = None, seed: int = 0
    ) -> None:
        super().__init__()
        self.options = self._checked_options(options)
        if self.wants_llm(self.options) and llm is None:
            raise ValueError(
                "memory 'marco' with condenser 'llm' needs a memory LLM: set memory_model, or condenser: rule"
            )
        self._set_llm(llm, llm_sampling, seed)
        #: per scope key: condensed guidelines {"id", "text", "batch"}, raw takeaways not condensed yet {"id",
        #: "text", "problem", "agent"} and the problems observed since the last condensation
        self.scopes: dict[str, dict[str, Any]] = {}
        self.next_id = 1
        self.condensations: list[dict[str, Any]] = []
        self.counters: dict[str, int] = dict.fromkeys(_COUNTERS, 0)

    # ------------------------------------------------------------------ scopes
    def scope_key(self, example: Any) -> str:
        """The bank an example belongs to: ``<dataset>/<subtask>`` from ``meta["code"]`` (``scope: dataset``).

        >>> from metamod.tasks.base import Example
        >>> MarcoMemory(MarcoOptions(condenser="rule")).scope_key(Example(id="q", question="?", gold="1", kind="math"))
        '-'
        """
        if self.options.scope == "run":
            return "-"
        meta = example.meta.get("code") if isinstance(getattr(example, "meta", None), Mapping) else None
        if not isinstance(meta, Mapping):
            return "-"
        return f"{meta.get('dataset') or '?'}/{meta.get('subtask') or '?'}"

    def _scope(self, key: str) -> dict[str, Any]:
        return self.scopes.setdefault(key, {"knowledge": [], "bank": [], "problems_since": 0})

    @property
    def knowledge(self) -> list[dict[str, Any]]:
        """Every scope's condensed guidelines (for reports; guidance reads its own scope's)."""
        return [k for scope in self.scopes.values() for k in scope["knowledge"]]

    @property
    def bank(self) -> list[dict[str, Any]]:
        """Every scope's raw takeaways waiting for condensation."""
        return [b for scope in self.scopes.values() for b in scope["bank"]]

    # ------------------------------------------------------------------ guidance
    def served_items(self, key: str = "-") -> list[dict[str, Any]]:
        """What guidance shows now in scope ``key``: the condensed knowledge (and/or raw bank entries)."""
        opts = self.options
        scope = self.scopes.get(key) or {"knowledge": [], "bank": []}
        items = list(scope["knowledge"]) if opts.condense else []
        if not opts.condense or opts.serve_pending:
            bank = scope["bank"]
            recent = bank if opts.max_served is None else bank[-opts.max_served :]
            items += recent[::-1]  # newest first: a prompt over its budget loses the oldest (metamod.llm.budget)
        return items

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        items = self.served_items(self.scope_key(request.example))
        if not items:
            return Guidance()
        return Guidance(text="\n".join(f"- {i['text']}" for i in items), item_ids=tuple(i["id"] for i in items))

    # ------------------------------------------------------------------ observation and condensation
    def record(self, observation: Observation) -> dict[str, Any]:
        takeaways = []
        for item in observation.trace.get("takeaways") or []:
            if isinstance(item, Mapping):
                takeaways.append({"agent": item.get("agent"), "text": str(item.get("text") or "")})
        return {"id": observation.example.id, "scope": self.scope_key(observation.example), "takeaways": takeaways}

    def _new_id(self, prefix: str) -> str:
        uid = f"{prefix}{self.next_id}"
        self.next_id += 1
        return uid

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        touched: list[str] = []
        for record in records:
            key = str(record.get("scope") or "-")
            scope = self._scope(key)
            if key not in touched:
                touched.append(key)
            for item in record.get("takeaways") or []:
                text = clean_takeaway(item.get("text", ""), self.options.max_takeaway_chars)
                if not text:
                    self.counters["takeaways_empty"] += 1
                    continue
                scope["bank"].append(
                    {"id": self._new_id("R"), "text": text, "problem": record["id"], "agent": item.get("agent")}
                )
                self.counters["takeaways_added"] += 1
            scope["problems_since"] += 1
        for key in sorted(touched):
            scope = self.scopes[key]
            if self.options.condense and scope["problems_since"] >= self.options.condense_every and scope["bank"]:
                self._condense(key, scope)

    def _condense(self, key: str, scope: dict[str, Any]) -> None:
        opts = self.options
        inputs = [k["text"] for k in scope["knowledge"]] + [b["text"] for b in scope["bank"]]
        fallback = False
        if opts.condenser == "llm":
            lessons = "\n".join(f"- {t}" for t in inputs)
            prompt = render("marco_condense", lessons=lessons, max_items=opts.max_knowledge)
            sampling = dataclasses.replace(self.llm_sampling, n=1, max_tokens=opts.condense_max_tokens)
            reply = chat_checked(self.llm, [[{"role": "user", "content": prompt}]], sampling, who="memory LLM")
            guidelines = parse_guidelines(reply[0].text if reply else "", opts.max_knowledge)
            if not guidelines:
                fallback = True
                self.counters["condense_fallbacks"] += 1
                logger.info("marco condenser reply had no guideline lines; using the rule condenser")
        if opts.condenser == "rule" or fallback:
            guidelines = rule_condense(inputs, opts.max_knowledge)
        scope["knowledge"] = [{"id": self._new_id("K"), "text": t, "batch": self.batch_index} for t in guidelines]
        self.condensations.append(
            {
                "scope": key,
                "batch": self.batch_index,
                "problems": scope["problems_since"],
                "inputs": len(inputs),
                "outputs": len(scope["knowledge"]),
                "fallback": fallback,
            }
        )
        self.counters["condensations"] += 1
        scope["bank"] = []
        scope["problems_since"] = 0

    # ------------------------------------------------------------------ persistence
    def config_dict(self) -> dict[str, Any]:
        return asdict(self.options)

    def state_dict(self) -> dict[str, Any]:
        return {
            "scopes": self.scopes,
            "next_id": self.next_id,
            "condensations": self.condensations,
            "counters": self.counters,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.scopes = {
            str(key): {
                "knowledge": [dict(k) for k in scope.get("knowledge", [])],
                "bank": [dict(b) for b in scope.get("bank", [])],
                "problems_since": int(scope.get("problems_since", 0)),
            }
            for key, scope in (state.get("scopes") or {}).items()
        }
        self.next_id = int(state.get("next_id", 1))
        self.condensations = [dict(c) for c in state.get("condensations", [])]
        self.counters = {**dict.fromkeys(_COUNTERS, 0), **dict(state.get("counters") or {})}

    def summary(self) -> dict[str, Any]:
        """Sizes and counters for reports."""
        return {"scopes": len(self.scopes), "knowledge": len(self.knowledge), "bank": len(self.bank), **self.counters}
