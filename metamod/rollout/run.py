"""``metamod rollout`` (debate or MRO traces) and ``metamod merge-shards``.

``loop: mro`` runs the Reasoner / Monitor / Controller loop (:mod:`metamod.rollout.mro`) with the ``roles`` setting
(:mod:`metamod.rollout.mro.factory`) instead of a debate; everything below (resume, shards, locks) is the same.

``metamod rollout --config configs/rollout/sim_arith.yaml`` streams examples from one or more tasks, runs the
round-synchronous debate engine with simulated or LLM debaters and appends one trace per question to
``<output_dir>/traces.jsonl`` (``traces.shard-i-of-K.jsonl`` when sharded). Every line is flushed as it is written,
so Ctrl-C or a crash leaves a readable file; rerunning the same command resumes, skipping finished ids. The
resolved config and a summary (eta rate per round, coverage, throughput) are saved next to the traces.

Nothing is written before every check passed (task options, debater backends, model folders). The settings are
fingerprinted into ``.fingerprint.json`` (a rerun with other settings is refused, naming the keys) and the traces
file is locked while it is written (``.lock``, one per shard), so two rollouts never write one file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metamod.config import (
    FINGERPRINT_LOCK,
    ConfigError,
    check_fields,
    check_fingerprint,
    config_to_dict,
    option_defaults,
    parse_config,
    read_fingerprint,
    record_fingerprint,
    resolve_local_paths,
    resume_settings,
    save_resolved_config,
    settings_fingerprint,
)
from metamod.errors import InputError
from metamod.files import LOCK_FILE, FolderLock, atomic_write_json, check_unlocked, path_signature
from metamod.rollout.debate import DebateStats, check_max_rounds, max_rounds_field, run_debates
from metamod.rollout.debater_factory import DebaterSpec, build_debater_groups
from metamod.rollout.debaters import DebaterGroup
from metamod.rollout.engine import Grader, LoopItem
from metamod.rollout.simulated import SimulationConfig
from metamod.rollout.traces import (
    TraceWriter,
    check_shard_args,
    in_shard,
    read_traces,
    shard_filename,
)
from metamod.tasks import TaskConfig
from metamod.tasks.config import check_task_selection, fingerprint_task_selection, task_config_for

logger = logging.getLogger(__name__)

CONFIG_FILE = "rollout_config.yaml"
# Keys that may change between a run and its resumption without changing the traces.
_RESUME_FREE_KEYS = {
    "output_dir",
    "resume",
    "overwrite",
    "progress",
    "batch_questions",
    "num_shards",
    "shard_index",
    "prompts_file",
}  # prompts_sha256 (the override's content) is compared


def _as_list(value: Any, name: str) -> list | None:
    """A YAML list, or a JSON list given on the command line (``--debaters '[{...}]'``)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("[", "{")):
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{name} must be a YAML list or a JSON list, got {text[:80]!r}: {err}") from err
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{name} must be a list of mappings, got {value!r:.120}")
    return value


LOOPS = ("debate", "mro")


@dataclass
class RolloutConfig:
    """What to run and where the traces go: tasks and simulation settings nested as in ``metamod eval``."""

    # ---- what to run: the task-selection shape `metamod eval` takes
    tasks: list[str] = field(
        default_factory=lambda: ["arith"],
        metadata={
            "help": "Task names, run in this order (see docs/tasks.md); name@variant runs one task under several "
            "labels (its traces carry the full entry)."
        },
    )
    task_options: dict = field(
        default_factory=dict,
        metadata={
            "help": "Per-task TaskConfig fields, e.g. {gsm8k: {task_split: train, task_limit: 500}} (YAML mapping)."
        },
    )
    limit: int | None = field(
        default=None, metadata={"help": "Questions per task; overrides every task's task_limit (None: keep them)."}
    )
    simulation: dict = field(
        default_factory=dict,
        metadata={"help": "SimulationConfig fields of the simulated debaters, e.g. {sim_seed: 0} (YAML mapping)."},
    )
    mro_simulation: dict = field(
        default_factory=dict,
        metadata={"help": "loop=mro: MROSimulationConfig fields of the simulated roles (YAML mapping)."},
    )
    # ---- the loop
    loop: str = field(
        default="debate",
        metadata={"help": "'debate' (N debaters, T_max rounds) or 'mro' (Reasoner / Monitor / Controller loop)."},
    )
    roles: str = field(
        default="simulated",
        metadata={
            "help": "loop=mro: 'simulated', one backend mapping shared by the three roles, or {reasoner: ..., "
            "monitor: ..., controller: ...} (each 'simulated' or a backend mapping; decoding keys override the "
            "run's; controller protocol: prompted | moderator). See metamod/rollout/mro/factory.py."
        },
    )
    max_iterations: int = field(
        default=3, metadata={"help": "loop=mro: N, the iteration budget (MC2 appendix D uses 3)."}
    )
    debaters: str = field(
        default="simulated",
        metadata={
            "help": "'simulated' (arith-aware stochastic debaters, CPU), or a list of backend configs (YAML list of "
            "mappings with metamod.llm.BackendConfig keys, e.g. [{backend: vllm, model: ...}]; JSON on the command "
            "line): one entry used by every agent, or one entry per agent."
        },
    )
    num_agents: int = field(default=2, metadata={"help": "N, the number of debaters (>= 2)."})
    max_rounds: int = max_rounds_field()
    temperature: float = field(default=0.7, metadata={"help": "LLM debaters: sampling temperature (0 = greedy)."})
    top_p: float = field(default=1.0, metadata={"help": "LLM debaters: nucleus sampling mass."})
    max_tokens: int = field(default=512, metadata={"help": "LLM debaters: max new tokens per response."})
    seed: int | None = field(
        default=None,
        metadata={
            "help": "LLM debaters: sampling seed (None: unseeded). With a seed, agents sharing a backend get "
            "seed + agent and separate batched calls, so identical round-0 prompts do not give identical samples."
        },
    )
    confidence: bool = field(
        default=False, metadata={"help": "Ask debaters for a confidence estimate (the confidence_instruction prompt)."}
    )
    stop: list[str] | None = field(
        default=None,
        metadata={"help": "LLM debaters: strings that end a response (not included), e.g. ['\\nQuestion:']."},
    )
    tiny_model_dir: str | None = field(
        default=None,
        metadata={"help": "Build the offline tiny model in this folder first when it is missing (CPU smoke runs)."},
    )
    output_dir: str = field(default="runs/rollout", metadata={"help": "Folder for traces, config and summary."})
    num_shards: int = field(default=1, metadata={"help": "Split the examples into this many shards (K)."})
    shard_index: int = field(default=0, metadata={"help": "Which shard this process runs (0..K-1)."})
    shard_by: str = field(
        default="hash", metadata={"help": "Shard assignment: 'hash' (stable hash of the id) or 'position'."}
    )
    batch_questions: int = field(
        default=256, metadata={"help": "Questions per engine chunk (bounds memory; traces are written per chunk)."}
    )
    resume: bool = field(default=True, metadata={"help": "Append to an existing traces file, skipping finished ids."})
    overwrite: bool = field(default=False, metadata={"help": "Delete existing traces in output_dir and start over."})
    progress: bool = field(default=True, metadata={"help": "Show a tqdm progress bar."})

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ConfigError(f"loop must be one of {LOOPS}, got {self.loop!r}")
        if self.max_iterations < 1:
            raise ConfigError(f"max_iterations must be >= 1, got {self.max_iterations}")
        if self.loop == "mro":
            from metamod.rollout.mro.factory import role_specs

            role_specs(self.roles)
        if self.num_agents < 2:
            raise ConfigError(f"num_agents must be >= 2 (a debate needs two debaters), got {self.num_agents}")
        check_max_rounds(self.max_rounds)
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.batch_questions < 1:
            raise ConfigError(f"batch_questions must be >= 1, got {self.batch_questions}")
        if self.shard_by not in ("hash", "position"):
            raise ConfigError(f"shard_by must be 'hash' or 'position', got {self.shard_by!r}")
        try:
            check_shard_args(self.num_shards, self.shard_index)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        if (
            isinstance(self.debaters, str)
            and self.debaters.strip() != "simulated"
            and _as_list(self.debaters, "debaters") is None
        ):
            raise ConfigError(
                f"debaters must be 'simulated' or a list of backend configs, got {self.debaters!r}; e.g. "
                "debaters: [{backend: hf, model: runs/tiny-model}]"
            )
        specs = self.backend_specs()
        if specs is not None and len(specs) not in (1, self.num_agents):
            raise ConfigError(
                f"debaters lists {len(specs)} backend configs for num_agents={self.num_agents}; give one (shared by "
                "every agent) or one per agent"
            )
        if not self.tasks:
            raise ConfigError("tasks is empty; list at least one task, e.g. [arith]")
        check_task_selection(self.tasks, self.task_options, self.limit)
        from metamod.rollout.mro.simulated import MROSimulationConfig

        check_fields("simulation", self.simulation, SimulationConfig)
        check_fields("mro_simulation", self.mro_simulation, MROSimulationConfig)

    def debater_spec(self) -> DebaterSpec:
        """The debaters' decoding settings (agent ``i`` samples with ``seed + i`` when seeded)."""
        return DebaterSpec(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed,
            confidence=self.confidence,
            stop=list(self.stop) if self.stop else None,
        )

    def is_simulated(self) -> bool:
        return isinstance(self.debaters, str) and self.debaters.strip() == "simulated"

    def backend_specs(self) -> list[dict] | None:
        """The backend config mappings (``None`` for simulated debaters)."""
        return None if self.is_simulated() else _as_list(self.debaters, "debaters")

    def task_configs(self) -> list[TaskConfig]:
        """The tasks to run, in order (:func:`metamod.tasks.config.task_config_for` of each entry)."""
        return [task_config_for(entry, self.task_options, self.limit) for entry in self.tasks]

    def sim_config(self) -> SimulationConfig:
        """The simulated debaters' parameters (``simulation``)."""
        return SimulationConfig(**self.simulation)

    def mro_sim_config(self) -> Any:
        """The simulated MRO roles' parameters (``mro_simulation``)."""
        from metamod.rollout.mro.simulated import MROSimulationConfig

        return MROSimulationConfig(**self.mro_simulation)


def moved_keys() -> dict[str, str]:
    """The flat keys of the old rollout shape and where each belongs now (the error for one names its place)."""
    from metamod.rollout.mro.simulated import MROSimulationConfig

    moved = {"task": "tasks: [<task>, ...]"}
    for f in dataclasses.fields(TaskConfig):
        if f.name != "task":
            moved[f.name] = "task_options: {<task>: {key: value}}"
    for name, config in (("simulation", SimulationConfig), ("mro_simulation", MROSimulationConfig)):
        for f in dataclasses.fields(config):
            moved[f.name] = f"{name}: {{key: value}}"
    return moved


# --------------------------------------------------------------------------------------------- building


def build_debaters(config: RolloutConfig) -> list[DebaterGroup]:
    """The ``num_agents`` debater groups, built by the shared factory (:mod:`metamod.rollout.debater_factory`).

    Args:
        config: the rollout config (its ``simulation`` parameters serve ``debaters: simulated``).

    Returns:
        ``num_agents`` groups, agent order: agents with the same backend config share a generator; unseeded they
        also share a group (one batched call per round), seeded agent ``i`` samples with ``seed + i`` in its own.

    Raises:
        ConfigError: unknown backend-config keys.
        FileNotFoundError: a local model folder that does not exist.
    """
    if config.is_simulated():
        return build_debater_groups(config.sim_config(), config.debater_spec(), config.num_agents)
    from metamod.llm import BackendConfig
    from metamod.llm.hf import looks_local

    backend_configs = []
    for i, spec in enumerate(config.backend_specs() or []):
        check_fields(f"debaters[{i}]", spec, BackendConfig)
        backend_config = BackendConfig(**spec)
        if backend_config.backend in ("hf", "vllm") and looks_local(backend_config.model):
            if not Path(backend_config.model).expanduser().is_dir():
                raise FileNotFoundError(
                    f"debaters[{i}]: model folder {backend_config.model!r} does not exist; give an existing folder, a "
                    "Hub id (org/name), or set tiny_model_dir to that folder to build the offline tiny model"
                )
        backend_configs.append(backend_config)
    return build_debater_groups(backend_configs, config.debater_spec(), config.num_agents)


def _task_stream(entries: list[str], task_configs: list[TaskConfig]) -> Iterator[LoopItem]:
    """Examples of every task in order, labelled with the task entry; ``index`` counts across tasks."""
    position = 0
    for entry, task_config in zip(entries, task_configs, strict=True):
        task = task_config.load()
        for example in task.examples():
            yield LoopItem(example, position, entry)
            position += 1


# --------------------------------------------------------------------------------------------- resume and locking


def lock_name(config: RolloutConfig) -> str:
    """The writer lock of this run's traces file: ``.lock``, or one per shard (shards share a folder).

    >>> lock_name(RolloutConfig(num_shards=4, shard_index=1))
    '.lock.shard-1-of-4'
    """
    return LOCK_FILE if config.num_shards == 1 else f"{LOCK_FILE}.shard-{config.shard_index}-of-{config.num_shards}"


def _backend_mappings(config: RolloutConfig) -> list[dict]:
    """The backend mappings this run loads: the debaters', or (loop=mro) the LLM roles'."""
    if config.loop == "mro":
        from metamod.rollout.mro.factory import role_specs

        return [spec for spec in role_specs(config.roles).values() if isinstance(spec, dict)]
    return config.backend_specs() or []


def _model_signatures(config: RolloutConfig) -> dict[str, str]:
    """Content signatures of the local model and adapter folders the debaters load (retrained in place: new)."""
    signatures = {}
    for spec in _backend_mappings(config):
        for key in ("model", "adapter"):
            value = spec.get(key)
            signature = path_signature(value) if isinstance(value, str) and value else None
            if signature:
                signatures[value] = signature
    return signatures


def resolved_config(config: RolloutConfig) -> dict[str, Any]:
    """The config as it runs (saved as ``rollout_config.yaml``; a rerun of that file is the same rollout): the
    simulation parameters of its loop with every default filled in.

    >>> resolved_config(RolloutConfig())["simulation"]["sim_seed"]
    0
    """
    resolved = config_to_dict(config)
    if config.loop == "mro":
        resolved["mro_simulation"] = dataclasses.asdict(config.mro_sim_config())
    else:
        resolved["simulation"] = dataclasses.asdict(config.sim_config())
    return resolved


def rollout_settings(config: RolloutConfig) -> dict[str, Any]:
    """The settings a rollout's traces depend on (hashed into ``.fingerprint.json``): the resolved config without
    the resume-free keys, each task entry's full :class:`TaskConfig` in place of ``task_options`` and ``limit``, and
    signatures of local model folders (``model_signatures``). Local paths (task files, model folders) are made
    absolute, so a rerun naming the same file another way resumes."""
    settings = resume_settings(resolved_config(config), _RESUME_FREE_KEYS)
    fingerprint_task_selection(settings, dict(zip(config.tasks, config.task_configs(), strict=True)))
    signatures = _model_signatures(config)
    if signatures:
        settings["model_signatures"] = signatures
    return resolve_local_paths(settings)


def _has_traces(output_dir: Path) -> bool:
    return output_dir.is_dir() and any(output_dir.glob("traces*.jsonl"))


def _check_resume(output_dir: Path, settings: dict[str, Any], *, overwrite: bool, record: bool = False) -> None:
    check_fingerprint(
        output_dir,
        settings,
        overwrite=overwrite,
        outputs=_has_traces(output_dir),
        ignore=() if record else ("model_signatures",),  # early: the tiny model may not be built yet
        defaults=option_defaults(RolloutConfig),
        command="rollout",
        what="traces",
    )


def _claim(output_dir: Path, config: RolloutConfig, settings: dict[str, Any], traces_path: Path) -> FolderLock:
    """Take this run's writer lock, check (or, with ``overwrite``, reset) the folder and record its fingerprint.

    All of it happens under the folder's short fingerprint lock, so K shards started at once with
    ``overwrite=true`` agree: the first one to come clears the folder (refusing while a writer with other
    settings still runs in it) and records the new settings; the others then only restart their own file.
    """
    lock = FolderLock(output_dir, name=lock_name(config))
    with FolderLock(output_dir, name=FINGERPRINT_LOCK, wait=True):
        lock.acquire()
        try:
            saved = read_fingerprint(output_dir)
            if config.overwrite:
                if saved is None or saved.get("fingerprint") != settings_fingerprint(settings):
                    _clear(output_dir, own_lock=lock.name)
                traces_path.unlink(missing_ok=True)
            _check_resume(output_dir, settings, overwrite=config.overwrite, record=True)
            record_fingerprint(output_dir, settings, command="rollout")
        except BaseException:
            lock.release()
            raise
    return lock


def _clear(output_dir: Path, *, own_lock: str) -> None:
    """Delete every traces and summary file of ``output_dir``; refuses while another writer holds a lock in it."""
    for other in sorted(output_dir.glob(f"{LOCK_FILE}*")):
        if other.name not in (own_lock, FINGERPRINT_LOCK):
            check_unlocked(output_dir, name=other.name)
    for path in [*output_dir.glob("traces*.jsonl"), *output_dir.glob("summary*.json")]:
        logger.info("overwrite: deleting %s", path)
        path.unlink()


def _check_tasks(task_configs: list[TaskConfig]) -> None:
    """Load every task and read its first example, so bad task options fail before anything is written; a task
    whose answers are code also needs a working sandbox here (:func:`~metamod.tasks.code.grading.preflight_code_tasks`)."""
    from metamod.tasks.code.grading import preflight_code_tasks

    kinds = {}
    for task_config in task_configs:
        task = task_config.load()
        first = next(iter(task.examples()), None)
        if first is None:  # eval refuses the same: nothing to debate, and an empty traces file would be written
            source = task_config.task_data_files or task_config.task_path
            raise InputError(
                f"task {task_config.task!r} has no usable question{f' in {source}' if source else ''} (rows need a "
                "question and a gold answer; check the column options and task_limit); expected at least one"
            )
        kinds[task_config.task] = getattr(first, "kind", None)
    preflight_code_tasks(kinds)


def _build_mro_roles(config: RolloutConfig) -> Any:
    """The MRO roles of a ``loop: mro`` rollout (local model folders checked before anything loads)."""
    from metamod.llm.hf import looks_local
    from metamod.rollout.mro.factory import build_mro_roles

    for spec in _backend_mappings(config):
        if spec.get("backend", "hf") in ("hf", "vllm") and looks_local(spec["model"]):
            if not Path(spec["model"]).expanduser().is_dir():
                raise FileNotFoundError(
                    f"roles: model folder {spec['model']!r} does not exist; give an existing folder, a Hub id "
                    "(org/name), or set tiny_model_dir to that folder to build the offline tiny model"
                )
    return build_mro_roles(config.roles, config.debater_spec().sampling(0), config.mro_sim_config())


def rollout(*, config: RolloutConfig, stop_hook: Any = None) -> dict[str, Any]:
    """Run (or resume) a rollout and return its summary.

    Args:
        config: the rollout settings (tasks, loop, debaters or roles, simulation, output folder).
        stop_hook: optional engine stop hook (see :func:`metamod.rollout.debate.run_debates`).

    Returns:
        The summary dict (also written to ``summary*.json`` in the output folder).
    """
    task_configs = config.task_configs()
    output_dir = Path(config.output_dir)
    traces_path = output_dir / shard_filename(config.num_shards, config.shard_index)
    # ---- checks that write nothing: another writer, other settings, bad task options, bad models
    check_unlocked(output_dir, name=lock_name(config))
    if traces_path.exists() and not config.resume and not config.overwrite:
        raise ConfigError(f"{traces_path} exists; set resume=true to continue it or overwrite=true to start over")
    _check_tasks(task_configs)  # first: a broken task file is named as such, not as "other settings"
    if not config.overwrite:
        _check_resume(output_dir, rollout_settings(config), overwrite=False)
    if config.tiny_model_dir:
        from metamod.llm.tiny import ensure_tiny_model

        ensure_tiny_model(config.tiny_model_dir)
    if config.loop == "mro":
        debaters = _build_mro_roles(config)
    else:  # fails early on bad backends / missing model folders
        debaters = build_debaters(config)
    settings = rollout_settings(config)
    # ---- the folder is ours from here on
    lock = _claim(output_dir, config, settings, traces_path)
    try:
        return _run(task_configs, config, debaters, traces_path, output_dir, stop_hook)
    finally:
        lock.release()


def _run(
    task_configs: list[TaskConfig],
    config: RolloutConfig,
    debaters: list[DebaterGroup],
    traces_path: Path,
    output_dir: Path,
    stop_hook: Any,
) -> dict[str, Any]:
    """The rollout proper (folder locked)."""
    save_resolved_config(output_dir / CONFIG_FILE, resolved_config(config))
    writer = TraceWriter(traces_path, resume=True)
    done = set(writer.done_ids)
    if done:
        logger.info("resuming %s: %d debate(s) already done", traces_path, len(done))
    items = (
        item
        for item in _task_stream(config.tasks, task_configs)
        if item.example.id not in done
        and in_shard(
            item.example.id,
            item.index,
            num_shards=config.num_shards,
            shard_index=config.shard_index,
            by=config.shard_by,
        )
    )
    interrupted, chunking = False, {"batch_questions": config.batch_questions, "progress": config.progress}
    if config.loop == "mro":
        from metamod.rollout.mro import MROStats, run_mro

        stats: Any = MROStats()
        traces = run_mro(items, debaters, max_iterations=config.max_iterations, stats=stats, **chunking)
    else:
        stats = DebateStats()
        traces = run_debates(
            items, debaters, max_rounds=config.max_rounds, stop_hook=stop_hook, stats=stats, **chunking
        )
    try:
        for trace in traces:
            writer.write(trace)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        writer.close()
        this_run = {**stats.summary(), "skipped_done": len(done), "interrupted": interrupted}
        summary = {
            "loop": config.loop,
            "simulated": config.is_simulated() if config.loop == "debate" else debaters.simulated,
            "traces_file": str(traces_path),
            **file_statistics(traces_path, config.loop),
            "total_traces": len(writer.done_ids),
            "this_run": this_run,
        }
        suffix = "" if config.num_shards == 1 else f".shard-{config.shard_index}-of-{config.num_shards}"
        atomic_write_json(output_dir / f"summary{suffix}.json", summary, indent=2, sort_keys=False)
    return summary


#: summary keys about one invocation (time, batched calls): only in ``this_run``
RUN_ONLY_KEYS = frozenset(
    ("elapsed_s", "questions_per_s", "debate_rounds_per_s", "instances_per_s", "tokens_per_s", "calls_per_backend",
     "calls_per_role")
)  # fmt: skip


def file_statistics(traces_path: Path, loop: str) -> dict[str, Any]:
    """The statistics of every trace in ``traces_path`` (whatever runs and resumes wrote them), counted as the
    engine counts them live; the per-invocation keys (:data:`RUN_ONLY_KEYS`) are left to ``this_run``."""
    from metamod.rollout.mro import MROStats

    stats = MROStats() if loop == "mro" else DebateStats()
    grade = Grader()  # one for the whole file
    if traces_path.is_file():
        for trace in read_traces(traces_path, validate=False):
            stats.add_trace(trace, grade)
    return {k: v for k, v in stats.summary().items() if k not in RUN_ONLY_KEYS}


def _print_summary(summary: dict[str, Any]) -> None:
    run = summary["this_run"]
    if summary.get("loop") == "mro":
        label = " (simulated roles)" if summary["simulated"] else ""
        print(
            f"rollout mro{label}: {run['questions']} new instances ({run['skipped_done']} already done; "
            f"{summary['questions']} in the file) -> {summary['traces_file']}"
        )
        print(
            f"  accuracy {summary['accuracy']}, mean iterations {summary['mean_iterations']}, "
            f"{summary['tokens_per_instance']} tokens/instance, {run['instances_per_s']} instances/s"
        )
        print(f"  candidate accuracy by iteration {summary['candidate_accuracy_by_iteration']}")
        print(f"  action shares by iteration      {summary['action_shares_by_iteration']}")
        print(f"  statuses {summary['statuses']}   parse {summary['parse']}")
        return
    label = " (simulated debaters)" if summary["simulated"] else ""
    print(
        f"rollout{label}: {run['questions']} new debates ({run['skipped_done']} already done; {summary['questions']} "
        f"in the file) -> {summary['traces_file']}"
    )
    print(
        f"  debate-rounds {summary['debate_rounds']}, tokens {summary['prompt_tokens'] + summary['completion_tokens']}"
        f", this run {run['questions_per_s']} q/s, {run['tokens_per_s']} tok/s"
    )
    print(f"  eta rate by round  {summary['eta_rate_by_round']}")
    print(f"  agent accuracy     {summary['agent_accuracy_by_round']}")
    print(f"  coverage           {summary['coverage']}   calls {run['calls_per_backend']}")
    if summary.get("trimmed_prompts") or summary.get("prompts_too_long"):
        print(
            f"  prompt budget      {summary.get('trimmed_prompts', 0)} prompt(s) cut to fit, "
            f"{summary.get('prompts_too_long', 0)} too long (not sent, answered empty)"
        )


def main(argv: list[str] | None = None) -> int:
    """``metamod rollout --config configs/rollout/sim_arith.yaml [--key value ...]``."""
    (config,) = parse_config([RolloutConfig], argv, prog="metamod rollout", moved=moved_keys())
    summary = rollout(config=config)
    _print_summary(summary)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
