"""The memory protocol: guidance before a question is solved, observation after, consolidation per batch.

The evaluation harness drives every memory the same way::

    for batch in batches(examples, memory_batch_size):
        for example in batch:
            text = memory.guidance(example, "debater")   # "" when there is nothing useful
            ... solve: a non-empty ``text`` is wrapped in the ``memory_guidance`` template
                (:func:`render_guidance`) and prepended to the solver's prompt ...
            memory.observe(example, trace, {"correct": ok, "final_answer": answer, "method": method})
        memory.end_batch()                                # consolidate; only now can guidance change
        memory.save(path)                                 # resume point

Rules every memory follows:

- **No gold before answering.** ``guidance(example, role)`` may read the question (``example.prompt_text()``),
  ``example.id``, ``example.kind`` and ``example.choices`` only, never ``example.gold`` or anything derived from
  it; the same question with a different gold gets the same guidance. Gold-derived signals (``outcome["correct"]``,
  the trace's per-round ``eta``) reach a memory only through ``observe``, after the question is finished.
- **Deterministic.** The same sequence of calls gives the same guidance and the same saved state.
- **Batch-synchronous.** Observations change guidance only after ``end_batch()``: inside a batch, guidance does
  not depend on which questions of the same batch were already finished, nor in which order (so batched or
  sharded evaluation gives the same results as a sequential loop).
- **Body only.** ``guidance`` returns the guidance body (e.g. one ``- name: instruction`` line per behaviour);
  the caller wraps it once in the ``memory_guidance`` template, so every memory is framed the same way.
- **Saved as JSON** with an atomic write (:func:`atomic_write_json`), so an interrupted run never leaves a torn file.

>>> from metamod.tasks.base import Example
>>> mem = NoMemory()
>>> mem.guidance(Example(id="q", question="1+1?", gold="2", kind="math"), "debater")
''
>>> isinstance(mem, Memory)
True
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from metamod.errors import load_json
from metamod.files import atomic_write_json
from metamod.prompts import render
from metamod.tasks.base import Example

logger = logging.getLogger(__name__)

#: Roles a memory may be asked to guide. ``debater``: a debate participant; ``single``: a single-agent baseline;
#: ``moderator``/``judge``: whoever decides when to stop and what the answer is; ``reasoner``/``monitor``/
#: ``controller``: the three roles of the Reasoner-Monitor-Controller loop.
ROLES: tuple[str, ...] = ("debater", "single", "moderator", "judge", "reasoner", "monitor", "controller")

#: Keys every ``outcome`` passed to ``observe`` must carry.
OUTCOME_KEYS: tuple[str, ...] = ("correct", "final_answer", "method")

#: Marker and version written into every saved memory file.
FILE_FORMAT = "metamod-memory"
FILE_VERSION = 1


@runtime_checkable
class Memory(Protocol):
    """What the evaluation harness and the debaters call. See the module docstring for the rules.

    Attributes:
        name: the memory's registry name (written into saved files).
    """

    name: str

    def guidance(self, example: Example, role: str) -> str:
        """Guidance body for a solver in ``role`` before it answers ``example`` ("" for none). Never reads the gold.

        The caller wraps a non-empty body with :func:`render_guidance` (the ``memory_guidance`` template).
        """
        ...

    def observe(self, example: Example, trace: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
        """Record a finished question: its debate trace (or single-agent record) and outcome."""
        ...

    def end_batch(self) -> None:
        """Consolidate what was observed since the last call; guidance may change only here."""
        ...

    def save(self, path: str | os.PathLike) -> Path:
        """Write the full state (committed and pending) as JSON, atomically. Returns the path."""
        ...

    def load(self, path: str | os.PathLike) -> None:
        """Replace the state with the one saved at ``path``."""
        ...


def render_guidance(guidance: str) -> str:
    """Wrap a memory's guidance body in the ``memory_guidance`` template ("" stays "").

    Callers prepend the result (plus a blank line) to the solver's prompt.

    >>> render_guidance("")
    ''
    >>> print(render_guidance("- check-units: convert units first."))
    Guidance from earlier problems (use it only where it applies):
    - check-units: convert units first.
    """
    body = (guidance or "").strip()
    return render("memory_guidance", guidance=body) if body else ""


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
    """Fail clearly when ``outcome`` lacks a required key or ``correct`` is not a bool.

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
    if not isinstance(outcome["correct"], bool):
        raise ValueError(
            f"observe(): outcome['correct'] for example {example.id!r} must be a bool, got {outcome['correct']!r}"
        )


class BaseMemory(ABC):
    """Shared plumbing: JSON save/load around ``state_dict`` / ``load_state_dict``, which subclasses implement.

    A saved file looks like ``{"format": "metamod-memory", "version": 1, "memory": <name>, "config": {...},
    "state": {...}}``. ``config`` records the settings the memory was built with (informational: a reload keeps
    the current settings and logs the keys that differ).
    """

    name: str = "base"

    @abstractmethod
    def guidance(self, example: Example, role: str) -> str:
        raise NotImplementedError

    @abstractmethod
    def observe(self, example: Example, trace: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
        raise NotImplementedError

    @abstractmethod
    def end_batch(self) -> None:
        raise NotImplementedError

    def config_dict(self) -> dict[str, Any]:
        """The settings this memory was built with (JSON-serialisable)."""
        return {}

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly where this memory is (JSON-serialisable)."""
        raise NotImplementedError

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict`."""
        raise NotImplementedError

    def save(self, path: str | os.PathLike) -> Path:
        payload = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "memory": self.name,
            "config": self.config_dict(),
            "state": self.state_dict(),
        }
        out = atomic_write_json(path, payload)
        logger.debug("saved memory %s to %s", self.name, out)
        return out

    def load(self, path: str | os.PathLike) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"Memory file not found: {path}")
        payload = load_json(path, what="metamod memory file (a JSON object)")
        if not isinstance(payload, dict) or payload.get("format") != FILE_FORMAT:
            raise ValueError(f"{path} is not a metamod memory file (expected 'format': {FILE_FORMAT!r})")
        if payload.get("version") != FILE_VERSION:
            raise ValueError(
                f"{path} has memory file version {payload.get('version')!r}; this metamod reads {FILE_VERSION}"
            )
        if payload.get("memory") != self.name:
            raise ValueError(
                f"{path} holds a {payload.get('memory')!r} memory but this is {self.name!r}; "
                f"set memory: {payload.get('memory')} to load it"
            )
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
        self.load_state_dict(payload.get("state") or {})


class NoMemory(BaseMemory):
    """The null memory: no guidance, observations ignored. Used when ``memory: none``.

    >>> from metamod.tasks.base import Example
    >>> mem = NoMemory()
    >>> ex = Example(id="q", question="2+2?", gold="4", kind="math")
    >>> mem.observe(ex, {}, {"correct": True, "final_answer": "4", "method": "cot"}); mem.end_batch()
    >>> mem.guidance(ex, "single")
    ''
    """

    name = "none"

    def guidance(self, example: Example, role: str) -> str:
        check_role(role)
        return ""

    def observe(self, example: Example, trace: Mapping[str, Any], outcome: Mapping[str, Any]) -> None:
        check_outcome(example, outcome)

    def end_batch(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None
