"""Traces -> the moderator dataset: one row per (question, round) with the moderator prompt and its ``eta`` label.

The prompt is built ONLY by :func:`metamod.rollout.state.moderator_messages` (the same function the evaluation's
moderator uses), with the forced-answer variant at the final round of a full-length debate. Questions are split
into train/validation by a deterministic hash of their id, so no question lands in both splits.

The paper's training rows (Meta-Moderator, appendix "Training data generation" / "Template") use ONE template, the
STOP/CONTINUE one, on every row, keep only the first two debaters of each round and use every question for
training: ``single_template=True, keep_agents=2, validation_fraction=0``. ``eta`` is then re-graded over the kept
agents only, with the shared grader.

``metamod build-dataset --traces runs/sim_arith/traces.jsonl --output_dir data/moderator``

``--source mro`` reads MRO traces instead and writes controller snapshots (one row per iteration; the state is the
question, the candidate and the Monitor's report; ``eta`` = the candidate is correct): same columns, same rewards,
same training (:mod:`metamod.rollout.mro.snapshots`).

>>> rows = snapshot_rows(example_trace("q1"))
>>> rows[0]["eta"], rows[0]["round"], rows[0]["is_final_round"], rows[0]["answers"]
(1, 0, True, ['4', '5'])
>>> rows[0]["prompt"][0]["content"].count("Agent ")
2
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metamod.config import ConfigError, check_fingerprint, parse_config, save_resolved_config
from metamod.errors import InputError
from metamod.files import atomic_write_json, write_after_checks
from metamod.rewards.outcome import DEFAULT_ESTIMATOR, check_estimator
from metamod.rollout.mro.snapshots import mro_snapshot_rows
from metamod.rollout.mro.traces import is_mro_trace
from metamod.rollout.outcome import add_outcome_columns, majority_correct, outcome_summary
from metamod.rollout.state import moderator_messages
from metamod.rollout.stats import eta_tally
from metamod.rollout.trace_prompts import traces_prompts_in_effect
from metamod.rollout.traces import example_trace, read_traces, validate_trace  # noqa: F401 (example_trace: doctest)
from metamod.tasks.grading import is_equivalent

logger = logging.getLogger(__name__)

SUMMARY_FILE = "build_summary.json"
SOURCES = ("debate", "mro")
CONFIG_FILE = "build_dataset_config.yaml"

COLUMNS = (
    "prompt",
    "eta",
    "gold",
    "kind",
    "round",
    "is_final_round",
    "id",
    "task",
    "answers",
    "num_agents",
    "simulated",
    "choices",
    "future_correct",
    "continue_value",
    "outcome_estimator",
)


def dataset_features():
    """The ``datasets.Features`` of the moderator dataset (fixed, so empty splits and ``None`` answers load back)."""
    from datasets import Features, List, Value

    return Features(
        {
            "prompt": List({"role": Value("string"), "content": Value("string")}),
            "eta": Value("int64"),
            "gold": Value("string"),
            "kind": Value("string"),
            "round": Value("int64"),
            "is_final_round": Value("bool"),
            "id": Value("string"),
            "task": Value("string"),
            "answers": List(Value("string")),
            "num_agents": Value("int64"),
            "simulated": Value("bool"),
            "choices": List(Value("string")),
            "future_correct": List(Value("int64")),
            "continue_value": Value("float64"),
            "outcome_estimator": Value("string"),
        }
    )


def is_validation(example_id: str, *, fraction: float, seed: int = 0) -> bool:
    """Whether a question id belongs to the validation split (a stable hash; independent of the other ids).

    >>> is_validation("q1", fraction=0.0), is_validation("q1", fraction=1.0)
    (False, True)
    """
    return _unit_hash(example_id, seed) < fraction


def _unit_hash(example_id: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{example_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def snapshot_rows(
    trace: dict,
    *,
    max_rounds: int | None = None,
    single_template: bool = False,
    keep_agents: int | None = None,
    outcome_estimator: str = DEFAULT_ESTIMATOR,
) -> list[dict[str, Any]]:
    """The moderator rows of one debate: one per round (up to ``max_rounds``).

    ``is_final_round`` is true at round ``T_max - 1`` of a debate that ran its full budget: with ``max_rounds``
    given, ``T_max = max_rounds`` (longer debates are truncated); otherwise only a debate that ended with
    ``stop_reason == "max_rounds"`` has a final round (its last one). A final round gets the forced-answer prompt,
    and the control reward skips it. With ``single_template`` every row, the last round included, gets the
    STOP/CONTINUE prompt and ``is_final_round`` false (the paper's training rows; the control reward applies to all).

    Args:
        trace: a schema-valid trace.
        max_rounds: optional T_max for the dataset.
        single_template: one prompt template (STOP/CONTINUE) on every row, no forced-answer rows.
        keep_agents: keep only the first this many agents' responses per round (``None``: all); ``eta`` is then
            re-graded over the kept agents' answers with :func:`metamod.tasks.grading.is_equivalent`.
        outcome_estimator: how ``continue_value`` values the recorded future (:mod:`metamod.rollout.outcome`).

    Returns:
        Row dicts with the columns of :data:`COLUMNS`.

    >>> three = example_trace("q", answers=("5", "6", "4"))
    >>> [(r["eta"], r["num_agents"], r["answers"]) for r in snapshot_rows(three, keep_agents=2)]
    [(0, 2, ['5', '6'])]
    >>> snapshot_rows(three, single_template=True)[0]["is_final_round"]
    False
    """
    if keep_agents is not None and keep_agents < 1:
        raise ValueError(f"keep_agents must be >= 1 or None (all agents), got {keep_agents}")
    rounds = trace["rounds"]
    if max_rounds is not None:
        rounds = rounds[:max_rounds]
        final_index = max_rounds - 1
    else:
        final_index = trace["num_rounds"] - 1 if trace["stop_reason"] == "max_rounds" else -1
    if single_template:
        final_index = -1
    choices = list(trace["choices"]) if trace.get("choices") else None
    rows = []
    for rnd in rounds:
        t = rnd["round"]
        kept = rnd["responses"] if keep_agents is None else rnd["responses"][:keep_agents]
        eta = int(rnd["eta"])
        if len(kept) < len(rnd["responses"]):  # eta must mean "a correct answer among the agents shown"
            eta = int(
                any(
                    r["answer"] is not None and is_equivalent(r["answer"], trace["gold"], trace["kind"], choices)
                    for r in kept
                )
            )
        final = t == final_index
        rows.append(
            {
                "prompt": moderator_messages(trace["question"], [r["text"] for r in kept], final=final),
                "eta": eta,
                "gold": trace["gold"],
                "kind": trace["kind"],
                "round": t,
                "is_final_round": final,
                "id": trace["id"],
                "task": trace["task"],
                "answers": [r["answer"] for r in kept],
                "num_agents": len(kept),
                "simulated": bool(trace["simulated"]),
                "choices": choices,
            }
        )
    # the recorded future (outcome reward): the budget is max_rounds, else the debate's own when it ran to the end
    last = rows[-1]["round"] if rows else -1
    at_budget = last == max_rounds - 1 if max_rounds is not None else trace["stop_reason"] == "max_rounds"
    correct = majority_correct(trace, [row["answers"] for row in rows])
    return add_outcome_columns(rows, correct, at_budget=at_budget, estimator=outcome_estimator)


def _trace_files(traces: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    items = [traces] if isinstance(traces, (str, os.PathLike)) else list(traces)
    files = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            path = path / "traces.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"traces file not found: {path} (run `metamod rollout` first, or merge shards)")
        files.append(path)
    if not files:
        raise ValueError("build_dataset needs at least one traces file")
    return files


def build_dataset(
    traces_path: str | os.PathLike | Sequence[str | os.PathLike],
    output_dir: str | os.PathLike | None,
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    max_rounds: int | None = None,
    single_template: bool = False,
    keep_agents: int | None = None,
    source: str = "debate",
    outcome_estimator: str = DEFAULT_ESTIMATOR,
    push_to_hub: bool = False,
    repo_id: str | None = None,
    private: bool = True,
    overwrite: bool = False,
    config: Any = None,
):
    """Build the moderator dataset from traces and save it with ``save_to_disk``.

    Args:
        traces_path: a ``traces.jsonl`` file, a folder holding one, or a list of them (ids de-duplicated).
        output_dir: where to save the ``DatasetDict`` (``None``: do not save).
        validation_fraction: share of QUESTIONS in the validation split (0 <= f < 1).
        seed: salt of the id hash that assigns questions to splits.
        max_rounds: optional T_max (truncate longer debates; the last kept round is the forced-answer round).
        single_template: the STOP/CONTINUE prompt on every row, no forced-answer rows (the paper's training rows).
        keep_agents: keep only the first this many agents' responses per round, re-grading ``eta`` over them
            (the paper keeps N=2).
        source: ``"debate"`` (debate traces -> moderator rows) or ``"mro"`` (MRO traces -> controller snapshots);
            a trace of the other kind is an error naming its file and id.
        outcome_estimator: how each row's ``continue_value`` values the recorded future (the outcome reward;
            :data:`metamod.rewards.outcome.ESTIMATORS`).
        push_to_hub: also push to the Hugging Face Hub under ``repo_id``.
        repo_id: Hub dataset repo (``user/name``), required with ``push_to_hub``.
        private: create the Hub repo as private.
        overwrite: replace a dataset in ``output_dir`` that was built with other options or sources (otherwise
            refused with the differing settings named; same settings: rebuilt in place).
        config: the resolved command config, saved as ``build_dataset_config.yaml`` beside the dataset.

    Returns:
        ``datasets.DatasetDict`` with ``train`` and ``validation`` splits; ``.info_summary`` (a dict attribute)
        holds counts, eta rate per round, coverage, skipped ids and the build ``options`` (also saved in
        ``build_summary.json``).

    Raises:
        FileNotFoundError: for a missing traces file.
        TraceError: for a corrupt or schema-invalid trace (naming file:line and field).
        ValueError: for bad arguments.
    """
    from datasets import Dataset, DatasetDict

    if not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {validation_fraction}")
    if max_rounds is not None and max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1 or None, got {max_rounds}")
    if keep_agents is not None and keep_agents < 1:
        raise ValueError(f"keep_agents must be >= 1 or None (all agents), got {keep_agents}")
    if push_to_hub and not repo_id:
        raise ValueError("push_to_hub needs repo_id (e.g. your-name/metamod-moderator-data)")
    if source not in SOURCES:
        raise ConfigError(f"source must be one of {SOURCES}, got {source!r}")
    if source == "mro" and keep_agents is not None:
        raise ConfigError("keep_agents applies to debates (agents per round); an MRO snapshot has one candidate")
    try:
        check_estimator(outcome_estimator)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    files = _trace_files(traces_path)
    with traces_prompts_in_effect(files):
        options = dataset_options(
            validation_fraction=validation_fraction,
            seed=seed,
            max_rounds=max_rounds,
            single_template=single_template,
            keep_agents=keep_agents,
            source=source,
            outcome_estimator=outcome_estimator,
        )

        def read() -> tuple[Any, dict[str, Any]]:  # every trace read and checked; nothing written
            if output_dir is not None and not overwrite:  # other settings: fail before reading the traces
                _check_dataset_resume(Path(output_dir), options, files, overwrite=False)
            splits: dict[str, list[dict]] = {"train": [], "validation": []}
            seen: set[str] = set()
            skipped: list[str] = []
            duplicates = 0
            trimmed_rows = 0
            first_by_hash: tuple[float, str] | None = None
            for path in files:
                for number, trace in enumerate(read_traces(path, validate=False), start=1):
                    tid = str(trace.get("id", f"{path}:{number}"))
                    if (
                        not isinstance(trace.get("question"), str)
                        or not trace.get("question", "").strip()
                        or not isinstance(trace.get("gold"), str)
                        or not trace.get("gold", "").strip()
                    ):
                        skipped.append(tid)
                        continue
                    validate_trace(trace, f"{path}:{number}: trace {tid!r}")
                    if is_mro_trace(trace) != (source == "mro"):
                        kind, flag = (
                            ("an MRO", "--source mro") if is_mro_trace(trace) else ("a debate", "--source debate")
                        )
                        raise InputError(
                            f"{path}:{number}: trace {tid!r} is {kind} trace but source is {source!r}; expected {source} "
                            f"traces (build {kind.split()[-1]} rows with {flag}, from a separate traces file)"
                        )
                    if tid in seen:
                        duplicates += 1
                        continue
                    seen.add(tid)
                    split = "validation" if is_validation(tid, fraction=validation_fraction, seed=seed) else "train"
                    if source == "mro":
                        rows = mro_snapshot_rows(
                            trace,
                            max_rounds=max_rounds,
                            single_template=single_template,
                            outcome_estimator=outcome_estimator,
                        )
                    else:
                        rows = snapshot_rows(
                            trace,
                            max_rounds=max_rounds,
                            single_template=single_template,
                            keep_agents=keep_agents,
                            outcome_estimator=outcome_estimator,
                        )
                    if keep_agents is not None:
                        trimmed_rows += sum(len(r["responses"]) > keep_agents for r in trace["rounds"][: len(rows)])
                    splits[split].extend(rows)
                    key = (_unit_hash(tid, seed), tid)
                    if first_by_hash is None or key < first_by_hash:
                        first_by_hash = key
            if skipped:
                logger.warning(
                    "skipped %d trace(s) without question or gold: %s", len(skipped), ", ".join(skipped[:20])
                )
            if duplicates:
                logger.warning("dropped %d duplicate trace id(s) across inputs", duplicates)
            if trimmed_rows:
                logger.info(
                    "kept the first %d agents' responses (eta re-graded) in %d row(s)", keep_agents, trimmed_rows
                )
            if not seen:
                why = f"{len(skipped)} without question or gold" if skipped else "the file(s) are empty"
                raise InputError(
                    f"{', '.join(str(p) for p in files)}: 0 usable traces ({why}); expected at least 1 debate trace: run "
                    "`metamod rollout` first (or point --traces at its traces.jsonl)"
                )
            # tiny sets: keep at least one validation question when a validation split was asked for
            if validation_fraction > 0 and not splits["validation"] and len(seen) >= 2 and first_by_hash is not None:
                moved = first_by_hash[1]
                splits["validation"] = [r for r in splits["train"] if r["id"] == moved]
                splits["train"] = [r for r in splits["train"] if r["id"] != moved]
            features = dataset_features()
            dataset = DatasetDict(
                {
                    name: Dataset.from_list(rows, features=features)
                    if rows
                    else Dataset.from_dict({c: [] for c in features}, features=features)
                    for name, rows in splits.items()
                }
            )
            all_rows = splits["train"] + splits["validation"]
            eta = eta_tally(all_rows)
            summary = {
                "questions": eta.questions,
                "rows": {name: len(rows) for name, rows in splits.items()},
                "questions_by_split": {name: len({r["id"] for r in rows}) for name, rows in splits.items()},
                "eta_rate_by_round": eta.eta_rate_by_round(),
                "coverage": eta.coverage(),
                "simulated": any(r["simulated"] for r in all_rows),
                "skipped_ids": skipped,
                "duplicates": duplicates,
                "sources": [str(p) for p in files],
                "rows_with_agents_dropped": trimmed_rows,
                "outcome": outcome_summary(all_rows),
                "options": options,
            }
            return dataset, summary

        if output_dir is None:
            dataset, summary = read()
        else:
            output_dir = Path(output_dir)
            with write_after_checks(output_dir, read) as (dataset, summary):
                _check_dataset_resume(output_dir, options, files, overwrite=overwrite, record=True)
                # one shard even for an empty split: datasets writes no file for 0 shards and cannot load it back
                dataset.save_to_disk(
                    str(output_dir), num_shards={name: 1 if len(ds) == 0 else None for name, ds in dataset.items()}
                )
                atomic_write_json(output_dir / SUMMARY_FILE, summary, indent=2, sort_keys=False)
                if config is not None:
                    save_resolved_config(output_dir / CONFIG_FILE, config)
        if push_to_hub:
            dataset.push_to_hub(repo_id, private=private)
        dataset.info_summary = summary
        return dataset


def dataset_settings(options: dict[str, Any], files: Sequence[Path]) -> dict[str, Any]:
    """What a moderator dataset's rows depend on (its fingerprint): the build options, the traces files and the
    prompts in effect (rows hold rendered moderator prompts). Traces that grew since are rebuilt, not refused.

    >>> settings = dataset_settings(dataset_options(keep_agents=2), [Path("runs/x/traces.jsonl")])
    >>> settings["keep_agents"], settings["sources"][0].endswith("x/traces.jsonl")
    (2, True)
    """
    from metamod.prompts import prompts_record

    record = {k: v for k, v in prompts_record().items() if k != "prompts_file"}
    return {**options, "sources": [str(Path(p).resolve()) for p in files], **record}


def _check_dataset_resume(
    output_dir: Path, options: dict[str, Any], files: Sequence[Path], *, overwrite: bool, record: bool = False
) -> None:
    check_fingerprint(
        output_dir,
        dataset_settings(options, files),
        overwrite=overwrite,
        record=record,
        outputs=(output_dir / "dataset_dict.json").is_file(),
        command="build-dataset",
        what="a moderator dataset",
    )


def dataset_options(
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    max_rounds: int | None = None,
    single_template: bool = False,
    keep_agents: int | None = None,
    source: str = "debate",
    outcome_estimator: str = DEFAULT_ESTIMATOR,
) -> dict[str, Any]:
    """The options that shape a moderator dataset's rows, as recorded in ``build_summary.json`` (``options``).

    >>> dataset_options(single_template=True, keep_agents=2, validation_fraction=0.0)["keep_agents"]
    2
    """
    return {
        "validation_fraction": float(validation_fraction),
        "seed": int(seed),
        "max_rounds": max_rounds,
        "single_template": bool(single_template),
        "keep_agents": keep_agents,
        **({"source": source} if source != "debate" else {}),  # debate datasets keep their old fingerprints
        # the default estimator is implied (datasets built before it keep their fingerprints)
        **({"outcome_estimator": outcome_estimator} if outcome_estimator != DEFAULT_ESTIMATOR else {}),
    }


@dataclass
class DatasetConfig:
    """Options of ``metamod build-dataset``."""

    traces: list[str] = field(
        default_factory=list,
        metadata={"help": "traces.jsonl file(s), or rollout output folder(s) holding traces.jsonl."},
    )
    output_dir: str = field(default="data/moderator", metadata={"help": "Where to save the DatasetDict."})
    validation_fraction: float = field(
        default=0.1, metadata={"help": "Share of questions (not rows) in the validation split, in [0, 1)."}
    )
    split_seed: int = field(default=0, metadata={"help": "Salt of the id hash that assigns questions to splits."})
    max_rounds: int | None = field(
        default=None,
        metadata={"help": "T_max of the dataset (None: the debates' own; longer debates are truncated)."},
    )
    single_template: bool = field(
        default=False,
        metadata={
            "help": "Paper rows: the STOP/CONTINUE prompt on every row, no forced-answer prompt at the last round "
            "(is_final_round is false everywhere, so the control reward applies to every row)."
        },
    )
    keep_agents: int | None = field(
        default=None,
        metadata={
            "help": "Keep only the first this many agents' responses per round (the paper keeps 2; extra agents "
            "are discarded) and re-grade eta over them. None: all agents."
        },
    )
    source: str = field(
        default="debate",
        metadata={
            "help": "debate: debate traces -> moderator rows; mro: MRO traces -> controller snapshots (state = "
            "question, candidate, monitor report; eta = the candidate is correct)."
        },
    )
    outcome_estimator: str = field(
        default=DEFAULT_ESTIMATOR,
        metadata={
            "help": "How the continue_value column (read by the outcome reward) values the recorded future of a "
            "row at round t: next_majority (the debaters' majority at t+1 is correct), best_later (the best later "
            "round, each round priced: optimistic) or final_majority (the majority at the last recorded round). "
            "See docs/training.md, 'The outcome reward'."
        },
    )
    push_to_hub: bool = field(default=False, metadata={"help": "Also push the dataset to the Hugging Face Hub."})
    repo_id: str | None = field(default=None, metadata={"help": "Hub dataset repo id (user/name) for push_to_hub."})
    private: bool = field(default=True, metadata={"help": "Create the Hub repo as private."})
    overwrite: bool = field(
        default=False,
        metadata={"help": "Replace a dataset in output_dir built with other options or traces files (else refused)."},
    )

    def __post_init__(self) -> None:
        if not self.traces:
            raise ConfigError("build-dataset needs traces: --traces runs/sim_arith/traces.jsonl")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        if self.push_to_hub and not self.repo_id:
            raise ConfigError("push_to_hub needs repo_id, e.g. --repo_id your-name/metamod-moderator-data")
        if self.keep_agents is not None and self.keep_agents < 1:
            raise ConfigError(
                f"keep_agents must be >= 1 or null (all agents), got {self.keep_agents}; the paper uses 2"
            )
        try:
            check_estimator(self.outcome_estimator)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    """``metamod build-dataset --traces runs/sim_arith --output_dir data/moderator``."""
    (config,) = parse_config([DatasetConfig], argv, prog="metamod build-dataset")
    dataset = build_dataset(
        config.traces,
        config.output_dir,
        validation_fraction=config.validation_fraction,
        seed=config.split_seed,
        max_rounds=config.max_rounds,
        single_template=config.single_template,
        keep_agents=config.keep_agents,
        source=config.source,
        outcome_estimator=config.outcome_estimator,
        push_to_hub=config.push_to_hub,
        repo_id=config.repo_id,
        private=config.private,
        overwrite=config.overwrite,
        config=config,
    )
    s = dataset.info_summary
    what = "controller snapshots (MRO)" if config.source == "mro" else "moderator dataset"
    label = " (simulated)" if s["simulated"] else ""
    print(f"{what}{label} -> {config.output_dir}")
    print(
        f"  questions {s['questions']} (train {s['questions_by_split']['train']}, "
        f"validation {s['questions_by_split']['validation']}); rows {s['rows']}"
    )
    print(f"  eta rate by round {s['eta_rate_by_round']}")
    print(f"  coverage (eta=1 at some round) {s['coverage']}")
    print(f"  continue_value by round ({s['outcome']['estimator']}) {s['outcome']['continue_value_by_round']}")
    if config.single_template or config.keep_agents is not None:
        kept = f"first {config.keep_agents} agents" if config.keep_agents is not None else "all agents"
        template = "STOP/CONTINUE prompt on every row" if config.single_template else "forced-answer prompt at T_max"
        print(f"  rows: {template}; {kept} ({s['rows_with_agents_dropped']} row(s) had more, eta re-graded)")
    if s["skipped_ids"]:
        print(f"  skipped {len(s['skipped_ids'])} trace(s) without question/gold: {', '.join(s['skipped_ids'][:10])}")
    return 0
