"""Memories that carry experience across questions: guidance before solving, observation after.

See ``docs/memory.md``. The protocol is in :mod:`metamod.memory.base`, the registry and config in
:mod:`metamod.memory.registry`, embeddings in :mod:`metamod.memory.embed`.
"""

from metamod.memory.base import ROLES, BaseMemory, Memory, NoMemory, atomic_write_json, render_guidance
from metamod.memory.behaviour_bank import BehaviourBank
from metamod.memory.embed import EMBEDDERS, Embedder, build_embedder, cosine_top_k
from metamod.memory.registry import MEMORIES, MemoryConfig, build_memory, build_memory_from_config

__all__ = [
    "EMBEDDERS",
    "MEMORIES",
    "ROLES",
    "BaseMemory",
    "BehaviourBank",
    "Embedder",
    "Memory",
    "MemoryConfig",
    "NoMemory",
    "atomic_write_json",
    "build_embedder",
    "build_memory",
    "build_memory_from_config",
    "cosine_top_k",
    "render_guidance",
]
