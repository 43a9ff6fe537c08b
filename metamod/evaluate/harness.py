"""``metamod eval``: every method on shared debate transcripts, graded by the one grader, written incrementally.

Flow per seed and task, in batches of questions (``task_batch_questions[task]``, else ``batch_questions``; with a
memory on (the shared ``memory`` or a method's own, :mod:`metamod.evaluate.memories`), memory batches for every
task, since a memory consolidates once per batch):

1. one full-length debate per question (``run_debates``; or the given ``traces``; or, on resume, the traces
   already in ``output_dir/traces-seed<s>.jsonl``),
2. every debate method replays its decision layer over the prefixes of those debates (``mode=live``: each method
   runs its own debates with the layer as the stop hook instead),
3. the single-agent baselines answer the same questions with their own batched calls,
4. each method's final answer is graded with :func:`metamod.tasks.grading.is_equivalent`; one row per question
   goes to ``samples.jsonl`` (flushed per batch, with ``memory_batch`` and each record's ``memory_items``); every
   memory observes its method's questions, consolidates and is saved (``memory-seed<k>[-<method>]/``).

Then ``results.json``, ``table.md`` and the plots are computed from ALL rows of ``samples.jsonl``, so a crashed
run resumes where it stopped (questions already in ``samples.jsonl`` are skipped) and ends with complete metrics.

Resume is per cell ``(task, method, seed, question)``: each row carries the folder's settings fingerprint and each
method record its own (:func:`method_fingerprints`). A rerun that changes a debate setting is refused (the
differing keys are named; ``--overwrite true`` starts over); one that adds methods, questions or seeds, or changes
a method's own settings (e.g. its adapter), computes exactly the missing cells (:mod:`metamod.evaluate.cells`;
docs/contracts.md, "Resume and locking"). The output folder is locked for the whole run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from metamod.config import check_fingerprint, option_defaults, parse_config, save_resolved_config
from metamod.memory import MemoryConfig
from metamod.rollout.engine import Grader
from metamod.tasks.base import Example
from metamod.tasks.code.grading import preflight_code_tasks

from ..files import JsonlWriter, atomic_write_json, atomic_write_text, write_after_checks
from .build import build_debaters, build_generators, layer_context, moderator_gold_use, resolve_models
from .cells import (
    METHOD_TRACES_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    TABLE_FILE,
    WHAT,
    clear_outputs,
    current_rows,
    eval_settings,
    has_outputs,
    method_fingerprints,
    missing_cells,
    read_samples,
)
from .config import EvalConfig
from .flips import debate_flips
from .frontier import budget_matched, frontier_points
from .inputs import check_cached_traces, load_inputs
from .memories import (
    SHARED_KEY,
    SeedMemories,
    add_unobserved_cells,
    batch_numbers,
    memories_in_use,
    memory_llm_spec,
    memory_on,
    method_gold_use,
    needs_memory_llm,
    read_summaries,
    scoped_tasks,
)
from .memory_metrics import batch_metrics, half_gains
from .methods import build_method, check_method_kinds, method_spec
from .metrics import task_metrics
from .mro.report import write_controller_plots
from .replay import replay, run_live
from .report import (
    analysis_tables,
    gold_labels,
    markdown_tables,
    structure_table,
    versions,
    write_analysis_plots,
    write_plots,
)
from .stop_curve import check_stop_curve, stop_curve_section, write_stop_plots

logger = logging.getLogger(__name__)

#: answer kinds graded with partial credit too (a per-question ``score`` next to ``correct``)
SCORED_KINDS = frozenset({"code_function"})

__all__ = ["check_eval", "compute_results", "evaluate", "evaluate_batch", "main"]


def _write_method_traces(
    sink: JsonlWriter,
    batch: list[Example],
    method_traces: dict[str, list[Any]],
    task: str,
    seed: int,
    method_fps: dict[str, str],
) -> None:
    """Append the batch's own-loop traces (MRO, MARCO) to ``method-traces.jsonl``, before the samples rows.

    Written first, so a crash in between leaves a trace without its row, which the resumed run computes again and
    appends once more: a reader keeps the last line per ``(task, method, seed, id)`` with the row's fingerprint.
    """
    lines = []
    for method, per_question in method_traces.items():
        for ex, trace in zip(batch, per_question, strict=True):
            if trace is not None:
                lines.append(
                    {
                        "task": task,
                        "seed": seed,
                        "method": method,
                        "id": ex.id,
                        "fingerprint": method_fps[method],
                        "trace": trace,
                    }  # fmt: skip
                )
    if lines:
        sink.write_many(lines)
        sink.sync()


def _chunks(items: Sequence[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


# --------------------------------------------------------------------------------------------- one batch


class _Grader:
    """The shared grader for one evaluation: the engine's memoised ``is_equivalent``
    (:class:`~metamod.rollout.engine.Grader`) per (answer, question), and partial credit per pair."""

    def __init__(self) -> None:
        self.equivalent = Grader()
        self.pair_cache: dict[tuple, dict[str, Any]] = {}

    def __call__(self, answer: str | None, ex: Example) -> bool:
        return self.equivalent(answer, ex.gold, ex.kind, ex.choices)

    def pairs(self, answer: str | None, ex: Example) -> dict[str, Any]:
        """What a kind with partial credit (``code_function``) adds to a record: ``score`` (this problem's share of
        graded pairs passed), ``pairs`` ``[passed, total]`` and, when the gold marks its visible pairs,
        ``hidden_pairs`` ``[passed, total]`` over the pairs the agent never saw."""
        from metamod.tasks.code.grading import grade_code

        key = (answer, ex.id, ex.gold, ex.kind)
        if key not in self.pair_cache:
            grade = grade_code(answer, ex.gold, ex.kind)
            out: dict[str, Any] = {"score": float(grade.score), "pairs": [grade.passed, grade.total]}
            if grade.hidden_total is not None:
                out["hidden_pairs"] = [grade.hidden_passed, grade.hidden_total]
            self.pair_cache[key] = out
        return {k: list(v) if isinstance(v, list) else v for k, v in self.pair_cache[key].items()}


def _round_summary(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "round": rnd["round"],
            "eta": rnd.get("eta"),
            "answers": [r.get("answer") for r in rnd["responses"]],
            "prompt_tokens": sum(r["prompt_tokens"] for r in rnd["responses"]),
            "completion_tokens": sum(r["completion_tokens"] for r in rnd["responses"]),
        }
        for rnd in trace["rounds"]
    ]


def _single_record(outcome: Any) -> dict[str, Any]:
    return {
        "final_answer": outcome.answer,
        "stop_round": None,
        "rounds": None,
        "decisions": [],
        "valid": [],
        "seen_answers": list(outcome.answers),
        "texts": list(outcome.texts),
        "tokens": {
            "debater_prompt": outcome.prompt_tokens,
            "debater_completion": outcome.completion_tokens,
            "moderator_prompt": outcome.meta_prompt_tokens,
            "moderator_completion": outcome.meta_completion_tokens,
        },
        **({"details": outcome.details} if getattr(outcome, "details", None) else {}),
    }


class BudgetLedger:
    """The prompt-budget events (:mod:`metamod.llm.budget`) of a run's generators, attributed to questions.

    The harness runs one step at a time (the shared debates, then each method), so the events drained after a step
    are that step's; each is given to the question whose text its prompt holds (:func:`question_of`).
    """

    def __init__(self, generators: Sequence[Any] = ()) -> None:
        from metamod.llm.budget import budgeted

        self.generators: list[Any] = []
        for generator in generators:
            found = budgeted(generator)
            if found is not None and all(found is not g for g in self.generators):
                self.generators.append(found)

    def drain(self, batch: Sequence[Example]) -> dict[str, dict[str, int]]:
        """``{question id: {"prompt_cuts": n, "prompts_too_long": m}}`` of the events since the last drain."""
        from metamod.llm.budget import question_of

        out: dict[str, dict[str, int]] = {}
        questions = {ex.id: ex.prompt_text() for ex in batch}
        for generator in self.generators:
            for event in generator.take_events():
                qid = question_of(event.text, questions) or question_of(
                    event.text, {ex.id: ex.question for ex in batch}
                )
                if qid is None:
                    logger.warning("prompt budget: a %s prompt names no question of this batch", event.kind)
                    continue
                key = "prompts_too_long" if event.kind == "too_long" else "prompt_cuts"
                counts = out.setdefault(qid, {})
                counts[key] = counts.get(key, 0) + 1
        return out


def _add_budget(record: dict[str, Any], *counts: dict[str, int] | None) -> None:
    """Add a question's prompt-budget counts to its record (nothing when there are none)."""
    for part in counts:
        for key, value in (part or {}).items():
            record[key] = record.get(key, 0) + value


def evaluate_batch(
    batch: list[Example],
    *,
    task: str,
    seed: int,
    layers: dict[str, Any],
    debaters: list[Any] | None,
    config: EvalConfig,
    traces: dict[str, dict],
    grade: _Grader,
    method_traces: dict[str, list[Any]] | None = None,
    ledger: BudgetLedger | None = None,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """All methods on one batch of questions.

    Args:
        batch: the questions.
        task, seed: recorded in each row.
        layers: method name -> built method.
        debaters: debater groups (to run the shared debates that ``traces`` lacks, and for ``mode=live``).
        config: the evaluation config.
        traces: full-length traces by question id; missing ones are generated and added (the caller persists them).
        grade: the cached grader.
        method_traces: when given, filled with each single-agent method's own traces (e.g. MRO traces; ``None``
            for a question without one), for the methods' memories.
        ledger: the run's prompt-budget events; a question whose prompt for a method was cut is counted in that
            method's record (``prompt_cuts``), one whose prompt could not fit (``prompts_too_long``) is graded
            wrong and named in the log. The shared debates' events count for every debate method.

    Returns:
        ``(rows, shared_traces_by_id)``: one samples row per question, and the transcripts the rows describe.
    """
    debate_methods = [m for m in layers if layers[m].spec.replays_debates]
    records: dict[str, list[dict[str, Any]]] = {}
    ledger = ledger or BudgetLedger()
    budget: dict[str, dict[str, dict[str, int]]] = {}
    ledger.drain(batch)  # what the memories' preparation spent belongs to no method
    if debate_methods or config.mode == "replay":
        missing = [ex for ex in batch if ex.id not in traces]
        if missing and config.mode == "replay" and debate_methods:
            from metamod.rollout.debate import run_debates

            for trace in run_debates(missing, debaters, max_rounds=config.max_rounds, task=task, progress=False):
                traces[trace["id"]] = trace
    debates_budget = ledger.drain(batch)
    shared = {ex.id: traces[ex.id] for ex in batch if ex.id in traces}
    for method in debate_methods:
        if config.mode == "live":
            records[method], live = run_live(
                layers[method], batch, debaters, max_rounds=config.max_rounds, task=task, progress=False
            )
            for ex, trace in zip(batch, live, strict=True):
                if ex.id not in shared or len(trace["rounds"]) > len(shared[ex.id]["rounds"]):
                    shared[ex.id] = trace
        else:
            records[method] = replay(layers[method], [shared[ex.id] for ex in batch])
        budget[method] = ledger.drain(batch)
        for qid, counts in debates_budget.items():  # every debate method answers from the shared debates
            _add_budget(budget[method].setdefault(qid, {}), counts)
    for method, layer in layers.items():
        if method not in records:
            outcomes = layer.run(batch)
            records[method] = [_single_record(o) for o in outcomes]
            budget[method] = ledger.drain(batch)
            if method_traces is not None:
                method_traces[method] = [getattr(o, "trace", None) for o in outcomes]
    rows = []
    for i, ex in enumerate(batch):
        methods = {}
        for method in layers:
            record = records[method][i]
            _add_budget(record, budget.get(method, {}).get(ex.id))
            record["correct"] = grade(record["final_answer"], ex) and not record.get("prompts_too_long")
            if record.get("prompts_too_long"):
                logger.warning(
                    "eval %s seed %d: question %r, method %s: %d prompt(s) did not fit the model's context; "
                    "graded wrong",
                    task, seed, ex.id, method, record["prompts_too_long"],
                )  # fmt: skip
            record["covered"] = any(grade(a, ex) for a in record["seen_answers"])
            if ex.kind in SCORED_KINDS:  # induction: graded pairs passed (MARCO's accuracy), hidden ones apart
                record.update(grade.pairs(record["final_answer"], ex))
            methods[method] = record
        trace = shared.get(ex.id)
        rows.append(
            {
                "task": task,
                "seed": seed,
                "id": ex.id,
                "question": ex.prompt_text(),
                "gold": ex.gold,
                "kind": ex.kind,
                "choices": list(ex.choices) if ex.choices else None,
                "simulated": bool(trace["simulated"]) if trace else config.debaters == "simulated",
                "rounds": _round_summary(trace) if trace else [],
                "methods": methods,
            }
        )
    return rows, shared


# --------------------------------------------------------------------------------------------- the run


def compute_results(rows: list[dict[str, Any]], config: EvalConfig, memory_config: Any = None) -> dict[str, Any]:
    """The ``results.json`` document from samples rows (lm-eval-like; see docs/evaluation.md)."""
    from metamod.config import config_to_dict

    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["task"] in config.tasks or config.traces:
            if row.get("seed", 0) in config.seeds:
                by_task.setdefault(row["task"], []).append(row)
    results, significance, n_samples = {}, {}, {}
    frontier, budget, flips, grade = {}, {}, {}, Grader()
    for task, task_rows in by_task.items():
        results[task], significance[task] = task_metrics(task_rows, config.methods, reference=config.reference_method)
        for method, metrics in results[task].items():
            metrics.update(batch_metrics(task_rows, method))
            metrics.update(half_gains(task_rows, method, config.reference_method))
        # equal compute and per-round flips (docs/evaluation.md, "Equal compute and flips")
        frontier[task] = frontier_points(results[task])
        budget[task] = budget_matched(task_rows, results[task], grade)
        flips[task] = debate_flips(task_rows, list(results[task]), grade)
        n_samples[task] = {
            "questions": len({r["id"] for r in task_rows}),
            "rows": len(task_rows),
            "seeds": sorted({r.get("seed", 0) for r in task_rows}),
        }
    simulated = any(r.get("simulated") for r in rows) or config.debaters == "simulated"
    gold_use = methods_gold_use(config, memory_config)
    labels = {m: method_spec(m).label for m in config.methods}
    return {
        "results": results,
        "significance": {
            "reference": config.reference_method,
            "test": "exact McNemar (two-sided)",
            "by_task": significance,
        },
        "frontier": frontier,
        "budget_matched": budget,
        "flips": flips,
        "labels": gold_labels(labels, gold_use),
        "gold_use": gold_use,
        "simulated": simulated,
        "mode": config.mode,
        "n_samples": n_samples,
        "config": config_to_dict(config, memory_config),
        "versions": versions(),
    }


def methods_gold_use(config: EvalConfig, memory_config: Any = None) -> dict[str, str | None]:
    """Per method, the gold-derived signal it is defined to use (``None``: none), over every task's memory options.

    >>> methods_gold_use(EvalConfig(methods=["majority_vote", "mc2"]))["majority_vote"] is None
    True
    """
    moderator = moderator_gold_use(config)
    tasks = [None, *(getattr(memory_config, "task_memory_options", None) or {})]
    out = {}
    for method in config.methods:
        reasons = [method_gold_use(method, memory_config, moderator_gold_use=moderator, task=t) for t in tasks]
        out[method] = next((r for r in reasons if r), None)
    return out


def check_eval(config: EvalConfig, memory_config: Any = None) -> tuple[Any, Any, Any, dict[str, Any]]:
    """Everything that can fail on bad input, before any model loads, any question is generated or any file lands
    (``metamod sweep`` runs it for every value before its first run). Returns what :func:`evaluate` goes on with:
    the questions, the reusable traces, the resolved models and the folder settings."""
    output_dir = Path(config.output_dir)
    start_over = config.overwrite or not config.resume
    examples, reused = load_inputs(config)
    check_method_kinds(config.methods, examples)
    preflight_code_tasks({task: exs[0].kind if exs else None for task, exs in examples.items()})
    specs = resolve_models(config)
    if memory_config is not None:
        from metamod.memory.registry import check_memory_options, check_memory_path

        in_use = memories_in_use(config.methods, memory_config)
        check_memory_options(memory_config, in_use)
        check_memory_path(memory_config, in_use)
    check_stop_curve(config, memory_on(config.methods, memory_config))
    settings = eval_settings(config, memory_config)
    if not start_over:
        check_fingerprint(
            output_dir, settings, outputs=has_outputs(output_dir), defaults=_defaults(config, memory_config),
            command="eval", what=WHAT,
        )  # fmt: skip
    return examples, reused, specs, settings


def _defaults(config: EvalConfig, memory_config: Any) -> dict[str, Any]:
    """The defaults of the options hashed into the settings (an option added later resumes at its default)."""
    return option_defaults(type(config), None if memory_config is None else type(memory_config))


def evaluate(config: EvalConfig, memory_config: Any = None) -> dict[str, Any]:
    """Run the evaluation described by ``config`` and write its outputs to ``config.output_dir``.

    Args:
        config: the evaluation config.
        memory_config: a :class:`metamod.memory.MemoryConfig` (``None`` or memory ``none``: no memory).

    Returns:
        The ``results.json`` document.
    """
    output_dir = Path(config.output_dir)
    start_over = config.overwrite or not config.resume
    with write_after_checks(output_dir, lambda: check_eval(config, memory_config)) as checked:
        examples, reused, specs, settings = checked
        if start_over:
            clear_outputs(output_dir)
        outputs = has_outputs(output_dir)
        settings_fp = check_fingerprint(
            output_dir, settings, overwrite=start_over, record=True, outputs=outputs,
            defaults=_defaults(config, memory_config), command="eval", what=WHAT,
        )  # fmt: skip
        return _evaluate(config, memory_config, output_dir, examples, reused, specs, settings_fp)


def _evaluate(
    config: EvalConfig,
    memory_config: Any,
    output_dir: Path,
    examples: dict[str, list[Example]],
    reused: dict[tuple[str, str], dict],
    specs: dict[str, Any],
    settings_fp: str,
) -> dict[str, Any]:
    """The evaluation proper, with ``output_dir`` locked and its fingerprint checked."""
    samples_path = output_dir / SAMPLES_FILE
    method_fps = method_fingerprints(config, specs, settings_fp, memory_config)
    done = current_rows(read_samples(samples_path), examples, config.seeds, settings_fp, method_fps)
    missing = missing_cells(done, examples, config.seeds, config.methods)
    save_resolved_config(output_dir / "config.yaml", config, memory_config)
    with_memory = memory_on(config.methods, memory_config)
    memory_fps = {SHARED_KEY: settings_fp, **method_fps}
    if with_memory and (redo := add_unobserved_cells(missing, output_dir, config, memory_config, examples, memory_fps)):
        logger.warning("eval: %d cell(s) again: their memory batch was written but not observed (a crash)", redo)
    # with a memory on, memory batches (memory_batch_size, else MC2's rule per task) win for every task (a memory
    # consolidates once per batch, so the batch is part of what it learns); without one, a task's
    # task_batch_questions entry, else batch_questions
    if with_memory and config.task_batch_questions:
        logger.warning(
            "task_batch_questions %s is ignored with a memory (%s): every task uses memory batches",
            config.task_batch_questions,
            memories_in_use(config.methods, memory_config),
        )
    logger.info(
        "eval: %d (task, method, seed, question) cells to do (%d done in %s)",
        sum(len(m) for m in missing.values()),
        sum(len(r["methods"]) for r in done),
        samples_path,
    )
    todo_methods = {m for ms in missing.values() for m in ms}
    roles = {"agent"} | {r for m in todo_methods for r in method_spec(m).needs}
    wanted = {r: s for r, s in specs.items() if r in roles}
    if missing and needs_memory_llm(sorted(todo_methods), memory_config):
        wanted["memory"] = memory_llm_spec(memory_config)
        if config.debaters == "simulated":  # R13: the one real model of a simulated run, and the slow part of it
            logger.warning(
                "eval: simulated debaters, but a memory in use writes with a real memory LLM (%s, %s backend): "
                "every memory batch calls it (on a CPU the embedded SmolLM2 takes seconds per question); "
                "methods without an LLM-writing memory do not load it",
                memory_config.memory_model,
                memory_config.memory_backend,
            )
    generators = build_generators(wanted) if missing else {}
    with JsonlWriter(samples_path) as sink, JsonlWriter(output_dir / METHOD_TRACES_FILE) as trace_sink:
        for seed in config.seeds:
            seed_missing = {m for (_, s, _), ms in missing.items() if s == seed for m in ms}
            if not seed_missing:
                continue
            seed_methods = [m for m in config.methods if m in seed_missing]
            writer = None
            traces: dict[str, dict] = {}
            if not config.traces and config.mode == "replay" and config.debate_methods():  # debates to cache
                from metamod.rollout.traces import TraceWriter, read_traces

                trace_path = output_dir / f"traces-seed{seed}.jsonl"
                writer = TraceWriter(trace_path, resume=True)
                traces = {t["id"]: t for t in read_traces(trace_path)} if writer.done_ids else {}
            run = _SeedRun(
                config=config,
                memory_config=memory_config,
                output_dir=output_dir,
                seed=seed,
                methods=seed_methods,
                generators=generators,
                memory_fps=memory_fps,
                method_fps=method_fps,
                settings_fp=settings_fp,
                missing=missing,
                reused=reused,
                traces=traces,
                writer=writer,
                sinks=(sink, trace_sink),
                ledger=BudgetLedger(list(generators.values())),
            )
            try:
                # with a memory on, each memory scope (a task, or the whole run: memory_scope) gets its memories
                # fresh; without one, the whole seed is one scope, as before
                scopes = scoped_tasks(list(examples), memory_config) if with_memory else [None]
                for scope in scopes:
                    run.tasks({t: exs for t, exs in examples.items() if scope is None or t == scope}, scope)
            finally:
                if writer is not None:
                    writer.close()
    rows = current_rows(read_samples(samples_path), examples, config.seeds, settings_fp, method_fps)
    document = compute_results(rows, config, memory_config)
    document["settings_fingerprint"] = settings_fp
    if config.stop_curve:
        document["stop_curve"] = stop_curve_section(
            config, output_dir, examples, reused, specs, settings_fp, rows, loaded=generators
        )
    summaries = read_summaries(output_dir)
    if summaries:
        document["memories"] = summaries
    atomic_write_json(output_dir / RESULTS_FILE, document, indent=2, sort_keys=False)
    atomic_write_text(
        output_dir / TABLE_FILE,
        markdown_tables(
            document["results"],
            document["labels"],
            simulated=document["simulated"],
            gold_use=document["gold_use"],
            budget=document["budget_matched"],
            reference=config.reference_method,
        )
        + structure_table(document.get("memories", {}), document["labels"])
        + analysis_tables(document),
    )
    if config.plots and document["results"]:
        write_plots(document["results"], document["labels"], output_dir / "plots", simulated=document["simulated"])
        write_analysis_plots(document, output_dir / "plots")
        write_controller_plots(document["results"], document["labels"], output_dir / "plots",
                               simulated=document["simulated"])  # fmt: skip
    if config.plots and document.get("stop_curve"):
        write_stop_plots(document["stop_curve"], document["labels"], output_dir / "plots", document["simulated"])
    return document


@dataclasses.dataclass
class _SeedRun:
    """One seed of an evaluation: builds each memory scope's memories, debaters and methods, and runs its tasks."""

    config: EvalConfig
    memory_config: Any
    output_dir: Path
    seed: int
    methods: list[str]
    generators: dict[str, Any]
    memory_fps: dict[str, str]
    method_fps: dict[str, str]
    settings_fp: str
    missing: dict[tuple[str, int, str], tuple[str, ...]]
    reused: dict[tuple[str, str], dict]
    traces: dict[str, dict]
    writer: Any
    sinks: tuple[JsonlWriter, JsonlWriter]
    ledger: BudgetLedger

    def tasks(self, examples: dict[str, list[Example]], scope: str | None) -> None:
        """Run ``examples``' missing cells with the memories of ``scope`` (a task, or ``None``: the whole run)."""
        config, memory_config, seed, missing = self.config, self.memory_config, self.seed, self.missing
        todo_tasks = [t for t, exs in examples.items() if any((t, seed, ex.id) in missing for ex in exs)]
        if not todo_tasks:
            return
        with_memory = memory_on(config.methods, memory_config)
        memories = SeedMemories(
            memory_config,
            self.methods,
            config.reference_method,
            self.output_dir,
            seed,
            llm=self.generators.get("memory"),
            all_methods=config.methods,
            fingerprints=self.memory_fps,
            task=scope,
        )
        debaters = None
        if config.debaters == "simulated" or not config.traces or config.mode == "live":
            debaters = build_debaters(config, seed, agent=self.generators.get("agent"), memory=memories.shared)
        if self.writer is not None:
            check_cached_traces(self.traces, debaters, self.writer.path)
        context = layer_context(config, seed, self.generators, debaters, memories.shared)
        layers = {m: build_method(m, dataclasses.replace(context, memory=memories.for_method(m))) for m in self.methods}
        grade = _Grader()
        sink, trace_sink = self.sinks
        traces = self.traces
        for task, task_examples in examples.items():
            todo = [ex for ex in task_examples if (task, seed, ex.id) in missing]
            if config.traces:
                traces = {ex.id: self.reused[(task, ex.id)] for ex in todo}
            if with_memory:
                size = (memory_config or MemoryConfig()).batch_size_for(len(task_examples))
                numbers = batch_numbers(task_examples, size)
            for methods, group in _groups(todo, lambda ex, t=task, s=seed: missing[(t, s, ex.id)]):
                if with_memory:
                    batches = _memory_batches(group, numbers)
                else:
                    batches = list(_chunks(group, config.task_batch_questions.get(task, config.batch_questions)))
                for batch in batches:
                    known = set(traces)
                    number = numbers[batch[0].id] if with_memory else 0
                    memories.begin_batch(batch, task, number)
                    method_traces: dict[str, list[Any]] = {}
                    rows, shared = evaluate_batch(
                        batch,
                        task=task,
                        seed=seed,
                        layers={m: layers[m] for m in methods},
                        debaters=debaters,
                        config=config,
                        traces=traces,
                        grade=grade,
                        method_traces=method_traces,
                        ledger=self.ledger,
                    )
                    if with_memory:
                        memories.annotate(rows, number)
                    if self.writer is not None:
                        for ex in batch:
                            if ex.id not in known and ex.id in traces:
                                self.writer.write(traces[ex.id])
                        self.writer.sync()
                    for row in rows:  # what each cell was computed with (records stay mode-independent)
                        row["settings"] = self.settings_fp
                        row["fingerprints"] = {m: self.method_fps[m] for m in row["methods"]}
                    _write_method_traces(trace_sink, batch, method_traces, task, seed, self.method_fps)
                    sink.write_many(rows)
                    sink.sync()
                    if memories.active:
                        memories.observe_and_save(batch, rows, shared, method_traces, task=task, batch_number=number)
                    logger.info("eval seed %d task %s: %d more rows (%s)", seed, task, len(rows), methods)


def _groups(items: list[Any], key: Any) -> Iterator[tuple[Any, list[Any]]]:
    """Runs of consecutive items with the same ``key(item)`` (e.g. the same methods still to compute)."""
    group: list[Any] = []
    current = None
    for item in items:
        k = key(item)
        if group and k != current:
            yield current, group
            group = []
        current = k
        group.append(item)
    if group:
        yield current, group


def _memory_batches(group: list[Example], numbers: dict[str, int]) -> list[list[Example]]:
    """``group`` cut where the memory batch number (:func:`~metamod.evaluate.memories.batch_numbers`) changes."""
    return [batch for _, batch in _groups(group, lambda ex: numbers[ex.id])]


def main(argv: list[str] | None = None) -> int:
    """``metamod eval --config configs/eval/sim_debate.yaml [--key value ...]``."""
    config, memory_config = parse_config([EvalConfig, MemoryConfig], argv, prog="metamod eval")
    document = evaluate(config, memory_config)
    out = Path(config.output_dir)
    print((out / TABLE_FILE).read_text())
    print(
        f"results: {out / RESULTS_FILE}  samples: {out / SAMPLES_FILE}"
        + ("  (SIMULATED debaters)" if document["simulated"] else "")
    )
    return 0
