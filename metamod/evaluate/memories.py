"""The memories of one evaluation seed: the config's shared memory and the methods' own, driven per batch.

Two kinds of memory take part in ``metamod eval``:

- the **shared memory** (``memory:`` in the config): one object per seed that every method without a memory of its
  own asks (debaters, single-agent methods, MRO roles, moderator, judge). It observes the reference method's
  questions (the ``reference_method`` when it is evaluated, else the first method). Saved in ``memory-seed<k>/``.
- a method's **own memory** (a method row with ``memory``: ``mc2``, ``mro_micro``, ``reasoner_updates``
  use ``mca``, ``bot`` uses ``bot``): one per seed and method, built from ``memory_options`` over the row's
  ``memory_defaults``, observing that method's own traces. Saved in ``memory-seed<k>-<method>/``.

**Scope** (``memory_scope``). ``task`` (the default): every memory is keyed by (seed, task, method) and starts cold
at each task, as MC² Algorithm 1 runs each dataset from an empty memory and the Bayesian Cheatsheet resets its
memory after each evaluation run (D.4); its folder is ``memory-seed<k>[-<method>]/<task>/``. ``run``: one memory
per (seed, method) carried from task to task in the config's order (MC² appendix G's transfer experiment), saved
in ``memory-seed<k>[-<method>]/``. ``task_memory_options`` overrides ``memory_options`` per task (e.g. the refit
interval g per dataset, BC Table 3).

A fresh memory (no state in the output folder yet) is warm-started from ``memory_path`` when that is set (a saved
folder of the same memory, e.g. another run's ``memory-seed0-mc2/gsm8k/``: MC² appendix G).

**Gold.** A memory reads gold-derived signals (``outcome["correct"]``, the trace's ``eta``) only when its class
says its method is defined to (:meth:`~metamod.memory.base.BaseMemory.gold_use`); every other memory observes
:func:`~metamod.memory.base.withhold_gold` observations. :func:`method_gold_use` gives each method's reason (its
memory's, or its trained moderator's warm start), which ``results.json`` records under ``gold_use`` and the tables
mark with a dagger.

Per batch (:class:`SeedMemories`): ``begin_batch`` on every memory, the methods run, each method's record gets
``memory_items`` (the ids its memory served for that question) and the row ``memory_batch`` (the batch number of
the question within its task, from its position: stable across resumes), then each memory observes and
consolidates (``end_batch``) and is saved, with a ``summary.json`` (counters; the MCA's appendix E guidance
relevance) and, for the MCA, ``guidance.jsonl`` (each composed guidance with the question removed), which
``results.json`` gathers under ``memories``. A memory that needs an LLM gets the memory LLM (``memory_model``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from metamod.memory.base import Observation, withhold_gold
from metamod.tasks.base import Example

from .methods import method_spec

logger = logging.getLogger(__name__)

SHARED = "memory-seed{seed}"
#: key of the shared memory in the fingerprints passed to :class:`SeedMemories` (methods use their names)
SHARED_KEY = "<shared>"
OWN = "memory-seed{seed}-{method}"
#: ``memory_scope`` values: a memory per task (cold at each task) or one carried over the run's tasks
SCOPES = ("task", "run")


def memory_folder(base: str, task: str | None) -> str:
    """The folder (relative to the run's) of a memory: ``base`` for a run-scoped memory, ``base/<task>`` else.

    >>> memory_folder(OWN.format(seed=0, method="mc2"), "gsm8k"), memory_folder(SHARED.format(seed=1), None)
    ('memory-seed0-mc2/gsm8k', 'memory-seed1')
    """
    return base if task is None else f"{base}/{task}"


def scoped_tasks(tasks: list[str], memory_config: Any) -> list[str | None]:
    """The memory scopes of a run: one per task (``memory_scope: task``), or ``[None]`` (one for the whole run).

    >>> scoped_tasks(["gsm8k", "math500"], None), scoped_tasks(["gsm8k", "math500"], _scope_config("run"))
    (['gsm8k', 'math500'], [None])
    """
    scope = getattr(memory_config, "memory_scope", "task") if memory_config is not None else "task"
    return [None] if scope == "run" else list(tasks)


def _scope_config(scope: str) -> Any:
    from metamod.memory import MemoryConfig

    return MemoryConfig(memory_scope=scope)


def memory_gold_use(memory: Any) -> str | None:
    """What gold-derived signal a built memory reads after answering (``None``: none; see the module docstring)."""
    gold_use = getattr(type(memory), "gold_use", None)
    return gold_use(getattr(memory, "options", None)) if gold_use is not None else None


def method_gold_use(
    method: str, memory_config: Any, *, moderator_gold_use: str | None = None, task: str | None = None
) -> str | None:
    """Why ``method`` uses gold-derived signals, or ``None`` when it does not.

    Its memory (its own, else the shared one) when that memory's options make it read them, and, for methods that
    use the trained moderator, ``moderator_gold_use`` (how the adapter was trained, from its ``train_summary.json``).

    >>> from metamod.memory import MemoryConfig
    >>> method_gold_use("mc2", None)
    "memory mca: the correctness flag as each reflection's success/failure tag (MC2 C.1, C.4)"
    >>> method_gold_use("bot", None) is None, method_gold_use("majority_vote", MemoryConfig(memory="marco"))
    (True, None)
    >>> method_gold_use("moderator", None, moderator_gold_use="trained on gold")
    'moderator: trained on gold'
    """
    from metamod.memory import MemoryConfig
    from metamod.memory.registry import memory_class, parse_memory_options

    config = memory_config if memory_config is not None else MemoryConfig()
    reasons = []
    name, defaults = own_memory(method)
    if name is None and config.memory not in (None, "none"):
        name, defaults = config.memory, {}
    if name is not None and name != "none":
        options = parse_memory_options(name, config.options_for(name, defaults, task=task))
        reason = memory_class(name).gold_use(options)
        if reason:
            reasons.append(f"memory {name}: {reason}")
    if moderator_gold_use and "moderator" in method_spec(method).needs:
        reasons.append(f"moderator: {moderator_gold_use}")
    return "; ".join(reasons) or None


def own_memory(method: str) -> tuple[str | None, dict[str, Any]]:
    """``(memory name, option defaults)`` a method brings itself, or ``(None, {})``.

    >>> own_memory("mc2"), own_memory("mro_micro")[1], own_memory("majority_vote")
    (('mca', {}), {'consolidate': False}, (None, {}))
    """
    spec = method_spec(method)
    return spec.memory, dict(spec.memory_defaults)


def memories_in_use(methods: list[str], memory_config: Any) -> list[str]:
    """Names of the memories an evaluation builds (the shared one, then the methods' own), without repeats."""
    names: list[str] = []
    if memory_config is not None and memory_config.memory not in (None, "none"):
        names.append(memory_config.memory)
    for method in methods:
        name, _ = own_memory(method)
        if name and name not in names:
            names.append(name)
    return names


def memory_on(methods: list[str], memory_config: Any) -> bool:
    """Whether any memory takes part (then batches are memory batches and every cell depends on the past)."""
    return bool(memories_in_use(methods, memory_config))


def needs_memory_llm(methods: list[str], memory_config: Any) -> bool:
    """Whether some memory in use writes with the memory LLM (then ``memory_model`` is loaded)."""
    from metamod.memory.registry import needs_llm

    if memory_config is None:
        return False
    uses = []
    for task in [None, *memory_config.task_memory_options]:
        if memory_config.memory not in (None, "none"):
            uses.append((memory_config.memory, memory_config.options_for(memory_config.memory, task=task)))
        for method in methods:
            name, defaults = own_memory(method)
            if name:
                uses.append((name, memory_config.options_for(name, defaults, task=task)))
    return any(needs_llm(name, options) for name, options in uses)


def memory_llm_spec(memory_config: Any) -> Any:
    """The memory LLM's :class:`~metamod.llm.BackendConfig` (errors name the bad option)."""
    from metamod.llm import BackendConfig

    try:
        return BackendConfig(
            backend=memory_config.memory_backend,
            model=memory_config.memory_model,
            **dict(memory_config.memory_backend_options),
        )
    except TypeError as err:
        valid = ", ".join(f.name for f in dataclasses.fields(BackendConfig))
        raise ValueError(
            f"memory_backend_options {sorted(memory_config.memory_backend_options)}: {err}. Valid: {valid}"
        ) from err


class SeedMemories:
    """The memories of one seed (see the module docstring).

    Args:
        memory_config: the :class:`~metamod.memory.MemoryConfig` (``None``: only the methods' own memories, with
            default settings).
        methods: the methods this seed computes.
        reference: the method the shared memory observes.
        output_dir: the run's folder (states are saved under it).
        seed: the evaluation seed.
        llm: the memory LLM (``None`` when no memory in use writes with one).
        task: the task these memories belong to (``memory_scope: task``: cold per task, saved in a sub-folder per
            task, with that task's ``task_memory_options``); ``None``: one memory for the whole run.
    """

    def __init__(
        self,
        memory_config: Any,
        methods: list[str],
        reference: str,
        output_dir: Path,
        seed: int,
        llm: Any = None,
        *,
        all_methods: list[str] | None = None,
        fingerprints: dict[str, str] | None = None,
        task: str | None = None,
    ) -> None:
        from metamod.memory import MemoryConfig, build_memory_from_config

        config = memory_config if memory_config is not None else MemoryConfig()
        every = list(all_methods or methods)
        self.methods = list(methods)
        self.task = task
        self.shared = None
        self.folders: dict[int, Path] = {}
        self.fingerprint: dict[int, str | None] = {}
        self.by_method: dict[str, Any] = {}
        self.observer: dict[int, str] = {}  # id(memory) -> the method whose questions it observes
        self.gold_use: dict[int, str | None] = {}  # id(memory) -> the gold-derived signal it is defined to read
        self._memories: list[Any] = []
        self._counters: list[TokenCounter | None] = []
        prints = dict(fingerprints or {})
        if config.memory not in (None, "none"):
            folder = output_dir / memory_folder(SHARED.format(seed=seed), task)
            observer = reference if reference in every else every[0]
            fp = prints.get(SHARED_KEY)
            state = folder if saved_fingerprint(folder) in (None, fp) else None
            self.shared = build_memory_from_config(config, llm=self._counted(llm), seed=seed, state=state, task=task)
            self._add(self.shared, folder, observer, fp)
        for method in methods:
            name, defaults = own_memory(method)
            if name:
                folder = output_dir / memory_folder(OWN.format(seed=seed, method=method), task)
                fp = prints.get(method)
                state = folder if saved_fingerprint(folder) in (None, fp) else None
                if state is None:
                    logger.warning("%s was saved with other settings of %s; starting it afresh", folder, method)
                memory = build_memory_from_config(
                    config, name=name, defaults=defaults, llm=self._counted(llm), seed=seed, state=state, task=task
                )
                self._add(memory, folder, method, fp)
                self.by_method[method] = memory
            elif self.shared is not None:
                self.by_method[method] = self.shared

    def _counted(self, llm: Any) -> Any:
        """A token-counting view of the memory LLM for the memory about to be built (``None`` stays ``None``)."""
        counter = TokenCounter(llm) if llm is not None else None
        self._counters.append(counter)
        return counter

    def _add(self, memory: Any, folder: Path, observer: str, fingerprint: str | None) -> None:
        self.gold_use[id(memory)] = memory_gold_use(memory)
        self._memories.append(memory)
        self.folders[id(memory)] = folder
        self.observer[id(memory)] = observer
        self.fingerprint[id(memory)] = fingerprint

    @property
    def active(self) -> bool:
        return bool(self._memories)

    def for_method(self, method: str) -> Any:
        """The memory ``method`` asks (its own, else the shared one, else ``None``)."""
        return self.by_method.get(method)

    def _pending(self, task: str, batch_number: int) -> list[Any]:
        """The memories that have not observed ``(task, batch_number)`` yet."""
        return [m for m in self._memories if batch_number not in observed_batches(m.extra, task)]

    def begin_batch(self, batch: list[Example], task: str, batch_number: int) -> None:
        """Prepare the memories that will observe this batch (the others are past it: a resumed partial batch)."""
        for memory in self._pending(task, batch_number):
            memory.begin_batch(batch)

    def annotate(self, rows: list[dict[str, Any]], batch_number: int) -> None:
        """Add ``memory_batch`` to each row, and to each method record that had a memory ``memory_items`` and the
        memory LLM's tokens (``tokens.memory_prompt`` / ``memory_completion``).

        A memory's tokens since the last batch (its consolidation after the previous batch and its preparation of
        this one: what this batch's guidance cost) are split evenly over the batch's questions and added to every
        method it serves; the consolidation after the last batch serves no question and is not counted.
        """
        spent = {}
        for memory, counter in zip(self._memories, self._counters, strict=True):
            spent[id(memory)] = counter.take() if counter is not None else (0, 0)
        for i, row in enumerate(rows):
            row["memory_batch"] = batch_number
            for method, record in row["methods"].items():
                memory = self.for_method(method)
                if memory is None:
                    continue
                record["memory_items"] = memory.served_ids(row["id"], method)
                prompt, completion = spent[id(memory)]
                tokens = record.setdefault("tokens", {})
                tokens["memory_prompt"] = _share(prompt, len(rows), i)
                tokens["memory_completion"] = _share(completion, len(rows), i)

    def observe_and_save(
        self,
        batch: list[Example],
        rows: list[dict[str, Any]],
        shared_traces: dict[str, dict[str, Any]],
        method_traces: dict[str, list[Any]],
        *,
        task: str,
        batch_number: int,
    ) -> None:
        """Each memory that has not observed this batch and whose observed method ran observes its finished
        questions, consolidates, records ``(task, batch_number)`` as observed, and is saved."""
        from .replay import prefix

        for memory in self._pending(task, batch_number):
            method = self.observer[id(memory)]
            if method not in rows[0]["methods"]:
                continue
            for i, (ex, row) in enumerate(zip(batch, rows, strict=True)):
                record = row["methods"][method]
                own = method_traces.get(method, [None] * len(batch))[i]
                trace = own if own is not None else shared_traces.get(ex.id)
                if own is None and trace is not None and record.get("stop_round") is not None:
                    trace = prefix(trace, record["stop_round"])
                elif trace is None:
                    trace = {"id": ex.id, "rounds": [], "single": _public(record)}
                outcome = {"correct": bool(record["correct"]), "final_answer": record["final_answer"], "method": method}
                observation = Observation(
                    ex,
                    trace,
                    outcome,
                    decisions=list(record.get("decisions") or []),
                    served=list(record.get("memory_items") or []),
                )
                memory.observe(observation if self.gold_use[id(memory)] else withhold_gold(observation))
            memory.end_batch()
            memory.extra.setdefault("observed", {}).setdefault(task, []).append(batch_number)
            if self.fingerprint[id(memory)] is not None:
                memory.extra["fingerprint"] = self.fingerprint[id(memory)]
            folder = memory.save(self.folders[id(memory)])
            counter = self._counters[self._memories.index(memory)]
            write_summary(memory, folder, prompts_too_long=counter.too_long if counter is not None else 0)


class TokenCounter:
    """Delegates to a generator and counts the prompt and completion tokens of every ``chat`` call."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self.prompt = self.completion = 0
        self.too_long = 0  # prompts the budget could not fit (answered empty), since this process started

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generator, name)

    def chat(self, conversations: Any, sampling: Any) -> Any:
        from metamod.llm.budget import TOO_LONG

        outputs = self.generator.chat(conversations, sampling)
        self.too_long += sum(g.finish_reason == TOO_LONG for g in outputs)
        self.prompt += sum(int(g.prompt_tokens) for g in outputs)
        self.completion += sum(int(g.completion_tokens) for g in outputs)
        return outputs

    def take(self) -> tuple[int, int]:
        """The tokens counted since the last call, then reset."""
        out = (self.prompt, self.completion)
        self.prompt = self.completion = 0
        return out


def _share(total: int, n: int, i: int) -> int:
    """Question ``i``'s share of ``total`` split over ``n`` (integers summing to ``total``).

    >>> [_share(10, 3, i) for i in range(3)]
    [4, 3, 3]
    """
    return total // n + (1 if i < total % n else 0)


SUMMARY = "summary.json"
GUIDANCE_LOG = "guidance.jsonl"


def write_summary(memory: Any, folder: Path, *, prompts_too_long: int = 0) -> dict[str, Any]:
    """Write ``summary.json`` (the memory's counters; for the MCA also appendix E's guidance relevance per batch)
    and, for memories that log their guidance, ``guidance.jsonl`` (the composed guidance, question text removed)."""
    from metamod.files import atomic_write_json, atomic_write_text

    summary: dict[str, Any] = {"memory": memory.name, "batches": memory.batch_index}
    if prompts_too_long:  # the memory LLM's prompts that did not fit its context (metamod.llm.budget): empty replies
        summary["prompts_too_long"] = prompts_too_long
    stats = getattr(memory, "stats", None)
    if stats is not None:
        summary["stats"] = stats()
    log = getattr(memory, "guidance_log", None)
    if log is not None:
        from metamod.memory.mca import guidance_relevance

        relevance = guidance_relevance(log, memory.embedder)
        summary["guidance_relevance"] = relevance
        summary["guidance_relevance_mean"] = _relevance_means(relevance)
        lines = [json.dumps(entry, sort_keys=True) for entry in log]
        atomic_write_text(folder / GUIDANCE_LOG, "\n".join(lines) + ("\n" if lines else ""))
    atomic_write_json(folder / SUMMARY, summary, indent=1)
    return summary


def _relevance_means(relevance: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per role, the mean over batches of the own-guidance and random-guidance similarities."""
    out: dict[str, dict[str, float]] = {}
    for role in sorted({r["role"] for r in relevance}):
        rows = [r for r in relevance if r["role"] == role]
        out[role] = {
            "own": round(sum(r["own"] for r in rows) / len(rows), 6),
            "random": round(sum(r["random"] for r in rows) / len(rows), 6),
            "batches": len(rows),
        }
    return out


def read_summaries(output_dir: Path) -> dict[str, Any]:
    """Every memory folder's ``summary.json`` in a run's folder, by folder name (for ``results.json``)."""
    from metamod.errors import load_json

    out = {}
    for pattern in (f"memory-seed*/{SUMMARY}", f"memory-seed*/*/{SUMMARY}"):
        for path in sorted(output_dir.glob(pattern)):
            out[path.parent.relative_to(output_dir).as_posix()] = load_json(path, what="memory summary")
    return dict(sorted(out.items()))


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """A method record without the fields that carry grading (a memory gets correctness from ``outcome``)."""
    return {k: v for k, v in record.items() if k not in ("correct", "covered")}


def saved_fingerprint(folder: Path) -> str | None:
    """The settings fingerprint a memory folder was saved under (``None``: no folder or none recorded)."""
    from metamod.errors import load_json

    manifest = folder / "manifest.json"
    if not manifest.is_file():
        return None
    return (load_json(manifest, what="memory manifest").get("extra") or {}).get("fingerprint")


def observed_batches(extra: dict[str, Any], task: str) -> set[int]:
    """The memory batches of ``task`` a memory has observed (from its saved ``extra``)."""
    return {int(b) for b in (extra.get("observed") or {}).get(task, [])}


def memory_plan(
    config: Any, memory_config: Any, seed: int, task: str | None = None
) -> list[tuple[str, str, list[str]]]:
    """``(folder name, observed method, methods it serves)`` for every memory of one seed (and task scope).

    >>> from metamod.evaluate.config import EvalConfig
    >>> memory_plan(EvalConfig(methods=["mro", "mc2"], reference_method="mro"), None, 0, "arith")
    [('memory-seed0-mc2/arith', 'mc2', ['mc2'])]
    """
    plan = []
    own = {m: own_memory(m)[0] for m in config.methods}
    if memory_config is not None and memory_config.memory not in (None, "none"):
        served = [m for m in config.methods if not own[m]]
        if served:
            observer = config.reference_method if config.reference_method in config.methods else config.methods[0]
            plan.append((memory_folder(SHARED.format(seed=seed), task), observer, served))
    plan += [(memory_folder(OWN.format(seed=seed, method=m), task), m, [m]) for m in config.methods if own[m]]
    return plan


def add_unobserved_cells(
    missing: dict[tuple[str, int, str], tuple[str, ...]],
    output_dir: Path,
    config: Any,
    memory_config: Any,
    examples: dict[str, list[Example]],
    fingerprints: dict[str, str] | None = None,
) -> int:
    """Mark for recomputation the cells of every question whose memory batch a memory has not observed.

    A run writes a batch's rows, then saves each memory: a crash in between leaves rows whose batch the memory
    never learned from. Those cells (of the methods that memory serves, and of the method it observes) are
    computed again from the memory's saved state, which is exactly the state they were first computed with; the
    new rows supersede the old ones. A memory saved under other settings (``fingerprints``: the shared memory's
    under :data:`SHARED_KEY`, a method's own under the method's name) starts afresh, so all its cells are redone.
    Returns the number of cells added.
    """
    added = 0
    cfg = memory_config if memory_config is not None else _default_memory_config()
    for seed in config.seeds:
        for scope in scoped_tasks(list(examples), memory_config):
            added += _add_unobserved(
                missing, output_dir, config, memory_config, examples, fingerprints, seed, scope, cfg
            )
    return added


def _add_unobserved(
    missing: dict[tuple[str, int, str], tuple[str, ...]],
    output_dir: Path,
    config: Any,
    memory_config: Any,
    examples: dict[str, list[Example]],
    fingerprints: dict[str, str] | None,
    seed: int,
    scope: str | None,
    cfg: Any,
) -> int:
    """:func:`add_unobserved_cells` for the memories of one seed and scope (a task, or ``None``: the run)."""
    from metamod.errors import load_json

    added = 0
    for folder, observer, served in memory_plan(config, memory_config, seed, scope):
        manifest = output_dir / folder / "manifest.json"
        extra = (load_json(manifest, what="memory manifest").get("extra") or {}) if manifest.is_file() else {}
        shared = folder == memory_folder(SHARED.format(seed=seed), scope)
        expected = (fingerprints or {}).get(SHARED_KEY if shared else observer)
        if extra.get("fingerprint") not in (None, expected):
            extra = {}  # saved under other settings: it will start afresh, so every batch is to do again
        methods = [m for m in config.methods if m in served or m == observer]
        for task, exs in examples.items():
            if scope is not None and task != scope:
                continue
            seen = observed_batches(extra, task)
            size = cfg.batch_size_for(len(exs))
            for number, ex in enumerate(exs):
                if number // size in seen:
                    continue
                key = (task, seed, ex.id)
                have = missing.get(key, ())
                need = tuple(m for m in config.methods if m in have or m in methods)
                if need != have:
                    added += len(need) - len(have)
                    missing[key] = need
    return added


def _default_memory_config() -> Any:
    from metamod.memory import MemoryConfig

    return MemoryConfig()


def batch_numbers(task_examples: list[Example], size: int) -> dict[str, int]:
    """The memory batch of each question of a task, from its position (so resumed runs keep their batches).

    >>> exs = [Example(id=str(i), question="?", gold="1", kind="math") for i in range(5)]
    >>> batch_numbers(exs, 2)
    {'0': 0, '1': 0, '2': 1, '3': 1, '4': 2}
    """
    return {ex.id: i // size for i, ex in enumerate(task_examples)}
