"""Per-cell resume of ``metamod eval``: what a cell's result depends on, and which cells a rerun still has to do.

A cell is ``(task, method, seed, question)``. Its result depends on two kinds of settings:

- *shared* ones (:func:`eval_settings`: debate and simulation settings, the debater model, prompts, ``mode``, the
  ``traces`` file's content; with a memory on, everything but the output options), hashed into the folder's
  ``.fingerprint.json``. A rerun that changes one of them is refused (:func:`metamod.config.check_fingerprint`).
- *method* ones (:func:`method_fingerprints`: the models, adapters and options a method uses), stamped on each
  row as ``fingerprints[method]``.

:func:`current_rows` keeps the method records of ``samples.jsonl`` that were computed under the current shared
and method fingerprints for the current question text and gold answer (merging the several rows a question gets
when methods are added), and :func:`missing_cells` lists what is still to compute. Local paths are made absolute
before hashing (:func:`metamod.config.resolve_local_paths`), so ``--traces runs/x/traces.jsonl`` and its absolute
form are the same setting. docs/contracts.md, "Resume and locking", has the full rules.

>>> from metamod.evaluate.config import EvalConfig
>>> config = EvalConfig(methods=["majority_vote", "consensus"], max_rounds=3)
>>> fps = method_fingerprints(config, {}, settings_fingerprint(eval_settings(config)))
>>> sorted(fps), fps["majority_vote"] != fps["consensus"]
(['consensus', 'majority_vote'], True)
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

from metamod.config import config_to_dict, resolve_local_paths, resume_settings, settings_fingerprint
from metamod.files import path_signature, read_jsonl
from metamod.tasks.base import Example

from .config import EvalConfig
from .methods import method_spec

logger = logging.getLogger(__name__)

SAMPLES_FILE = "samples.jsonl"
#: the full traces of methods that run their own loop (MRO, MARCO), one line per computed cell
METHOD_TRACES_FILE = "method-traces.jsonl"
RESULTS_FILE = "results.json"
TABLE_FILE = "table.md"
VIEW_FILE = "view.html"  # `metamod view`'s page (metamod.evaluate.view)
#: what an eval folder holds, in a settings-mismatch message
WHAT = "eval rows and cached debates (from other debaters or debate settings)"


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Rows of ``samples.jsonl`` as written; a torn last line (a crash mid-write) is dropped with a warning.

    A rerun that adds methods appends rows holding only the new methods' records, so one question may have
    several rows: :func:`current_rows` merges them (and keeps only the cells computed with the current settings).
    """
    return read_jsonl(path)


# --------------------------------------------------------------------------------------------- fingerprints

#: EvalConfig keys that change no cell's result: WHICH cells to compute (cells are keyed by task, method, seed and
#: question content) and where outputs go. Every key not listed here or in _METHOD_KEYS changes every cell.
_SCOPE_KEYS = frozenset(
    {
        "tasks",
        "task_options",
        "limit",
        "methods",
        "seeds",
        "reference_method",
        "output_dir",
        "resume",
        "overwrite",
        "plots",
        "stop_curve",
        "batch_questions",
        "task_batch_questions",
        "question_order_seed",
        "prompts_file",
    }
)
#: keys that change only the methods that use them (part of those methods' cell fingerprints)
_METHOD_KEYS = frozenset(
    {
        "moderator",
        "moderator_base",
        "moderator_backend",
        "moderator_backend_options",
        "moderator_max_tokens",
        "moderator_temperature",
        "judge_model",
        "judge_backend",
        "judge_max_tokens",
        "fixed_rounds",
        "sc_samples",
        "method_options",
        "max_iterations",
        "mro_simulation",
        "code_simulation",
    }
)
_ROLE_KNOBS = {
    "moderator": ("moderator_max_tokens", "moderator_temperature"),
    "moderator_base": ("moderator_max_tokens", "moderator_temperature"),
    "judge": ("judge_max_tokens",),
}
#: with a memory on, cells depend on everything the memory saw before them: only these keys are free
_MEMORY_FREE_KEYS = frozenset({"output_dir", "resume", "overwrite", "plots", "stop_curve", "prompts_file"})


def _memory_on(memory_config: Any, methods: list[str] | None = None) -> bool:
    """Whether a memory takes part: the config's shared one, or a method's own (``mc2``, ``bot``, ...)."""
    from .memories import memory_on

    return memory_on(list(methods or []), memory_config)


def eval_settings(config: EvalConfig, memory_config: Any = None) -> dict[str, Any]:
    """The settings shared by every cell of an evaluation (hashed into ``output_dir/.fingerprint.json``).

    Debate and simulation settings, debater model, prompts, ``mode``, the ``traces`` file's content, and, with a
    shared memory, everything but the output options (with only methods' own memories, ``question_order_seed``;
    the memory settings then enter those methods' fingerprints). A rerun that changes one of them is refused. Local paths are made
    absolute (a relative and an absolute ``--traces`` naming one file are one setting).

    >>> from metamod.evaluate.config import EvalConfig
    >>> s = eval_settings(EvalConfig(methods=["majority_vote"], max_rounds=3))
    >>> s["max_rounds"], "methods" in s, "fixed_rounds" in s
    (3, False, False)
    """
    resolved = config_to_dict(config, memory_config)
    shared = memory_config is not None and memory_config.memory not in (None, "none")
    if shared:
        free: set[str] = set(_MEMORY_FREE_KEYS)
    elif _memory_on(memory_config, config.methods):
        # only methods' own memories: each learns from its own method's stream, which other methods do not change,
        # so methods and questions may be added; the memory settings enter those methods' fingerprints instead
        memory_keys = {f.name for f in dataclasses.fields(memory_config)} if memory_config is not None else set()
        free = (set(_SCOPE_KEYS) - {"question_order_seed"}) | set(_METHOD_KEYS) | memory_keys
        if getattr(memory_config, "memory_scope", "task") == "run":
            # one memory carried through the tasks: what a later task's questions see depends on every earlier one
            free -= {"tasks", "task_options", "limit"}
    else:
        memory_keys = {f.name for f in dataclasses.fields(memory_config)} if memory_config is not None else set()
        free = set(_SCOPE_KEYS) | set(_METHOD_KEYS) | memory_keys
    settings = resolve_local_paths(resume_settings(resolved, free))  # `runs/x` and its absolute form: one setting
    if config.traces:
        settings["traces_signature"] = path_signature(config.traces)
    debater_model = path_signature(config.debater_model) if config.debaters != "simulated" else None
    if debater_model:
        settings["debater_model_signature"] = debater_model
    return settings


def _spec_record(spec: Any) -> dict[str, Any]:
    record = dataclasses.asdict(spec)
    signatures = {key: path_signature(record[key]) for key in ("model", "adapter") if record.get(key)}
    record["signatures"] = {key: value for key, value in signatures.items() if value}
    return resolve_local_paths(record)


def method_fingerprints(
    config: EvalConfig, specs: dict[str, Any], settings_fp: str, memory_config: Any = None
) -> dict[str, str]:
    """One fingerprint per method: the shared settings plus the models and options that method uses.

    A changed moderator adapter therefore recomputes the moderator methods' cells and keeps the baselines'.

    >>> from metamod.evaluate.config import EvalConfig
    >>> a = method_fingerprints(EvalConfig(methods=["majority_vote", "single_cot_sc"]), {}, "x")
    >>> b = method_fingerprints(EvalConfig(methods=["majority_vote", "single_cot_sc"], sc_samples=3), {}, "x")
    >>> a["majority_vote"] == b["majority_vote"], a["single_cot_sc"] == b["single_cot_sc"]
    (True, False)
    """
    out = {}
    for method in config.methods:
        spec = method_spec(method)
        roles = [r for r in spec.needs if r in specs]
        keys = sorted({k for r in roles for k in _ROLE_KNOBS.get(r, ())} | set(spec.knobs))  # its row's knobs
        record = {
            "method": method,
            "settings": settings_fp,
            "options": {k: getattr(config, k) for k in keys},
            "method_options": config.method_options.get(method, {}),
            "models": {r: _spec_record(specs[r]) for r in roles},
        }
        if spec.memory:  # a method with its own memory: its cells depend on its settings
            record["memory"] = resolve_local_paths(dataclasses.asdict(memory_config)) if memory_config else {}
        out[method] = settings_fingerprint(record)
    return out


def _index(examples: dict[str, list[Example]]) -> dict[tuple[str, str], Example]:
    return {(task, ex.id): ex for task, exs in examples.items() for ex in exs}


def current_rows(
    rows: list[dict[str, Any]],
    examples: dict[str, list[Example]],
    seeds: list[int],
    settings_fp: str,
    method_fps: dict[str, str],
) -> list[dict[str, Any]]:
    """One merged row per current (task, seed, question), holding only the method records of the current cells.

    A record counts when its row was written under ``settings_fp``, its question text and gold answer are the
    current example's, and the row's ``fingerprints[method]`` is the method's current one; later rows win. Rows
    come out in the order of ``seeds`` and ``examples``.

    >>> ex = Example(id="q1", question="1+1?", gold="2", kind="math")
    >>> row = {"task": "arith", "seed": 0, "id": "q1", "question": "1+1?", "gold": "2", "settings": "S",
    ...        "methods": {"majority_vote": {"correct": True}}, "fingerprints": {"majority_vote": "M"}}
    >>> [r["methods"] for r in current_rows([row], {"arith": [ex]}, [0], "S", {"majority_vote": "M"})]
    [{'majority_vote': {'correct': True}}]
    >>> current_rows([row], {"arith": [ex]}, [0], "other settings", {"majority_vote": "M"})
    []
    """
    index = _index(examples)
    merged: dict[tuple[str, int, str], dict[str, Any]] = {}
    for row in rows:
        seed = row.get("seed", 0)
        ex = index.get((row.get("task"), row.get("id")))
        if row.get("settings") != settings_fp or ex is None or seed not in seeds:
            continue
        if row.get("question") != ex.prompt_text() or row.get("gold") != ex.gold:
            continue
        stamps = row.get("fingerprints") or {}
        methods = {
            m: r for m, r in (row.get("methods") or {}).items() if m in method_fps and stamps.get(m) == method_fps[m]
        }
        if not methods:
            continue
        key = (row["task"], seed, row["id"])
        if key not in merged:
            merged[key] = {**row, "methods": {}, "fingerprints": {}}
        elif not merged[key].get("rounds") and row.get("rounds"):
            merged[key].update({k: v for k, v in row.items() if k not in ("methods", "fingerprints")})
        merged[key]["methods"].update(methods)
        merged[key]["fingerprints"].update({m: method_fps[m] for m in methods})
    ordered = []
    for seed in seeds:
        for task, exs in examples.items():
            for ex in exs:
                row = merged.get((task, seed, ex.id))
                if row is not None:
                    ordered.append(
                        {**row, "methods": {m: row["methods"][m] for m in method_fps if m in row["methods"]}}
                    )
    return ordered


def missing_cells(
    done: list[dict[str, Any]], examples: dict[str, list[Example]], seeds: list[int], methods: list[str]
) -> dict[tuple[str, int, str], tuple[str, ...]]:
    """``(task, seed, id) -> methods still to compute`` for every current question (empty tuples left out).

    >>> ex = Example(id="q1", question="1+1?", gold="2", kind="math")
    >>> done = [{"task": "arith", "seed": 0, "id": "q1", "methods": {"majority_vote": {}}}]
    >>> missing_cells(done, {"arith": [ex]}, [0, 1], ["majority_vote", "consensus"])
    {('arith', 0, 'q1'): ('consensus',), ('arith', 1, 'q1'): ('majority_vote', 'consensus')}
    """
    have = {(r["task"], r.get("seed", 0), r["id"]): set(r["methods"]) for r in done}
    missing = {}
    for seed in seeds:
        for task, exs in examples.items():
            for ex in exs:
                todo = tuple(m for m in methods if m not in have.get((task, seed, ex.id), set()))
                if todo:
                    missing[(task, seed, ex.id)] = todo
    return missing


#: everything a run writes that a resumed run reuses: samples, own-loop traces, cached debates, memory states
#: (metamod.evaluate.memories: memory-seed<k>/ and memory-seed<k>-<method>/, and their per-task folders). The ONE
#: list: ``has_outputs`` decides from it whether a folder holds a run, ``clear_outputs`` deletes it.
REUSED_OUTPUTS = (SAMPLES_FILE, METHOD_TRACES_FILE, "traces-seed*.jsonl", "memory-seed*", "stop-curve.jsonl")
#: what a run derives from the reused outputs (rewritten at the end of every run; the viewer page by `metamod view`)
DERIVED_OUTPUTS = (RESULTS_FILE, TABLE_FILE, "plots", VIEW_FILE)


def has_outputs(output_dir: Path) -> bool:
    """Whether ``output_dir`` holds what a resumed evaluation would reuse (:data:`REUSED_OUTPUTS`)."""
    return output_dir.is_dir() and any(any(output_dir.glob(pattern)) for pattern in REUSED_OUTPUTS)


def clear_outputs(output_dir: Path) -> None:
    """Delete what a resumed evaluation would reuse (:data:`REUSED_OUTPUTS`) and what it derived from it.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name in (SAMPLES_FILE, METHOD_TRACES_FILE, "traces-seed0.jsonl", RESULTS_FILE, "config.yaml"):
    ...     _ = (folder / name).write_text("{}")
    >>> (folder / "memory-seed0-mc2").mkdir()
    >>> clear_outputs(folder); sorted(p.name for p in folder.iterdir()), has_outputs(folder)
    (['config.yaml'], False)
    """
    for pattern in (*REUSED_OUTPUTS, *DERIVED_OUTPUTS):
        for path in output_dir.glob(pattern):
            logger.info("eval: starting over, deleting %s", path)
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
