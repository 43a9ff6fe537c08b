"""Memories that carry experience across questions: guidance before solving, observation after.

See ``docs/memory.md``. The protocol (version 2) is in :mod:`metamod.memory.base`, the registry, options and
config in :mod:`metamod.memory.registry`, embeddings in :mod:`metamod.memory.embed`. Memories: the behaviour bank
(:mod:`~metamod.memory.behaviour_bank`), MC²'s MetaCognitive Accumulator (:mod:`~metamod.memory.mca`),
Buffer-of-Thought (:mod:`~metamod.memory.bot`), the Bayesian Cheatsheet's (:mod:`~metamod.memory.cheatsheet`,
:mod:`~metamod.memory.dc`, :mod:`~metamod.memory.ace`) and MARCO's (:mod:`~metamod.memory.marco`).

The names below are imported from their modules on first use, so importing one memory module (or reading a
memory config) does not import every memory.

>>> from metamod.memory import MemoryConfig
>>> MemoryConfig().memory
'none'
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(
        [
            "ROLES",
            "BaseMemory",
            "Guidance",
            "GuidanceRequest",
            "Memory",
            "MemoryOptions",
            "NoMemory",
            "Observation",
            "ask_guidance",
            "atomic_write_json",
            "render_guidance",
            "with_guidance",
        ],
        "metamod.memory.base",
    ),
    **dict.fromkeys(["BehaviourBank", "BehaviourBankOptions"], "metamod.memory.behaviour_bank"),
    **dict.fromkeys(["EMBEDDERS", "Embedder", "build_embedder", "cosine_top_k"], "metamod.memory.embed"),
    **dict.fromkeys(
        [
            "MEMORIES",
            "MemoryConfig",
            "build_memory",
            "build_memory_from_config",
            "mc2_batch_size",
            "needs_llm",
            "parse_memory_options",
        ],
        "metamod.memory.registry",
    ),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'metamod.memory' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
