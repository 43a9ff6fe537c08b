"""Which memories exist, their shared config, and how to build one.

``MEMORIES`` is the one ``name -> class`` dict for this extension point. A memory class takes keyword options in
its constructor (for :func:`build_memory`) and a ``from_config(config, *, generator=None)`` classmethod (for
:func:`build_memory_from_config`, which commands use).

>>> sorted(MEMORIES)
['behaviour_bank', 'none']
>>> build_memory("none").name
'none'
>>> build_memory("behaviour_bank", top_k=2).top_k
2
>>> build_memory("behaviour_bank", topk=2)
Traceback (most recent call last):
...
TypeError: Unknown option(s) ['topk'] for memory 'behaviour_bank'. Valid options: dedup_threshold, distill_max_tokens, distiller, embedder, embedder_options, eviction, generator, max_behaviours_per_question, max_entries, max_keys_per_entry, min_similarity, top_k
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metamod.memory.base import Memory, NoMemory
from metamod.memory.behaviour_bank import DISTILLERS, EVICTION_POLICIES, BehaviourBank
from metamod.memory.embed import EMBEDDERS
from metamod.registry import resolve, valid_names_help

logger = logging.getLogger(__name__)

#: memory name -> class.
MEMORIES: dict[str, type] = {
    "none": NoMemory,
    "behaviour_bank": BehaviourBank,
}


def build_memory(name: str = "none", **options: Any) -> Memory:
    """Build a memory by registry name (or dotted path) with constructor options.

    Args:
        name: a key of :data:`MEMORIES` or ``package.module:Class``.
        **options: keyword arguments of that memory's constructor.

    Returns:
        The memory.

    Raises:
        KeyError: unknown name (the message lists the valid ones).
        TypeError: an option the memory does not take (the message lists the valid ones).
    """
    cls = resolve(MEMORIES, name, what="memory")
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(options) - set(params))
    if unknown and not takes_any:
        valid = ", ".join(sorted(params)) or "(none)"
        raise TypeError(f"Unknown option(s) {unknown} for memory {name!r}. Valid options: {valid}")
    return cls(**options)


@dataclass
class MemoryConfig:
    """Memory settings shared by commands that solve questions (``metamod eval``).

    Keys are prefixed with ``memory_`` because commands merge several config dataclasses into one flat namespace.
    Options that only one memory uses say so in their help.
    """

    memory: str = field(
        default="none",
        metadata={"help": f"Memory that feeds guidance into prompts. {valid_names_help(MEMORIES)}"},
    )
    memory_path: str | None = field(
        default=None,
        metadata={
            "help": "JSON file for the memory's state: loaded at start when it exists (resume / warm start) and "
            "saved by the harness after every batch. None: start empty, keep nothing."
        },
    )
    memory_batch_size: int = field(
        default=16,
        metadata={
            "help": "Questions per memory batch; the harness calls end_batch() after each (observations "
            "reach guidance only then)."
        },
    )
    memory_top_k: int = field(default=3, metadata={"help": "behaviour_bank: most behaviours shown per request."})
    memory_min_similarity: float = field(
        default=0.2,
        metadata={
            "help": "behaviour_bank: minimum cosine similarity between the question and a behaviour's source "
            "questions for the behaviour to be shown."
        },
    )
    memory_max_entries: int = field(default=256, metadata={"help": "behaviour_bank: bank size cap."})
    memory_eviction: str = field(
        default="fifo",
        metadata={
            "help": f"behaviour_bank: which entries go when the bank is full, one of {EVICTION_POLICIES} "
            "(fifo: oldest first; usage: least retrieved first)."
        },
    )
    memory_dedup_threshold: float = field(
        default=0.9,
        metadata={
            "help": "behaviour_bank: cosine similarity at or above which a new behaviour is merged into an "
            "existing one for the same roles."
        },
    )
    memory_max_behaviours_per_question: int = field(
        default=4, metadata={"help": "behaviour_bank: most behaviours distilled from one finished question."}
    )
    memory_distiller: str = field(
        default="rule",
        metadata={
            "help": f"behaviour_bank: how behaviours are distilled, one of {DISTILLERS} (rule: deterministic, "
            "offline; llm: the evaluation's generator writes them with the memory_distill_behaviour prompt)."
        },
    )
    memory_embedder: str = field(
        default="hashing",
        metadata={"help": f"Text embedder for retrieval. {valid_names_help(EMBEDDERS)}"},
    )
    memory_embedder_model: str | None = field(
        default=None,
        metadata={"help": "Local model directory for memory_embedder: sentence-transformers (never downloaded)."},
    )

    def __post_init__(self) -> None:
        if self.memory not in MEMORIES and "." not in self.memory and ":" not in self.memory:
            raise ValueError(f"memory={self.memory!r} is not a known memory. {valid_names_help(MEMORIES)}")
        if self.memory_batch_size < 1:
            raise ValueError(f"memory_batch_size must be >= 1, got {self.memory_batch_size}")
        if self.memory_top_k < 1:
            raise ValueError(f"memory_top_k must be >= 1, got {self.memory_top_k}")
        if not -1.0 <= self.memory_min_similarity <= 1.0:
            raise ValueError(f"memory_min_similarity must be in [-1, 1], got {self.memory_min_similarity}")
        if self.memory_max_entries < 1:
            raise ValueError(f"memory_max_entries must be >= 1, got {self.memory_max_entries}")
        if self.memory_eviction not in EVICTION_POLICIES:
            raise ValueError(f"memory_eviction={self.memory_eviction!r}; use one of {EVICTION_POLICIES}")
        if not 0.0 < self.memory_dedup_threshold <= 1.0:
            raise ValueError(f"memory_dedup_threshold must be in (0, 1], got {self.memory_dedup_threshold}")
        if self.memory_max_behaviours_per_question < 1:
            raise ValueError(
                f"memory_max_behaviours_per_question must be >= 1, got {self.memory_max_behaviours_per_question}"
            )
        if self.memory_distiller not in DISTILLERS:
            raise ValueError(f"memory_distiller={self.memory_distiller!r}; use one of {DISTILLERS}")
        if (
            self.memory_embedder not in EMBEDDERS
            and "." not in self.memory_embedder
            and ":" not in self.memory_embedder
        ):
            raise ValueError(f"memory_embedder={self.memory_embedder!r} is not known. {valid_names_help(EMBEDDERS)}")
        if self.memory_embedder == "sentence-transformers" and not self.memory_embedder_model:
            raise ValueError(
                "memory_embedder=sentence-transformers needs memory_embedder_model: /local/model/dir "
                "(models are never downloaded); or use memory_embedder: hashing"
            )


def build_memory_from_config(config: MemoryConfig, *, generator: Any = None) -> Memory:
    """Build the configured memory and load ``config.memory_path`` when that file exists.

    Args:
        config: the memory settings.
        generator: the evaluation's :class:`metamod.llm.base.Generator` (needed by ``memory_distiller: llm``).

    Returns:
        The memory, fresh or resumed.

    >>> build_memory_from_config(MemoryConfig()).name
    'none'
    """
    cls = resolve(MEMORIES, config.memory, what="memory")
    if hasattr(cls, "from_config"):
        memory = cls.from_config(config, generator=generator)
    else:
        memory = cls()
    if config.memory_path and Path(config.memory_path).is_file():
        memory.load(config.memory_path)
        logger.info("memory %s resumed from %s", config.memory, config.memory_path)
    return memory
