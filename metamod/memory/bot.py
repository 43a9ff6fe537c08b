"""Buffer-of-Thought (BoT) memory: distil the problem, retrieve a thought template, instantiate it, update the buffer.

The four BoT stages (MC² appendix B.2) on the memory protocol of :mod:`metamod.memory.base`:

1. **Problem distiller** (``prepare``, at ``begin_batch``): each new question of the batch becomes key facts, a goal
   and constraints. ``writer="llm"``: ONE batched ``llm.chat`` with ``bot_distill``, parsed from labelled lines (an
   unparsable reply falls back to the question's first sentence(s) as the goal, counted); ``writer="rule"``: numbers
   with their units, the asking sentence, constraint words. Only the question text is read, never the gold.
2. **Template retrieval**: the distilled text is embedded and compared (cosine) with the stored templates'
   descriptions; the best one at or above ``retrieval_threshold`` is used, else the generic coarse template
   (``bot_generic_template``, id ``generic``). Ties go to the older template.
3. **Instantiation**: solver roles (``single``, ``reasoner``, ``debater``) get ``bot_instantiate`` (the distilled
   problem and the template's steps) with ``item_ids=(template_id,)``; other roles get no guidance.
4. **Buffer manager** (``consolidate``, at ``end_batch``): each finished question it learns from (``learn_from``:
   every answered question by default, as MC² B.2 builds a template from the solved trajectory; ``correct`` keeps
   only the gold-correct ones and marks the method ``uses_gold``)
   yields one template: ``writer="llm"``: ONE batched call with ``bot_extract_template`` on the trajectory with the
   answers scrubbed out; ``writer="rule"``: from the question kind and the trajectory's equation lines. A template
   joins the buffer only when its description's best similarity to the stored ones is below ``novelty_threshold``,
   else the closest one gains support. At most ``max_templates`` stay (the least-used, then oldest, goes first).

>>> from metamod.memory.base import GuidanceRequest, Observation
>>> from metamod.tasks.base import Example
>>> bot = BufferOfThought(BoTOptions(writer="rule"))
>>> q = Example(id="a", question="A box holds 12 pens. Mia buys 3 boxes. How many pens does Mia have?", gold="36",
...             kind="math")
>>> bot.guidance(GuidanceRequest(q, "single")).item_ids
('generic',)
>>> trace = {"id": "a", "rounds": [], "single": {"text": "12 * 3 = 36 <answer>36</answer>", "answer": "36"}}
>>> bot.observe(Observation(q, trace, {"correct": True, "final_answer": "36", "method": "cot"}))
>>> bot.end_batch()
>>> new = Example(id="b", question="A box holds 10 pens. Mia buys 4 boxes. How many pens does Mia have?", gold="40",
...               kind="math")
>>> g = bot.guidance(GuidanceRequest(new, "single"))
>>> g.item_ids, "Goal: How many pens does Mia have?" in g.text
(('T1',), True)
>>> bot.guidance(GuidanceRequest(new, "monitor"))
Guidance(text='', item_ids=())
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from metamod.llm.base import chat_checked
from metamod.memory.base import BaseMemory, Guidance, GuidanceRequest, MemoryOptions, Observation
from metamod.memory.distill import normalise_answer, scrub_answers
from metamod.memory.embed import EMBEDDERS, Embedder, build_embedder, top_k_scores
from metamod.memory.items import check_positive, evict_lowest
from metamod.prompts import render
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

WRITERS: tuple[str, ...] = ("llm", "rule")
LEARN_FROM: tuple[str, ...] = ("correct", "answered")
#: Roles that solve the question and so receive the instantiated template.
SOLVER_ROLES: tuple[str, ...] = ("single", "reasoner", "debater")
GENERIC_ID = "generic"
#: Longest kept item (goal, fact, constraint, step), most items per field, longest trajectory sent to the manager.
MAX_ITEM_CHARS, MAX_ITEMS, MAX_SOLUTION_CHARS = 240, 8, 4000
COUNTERS: tuple[str, ...] = (
    "distilled", "distill_calls", "distill_fallbacks", "retrieved_template", "retrieved_generic", "manager_calls",
    "learned_from", "not_learned", "templates_added", "templates_merged", "templates_skipped", "templates_evicted",
)  # fmt: skip

_NEEDS_LLM = "memory 'bot' with writer=llm needs a memory LLM (memory_model); or set memory_options writer: rule"
_LAST = "State the final answer in the form the question asks for."
#: kind -> (label in rule descriptions, constraint the rule distiller adds, last step of a rule template).
_KINDS: dict[str, tuple[str, str | None, str]] = {
    "math": ("math word problem", None, _LAST),
    "mc": ("multiple-choice question", "answer with one option letter", "Pick the option letter matching the result."),
    "yesno": ("yes/no question", "answer yes or no", "Answer yes or no, as the result says."),
    "text": ("short-answer question", None, _LAST),
    "approx": ("numeric estimation problem", None, _LAST),
    "game24": ("24-game puzzle", "use each number once", "Write one expression of the numbers that equals 24."),
}
_CONSTRAINT_WORDS = (
    "at least", "at most", "exactly", "only", "must", "cannot", "without", "no more than", "no less than",
    "integer", "whole", "nearest", "rounded", "different", "distinct", "positive", "negative", "remainder",
)  # fmt: skip
_STOPWORDS = {"and", "or", "of", "the", "a", "an", "in", "on", "to", "for", "by", "is", "are", "each", "per", "times"}
_NAME_SKIP = _STOPWORDS | {"do", "does", "did", "has", "have", "had", "will", "would", "can", "could", "n"}
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?:/\d+)?%?")
_FACT = re.compile(r"(?<![\w.])(-?\d+(?:[.,]\d+)*(?:/\d+)?%?)(?:\s+([A-Za-z][A-Za-z-]*))?")
_OPTION_LINE = re.compile(r"^\([A-Z]\)\s")
_LABEL = r"^\s*(?:[-*]\s*)?\**\s*({})\s*\**\s*:\s*\**\s*(.*)$"
_DISTILL_LABEL = re.compile(_LABEL.format("key facts|facts|goal|constraints"), re.I)
_TEMPLATE_LABEL = re.compile(_LABEL.format("name|description|steps"), re.I)
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|step\s*\d+\s*[:.)])\s*", re.I)


@dataclass
class BoTOptions(MemoryOptions):
    """Options of the Buffer-of-Thought memory (``memory_options`` when ``memory: bot``)."""

    writer: str = field(default="llm", metadata={"help": f"Who writes distillations and templates: {WRITERS}."})
    retrieval_threshold: float = field(
        default=0.35, metadata={"help": "Cosine similarity below which the generic coarse template is used."}
    )
    novelty_threshold: float = field(
        default=0.8,
        metadata={
            "help": "A new template joins the buffer only when its description's best cosine similarity to the "
            "stored descriptions is below this; otherwise the closest stored template gains support."
        },
    )
    max_templates: int = field(default=64, metadata={"help": "Buffer cap; the least-used, oldest templates go first."})
    learn_from: str = field(
        default="answered",
        metadata={
            "help": f"Questions the manager learns from: {LEARN_FROM}. answered (MC² B.2: a template from every "
            "solved trajectory, no correctness filter); correct reads the gold grading (then the method is marked "
            "uses_gold)."
        },
    )
    embedder: str = field(
        default="hashing", metadata={"help": f"Embedder: one of {sorted(EMBEDDERS)} or a dotted path."}
    )
    embedder_model: str | None = field(default=None, metadata={"help": "Model folder for 'sentence-transformers'."})

    def __post_init__(self) -> None:
        if self.writer not in WRITERS:
            raise ValueError(f"writer must be one of {WRITERS}, got {self.writer!r}")
        if self.learn_from not in LEARN_FROM:
            raise ValueError(f"learn_from must be one of {LEARN_FROM}, got {self.learn_from!r}")
        if not -1.0 <= self.retrieval_threshold <= 1.0:
            raise ValueError(f"retrieval_threshold must be a cosine in [-1, 1], got {self.retrieval_threshold}")
        if not -1.0 < self.novelty_threshold <= 1.0:
            raise ValueError(f"novelty_threshold must be a cosine in (-1, 1], got {self.novelty_threshold}")
        check_positive("max_templates", self.max_templates)
        if self.embedder not in EMBEDDERS and ":" not in self.embedder and "." not in self.embedder:
            raise ValueError(f"embedder must be one of {sorted(EMBEDDERS)} or a dotted path, got {self.embedder!r}")


@dataclass
class ThoughtTemplate:
    """One thought template: ``id`` (``T<n>`` in creation order, or ``generic``), a hyphenated ``name``, the
    ``description`` of the problems it fits (embedded for retrieval and novelty), its ``steps``, ``support`` (how
    many extracted templates it stands for), ``uses`` (how many questions retrieved it), the batches that created it
    and last supported it, and its ``source`` (``llm``, ``rule`` or ``generic``)."""

    id: str
    name: str
    description: str
    steps: list[str]
    support: int = 1
    uses: int = 0
    created_batch: int = 0
    last_batch: int = 0
    source: str = "rule"


# ---------------------------------------------------------------------------------------------- parsing and text
def _clip(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip("*").strip()[:MAX_ITEM_CHARS]


def _items(text: str) -> list[str]:
    items = [_clip(_ITEM.sub("", part)) for part in re.split(r";|\n", text)]
    return [i for i in items if i and i.lower().rstrip(".") not in {"none", "n/a", "-"}][:MAX_ITEMS]


def _sections(text: str, label: re.Pattern) -> dict[str, str]:
    """``label: ...`` sections of a reply (continuation lines join the section above; a repeated label is ignored)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (text or "").splitlines():
        match = label.match(line)
        if match:
            key = match.group(1).lower().replace("key ", "")
            current = [] if key in sections else sections.setdefault(key, [])
            current.append(match.group(2))
        elif current is not None and line.strip():
            current.append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


def parse_distilled(text: str) -> dict[str, Any] | None:
    """Read a distiller reply's ``Key facts`` / ``Goal`` / ``Constraints`` lines; ``None`` without a goal.

    >>> parse_distilled("Key facts: 12 pens per box; 3 boxes\\nGoal: total pens\\nConstraints: none")
    {'facts': ['12 pens per box', '3 boxes'], 'goal': 'total pens', 'constraints': []}
    >>> parse_distilled("The answer is 36.") is None
    True
    """
    sections = _sections(text, _DISTILL_LABEL)
    goal = _clip(sections.get("goal", ""))
    if not goal:
        return None
    get = sections.get
    return {"facts": _items(get("facts", "")), "goal": goal, "constraints": _items(get("constraints", ""))}


def parse_template(text: str) -> dict[str, Any] | None:
    """Read a ``Name`` / ``Description`` / ``Steps`` reply; ``None`` when any of the three is missing.

    >>> parse_template("Name: Rate Times Time\\nDescription: distance from speed and time.\\nSteps:\\n1. Multiply.")
    {'name': 'rate-times-time', 'description': 'distance from speed and time.', 'steps': ['Multiply.']}
    """
    sections = _sections(text, _TEMPLATE_LABEL)
    name = re.sub(r"[^a-z0-9]+", "-", sections.get("name", "").lower()).strip("-")[:60]
    description = _clip(sections.get("description", ""))
    steps = [s for s in (_clip(_ITEM.sub("", line)) for line in sections.get("steps", "").splitlines()) if s]
    if not (name and description and steps):
        return None
    return {"name": name, "description": description, "steps": steps[:MAX_ITEMS]}


def _sentences(question: str) -> list[str]:
    """The sentences of a question, without the option lines of a multiple-choice item."""
    body = " ".join(line for line in question.splitlines() if not _OPTION_LINE.match(line.strip()))
    return [s.strip() for s in re.split(r"(?<=[.?!])\s+", re.sub(r"\s+", " ", body).strip()) if s.strip()]


def fallback_distilled(question: str) -> dict[str, Any]:
    """The distillation used when the distiller's reply cannot be parsed: the first sentence(s) as the goal.

    >>> fallback_distilled("Tom has 3 apples. He eats one. How many are left?")["goal"]
    'Tom has 3 apples. He eats one. How many are left?'
    """
    goal = ""
    for sentence in _sentences(question):
        if goal and len(goal) + len(sentence) > MAX_ITEM_CHARS:
            break
        goal = f"{goal} {sentence}".strip()
    return {"facts": [], "goal": _clip(goal or question), "constraints": []}


def rule_distilled(question: str, kind: str) -> dict[str, Any]:
    """Deterministic distillation: numbers (with the word after them) as facts, the asking sentence as the goal.

    >>> rule_distilled("A train runs at 60 km per hour for 2 hours. How far does it go, to the nearest km?", "math")
    {'facts': ['60 km', '2 hours'], 'goal': 'How far does it go, to the nearest km?', 'constraints': ['nearest']}
    """
    sentences = _sentences(question) or [question.strip()]
    body = " ".join(sentences)
    facts = []
    for number, word in _FACT.findall(body):
        fact = number if not word or word.lower() in _STOPWORDS else f"{number} {word}"
        facts += [fact] if fact not in facts else []
    goal = next((s for s in reversed(sentences) if s.endswith("?")), sentences[-1])
    constraints = [w for w in _CONSTRAINT_WORDS if re.search(rf"\b{re.escape(w)}\b", body.lower())]
    constraints += [c for c in [_KINDS.get(kind, ("", None, ""))[1]] if c]
    return {"facts": facts[:MAX_ITEMS], "goal": _clip(goal), "constraints": constraints[:MAX_ITEMS]}


def distilled_key(distilled: Mapping[str, Any]) -> str:
    """The text embedded for retrieval: goal, facts and constraints."""
    return " ; ".join([distilled["goal"], *distilled["facts"], *distilled["constraints"]])


def generic_template() -> ThoughtTemplate:
    """The coarse template used below the retrieval threshold (``bot_generic_template``, id ``generic``)."""
    parsed = parse_template(render("bot_generic_template"))
    if parsed is None:
        raise ValueError("prompt template 'bot_generic_template' needs Name:, Description: and Steps: lines")
    return ThoughtTemplate(id=GENERIC_ID, source="generic", **parsed)


def trajectory(trace: Mapping[str, Any], final_answer: Any) -> tuple[str, str, list[str]]:
    """``(source, text, answers)`` of a finished question: the text the buffer manager learns from.

    ``source`` is ``mro`` (the last Reasoner text), ``debate`` (the last round's response holding the final answer,
    else the first agent's) or ``single`` (the single-agent record's text). ``answers``: every answer string seen.

    >>> trajectory({"rounds": [], "single": {"texts": ["2+2=4"], "final_answer": "4"}}, "4")
    ('single', '2+2=4', ['4'])
    """
    final = normalise_answer(final_answer)
    answers: list[Any] = [final_answer]
    if isinstance(trace.get("history"), Sequence) and trace.get("history"):
        history = [h for h in trace["history"] if isinstance(h, Mapping)] or [{}]
        answers += [(h.get(role) or {}).get("answer") for h in history for role in ("reasoner", "controller")]
        source, text = "mro", str((history[-1].get("reasoner") or {}).get("text") or "")
    elif trace.get("rounds"):
        responses = sorted(trace["rounds"][-1].get("responses") or [], key=lambda r: int(r.get("agent", 0)))
        answers += [r.get("answer") for rnd in trace["rounds"] for r in rnd.get("responses") or []]
        pick = next((r for r in responses if final is not None and normalise_answer(r.get("answer")) == final), None)
        source, text = "debate", str((pick or (responses[0] if responses else {})).get("text") or "")
    else:
        single = trace.get("single") or {}
        texts = single.get("texts") or [""]
        answers += [single.get("answer"), single.get("final_answer"), *(single.get("seen_answers") or [])]
        source, text = "single", str(single.get("text") or texts[-1] or "")
    return source, text, sorted({str(a).strip() for a in answers if a is not None and str(a).strip()})


def scrub(text: str, answers: list[str]) -> str:
    """Replace answers with ``[answer]``; short words (option letters, yes/no) only where they read as the answer.

    Longer answers are replaced wherever they stand as a whole token (:func:`metamod.memory.distill.scrub_answers`).

    >>> scrub("A train: (B) is right, so the answer is B. <answer>B</answer> 12 = 12", ["B", "12"])
    'A train: ([answer]) is right, so the answer is [answer]. <answer>[answer]</answer> [answer] = [answer]'
    """
    short = sorted((a for a in answers if a.isalpha() and len(a) <= 3), key=len, reverse=True)
    for ans in map(re.escape, short):
        text = re.sub(rf"(\(\s*|<answer>\s*|\b(?:answer|option|choice) is\s+){ans}\b", r"\1[answer]", text, flags=re.I)
    return scrub_answers(text, [a for a in answers if a not in short])


def rule_template(question: str, kind: str, solution: str) -> dict[str, Any]:
    """Deterministic template from the question kind and the trajectory's structure (its equation lines).

    >>> t = rule_template("Sam has 3 bags of 5 nuts. How many nuts?", "math", "3 * 5 = [answer]")
    >>> t["name"], t["steps"][1]
    ('math-how-many-nuts', 'Set up and evaluate a step of the form N * N = N.')
    """
    distilled = rule_distilled(question, kind)
    goal = _NUMBER.sub("N", distilled["goal"])
    label, _, last_step = _KINDS.get(kind, ("problem", None, _LAST))
    units = list(dict.fromkeys(f.split(" ", 1)[1] for f in distilled["facts"] if " " in f))
    description = f"{label} asking: {goal}" + (f" Given: {', '.join(units)}." if units else "")
    words = [w for w in re.findall(r"[a-z]+", goal.lower()) if w not in _NAME_SKIP][:4]
    lines = [re.sub(r"<answer>.*?</answer>", "", line).replace("[answer]", "N") for line in solution.splitlines()]
    equations = [_clip(_NUMBER.sub("N", line)) for line in lines if "=" in line][:4]
    steps = [f"Write down the given facts ({len(distilled['facts'])} quantities in the solved example)."]
    steps += [f"Set up and evaluate a step of the form {line.rstrip('.')}." for line in equations] or [
        f"Reason in about {max(1, min(MAX_ITEMS, len(_sentences(solution))))} short steps, one result per step."
    ]
    steps += ["Check the result against the goal and every constraint.", last_step]
    return {"name": "-".join([kind, *words]), "description": description, "steps": steps}


# ---------------------------------------------------------------------------------------------- the memory
class BufferOfThought(BaseMemory):
    """The Buffer-of-Thought memory; see the module docstring.

    Args:
        options: a :class:`BoTOptions` (None: the defaults).
        llm: the memory LLM (a :class:`metamod.llm.base.Generator`), needed when ``writer="llm"``.
        llm_sampling: its decoding (None: greedy, 256 tokens, ``seed``).
        seed: the memory's seed.

    Raises:
        ValueError: ``writer="llm"`` without ``llm``.
    """

    name = "bot"
    uses_llm: ClassVar[bool] = True
    options_class: ClassVar[type] = BoTOptions

    @classmethod
    def wants_llm(cls, options: BoTOptions | None) -> bool:
        """Whether these options call the memory LLM (``writer == "llm"``)."""
        return (options or BoTOptions()).writer == "llm"

    @classmethod
    def gold_use(cls, options: BoTOptions | None) -> str | None:
        """``learn_from: correct`` keeps only the questions graded correct (not in BoT as MC² B.2 runs it)."""
        if (options or BoTOptions()).learn_from == "correct":
            return "learns thought templates only from questions graded correct (learn_from: correct)"
        return None

    def __init__(
        self, options: BoTOptions | None = None, *, llm: Any = None, llm_sampling: Any = None, seed: int = 0
    ) -> None:
        super().__init__()
        self.options = self._checked_options(options)
        if self.options.writer == "llm" and llm is None:
            raise ValueError(_NEEDS_LLM)
        self._set_llm(llm, llm_sampling, seed)
        extra = {"model_path": self.options.embedder_model} if self.options.embedder == "sentence-transformers" else {}
        self.embedder: Embedder = build_embedder(self.options.embedder, **extra)
        self.generic = generic_template()
        self.templates: list[ThoughtTemplate] = []
        self.next_uid = 1
        self.distilled: dict[str, dict[str, Any]] = {}  # example id -> distillation + retrieval, this batch only
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._reindex()

    # ------------------------------------------------------------------ hooks
    def prepare(self, examples: Sequence[Example]) -> None:
        """Distil the batch's new questions (one batched LLM call) and retrieve a template for each."""
        fresh = list({ex.id: ex for ex in examples}.values())  # one per id
        texts = [ex.prompt_text() for ex in fresh]
        if self.options.writer == "rule":
            parsed: list[dict[str, Any] | None] = [rule_distilled(t, e.kind) for t, e in zip(texts, fresh, strict=True)]
        else:
            parsed = [
                parse_distilled(reply) for reply in self._chat([render("bot_distill", question=t) for t in texts])
            ]
            self.counters["distill_calls"] += 1
        for ex, text, distilled in zip(fresh, texts, parsed, strict=True):
            if distilled is None:
                self.counters["distill_fallbacks"] += 1
                logger.debug("bot: distiller reply for %r unparsable; using the question's first sentence(s)", ex.id)
            entry = dict(distilled or fallback_distilled(text), fallback=distilled is None)
            entry["template"], entry["score"] = self._retrieve(entry)
            self.distilled[ex.id] = entry
            self.counters["distilled"] += 1

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        if request.role not in SOLVER_ROLES:
            return Guidance()
        entry = self.distilled[request.example.id]
        template = self.generic if entry["template"] == GENERIC_ID else self._by_id[entry["template"]]
        distilled = render(
            "bot_distilled",
            facts="; ".join(entry["facts"]) or "none",
            goal=entry["goal"],
            constraints="; ".join(entry["constraints"]) or "none",
        )
        text = render(
            "bot_instantiate",
            distilled=distilled,
            name=template.name,
            description=template.description.rstrip("."),
            steps="\n".join(f"{i}. {s}" for i, s in enumerate(template.steps, 1)),
        )
        return Guidance(text=text, item_ids=(template.id,))

    def record(self, observation: Observation) -> dict[str, Any]:
        """A gold-free record: the question, its kind, the trajectory with every answer scrubbed, the outcome flags."""
        ex, outcome = observation.example, observation.outcome
        source, text, answers = trajectory(observation.trace, outcome["final_answer"])
        return {
            "id": ex.id,
            "question": ex.prompt_text(),
            "kind": ex.kind,
            "method": str(outcome["method"]),
            "correct": outcome["correct"],  # None unless learn_from: correct (then the harness passes the grading)
            "answered": outcome["final_answer"] is not None,
            "source": source,
            "solution": scrub(text, answers)[-MAX_SOLUTION_CHARS:],
            "answers": answers,
            "served": list(observation.served),
        }

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        """The buffer manager: a template per learned-from record; novel ones are added, the others merged."""
        chosen = [r for r in records if r[self.options.learn_from]]
        self.counters["learned_from"] += len(chosen)
        self.counters["not_learned"] += len(records) - len(chosen)
        if self.options.writer == "rule":
            found = [rule_template(r["question"], r["kind"], r["solution"]) for r in chosen]
        else:
            prompts = [
                render("bot_extract_template", question=r["question"], solution=r["solution"], max_steps=MAX_ITEMS)
                for r in chosen
            ]
            found = [parse_template(reply) for reply in self._chat(prompts)]
            self.counters["manager_calls"] += 1 if prompts else 0
        for record, template in zip(chosen, found, strict=True):
            if template is None:
                self.counters["templates_skipped"] += 1
                logger.debug("bot: buffer manager reply for %r unparsable; skipped", record["id"])
                continue
            template["description"] = scrub(template["description"], record["answers"])
            template["steps"] = [scrub(step, record["answers"]) for step in template["steps"]]
            self._add_or_merge(template)
        self._evict()
        self.distilled = {}
        self._reindex()
        logger.info(
            "bot: batch %d learned from %d question(s); %d templates",
            self.batch_index,
            len(chosen),
            len(self.templates),
        )

    # ------------------------------------------------------------------ state
    def config_dict(self) -> dict[str, Any]:
        return {**asdict(self.options), "embedder": self.embedder.spec()}

    def stats(self) -> dict[str, int]:
        """Counters (distiller fallbacks, templates added/merged/skipped/evicted, retrievals) and the buffer size."""
        return {**self.counters, "templates": len(self.templates)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "templates": [asdict(t) for t in self.templates],
            "next_uid": self.next_uid,
            "distilled": {k: dict(v) for k, v in sorted(self.distilled.items())},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            templates = [ThoughtTemplate(**{**t, "steps": list(t["steps"])}) for t in state.get("templates", [])]
            next_uid = int(state.get("next_uid", 1))
            distilled = {str(k): dict(v) for k, v in (state.get("distilled") or {}).items()}
            counters = {**self.counters, **{str(k): int(v) for k, v in (state.get("counters") or {}).items()}}
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"bot memory state is malformed: {err}") from err
        ids = [t.id for t in templates]
        if len(set(ids)) != len(ids) or any(not re.fullmatch(r"T\d+", i) or int(i[1:]) >= next_uid for i in ids):
            raise ValueError(f"bot memory state is malformed: template ids {ids} must be unique T<n> below next_uid")
        unknown = sorted({str(d.get("template")) for d in distilled.values()} - set(ids) - {GENERIC_ID})
        if unknown:
            raise ValueError(f"bot memory state is malformed: distilled questions refer to unknown templates {unknown}")
        self.templates, self.next_uid, self.distilled, self.counters = templates, next_uid, distilled, counters
        self._reindex()

    # ------------------------------------------------------------------ internals
    def _chat(self, prompts: list[str]) -> list[str]:
        """One batched call of the memory LLM (none for no prompts); one reply text per prompt."""
        if not prompts:
            return []
        sampling = dataclasses.replace(self.llm_sampling, n=1)
        conversations = [[{"role": "user", "content": p}] for p in prompts]
        return [g.text for g in chat_checked(self.llm, conversations, sampling, who="memory LLM")]

    def _reindex(self) -> None:
        """Embed the stored descriptions (never saved: the embedder is deterministic)."""
        self._by_id = {t.id: t for t in self.templates}
        self._vecs = self.embedder.embed([t.description for t in self.templates]) if self.templates else None

    def _retrieve(self, distilled: Mapping[str, Any]) -> tuple[str, float | None]:
        """The best stored template at or above ``retrieval_threshold`` (counted as a use), else ``generic``."""
        best = None
        if self._vecs is not None:
            best = top_k_scores(self._vecs @ self.embedder.embed([distilled_key(distilled)])[0], 1)
        if best and best[0][1] >= self.options.retrieval_threshold:
            template = self.templates[best[0][0]]
            template.uses += 1
            self.counters["retrieved_template"] += 1
            return template.id, best[0][1]
        self.counters["retrieved_generic"] += 1
        return GENERIC_ID, best[0][1] if best else None

    def _add_or_merge(self, template: dict[str, Any]) -> None:
        vec = self.embedder.embed([template["description"]])[0]
        if self._vecs is not None:
            (index, score), *_ = top_k_scores(self._vecs @ vec, 1)
            if score >= self.options.novelty_threshold:
                self.templates[index].support += 1
                self.templates[index].last_batch = self.batch_index
                self.counters["templates_merged"] += 1
                return
        added = ThoughtTemplate(id=f"T{self.next_uid}", source=self.options.writer, **template)
        added.created_batch = added.last_batch = self.batch_index
        self.templates.append(added)
        self.next_uid += 1
        self.counters["templates_added"] += 1
        self._vecs = vec[None, :] if self._vecs is None else np.vstack([self._vecs, vec[None, :]])

    def _evict(self) -> None:
        excess = len(self.templates) - self.options.max_templates
        self.templates = evict_lowest(self.templates, excess, lambda i: (self.templates[i].uses, i))
        self.counters["templates_evicted"] += max(excess, 0)
