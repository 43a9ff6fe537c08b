"""The memory protocol (version 2): guidance before a question is solved, observation after, consolidation per batch.

The evaluation harness drives every memory the same way::

    for batch in batches(examples, memory_batch_size):
        memory.begin_batch(batch)                              # optional batched preparation (no gold)
        for example in batch:
            g = ask_guidance(memory, example, "reasoner", step=0, method="mc2")  # asks memory.guidance
            ... solve: g.prepend_to_first(conversation) wraps a non-empty ``g.text`` in the ``memory_guidance``
                template (:func:`render_guidance`) in front of the caller's prompt, or, when ``g.policy`` and the
                caller has a policy part (the MRO roles), it goes in place of that part; ``g.item_ids`` are logged ...
            memory.observe(Observation(example, trace, outcome, decisions, served=memory.served_ids(example.id)))
        memory.end_batch()                                     # consolidate; only now can guidance change
        memory.save(folder)                                    # resume point

Every caller that builds a prompt asks: debaters (role ``debater``, with agent and round), single-agent methods
(``single``), the MRO roles (``reasoner``/``monitor``/``controller``, with the iteration), the moderator, the judge.

Rules every memory follows:

- **No gold before answering.** ``guidance`` and ``begin_batch`` may read the question (``example.prompt_text()``),
  ``example.id``, ``example.kind`` and ``example.choices`` only, never ``example.gold`` or anything derived from it;
  the same question with a different gold gets the same guidance. Gold-derived signals (``outcome["correct"]``, the
  trace's per-round ``eta``) reach a memory only through ``observe``, after the question is finished, and only when
  the memory is defined to use them: :meth:`BaseMemory.gold_use` says so for given options. The harness gives every
  other memory :func:`withhold_gold` observations (``correct`` is ``None``, gold-derived trace fields are gone and
  the example's gold raises :class:`~metamod.tasks.base.GoldWithheldError` when read).
- **Deterministic.** The same sequence of calls (and the same ``seed``) gives the same guidance and saved state.
- **Batch-synchronous.** Observations change guidance only after ``end_batch()``: inside a batch, guidance does not
  depend on which questions of the same batch were already finished, nor in which order (so batched or sharded
  evaluation gives the same results as a sequential loop). :class:`BaseMemory` enforces it: it caches every answer
  per request for the batch and queues observations until ``end_batch``.
- **Body only.** ``guidance`` returns the body (e.g. one ``- name: instruction`` line per item); the caller wraps it
  once in the ``memory_guidance`` template, so every memory is framed the same way.
- **Saved as a folder**: ``manifest.json`` (format, version, memory name, config, JSON state, array file name) plus
  an optional ``arrays-<n>.npz`` for numeric state. The manifest is replaced atomically and names its array file,
  so an interrupted save leaves the previous state readable.

>>> from metamod.tasks.base import Example
>>> mem = NoMemory()
>>> g = mem.guidance(GuidanceRequest(Example(id="q", question="1+1?", gold="2", kind="math"), "single"))
>>> g.text, g.item_ids
('', ())
>>> isinstance(mem, Memory)
True
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from metamod.errors import InputError, load_json, load_npz
from metamod.files import atomic_write_json
from metamod.prompts import render
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

#: Roles a memory may be asked to guide. ``debater``: a debate participant; ``single``: a single-agent baseline;
#: ``moderator``/``judge``: whoever decides when to stop and what the answer is; ``reasoner``/``monitor``/
#: ``controller``: the three roles of the Reasoner-Monitor-Controller loop.
ROLES: tuple[str, ...] = ("debater", "single", "moderator", "judge", "reasoner", "monitor", "controller")

#: Keys every ``outcome`` passed to ``observe`` must carry (``correct`` is ``None`` when the gold is withheld).
OUTCOME_KEYS: tuple[str, ...] = ("correct", "final_answer", "method")

#: Trace and record fields derived from the gold answer (removed by :func:`withhold_gold`, at any depth).
GOLD_FIELDS: frozenset[str] = frozenset(
    {"gold", "eta", "etas", "correct", "covered", "score", "answer_correct", "final_correct", "first_correct_round"}
)

#: Marker and version written into every saved memory manifest.
FILE_FORMAT = "metamod-memory"
FILE_VERSION = 2
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class GuidanceRequest:
    """Who is about to build a prompt, for which question.

    Attributes:
        example: the question (a memory reads its text, id, kind and choices, never its gold).
        role: one of :data:`ROLES`.
        agent: the debater's index (``None`` for roles that are not one of several agents).
        step: the 0-based debate round or MRO iteration (``None`` when the caller has no steps).
        method: the evaluation method asking (``None``: shared by every method, e.g. debates replayed by several).
    """

    example: Example
    role: str
    agent: int | None = None
    step: int | None = None
    method: str | None = None

    def key(self) -> tuple[str, str, int | None, int | None, str | None]:
        return (self.example.id, self.role, self.agent, self.step, self.method)


@dataclass(frozen=True)
class Guidance:
    """A memory's answer: the guidance body ("" for none) and the ids of the items it used (logged per sample).

    Attributes:
        text: the guidance body.
        item_ids: the ids of the memory items it was built from.
        policy: ``True`` when ``text`` is a whole updated role policy prompt (MC² Eq. 13: the MetaCognitive
            Accumulator's composed prompt) rather than extra guidance. A caller whose prompt has a replaceable
            policy part (the MRO roles' ``{policy}``) puts it there in place of its own policy; every other
            caller prepends it like any guidance (:func:`render_guidance`).

    >>> Guidance("Check each step.", ("L0.reasoner.1",), policy=True)
    Guidance(text='Check each step.', item_ids=('L0.reasoner.1',), policy=True)
    """

    text: str = ""
    item_ids: tuple[str, ...] = ()
    policy: bool = False

    def __repr__(self) -> str:  # ``policy`` shown only when set, so plain guidance reads as before
        extra = ", policy=True" if self.policy else ""
        return f"Guidance(text={self.text!r}, item_ids={self.item_ids!r}{extra})"

    def prepend_to(self, text: str) -> str:
        """``text`` with this guidance in front, rendered through the ``memory_guidance`` template (``text`` itself
        when there is none). The result remembers where the block ends, so the prompt budget can drop its items
        first (:func:`with_guidance`).

        >>> print(Guidance("- check units").prepend_to("Solve 2+2."))
        Guidance from earlier problems (use it only where it applies):
        - check units
        <BLANKLINE>
        Solve 2+2.
        >>> Guidance().prepend_to("Solve 2+2.")
        'Solve 2+2.'
        """
        return with_guidance(text, render_guidance(self.text))

    def prepend_to_first(self, conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``conversation`` (a new list) with :meth:`prepend_to` applied to its first message."""
        if not self.text.strip():
            return list(conversation)
        first = {**conversation[0], "content": self.prepend_to(conversation[0]["content"])}
        return [first, *conversation[1:]]


@dataclass(frozen=True)
class Observation:
    """A finished question as a memory sees it after answering.

    Attributes:
        example: the question (memories defined to use gold signals read ``outcome["correct"]``, never the gold
            text; for the others the harness passes an example whose gold raises when read).
        trace: the debate trace, MRO trace, or the single-agent record (``{"id", "rounds": [], "single": {...}}``).
        outcome: at least ``correct`` (bool, or ``None`` when withheld), ``final_answer`` (str or None) and
            ``method``.
        decisions: the method's decisions in order (e.g. the moderator's per-round outputs, the Controller's
            actions); empty when the method makes none.
        served: the ids of the memory items this question's prompts were built with.
    """

    example: Example
    trace: Mapping[str, Any]
    outcome: Mapping[str, Any]
    decisions: Sequence[Mapping[str, Any]] = ()
    served: Sequence[str] = ()


@runtime_checkable
class Memory(Protocol):
    """What the evaluation harness and the prompt builders call. See the module docstring for the rules.

    Attributes:
        name: the memory's registry name (written into saved manifests).
    """

    name: str

    def begin_batch(self, examples: Sequence[Example]) -> None:
        """Prepare the guidance of a batch in batched calls (never reads a gold)."""
        ...

    def guidance(self, request: GuidanceRequest) -> Guidance:
        """Guidance for one prompt; the same request in a batch always gets the same answer."""
        ...

    def served_ids(self, example_id: str, method: str | None = None) -> list[str]:
        """Ids of the items served for ``example_id`` in this batch (to ``method`` or to every method)."""
        ...

    def observe(self, observation: Observation) -> None:
        """Record a finished question; it reaches guidance only after :meth:`end_batch`."""
        ...

    def end_batch(self) -> None:
        """Consolidate what was observed since the last call; guidance may change only here."""
        ...

    def save(self, folder: str | os.PathLike) -> Path:
        """Write the full state (committed and pending) into ``folder``. Returns the folder."""
        ...

    def load(self, folder: str | os.PathLike) -> None:
        """Replace the state with the one saved in ``folder``."""
        ...


def render_guidance(guidance: str) -> str:
    """Wrap a memory's guidance body in the ``memory_guidance`` template ("" stays "").

    Callers prepend the result (plus a blank line) to the prompt.

    >>> render_guidance("")
    ''
    >>> print(render_guidance("- check-units: convert units first."))
    Guidance from earlier problems (use it only where it applies):
    - check-units: convert units first.
    """
    body = (guidance or "").strip()
    return render("memory_guidance", guidance=body) if body else ""


def ask_guidance(
    memory: Any,
    example: Example,
    role: str,
    *,
    agent: int | None = None,
    step: int | None = None,
    method: str | None = None,
) -> Guidance:
    """THE way a prompt builder asks a memory: its :class:`Guidance` for one prompt (empty without a memory), which
    the builder puts in front of its prompt with :meth:`Guidance.prepend_to` / :meth:`Guidance.prepend_to_first`
    (or, for a policy answer, into its prompt's policy part).

    >>> from metamod.tasks.base import Example
    >>> ask_guidance(None, Example(id="q", question="?", gold="1", kind="math"), "reasoner")
    Guidance(text='', item_ids=())
    """
    if memory is None:
        return Guidance()
    return memory.guidance(GuidanceRequest(example, role, agent=agent, step=step, method=method))


def with_guidance(text: str, block: str) -> str:
    """``block`` (a rendered guidance block) and a blank line before ``text``; ``text`` alone when ``block`` is "".

    The result remembers where the block ends (:class:`~metamod.llm.budget.GuidedText`), so the prompt budget can
    drop its items first when the prompt would not fit the model's context.

    >>> with_guidance("Solve 2+2.", "")
    'Solve 2+2.'
    >>> with_guidance("Solve 2+2.", "Guidance:\\n- check units").block
    'Guidance:\\n- check units'
    """
    from metamod.llm.budget import GuidedText

    return GuidedText.join_block(block, text) if block else text


def check_role(role: str) -> str:
    """Validate a role name.

    >>> check_role("moderator")
    'moderator'
    >>> check_role("critic")
    Traceback (most recent call last):
    ...
    ValueError: Unknown memory role 'critic'; expected one of ('debater', 'single', 'moderator', 'judge', 'reasoner', 'monitor', 'controller')
    """
    if role not in ROLES:
        raise ValueError(f"Unknown memory role {role!r}; expected one of {ROLES}")
    return role


def check_outcome(example: Example, outcome: Mapping[str, Any]) -> None:
    """Fail clearly when ``outcome`` lacks a required key or ``correct`` is neither a bool nor ``None`` (withheld).

    >>> check_outcome(Example(id="q", question="?", gold="1", kind="math"), {"correct": True})
    Traceback (most recent call last):
    ...
    ValueError: observe(): outcome for example 'q' is missing ['final_answer', 'method']; expected keys ('correct', 'final_answer', 'method')
    """
    if not isinstance(outcome, Mapping):
        raise TypeError(f"observe(): outcome for example {example.id!r} must be a dict, got {type(outcome).__name__}")
    missing = [key for key in OUTCOME_KEYS if key not in outcome]
    if missing:
        raise ValueError(
            f"observe(): outcome for example {example.id!r} is missing {missing}; expected keys {OUTCOME_KEYS}"
        )
    if outcome["correct"] is not None and not isinstance(outcome["correct"], bool):
        raise ValueError(
            f"observe(): outcome['correct'] for example {example.id!r} must be a bool or None (withheld), got "
            f"{outcome['correct']!r}"
        )


def strip_gold_fields(value: Any) -> Any:
    """``value`` with every :data:`GOLD_FIELDS` key removed from its dicts, at any depth (lists and dicts copied).

    >>> strip_gold_fields({"id": "q", "gold": "4", "rounds": [{"eta": 1, "responses": [{"answer": "4"}]}]})
    {'id': 'q', 'rounds': [{'responses': [{'answer': '4'}]}]}
    """
    if isinstance(value, Mapping):
        return {k: strip_gold_fields(v) for k, v in value.items() if k not in GOLD_FIELDS}
    if isinstance(value, list | tuple):
        return [strip_gold_fields(v) for v in value]
    return value


def withhold_gold(observation: Observation) -> Observation:
    """The observation a memory NOT defined to use gold signals gets: no correctness, no gold-derived trace field,
    and an example whose gold raises :class:`~metamod.tasks.base.GoldWithheldError` when read.

    >>> from metamod.tasks.base import Example
    >>> seen = withhold_gold(Observation(Example(id="q", question="2+2?", gold="4", kind="math"),
    ...                                  {"id": "q", "gold": "4", "rounds": []},
    ...                                  {"correct": True, "final_answer": "4", "method": "cot"}))
    >>> seen.outcome["correct"], seen.trace, seen.example.prompt_text()
    (None, {'id': 'q', 'rounds': []}, '2+2?')
    >>> seen.example.gold
    Traceback (most recent call last):
    ...
    metamod.tasks.base.GoldWithheldError: example 'q': the gold answer is withheld here (only methods defined to use gold-derived signals see them; docs/memory.md, "Gold")
    """
    return Observation(
        observation.example.without_gold(),
        strip_gold_fields(observation.trace),
        {**observation.outcome, "correct": None},
        decisions=[strip_gold_fields(d) for d in observation.decisions],
        served=list(observation.served),
    )


def check_observation(observation: Observation) -> None:
    """Fail clearly on a malformed observation (bad outcome, trace not a dict, served not a list of str)."""
    if not isinstance(observation, Observation):
        raise TypeError(f"observe() takes an Observation, got {type(observation).__name__}")
    example = observation.example
    check_outcome(example, observation.outcome)
    if not isinstance(observation.trace, Mapping):
        raise TypeError(
            f"observe(): trace for example {example.id!r} must be a dict, got {type(observation.trace).__name__}"
        )
    if isinstance(observation.served, str) or not all(isinstance(s, str) for s in observation.served):
        raise TypeError(f"observe(): served for example {example.id!r} must be a list of item id strings")


@dataclass
class MemoryOptions:
    """Base of every memory's options dataclass (``memory_options`` in a config is checked against its fields)."""


class BaseMemory(ABC):
    """Shared plumbing: the per-batch served cache, the pending-observation queue, folder save/load.

    Subclasses implement :meth:`compute_guidance` (called at most once per distinct request per batch),
    :meth:`consolidate` (called by ``end_batch`` with the queued observations in a canonical order),
    :meth:`state_dict` / :meth:`load_state_dict` (JSON state) and, for numeric state, :meth:`array_state` /
    :meth:`load_array_state`. Optionally :meth:`prepare` (batched work at ``begin_batch``) and :meth:`record` (what
    of an observation to queue; the default keeps a JSON-safe copy without the example's gold).

    Class attributes:
        name: the registry name.
        options_class: the options dataclass (``memory_options`` is validated against its fields).
        uses_llm: whether the memory may call the memory LLM (the harness loads one only when True).

    Override :meth:`gold_use` when some options make the memory read gold-derived signals in ``observe``.
    """

    name: str = "base"
    options_class: ClassVar[type] = MemoryOptions
    uses_llm: ClassVar[bool] = False

    def __init__(self) -> None:
        self.batch_index = 0
        self.pending: list[dict[str, Any]] = []
        self._served: dict[tuple, Guidance] = {}
        self._prepared: set[str] = set()
        #: caller's bookkeeping saved with the state (the eval harness records the batches observed here)
        self.extra: dict[str, Any] = {}

    def _checked_options(self, options: Any) -> Any:
        """``options``, or the defaults of ``options_class`` for None; options of another class raise TypeError."""
        options = options if options is not None else self.options_class()
        if not isinstance(options, self.options_class):
            raise TypeError(f"memory {self.name!r} takes {self.options_class.__name__}, got {type(options).__name__}")
        return options

    def _set_llm(self, llm: Any, llm_sampling: Any, seed: int) -> None:
        """Keep the memory LLM and its decoding (None: greedy with ``seed``, 256 tokens) and the memory's seed."""
        from metamod.llm.base import SamplingConfig

        self.llm, self.seed = llm, seed
        self.llm_sampling = llm_sampling or SamplingConfig(temperature=0.0, max_tokens=256, seed=seed)

    @classmethod
    def gold_use(cls, options: Any) -> str | None:
        """What gold-derived signal these options make the memory read after answering (``None``: none).

        A memory whose method is defined to learn from correctness (MC²'s outcome tag, a curator told whether a
        solution was right) says so here; the harness then passes it ``outcome["correct"]`` and the trace's ``eta``,
        marks every method it serves ``uses_gold`` in results.json and the tables, and withholds them otherwise.
        """
        return None

    # ------------------------------------------------------------------ protocol
    def begin_batch(self, examples: Sequence[Example]) -> None:
        fresh = [ex for ex in examples if ex.id not in self._prepared]
        if fresh:
            self.prepare(fresh)
            self._prepared.update(ex.id for ex in fresh)

    def guidance(self, request: GuidanceRequest) -> Guidance:
        check_role(request.role)
        key = request.key()
        if key not in self._served:
            if request.example.id not in self._prepared:
                self.begin_batch([request.example])
            answer = self.compute_guidance(request)
            if not isinstance(answer, Guidance):
                raise TypeError(f"{self.name}.compute_guidance must return a Guidance, got {type(answer).__name__}")
            self._served[key] = answer
        return self._served[key]

    def served_ids(self, example_id: str, method: str | None = None) -> list[str]:
        ids: list[str] = []
        for (ex_id, _role, _agent, _step, m), answer in self._served.items():
            if ex_id == example_id and (m is None or method is None or m == method):
                ids.extend(i for i in answer.item_ids if i not in ids)
        return ids

    def observe(self, observation: Observation) -> None:
        check_observation(observation)
        self.pending.append(self.record(observation))

    def end_batch(self) -> None:
        records = sorted(self.pending, key=lambda r: json.dumps(r, sort_keys=True, default=str))
        self.consolidate(records)
        self.pending = []
        self._served = {}
        self._prepared = set()
        self.batch_index += 1

    # ------------------------------------------------------------------ hooks
    def prepare(self, examples: Sequence[Example]) -> None:
        """Batched preparation of guidance for ``examples`` (default: nothing). Never reads a gold."""
        return None

    @abstractmethod
    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        """The guidance for one request from the committed state (cached by :meth:`guidance`)."""
        raise NotImplementedError

    def record(self, observation: Observation) -> dict[str, Any]:
        """The JSON-safe record of an observation that is queued until ``end_batch`` (no gold text)."""
        ex = observation.example
        return {
            "id": ex.id,
            "question": ex.prompt_text(),
            "kind": ex.kind,
            "trace": _json_safe({k: v for k, v in observation.trace.items() if k != "gold"}),
            "outcome": _json_safe(observation.outcome),
            "decisions": _json_safe(list(observation.decisions)),
            "served": list(observation.served),
        }

    @abstractmethod
    def consolidate(self, records: list[dict[str, Any]]) -> None:
        """Fold the batch's queued records into the committed state (records sorted canonically)."""
        raise NotImplementedError

    def config_dict(self) -> dict[str, Any]:
        """The settings this memory was built with (JSON-serialisable)."""
        return {}

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The JSON part of the committed state (the base adds batch index, queue and served cache)."""
        raise NotImplementedError

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict`."""
        raise NotImplementedError

    def array_state(self) -> dict[str, np.ndarray]:
        """Numeric state saved next to the manifest (default: none)."""
        return {}

    def load_array_state(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Restore what :meth:`array_state` returned."""
        return None

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | os.PathLike) -> Path:
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"memory state {folder} is a file; memory states are folders (protocol v{FILE_VERSION})")
        folder.mkdir(parents=True, exist_ok=True)
        arrays = self.array_state()
        array_file = None
        if arrays:
            array_file = f"arrays-{self.batch_index}-{uuid.uuid4().hex[:8]}.npz"
            tmp = folder / f".{array_file}.tmp"
            with open(tmp, "wb") as handle:
                np.savez(handle, **{k: np.asarray(v) for k, v in arrays.items()})
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, folder / array_file)
        manifest = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "memory": self.name,
            "config": self.config_dict(),
            "batch_index": self.batch_index,
            "pending": self.pending,
            "served": [[list(k), list(g.item_ids), g.text, g.policy] for k, g in self._served.items()],
            "prepared": sorted(self._prepared),
            "extra": self.extra,
            "state": self.state_dict(),
            "arrays": array_file,
        }
        atomic_write_json(folder / MANIFEST, manifest)  # the commit point
        for stale in folder.glob("arrays-*.npz"):
            if stale.name != array_file:
                stale.unlink(missing_ok=True)
        logger.debug("saved memory %s to %s", self.name, folder)
        return folder

    def load(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        path = folder / MANIFEST
        payload = read_manifest(folder, self.name)
        saved_config = payload.get("config") or {}
        current = self.config_dict()
        changed = sorted(k for k in set(saved_config) | set(current) if saved_config.get(k) != current.get(k))
        if changed:
            logger.warning(
                "memory %s loaded from %s with different settings for %s; using the current ones",
                self.name,
                path,
                changed,
            )
        try:
            self.batch_index = int(payload.get("batch_index", 0))
            self.pending = [dict(r) for r in payload.get("pending", [])]
            self._served = {
                tuple(k): Guidance(
                    text=str(text), item_ids=tuple(str(i) for i in ids), policy=bool(policy and policy[0])
                )
                for k, ids, text, *policy in payload.get("served", [])
            }
            self._prepared = {str(i) for i in payload.get("prepared", [])}
            self.extra = dict(payload.get("extra") or {})
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: memory state is malformed: {err}") from err
        self.load_state_dict(payload.get("state") or {})
        self.load_array_state(read_arrays(folder, payload))


def read_manifest(folder: str | os.PathLike, name: str) -> dict[str, Any]:
    """The manifest of a saved memory folder, checked: it exists, is a metamod memory of this version, and holds a
    ``name`` memory. Every problem is one error naming the file and what was expected."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        what = (
            "a file, not a folder" if folder.is_file() else "missing" if not folder.exists() else f"without {MANIFEST}"
        )
        raise FileNotFoundError(
            f"memory state {folder} is {what}: expected a folder with {MANIFEST} (written by memory.save)"
        )
    payload = load_json(path, what="metamod memory manifest (a JSON object)")
    if not isinstance(payload, dict) or payload.get("format") != FILE_FORMAT:
        raise InputError(f"{path} is not a metamod memory manifest (expected 'format': {FILE_FORMAT!r})")
    if payload.get("version") != FILE_VERSION:
        raise InputError(f"{path} has memory version {payload.get('version')!r}; this metamod reads {FILE_VERSION}")
    if payload.get("memory") != name:
        raise InputError(
            f"{path} holds a {payload.get('memory')!r} memory but this is {name!r}; set memory: {payload.get('memory')} "
            "to load it"
        )
    return payload


def read_arrays(folder: str | os.PathLike, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The arrays a manifest names (``{}`` when none), read now."""
    array_file = payload.get("arrays")
    if not array_file:
        return {}
    array_path = Path(folder) / str(array_file)
    if not array_path.is_file():
        raise FileNotFoundError(
            f"{Path(folder) / MANIFEST} names array file {array_file!r}, which is missing from {folder}"
        )
    return load_npz(array_path, what="memory arrays")


def check_saved_memory(folder: str | os.PathLike, name: str) -> None:
    """Everything :meth:`BaseMemory.load` reads from ``folder`` for a ``name`` memory, read and checked without
    building the memory (or its LLM): what ``eval --memory_path`` runs before it writes anything."""
    payload = read_manifest(folder, name)
    read_arrays(folder, payload)


def _json_safe(value: Any) -> Any:
    """A JSON round trip (tuples become lists, unknown objects their ``str``) so queued records save as they are."""
    return json.loads(json.dumps(value, default=str))


class NoMemory(BaseMemory):
    """The null memory: no guidance, observations ignored. Used when ``memory: none``.

    >>> from metamod.tasks.base import Example
    >>> mem = NoMemory()
    >>> ex = Example(id="q", question="2+2?", gold="4", kind="math")
    >>> mem.observe(Observation(ex, {}, {"correct": True, "final_answer": "4", "method": "cot"})); mem.end_batch()
    >>> mem.guidance(GuidanceRequest(ex, "single")).text
    ''
    """

    name = "none"

    def compute_guidance(self, request: GuidanceRequest) -> Guidance:
        return Guidance()

    def record(self, observation: Observation) -> dict[str, Any]:
        return {"id": observation.example.id}

    def consolidate(self, records: list[dict[str, Any]]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None
