"""``metamod mine-behaviours``: solve -> reflect -> extract over task questions, written as a behaviour corpus.

``metamod mine-behaviours --config configs/memory/mine_smol.yaml [--key value ...]`` streams the questions of the
configured tasks (each with a ``domain`` label), runs the three stages of :mod:`metamod.memory.cheatsheet.mining` on
batches of ``batch_size`` questions (one batched ``generator.chat`` call per stage and batch) and writes to
``output_dir``:

- ``mined.jsonl``: one row per question, appended and fsynced per batch (the resume unit): ``id``, ``domain``,
  ``task``, ``example_id``, ``question``, ``gold``, ``kind``, the three stage texts (``solution``,
  ``reflection``, ``extraction``), the solution's extracted ``answer`` and ``correct`` (graded with
  :mod:`metamod.tasks.grading` against the gold, for the record only: the model never sees the gold),
  ``records`` (``[[name, description], ...]``), ``tokens`` per stage, ``batch`` and ``seconds`` (its share of the
  batch's wall time);
- at the end, from all of ``mined.jsonl``: ``behaviours.jsonl`` (records deduplicated by exact name, first wins,
  per domain or globally; ``{"id", "name", "description", "domain", "question_id", "question", "correct"}``),
  ``embeddings.npz`` (``behaviours`` = E(description), ``queries`` = E(question), float32, row-aligned with
  ``behaviours.jsonl``) with ``embeddings.json`` (``{"embedder": spec, "rows", "dim"}``), and ``summary.json``.

Rerunning the same command resumes: finished question ids are skipped and the final files are rebuilt. The
settings that change ``mined.jsonl`` are fingerprinted (``.fingerprint.json``), so a rerun with others is refused
with one line naming the keys (``--overwrite true`` starts over); the embedder and the dedupe scope only change
the final files, so they may change between runs. The folder is locked (``.lock``) while a run writes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metamod.config import (
    ConfigError,
    check_fingerprint,
    config_to_dict,
    parse_config,
    record_fingerprint,
    resolve_local_paths,
    resume_settings,
    save_resolved_config,
)
from metamod.files import JsonlWriter, atomic_write_json, iter_jsonl, path_signature, write_after_checks
from metamod.llm.base import Generator, SamplingConfig
from metamod.memory.cheatsheet import mining
from metamod.tasks.base import Example
from metamod.tasks.config import TaskConfig, check_task_selection, fingerprint_task_selection, task_config_for

logger = logging.getLogger(__name__)

MINED_FILE = "mined.jsonl"
BEHAVIOURS_FILE = "behaviours.jsonl"
EMBEDDINGS_FILE = "embeddings.npz"
EMBEDDINGS_META = "embeddings.json"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "mine_config.yaml"
#: keys that may change between a run and its resumption without changing mined.jsonl
_RESUME_FREE_KEYS = {
    "output_dir",
    "overwrite",
    "embedder",
    "embedder_options",
    "dedupe",
    "records_from",
    "prompts_file",
}
DEDUPE_SCOPES = ("domain", "global")
STAGES = ("solve", "reflect", "extract")


@dataclass
class MineConfig:
    """What to mine, with which model, and where the corpus goes."""

    tasks: list[str] = field(
        default_factory=lambda: ["arith"],
        metadata={
            "help": "The question sources, mined in this order: task names (docs/tasks.md) or name@variant labels, "
            "the task selection of rollout and eval."
        },
    )
    task_options: dict = field(
        default_factory=lambda: {"arith": {"task_split": "train"}},
        metadata={
            "help": "Per task entry, TaskConfig fields, e.g. {arith: {task_split: train, task_levels: [1, 2, 3]}} "
            "(YAML mapping; the same block as rollout and eval)."
        },
    )
    domains: dict = field(
        default_factory=dict,
        metadata={
            "help": "Per task entry, the corpus label of its behaviours, e.g. {numina_math: math} (default: the entry)."
        },
    )
    limit: int | None = field(
        default=20,
        metadata={"help": "Questions per task; overrides every task's task_limit (None: keep them)."},
    )
    backend: str = field(
        default="hf", metadata={"help": "Generation backend (metamod.llm.BACKENDS): hf, vllm, openai."}
    )
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Model: the embedded alias smollm2-135m-instruct, a local folder or a Hub id / served name."},
    )
    backend_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "Other metamod.llm.BackendConfig keys, e.g. {device: cpu, batch_size: 16, num_threads: 2} "
            "(hf) or {tensor_parallel_size: 2} (vllm)."
        },
    )
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature of every stage (0 = greedy)."})
    extract_temperature: float | None = field(
        default=None,
        metadata={
            "help": "Temperature of the extract stage, a formatting task (None: temperature); a weak model keeps "
            "the name: description format better at a low one."
        },
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass of every stage."})
    solve_max_tokens: int = field(default=256, metadata={"help": "Max new tokens of a solution (stage 1)."})
    reflect_max_tokens: int = field(default=128, metadata={"help": "Max new tokens of a reflection (stage 2)."})
    extract_max_tokens: int = field(default=128, metadata={"help": "Max new tokens of an extraction (stage 3)."})
    batch_size: int = field(
        default=16,
        metadata={"help": "Questions per batched call of each stage; a batch is written at once (the resume unit)."},
    )
    max_behaviours: int = field(default=5, metadata={"help": "Most behaviour records kept per question."})
    records_from: str = field(
        default="extraction",
        metadata={
            "help": "Where records come from: extraction (the extract stage, the paper), reflection (the reflection's "
            "own sentences: for models that copy the extract prompt's example) or both. Rebuilds the final files only."
        },
    )
    dedupe: str = field(
        default="domain",
        metadata={"help": "Deduplicate records by exact name within each domain (domain) or across domains (global)."},
    )
    embedder: str = field(
        default="lm",
        metadata={"help": "Embedder of descriptions and questions (metamod.memory.embed.EMBEDDERS): lm or hashing."},
    )
    embedder_options: dict = field(
        default_factory=dict,
        metadata={"help": "Embedder constructor options, e.g. {batch_size: 32} (lm) or {n_features: 2048} (hashing)."},
    )
    output_dir: str = field(default="runs/mine", metadata={"help": "Folder of the corpus files."})
    seed: int | None = field(
        default=0,
        metadata={
            "help": "Sampling seed (batch b, stage s sample with seed + 3 b + s, so a resumed run draws what an "
            "uninterrupted one would); None: unseeded."
        },
    )
    overwrite: bool = field(default=False, metadata={"help": "Delete the corpus files in output_dir and start over."})

    def __post_init__(self) -> None:
        from metamod.memory.embed import check_embedder

        self._check_tasks()
        for name in ("temperature", "extract_temperature"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must be >= 0 (0 = greedy), got {value}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        for name in ("solve_max_tokens", "reflect_max_tokens", "extract_max_tokens", "batch_size", "max_behaviours"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.records_from not in mining.RECORD_SOURCES:
            raise ConfigError(f"records_from must be one of {mining.RECORD_SOURCES}, got {self.records_from!r}")
        if self.dedupe not in DEDUPE_SCOPES:
            raise ConfigError(f"dedupe must be one of {DEDUPE_SCOPES}, got {self.dedupe!r}")
        try:
            check_embedder(self.embedder, self.embedder_options.get("model_path") or self.embedder_options.get("model"))
        except ValueError as err:
            raise ConfigError(str(err)) from err
        for key in ("backend", "model"):
            if key in self.backend_options:
                raise ConfigError(f"backend_options must not set {key!r}; use the top-level {key} key")

    def _check_tasks(self) -> None:
        if isinstance(self.tasks, list) and any(isinstance(t, dict) for t in self.tasks):
            raise ConfigError(
                "tasks takes task names now, as rollout and eval do: tasks: [arith, game24], their options in "
                "task_options: {arith: {task_split: train}} (TaskConfig fields) and corpus labels in domains: "
                f"{{arith: arith}}; got {self.tasks!r:.120}"
            )
        if not self.tasks:
            raise ConfigError("tasks is empty; list at least one task, e.g. [arith]")
        check_task_selection(self.tasks, self.task_options, self.limit)
        if not isinstance(self.domains, dict):
            raise ConfigError(f"domains must be a mapping of task entry to corpus label, got {self.domains!r}")
        for entry, label in self.domains.items():
            if entry not in self.tasks:
                raise ConfigError(f"domains has a label for {entry!r}, which is not in tasks {self.tasks}")
            if not isinstance(label, str) or not label:
                raise ConfigError(f"domains[{entry!r}] must be a non-empty label, got {label!r}")
        self.task_configs()  # a bad option value fails here, before any work

    def task_configs(self) -> dict[str, TaskConfig]:
        """Each task entry's :class:`TaskConfig` (``limit`` applied), in ``tasks`` order."""
        return {entry: task_config_for(entry, self.task_options, self.limit) for entry in self.tasks}

    def domain(self, entry: str) -> str:
        """The corpus label of the behaviours mined from task entry ``entry``."""
        return str(self.domains.get(entry) or entry)

    def sampling(self, stage: str, batch: int) -> SamplingConfig:
        """The decoding settings of ``stage`` for batch number ``batch``."""
        max_tokens = getattr(self, f"{stage}_max_tokens")
        seed = None if self.seed is None else self.seed + 3 * batch + STAGES.index(stage)
        temperature = self.temperature
        if stage == "extract" and self.extract_temperature is not None:
            temperature = self.extract_temperature
        return SamplingConfig(temperature=temperature, top_p=self.top_p, max_tokens=max_tokens, seed=seed)

    def backend_config(self) -> Any:
        """The :class:`metamod.llm.BackendConfig` of the mining model (unknown keys fail naming the valid ones)."""
        from metamod.llm import BackendConfig

        valid = [f.name for f in dataclasses.fields(BackendConfig)]
        unknown = sorted(set(self.backend_options) - set(valid))
        if unknown:
            raise ConfigError(
                f"backend_options: unknown key(s) {unknown}; valid BackendConfig keys: {', '.join(valid)}"
            )
        try:
            return BackendConfig(backend=self.backend, model=self.model, **self.backend_options)
        except ValueError as err:
            raise ConfigError(f"backend_options: {err}") from err


# --------------------------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Question:
    """One question to mine: its corpus id (``<domain>/<example id>``), domain, task and example."""

    id: str
    domain: str
    task: str
    example: Example


def load_questions(config: MineConfig) -> list[Question]:
    """Every question of the configured tasks, in task order (ids must be unique across tasks)."""
    out: list[Question] = []
    seen: dict[str, str] = {}
    for entry, task_config in config.task_configs().items():
        try:
            task = task_config.load()
        except (KeyError, ValueError, TypeError) as err:
            message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
            raise ConfigError(f"task_options[{entry!r}]: {message}") from err
        domain = config.domain(entry)
        for example in task.examples():
            qid = f"{domain}/{example.id}"
            if qid in seen:
                raise ConfigError(
                    f"task {entry!r} repeats question id {qid!r} of task {seen[qid]!r}; give the two entries "
                    "different domains or options that make different questions"
                )
            seen[qid] = entry
            out.append(Question(qid, domain, entry, example))
    return out


def build_mining_generator(config: MineConfig) -> Generator:
    """The generator of the three stages (tests replace this function with a scripted fake)."""
    from metamod.llm import build_generator

    return build_generator(config.backend_config())


# --------------------------------------------------------------------------------------------- mining


def _grade(text: str, example: Example) -> tuple[str | None, bool]:
    from metamod.tasks.grading import extract_answer, is_equivalent

    answer = extract_answer(text)
    return answer, bool(is_equivalent(answer, example.gold, example.kind, example.choices))


def mine_batch(generator: Generator, config: MineConfig, questions: list[Question], batch: int) -> list[dict[str, Any]]:
    """Run the three stages on one batch (three batched calls) and return its ``mined.jsonl`` rows."""
    started = time.perf_counter()
    texts = [q.example.prompt_text() for q in questions]
    solutions = mining.solve(generator, config.sampling("solve", batch), texts)
    later = mining.reflect_and_extract_outputs(
        generator,
        config.sampling("reflect", batch),
        [(t, s.text) for t, s in zip(texts, solutions, strict=True)],
        max_behaviours=config.max_behaviours,
        extract_sampling=config.sampling("extract", batch),
    )
    share = (time.perf_counter() - started) / max(1, len(questions))
    rows = []
    for question, text, solution, stages in zip(questions, texts, solutions, later, strict=True):
        answer, correct = _grade(solution.text, question.example)
        rows.append(
            {
                "id": question.id,
                "domain": question.domain,
                "task": question.task,
                "example_id": question.example.id,
                "question": text,
                "gold": question.example.gold,
                "kind": question.example.kind,
                "solution": solution.text,
                "answer": answer,
                "correct": correct,
                "reflection": stages.reflection,
                "extraction": stages.extraction,
                "records": [list(r) for r in stages.records],
                "tokens": {"solve": mining.tokens_of(solution), **stages.tokens},
                "batch": batch,
                "seconds": round(share, 4),
            }
        )
    return rows


def _batches(questions: list[Question], size: int) -> Iterator[tuple[int, list[Question]]]:
    """Fixed batches over the WHOLE question list (so batch numbers, and seeds, survive a resume)."""
    for start in range(0, len(questions), size):
        yield start // size, questions[start : start + size]


def _check_row(obj: Any, where: str) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str) or not isinstance(obj.get("records"), list):
        raise ValueError(f"{where}: not a mined-question row (expected an object with id and records)")


def read_mined(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of ``mined.jsonl`` by question id (a torn last line is dropped; a later duplicate wins)."""
    if not path.is_file():
        return {}
    return {row["id"]: row for _, row in iter_jsonl(path, check=_check_row)}


# --------------------------------------------------------------------------------------------- the corpus


def row_records(row: dict[str, Any], records_from: str = "extraction", limit: int = 5) -> list[list[str]]:
    """A mined row's records from the chosen source (:data:`metamod.memory.cheatsheet.mining.RECORD_SOURCES`)."""
    if records_from == "extraction":
        return [list(r) for r in row["records"]]
    outputs = mining.StageOutputs(
        reflection=row.get("reflection") or "",
        extraction=row.get("extraction") or "",
        records=[tuple(r) for r in row["records"]],
        tokens={},
    )
    return [list(r) for r in mining.records_of(outputs, records_from, limit)]


def build_behaviours(
    rows: list[dict[str, Any]], *, dedupe: str = "domain", records_from: str = "extraction", limit: int = 5
) -> tuple[list[dict[str, Any]], int]:
    """The deduplicated behaviour rows of ``behaviours.jsonl`` (and the number of records before dedupe).

    >>> rows = [{"id": "arith/a", "domain": "arith", "question": "Q1", "correct": True,
    ...          "records": [["add-up", "Add <n> and <n>."], ["check", "Check the sum twice."]]},
    ...         {"id": "game24/b", "domain": "game24", "question": "Q2", "correct": False,
    ...          "records": [["add-up", "Try adding first."]]}]
    >>> [(b["id"], b["name"], b["domain"]) for b in build_behaviours(rows)[0]]
    [('b00000', 'add-up', 'arith'), ('b00001', 'check', 'arith'), ('b00002', 'add-up', 'game24')]
    >>> len(build_behaviours(rows, dedupe="global")[0]), build_behaviours(rows)[1]
    (2, 3)
    """
    flat = [
        (row["domain"], str(name), str(description), row)
        for row in rows
        for name, description in row_records(row, records_from, limit)
    ]
    key = (lambda item: item[1]) if dedupe == "global" else (lambda item: (item[0], item[1]))
    kept = mining.dedupe_by_name(flat, key=key)
    out = [
        {
            "id": f"b{i:05d}",
            "name": name,
            "description": description,
            "domain": domain,
            "question_id": row["id"],
            "question": row["question"],
            "correct": row.get("correct"),
        }
        for i, (domain, name, description, row) in enumerate(kept)
    ]
    return out, len(flat)


def write_corpus(output_dir: Path, rows: list[dict[str, Any]], config: MineConfig) -> dict[str, Any]:
    """Write ``behaviours.jsonl``, ``embeddings.npz`` / ``.json`` from the mined rows; returns counts and timing."""
    from metamod.memory.embed import build_embedder

    behaviours, raw = build_behaviours(
        rows, dedupe=config.dedupe, records_from=config.records_from, limit=config.max_behaviours
    )
    with JsonlWriter(output_dir / BEHAVIOURS_FILE, resume=False) as writer:
        writer.write_many(behaviours)
    seconds = write_embeddings(output_dir, behaviours, build_embedder(config.embedder, **config.embedder_options))
    return {"behaviours": behaviours, "raw": raw, "embedding_seconds": seconds}


def write_embeddings(output_dir: Path, behaviours: list[dict[str, Any]], embedder: Any) -> float:
    """``embeddings.npz`` (E(description), E(question), row-aligned) and ``embeddings.json`` for ``behaviours``
    beside their ``behaviours.jsonl``; returns the embedding seconds."""
    started = time.perf_counter()
    descriptions = embedder.embed([b["description"] for b in behaviours])
    queries = embedder.embed([b["question"] for b in behaviours])
    if not behaviours:  # an empty corpus still gets well-formed (0, D0) arrays
        dim = embedder.embed(["x"]).shape[1]
        descriptions = queries = np.zeros((0, dim), dtype=np.float32)
    seconds = time.perf_counter() - started
    tmp = output_dir / f".{EMBEDDINGS_FILE}.tmp.npz"
    np.savez(tmp, behaviours=descriptions.astype(np.float32), queries=queries.astype(np.float32))
    tmp.replace(output_dir / EMBEDDINGS_FILE)
    atomic_write_json(
        output_dir / EMBEDDINGS_META,
        {"embedder": embedder.spec(), "rows": len(behaviours), "dim": int(descriptions.shape[1])},
    )
    return seconds


def summarise(rows: list[dict[str, Any]], corpus: dict[str, Any], run_seconds: float, new: int) -> dict[str, Any]:
    """The ``summary.json`` document."""
    behaviours = corpus["behaviours"]
    tokens = {stage: {"prompt": 0, "completion": 0} for stage in STAGES}
    for row in rows:
        for stage in STAGES:
            for kind in ("prompt", "completion"):
                tokens[stage][kind] += int(row.get("tokens", {}).get(stage, {}).get(kind, 0))
    per_domain: dict[str, dict[str, Any]] = {}
    kept = Counter(b["domain"] for b in behaviours)
    for row in rows:
        entry = per_domain.setdefault(row["domain"], {"questions": 0, "correct": 0, "records": 0, "empty": 0})
        entry["questions"] += 1
        entry["correct"] += int(bool(row.get("correct")))
        entry["records"] += len(row["records"])
        entry["empty"] += int(not row["records"])
    for domain, entry in per_domain.items():
        entry["behaviours"] = kept.get(domain, 0)
        entry["accuracy"] = round(entry["correct"] / entry["questions"], 4)
    mining_seconds = sum(float(row.get("seconds", 0.0)) for row in rows)
    n = len(rows)
    return {
        "questions": n,
        "new_questions": new,
        "questions_without_records": sum(1 for row in rows if not row["records"]),
        "behaviours_before_dedupe": corpus["raw"],
        "behaviours": len(behaviours),
        "behaviours_per_question": round(corpus["raw"] / n, 3) if n else 0.0,
        "accuracy": round(sum(bool(r.get("correct")) for r in rows) / n, 4) if n else None,
        "per_domain": per_domain,
        "tokens": tokens,
        "seconds": {
            "mining": round(mining_seconds, 2),
            "embedding": round(corpus["embedding_seconds"], 2),
            "this_run": round(run_seconds, 2),
        },
        "questions_per_minute": round(60.0 * n / mining_seconds, 3) if mining_seconds > 0 else None,
    }


# --------------------------------------------------------------------------------------------- the command


def mine_settings(config: MineConfig) -> dict[str, Any]:
    """The settings ``mined.jsonl`` depends on (fingerprinted): the config without the resume-free keys, each task
    entry's full :class:`TaskConfig` in place of ``task_options`` and ``limit`` (as a rollout's), the signatures of
    local task files, the prompts, and the signature of a local model folder."""
    settings = resume_settings(config_to_dict(config), _RESUME_FREE_KEYS)
    fingerprint_task_selection(settings, config.task_configs())
    from metamod.prompts import get_template

    settings["templates"] = {name: get_template(f"behaviour_{name}") for name in STAGES}
    signature = path_signature(config.model) if Path(config.model).expanduser().exists() else None
    if signature:
        settings["model_signature"] = signature
    return resolve_local_paths(settings)


def _clear(output_dir: Path) -> None:
    for name in (MINED_FILE, BEHAVIOURS_FILE, EMBEDDINGS_FILE, EMBEDDINGS_META, SUMMARY_FILE):
        path = output_dir / name
        if path.exists():
            logger.info("overwrite: deleting %s", path)
            path.unlink()


def mine_behaviours(config: MineConfig, *, generator: Generator | None = None) -> dict[str, Any]:
    """Run (or resume) behaviour mining and write the corpus; returns the summary.

    Args:
        config: the mining settings.
        generator: a ready generator (default: :func:`build_mining_generator`, built only when questions remain).

    Raises:
        ConfigError: bad task options, another writer in ``output_dir``, or a folder mined with other settings
            (:class:`~metamod.config.SettingsMismatchError`, one line naming the keys).
    """
    started = time.perf_counter()
    output_dir = Path(config.output_dir)
    mined_path = output_dir / MINED_FILE
    settings = mine_settings(config)

    def checks() -> tuple:  # write nothing
        if not config.overwrite:
            outputs = mined_path.is_file()
            check_fingerprint(output_dir, settings, outputs=outputs, command="mine-behaviours", what="mined behaviours")
        questions = load_questions(config)
        done = {} if config.overwrite else read_mined(mined_path)
        todo = [(b, [q for q in batch if q.id not in done]) for b, batch in _batches(questions, config.batch_size)]
        todo = [(b, batch) for b, batch in todo if batch]
        model = build_mining_generator(config) if todo and generator is None else generator  # a bad model: now
        return questions, done, todo, model

    # ---- the folder is ours once every check passed
    with write_after_checks(output_dir, checks) as (questions, done, todo, generator):
        if config.overwrite:
            _clear(output_dir)
        record_fingerprint(output_dir, settings, command="mine-behaviours")
        save_resolved_config(output_dir / CONFIG_FILE, config)
        if done:
            logger.info("resuming %s: %d of %d question(s) already mined", mined_path, len(done), len(questions))
        new = 0
        with JsonlWriter(mined_path, resume=True) as writer:
            for batch_index, batch in todo:
                rows = mine_batch(generator, config, batch, batch_index)
                writer.write_many(rows)
                writer.sync()
                new += len(rows)
                logger.info(
                    "batch %d: %d question(s), %d record(s) (%d/%d mined)",
                    batch_index,
                    len(rows),
                    sum(len(r["records"]) for r in rows),
                    len(done) + new,
                    len(questions),
                )
        by_id = read_mined(mined_path)
        wanted = [q.id for q in questions]
        rows = [by_id[qid] for qid in wanted if qid in by_id]
        corpus = write_corpus(output_dir, rows, config)
        summary = summarise(rows, corpus, time.perf_counter() - started, new)
        atomic_write_json(output_dir / SUMMARY_FILE, summary, indent=2, sort_keys=False)
    return summary


def main(argv: list[str] | None = None) -> int:
    """``metamod mine-behaviours --config configs/memory/mine_smol.yaml [--key value ...]``."""
    (config,) = parse_config([MineConfig], argv, prog="metamod mine-behaviours")
    summary = mine_behaviours(config)
    print(
        f"mine-behaviours: {summary['questions']} questions ({summary['new_questions']} new), "
        f"{summary['behaviours_before_dedupe']} records -> {summary['behaviours']} behaviours after dedupe "
        f"-> {Path(config.output_dir) / BEHAVIOURS_FILE}"
    )
    print(
        f"  per domain {json.dumps({d: v['behaviours'] for d, v in summary['per_domain'].items()})}, "
        f"accuracy {summary['accuracy']}, {summary['questions_per_minute']} questions/min"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
