"""Memories that carry experience across questions: guidance before solving, observation after.

See ``docs/memory.md``. The protocol (version 2) is in :mod:`metamod.memory.base`, the registry, options and
config in :mod:`metamod.memory.registry`, embeddings in :mod:`metamod.memory.embed`. Memories: the behaviour bank
(:mod:`~metamod.memory.behaviour_bank`), MC²'s MetaCognitive Accumulator (:mod:`~metamod.memory.mca`) and
Buffer-of-Thought (:mod:`~metamod.memory.bot`).
"""

from metamod.memory.base import (
    ROLES,
    BaseMemory,
    Guidance,
    GuidanceRequest,
    Memory,
    MemoryOptions,
    NoMemory,
    Observation,
    atomic_write_json,
    render_guidance,
    with_guidance,
)
from metamod.memory.behaviour_bank import BehaviourBank, BehaviourBankOptions
from metamod.memory.embed import EMBEDDERS, Embedder, build_embedder, cosine_top_k
from metamod.memory.registry import (
    MEMORIES,
    MemoryConfig,
    build_memory,
    build_memory_from_config,
    mc2_batch_size,
    needs_llm,
    parse_memory_options,
)

__all__ = [
    "EMBEDDERS",
    "MEMORIES",
    "ROLES",
    "BaseMemory",
    "BehaviourBank",
    "BehaviourBankOptions",
    "Embedder",
    "Guidance",
    "GuidanceRequest",
    "Memory",
    "MemoryConfig",
    "MemoryOptions",
    "NoMemory",
    "Observation",
    "atomic_write_json",
    "build_embedder",
    "build_memory",
    "build_memory_from_config",
    "cosine_top_k",
    "mc2_batch_size",
    "needs_llm",
    "parse_memory_options",
    "render_guidance",
    "with_guidance",
]
