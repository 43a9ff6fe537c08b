"""Which memories exist, their options, the memory LLM, and how to build one.

``MEMORIES`` is the one ``name -> class path`` table for this extension point (a class is imported when a memory
of its name is built or checked, so reading a config imports no memory code). Each memory class has an ``options_class``
(a dataclass with help text and checks): ``memory_options`` in a config is validated against its fields, so a
typo or an option of another memory is refused with the valid names.

>>> sorted(MEMORIES)
['ace', 'behaviour_bank', 'bot', 'cheatsheet', 'dc', 'marco', 'mca', 'none']
>>> build_memory("none").name
'none'
>>> build_memory("behaviour_bank", top_k=2).options.top_k
2
>>> build_memory("behaviour_bank", topk=2)
Traceback (most recent call last):
...
ValueError: memory_options: 'topk' is not an option of memory 'behaviour_bank'; valid: dedup_threshold, distill_max_tokens, distiller, embedder, embedder_model, eviction, max_behaviours_per_question, max_entries, max_keys_per_entry, min_similarity, top_k
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metamod.memory.base import MANIFEST, Memory, NoMemory
from metamod.registry import import_dotted, resolve, valid_names_help

logger = logging.getLogger(__name__)

#: memory name -> ``module:Class`` of its class (imported on first use).
MEMORIES: dict[str, str] = {
    "none": "metamod.memory.base:NoMemory",
    "behaviour_bank": "metamod.memory.behaviour_bank:BehaviourBank",
    "mca": "metamod.memory.mca:MetaCognitiveAccumulator",
    "bot": "metamod.memory.bot:BufferOfThought",
    "dc": "metamod.memory.dc:DynamicCheatsheet",
    "cheatsheet": "metamod.memory.cheatsheet:Cheatsheet",
    "ace": "metamod.memory.ace:ACEMemory",
    "marco": "metamod.memory.marco:MarcoMemory",
}

#: The memory LLM's model when none is set: the embedded SmolLM2 (runs on the CPU).
DEFAULT_MEMORY_MODEL = "smollm2-135m-instruct"


def memory_class(name: str) -> type:
    """The class registered as ``name`` (or a dotted path).

    >>> memory_class("mca").__name__
    'MetaCognitiveAccumulator'
    """
    found = resolve(MEMORIES, name, what="memory")
    return import_dotted(found) if isinstance(found, str) else found


def parse_memory_options(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """Build memory ``name``'s options dataclass from a dict, refusing unknown keys.

    >>> parse_memory_options("mca", {"window": 2}).window
    2
    """
    cls = memory_class(name)
    options_cls = cls.options_class
    valid = sorted(f.name for f in dataclasses.fields(options_cls))
    for key in options or {}:
        if key not in valid:
            raise ValueError(
                f"memory_options: {key!r} is not an option of memory {name!r}; valid: {', '.join(valid) or '(none)'}"
            )
    try:
        return options_cls(**dict(options or {}))
    except (TypeError, ValueError) as err:
        raise ValueError(f"memory_options for memory {name!r}: {err}") from err


def build_memory(
    name: str = "none", *, llm: Any = None, llm_sampling: Any = None, seed: int = 0, **options: Any
) -> Memory:
    """Build a memory by registry name (or dotted path) with its options as keywords.

    Args:
        name: a key of :data:`MEMORIES` or ``package.module:Class``.
        llm: the memory LLM (a :class:`metamod.llm.base.Generator`) for memories that write text with one.
        llm_sampling: its decoding (:class:`metamod.llm.base.SamplingConfig`; None: greedy, 256 tokens).
        seed: the memory's seed (tie-breaks, sampling).
        **options: fields of the memory's options dataclass.

    Raises:
        KeyError: unknown name (the message lists the valid ones).
        ValueError: an option the memory does not take, or a bad value (the message names it).
    """
    cls = memory_class(name)
    parsed = parse_memory_options(name, options)
    if cls is NoMemory:
        return NoMemory()
    return cls(parsed, llm=llm, llm_sampling=llm_sampling, seed=seed)


def needs_llm(name: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether memory ``name`` with these options calls the memory LLM (the harness loads one only then).

    >>> needs_llm("behaviour_bank"), needs_llm("behaviour_bank", {"distiller": "llm"}), needs_llm("none")
    (False, True, False)
    """
    cls = memory_class(name)
    if not getattr(cls, "uses_llm", False):
        return False
    wants = getattr(cls, "wants_llm", None)
    return bool(wants(parse_memory_options(name, options))) if wants else True


@dataclass
class MemoryConfig:
    """Memory settings of commands that solve questions (``metamod eval``).

    Keys are prefixed with ``memory_`` because commands merge several config dataclasses into one flat namespace;
    each memory's own settings go in ``memory_options`` (checked against that memory's options dataclass).
    """

    memory: str = field(
        default="none",
        metadata={
            "help": "Memory that feeds guidance into every method's prompts (methods with a memory of their own, "
            f"e.g. mc2 or bot, keep theirs). {valid_names_help(MEMORIES)}"
        },
    )
    memory_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "The memory's own options as a dict (see docs/memory.md and each memory's options class), "
            'e.g. {"top_k": 3, "window": 3}. Keys are checked against the fields of the memories in use.'
        },
    )
    task_memory_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "Per task, memory_options that override the shared ones for that task's memories, e.g. "
            '{"aime25": {"refit_interval": 10}} (the Bayesian Cheatsheet sets g per dataset, its Table 3).'
        },
    )
    memory_scope: str = field(
        default="task",
        metadata={
            "help": "task: every memory is keyed by (seed, task, method) and starts cold at each task (MC2 Alg. 1; "
            "BC D.4), saved in memory-seed<k>[-<method>]/<task>/. run: one memory per (seed, method) carried from "
            "task to task in config order (MC2 appendix G's transfer), saved in memory-seed<k>[-<method>]/."
        },
    )
    memory_path: str | None = field(
        default=None,
        metadata={
            "help": "Saved memory folder to warm-start every fresh memory from (transfer from another run, e.g. "
            "runs/x/memory-seed0-mc2/gsm8k); the run's own state then lives in its output folder, which resume "
            "prefers. None: start empty."
        },
    )
    memory_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Questions per memory batch; observations reach guidance only after each batch. None: "
            "min(100, max(10, floor(N / 10))) for a task of N questions (MC2's rule)."
        },
    )
    memory_seed: int = field(default=0, metadata={"help": "Seed of the memory (added to the eval seed)."})
    memory_backend: str = field(
        default="hf", metadata={"help": "Backend of the memory LLM (hf, vllm, openai), used by memories that write."}
    )
    memory_model: str = field(
        default=DEFAULT_MEMORY_MODEL,
        metadata={"help": "Memory LLM: a folder, Hub id, served name, or embedded alias (default: embedded SmolLM2)."},
    )
    memory_backend_options: dict = field(
        default_factory=dict, metadata={"help": "BackendConfig options of the memory LLM (e.g. {device: cpu})."}
    )
    memory_temperature: float = field(default=0.0, metadata={"help": "Memory LLM sampling temperature (0: greedy)."})
    memory_max_tokens: int = field(default=256, metadata={"help": "Memory LLM generation budget per call."})

    def __post_init__(self) -> None:
        if self.memory not in MEMORIES and "." not in self.memory and ":" not in self.memory:
            raise ValueError(f"memory={self.memory!r} is not a known memory. {valid_names_help(MEMORIES)}")
        if self.memory_batch_size is not None and self.memory_batch_size < 1:
            raise ValueError(f"memory_batch_size must be >= 1 (or None for MC2's rule), got {self.memory_batch_size}")
        if not isinstance(self.memory_options, dict):
            raise ValueError(f"memory_options must be a dict, got {type(self.memory_options).__name__}")
        if self.memory_scope not in ("task", "run"):
            raise ValueError(f"memory_scope must be task or run, got {self.memory_scope!r}")
        if not isinstance(self.task_memory_options, dict) or not all(
            isinstance(v, dict) for v in self.task_memory_options.values()
        ):
            raise ValueError(
                "task_memory_options must map task names to dicts of memory options, e.g. "
                f'{{"aime25": {{"refit_interval": 10}}}}; got {self.task_memory_options!r}'
            )
        if self.memory_temperature < 0:
            raise ValueError(f"memory_temperature must be >= 0, got {self.memory_temperature}")
        if self.memory_max_tokens < 1:
            raise ValueError(f"memory_max_tokens must be >= 1, got {self.memory_max_tokens}")
        if self.memory not in (None, "none"):  # the chosen memory's values; keys of other memories in use are
            parse_memory_options(self.memory, self.options_for(self.memory))  # checked by check_memory_options

    def options_for(
        self, name: str, defaults: Mapping[str, Any] | None = None, *, task: str | None = None
    ) -> dict[str, Any]:
        """Options of memory ``name``: ``defaults`` updated with the ``memory_options`` keys that memory has, then
        with ``task_memory_options[task]``'s.

        >>> config = MemoryConfig(memory_options={"window": 2}, task_memory_options={"math500": {"window": 4}})
        >>> config.options_for("mca", {"consolidate": False}), config.options_for("mca", task="math500")
        ({'consolidate': False, 'window': 2}, {'window': 4})
        """
        fields = {f.name for f in dataclasses.fields(memory_class(name).options_class)}
        out = dict(defaults or {})
        out.update({k: v for k, v in self.memory_options.items() if k in fields})
        if task is not None:
            out.update({k: v for k, v in (self.task_memory_options.get(task) or {}).items() if k in fields})
        return out

    def batch_size_for(self, num_questions: int) -> int:
        """This config's memory batch for a task of ``num_questions`` questions.

        >>> [MemoryConfig().batch_size_for(n) for n in (30, 500, 1319, 5000)]
        [10, 50, 100, 100]
        >>> MemoryConfig(memory_batch_size=4).batch_size_for(500)
        4
        """
        return self.memory_batch_size if self.memory_batch_size is not None else mc2_batch_size(num_questions)


def mc2_batch_size(num_questions: int) -> int:
    """MC2's batch rule: ``min(100, max(10, floor(N / 10)))``.

    >>> [mc2_batch_size(n) for n in (100, 500, 800, 1319)]
    [10, 50, 80, 100]
    """
    return min(100, max(10, num_questions // 10))


def check_memory_options(config: MemoryConfig, names: list[str]) -> None:
    """Every ``memory_options`` key must be an option of at least one memory in use (``names``)."""
    names = [n for n in names if n not in (None, "none")]
    given = config.memory_options or config.task_memory_options
    if not given or not names:
        if given and not names:
            raise ValueError(
                "memory_options / task_memory_options is set but no memory is in use (set memory, or a method with a "
                "memory)"
            )
        return
    fields = {n: {f.name for f in dataclasses.fields(memory_class(n).options_class)} for n in names}
    per_task = [(f"task_memory_options[{t!r}]", o) for t, o in config.task_memory_options.items()]
    for where, options in [("memory_options", config.memory_options), *per_task]:
        for key in options:
            if not any(key in f for f in fields.values()):
                valid = sorted(set().union(*fields.values()))
                raise ValueError(
                    f"{where}: {key!r} is not an option of the memories in use {names}; valid: {', '.join(valid)}"
                )


def check_memory_path(config: MemoryConfig, names: list[str]) -> None:
    """``memory_path`` (a warm start), read and checked for every memory in use (``names``) before anything is
    written: a missing or corrupt folder, another memory kind or a broken array file is one clear error."""
    if not config.memory_path:
        return
    from metamod.memory.base import check_saved_memory

    for name in dict.fromkeys(n for n in names if n not in (None, "none")):
        check_saved_memory(config.memory_path, name)


def memory_llm_sampling(config: MemoryConfig, seed: int) -> Any:
    """The memory LLM's decoding for one evaluation seed."""
    from metamod.llm.base import SamplingConfig

    return SamplingConfig(
        temperature=config.memory_temperature, max_tokens=config.memory_max_tokens, seed=config.memory_seed + seed
    )


def build_memory_from_config(
    config: MemoryConfig,
    *,
    name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    llm: Any = None,
    seed: int = 0,
    state: str | Path | None = None,
    task: str | None = None,
) -> Memory:
    """Build a memory from a config and load a saved state when one exists.

    Args:
        config: the memory settings.
        name: the memory to build (default ``config.memory``; a method with its own memory passes its name).
        defaults: option defaults of that use (e.g. ``mro_micro``'s ``consolidate: False``), under ``memory_options``.
        llm: the memory LLM (built by the caller when :func:`needs_llm`).
        seed: the evaluation seed (added to ``memory_seed``).
        state: a saved folder to resume from; when it holds no manifest, ``config.memory_path`` (a warm start) is
            loaded instead when set.
        task: the task the memory serves (its ``task_memory_options`` apply); ``None``: a run-scoped memory.

    >>> build_memory_from_config(MemoryConfig()).name
    'none'
    """
    name = name or config.memory
    options = config.options_for(name, defaults, task=task) if name not in (None, "none") else {}
    memory = build_memory(
        name, llm=llm, llm_sampling=memory_llm_sampling(config, seed), seed=config.memory_seed + seed, **options
    )
    source = None
    if state is not None and (Path(state) / MANIFEST).is_file():
        source = Path(state)
    elif config.memory_path:
        source = Path(config.memory_path)
        if not (source / MANIFEST).is_file():
            raise FileNotFoundError(
                f"memory_path {source} has no {MANIFEST}: expected a memory folder saved by a run "
                "(e.g. <output_dir>/memory-seed0)"
            )
    if source is not None:
        memory.load(source)
        if state is None or source != Path(state):
            memory.extra = {}  # a warm start: the caller's bookkeeping belongs to the other run
        logger.info("memory %s %s from %s", name, "resumed" if memory.extra else "loaded", source)
    return memory
