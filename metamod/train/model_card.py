"""The model card (``README.md``) of an exported moderator adapter.

The card is a ``huggingface_hub.ModelCard`` rendered from ``model_card_template.md`` (a Jinja template beside this
module) with YAML metadata from ``ModelCardData``. Everything variable is computed here from files on disk: the
adapter's ``adapter_config.json``, the resolved training config and ``train_summary.json`` saved by
``metamod train``, the moderator dataset (eta statistics, counted by :class:`metamod.rollout.stats.EtaTally`) and an
optional lm-eval-like ``results.json`` (read by :mod:`metamod.evaluate.results`). Reward descriptions come from the
rewards registry (:data:`metamod.rewards.REWARDS`: each reward's docstring).

>>> print(markdown_table(["a", "b"], [[1, "x"]]))
| a | b |
|---|---|
| 1 | x |
>>> print(results_table({"arith": {"majority": {"acc": 0.5, "acc_stderr": 0.05}}}))
| Task | Method | acc |
|---|---|---|
| arith | majority | 0.5 ± 0.05 |
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metamod.llm.vllm_backend import LORA_RANKS

logger = logging.getLogger(__name__)

TEMPLATE_PATH = Path(__file__).with_name("model_card_template.md")
BASE_TAGS = ["meta-moderator", "grpo", "lora", "trl", "multi-agent-debate"]

#: (config key, label) pairs shown in the GRPO table, in order; missing keys are skipped
GRPO_KEYS: list[tuple[str, str]] = [
    ("learning_rate", "learning rate"),
    ("lr_scheduler_type", "LR schedule"),
    ("num_generations", "num_generations (group size)"),
    ("beta", "beta (KL coefficient)"),
    ("loss_type", "loss_type"),
    ("epsilon", "epsilon (clip)"),
    ("scale_rewards", "scale_rewards"),
    ("temperature", "sampling temperature"),
    ("max_completion_length", "max completion length"),
    ("per_device_train_batch_size", "per-device batch size"),
    ("gradient_accumulation_steps", "gradient accumulation"),
    ("max_steps", "max_steps"),
    ("num_train_epochs", "epochs"),
    ("global_step", "steps trained"),
    ("warm_start", "SFT warm start"),
    ("warm_start_targets", "warm-start targets"),
    ("gold_use", "gold answers learned (beyond the eta labels)"),
    ("use_vllm", "vLLM generation"),
    ("seed", "seed"),
]

#: metrics shown in the evaluation table when present (``metamod eval`` writes many more); others are skipped
RESULT_METRICS = (
    "accuracy",
    "mean_rounds",
    "coverage",
    "mis_aggregation",
    "format_valid_rate",
    "tokens_per_question",
)

#: (adapter_config.json key, label) pairs shown in the LoRA table
LORA_KEYS: list[tuple[str, str]] = [
    ("r", "r (rank)"),
    ("lora_alpha", "alpha"),
    ("lora_dropout", "dropout"),
    ("target_modules", "target modules"),
    ("use_rslora", "rsLoRA"),
    ("bias", "bias"),
]


def _fmt(value: Any) -> str:
    """Short, stable text for a table cell."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple, set)):
        return (
            ", ".join(str(v) for v in sorted(value, key=str)) if isinstance(value, set) else ", ".join(map(str, value))
        )
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table.

    Args:
        header: column titles.
        rows: one sequence of cell values per row (formatted with a short stable format).

    Returns:
        The table text (no trailing newline).
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- evaluation results


def results_table(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    metrics: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """One row per (task, method), one column per metric; a ``metric_stderr`` twin is shown as ``± stderr``.

    Args:
        results: ``{task: {method: {metric: value}}}``.
        metrics: columns to show. Default: those of :data:`RESULT_METRICS` present in ``results``, or, when none
            is, every scalar metric in order of first appearance.
        labels: display names of methods (``results.json`` ``labels``), shown as ``label (`method`)``.

    Returns:
        A markdown table (``-`` where a method lacks a metric).
    """
    present: list[str] = []
    for methods in results.values():
        for values in methods.values():
            for key, value in values.items():
                scalar = isinstance(value, (int, float, str, bool)) or value is None
                if scalar and not key.endswith("_stderr") and key not in present:
                    present.append(key)
    if metrics is None:
        metrics = [m for m in RESULT_METRICS if m in present] or present
    rows = []
    for task, methods in results.items():
        for method, values in methods.items():
            label = (labels or {}).get(method)
            row: list[Any] = [task, f"{label} (`{method}`)" if label and label != method else method]
            for metric in metrics:
                value = values.get(metric)
                if value is None:
                    row.append("-")
                    continue
                cell = _fmt(value)
                stderr = values.get(f"{metric}_stderr")
                if isinstance(stderr, (int, float)) and not isinstance(stderr, bool) and math.isfinite(stderr):
                    cell += f" ± {stderr:.2g}"
                row.append(cell)
            rows.append(row)
    return markdown_table(["Task", "Method", *metrics], rows)


# ---------------------------------------------------------------- training data


def dataset_statistics(dataset_path: str | os.PathLike) -> dict[str, Any]:
    """Eta statistics of a moderator dataset saved by ``metamod build-dataset``.

    Args:
        dataset_path: a ``DatasetDict`` (or ``Dataset``) folder saved with ``save_to_disk``.

    Returns:
        ``{"path", "splits": {split: rows}, "rows", "questions", "eta_rate": float, "eta_rate_per_round":
        {round: rate}, "rows_per_round": {round: rows}, "coverage": float, "simulated": bool, "tasks": [...]}``.
        ``coverage`` is the share of questions where some round has eta = 1 (a correct answer appeared).

    Raises:
        FileNotFoundError: the folder is missing.
        ValueError: a required column (``eta``, ``round``, ``id``) is missing.
    """
    from datasets import Dataset, DatasetDict, load_from_disk

    from metamod.rollout.stats import EtaTally

    path = Path(dataset_path)
    if not path.exists():
        raise FileNotFoundError(f"dataset_path {path} does not exist (pass the folder written by build-dataset)")
    loaded = load_from_disk(str(path))  # memory-mapped; only the label columns below are read
    splits: dict[str, Dataset] = dict(loaded) if isinstance(loaded, DatasetDict) else {"train": loaded}
    tally = EtaTally()
    simulated = False
    tasks: set[str] = set()
    for name, split in splits.items():
        missing = [c for c in ("eta", "round", "id") if c not in split.column_names]
        if missing:
            raise ValueError(
                f"dataset {path} split {name!r} lacks column(s) {missing}; columns are {split.column_names}. "
                "Pass a dataset written by `metamod build-dataset`."
            )
        for qid, rnd, eta in zip(split["id"], split["round"], split["eta"], strict=True):
            tally.add(f"{name}/{qid}", rnd, eta)
        if "simulated" in split.column_names:
            simulated = simulated or any(bool(v) for v in split["simulated"])
        if "task" in split.column_names:
            tasks.update(str(t) for t in split["task"] if t)
    return {
        "path": str(path),
        "splits": {name: len(split) for name, split in splits.items()},
        "rows": tally.rows,
        "questions": tally.questions,
        "eta_rate": _or_nan(tally.eta_rate(digits=None)),
        "eta_rate_per_round": tally.eta_rate_per_round(digits=None),
        "rows_per_round": dict(sorted(tally.rows_by_round.items())),
        "coverage": _or_nan(tally.coverage(digits=None)),
        "simulated": simulated,
        "tasks": sorted(tasks),
    }


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def data_section(stats: Mapping[str, Any] | None, *, dataset_ref: str | None = None) -> str:
    """The markdown of the card's training-data section (a note when no statistics are known)."""
    if not stats:
        where = f" (`{dataset_ref}`, not found on disk)" if dataset_ref else ""
        return (
            f"Per-round moderator states from debate traces{where}. No dataset statistics were available at export "
            "time; pass `--dataset_path` to `metamod export` to include them."
        )
    lines = []
    origin = "**simulated** debaters (metamod's offline world)" if stats.get("simulated") else "LLM debaters"
    lines.append(
        f"One row per (question, round) of debates between {origin}: the moderator prompt at that round and "
        "eta, 1 when some debater's answer at that round matches gold."
    )
    lines.append("")
    facts = []
    if stats.get("path"):
        facts.append(("dataset", f"`{stats['path']}`"))
    if stats.get("tasks"):
        facts.append(("tasks", ", ".join(stats["tasks"])))
    if stats.get("splits"):
        facts.append(("rows per split", ", ".join(f"{k}: {v}" for k, v in stats["splits"].items())))
    for key, label in (("rows", "rows"), ("questions", "questions"), ("eta_rate", "eta rate (all rows)")):
        if key in stats:
            facts.append((label, stats[key]))
    if "coverage" in stats:
        facts.append(("coverage (questions with eta = 1 at some round)", stats["coverage"]))
    facts.append(("simulated", bool(stats.get("simulated"))))
    lines.append(markdown_table(["statistic", "value"], facts))
    per_round = stats.get("eta_rate_per_round") or {}
    if per_round:
        counts = stats.get("rows_per_round") or {}
        lines += ["", "Eta rate per round (share of rows where a correct answer is already on the table):", ""]
        rows = [[r, rate, counts.get(r, counts.get(str(r), "-"))] for r, rate in per_round.items()]
        lines.append(markdown_table(["round", "eta rate", "rows"], rows))
    return "\n".join(lines)


# ---------------------------------------------------------------- settings


def reward_description(name: str) -> str:
    """What a reward pays, from the rewards registry: the first paragraph of the registered callable's docstring.

    A dotted-path reward (``package.module:attr``) is described by its own docstring when it imports; otherwise,
    or without a docstring, the text says it is a custom reward.

    >>> reward_description("control")
    'R_ctrl: 1 for `STOP` when `eta` is 1, 1 for `CONTINUE` when `eta` is 0, else 0.'
    """
    from metamod.registry import resolve
    from metamod.rewards import REWARDS

    try:
        func = resolve(REWARDS, str(name), what="reward")
    except KeyError:
        func = None
    doc = (inspect.getdoc(func) or "") if func is not None and not isinstance(func, type) else ""
    summary = " ".join(doc.split("\n\n", 1)[0].split())
    return summary.replace("``", "`") if summary else f"a custom reward (`{name}`)."


def reward_section(train_config: Mapping[str, Any]) -> str:
    """Bullet list of the rewards named by ``reward_funcs`` (default: the registry's) with their weights.

    >>> print(reward_section({"reward_funcs": ["format_strict"], "reward_weights": [2.0]}).splitlines()[0])
    - **format_strict**: R_fmt with the partial credit for `STOP` ALONE only (`STOP` + text without a span gets 0). Weight 2.
    """
    from metamod.rewards import DEFAULT_REWARDS

    names = train_config.get("reward_funcs") or list(DEFAULT_REWARDS)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    weights = train_config.get("reward_weights") or [1.0] * len(names)
    lines = []
    for i, name in enumerate(names):
        weight = weights[i] if i < len(weights) else 1.0
        lines.append(f"- **{name}**: {reward_description(str(name))} Weight {_fmt(float(weight))}.")
    lines += ["", "Labels a reward reads (`eta`, `gold`) are offline training data; the moderator never sees them."]
    return "\n".join(lines)


def target_modules_text(value: Any) -> str:
    """LoRA targets, short: full module paths (``model.layers.0.self_attn.q_proj``) reduce to their sorted names.

    >>> target_modules_text(["model.layers.1.mlp.up_proj", "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"])
    'q_proj, up_proj (2 layers)'
    >>> target_modules_text("all-linear")
    'all-linear'
    """
    if not isinstance(value, (list, tuple, set)):
        return str(value)
    names = sorted({str(v).rsplit(".", 1)[-1] for v in value})
    layers = {m.group(1) for v in value if (m := re.search(r"layers\.(\d+)\.", str(v)))}
    return ", ".join(names) + (f" ({len(layers)} layers)" if layers else "")


def settings_table(source: Mapping[str, Any], keys: Sequence[tuple[str, str]]) -> str:
    """Two-column table of the ``keys`` present in ``source`` (a note when none are)."""
    source = dict(source)
    if source.get("target_modules") is not None:
        source["target_modules"] = target_modules_text(source["target_modules"])
    if isinstance(source.get("max_steps"), int) and source["max_steps"] > 0:
        source.pop("num_train_epochs", None)  # max_steps overrides the epoch count
    rows = [(label, source[key]) for key, label in keys if source.get(key) is not None]
    if not rows:
        return "_Not recorded (no resolved training config found beside the adapter)._"
    return markdown_table(["setting", "value"], rows)


def summary_table(summary: Mapping[str, Any]) -> str:
    """The entries of ``train_summary.json`` as a table ('' when there are none); flat dicts become ``k=v`` lists."""
    rows = []
    for key, value in summary.items():
        if key == "simulated":
            continue
        if isinstance(value, dict) and all(not isinstance(v, (dict, list)) for v in value.values()):
            value = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
        if isinstance(value, (int, float, str, bool)):
            rows.append((key, value))
    return markdown_table(["entry", "value"], rows) if rows else ""


def _vllm_rank(r: Any) -> int:
    """Smallest rank vLLM accepts for ``max_lora_rank`` that fits the adapter's ``r``."""
    rank = int(r) if isinstance(r, (int, float)) else 16
    return next((v for v in LORA_RANKS if v >= max(rank, 8)), rank)


# ---------------------------------------------------------------- the card


def build_model_card(
    *,
    base_model: str,
    adapter_config: Mapping[str, Any],
    train_config: Mapping[str, Any] | None = None,
    train_summary: Mapping[str, Any] | None = None,
    dataset_stats: Mapping[str, Any] | None = None,
    results: Mapping[str, Any] | None = None,
    results_are_simulated: bool = False,
    results_labels: Mapping[str, str] | None = None,  # noqa: F811 (the parameter, not the reader imported above)
    adapter_ref: str = ".",
    repo_id: str | None = None,
    merged_dir: str | None = None,
    merged_only: bool = False,
    license: str | None = None,
    base_is_local: bool = False,
    learning_curves: str | None = None,
):
    """Render the model card of an exported adapter.

    Args:
        base_model: the base model id or path the adapter applies to.
        adapter_config: the adapter's ``adapter_config.json`` (LoRA settings).
        train_config: the resolved training config (GRPO settings, ``reward_funcs``), ``{}`` when unknown.
        train_summary: ``train_summary.json`` of the run, ``{}`` when unknown.
        dataset_stats: :func:`dataset_statistics` output (or the ``dataset`` entry of ``train_summary``).
        results: ``{task: {method: {metric: value}}}`` to render as the evaluation table.
        results_are_simulated: label the evaluation results as simulated.
        results_labels: display names of the methods in ``results``.
        adapter_ref: where users load the adapter from in the usage snippets (Hub id or local folder).
        repo_id: the Hub repo id when the card is meant for the Hub.
        merged_dir: folder (relative to the card) holding merged full weights, if any.
        merged_only: the card sits beside merged full weights only (no adapter files): transformers usage.
        license: license identifier for the metadata (``None`` leaves it out).
        base_is_local: the base model is a local folder (the card then says how to point it at the Hub).
        learning_curves: the run's learning-curve table and plot link (:func:`metamod.train.curves.copy_curves`).

    Returns:
        A ``huggingface_hub.ModelCard``; ``card.save(path)`` writes ``README.md``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    train_config = dict(train_config or {})
    train_summary = dict(train_summary or {})
    simulated = bool(
        (dataset_stats or {}).get("simulated")
        or train_summary.get("simulated")
        or train_config.get("simulated")
        or results_are_simulated
    )
    tags = list(BASE_TAGS) + (["merged"] if merged_only else []) + (["simulated"] if simulated else [])
    card_data = ModelCardData(
        base_model=base_model,
        library_name="transformers" if merged_only else "peft",
        license=license,
        pipeline_tag="text-generation",
        tags=tags,
        model_name=repo_id.split("/")[-1] if repo_id else None,
    )
    grpo_source = dict(train_config)
    if "global_step" in train_summary:
        grpo_source["global_step"] = train_summary["global_step"]
    # what the adapter learned from gold answers (metamod.train.sft.warm_start_gold_use)
    if "gold_use" in train_summary:
        grpo_source["gold_use"] = train_summary["gold_use"] or "none"
    if not train_summary.get("warm_start", grpo_source.get("warm_start")):
        grpo_source.pop("warm_start_targets", None)
    if results:
        label = " (simulated debaters)" if results_are_simulated else ""
        results_section = f"Accuracy and related metrics{label}, `results[task][method]`:\n\n" + results_table(
            results, labels=results_labels
        )
    else:
        results_section = "_No evaluation results were attached (pass `--results results.json` to `metamod export`)._"
    cli = [f"metamod eval --config configs/eval/<your_eval>.yaml --moderator {adapter_ref}"]
    dataset_ref = train_config.get("dataset_path") or train_config.get("dataset_name")
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        title=f"Meta-Moderator LoRA adapter for {base_model}" + (" (simulated)" if simulated else ""),
        simulated=simulated,
        base_model=base_model,
        base_is_local=base_is_local,
        peft_type=adapter_config.get("peft_type", "LORA"),
        task_type=adapter_config.get("task_type"),
        merged_dir=merged_dir,
        merged_only=merged_only,
        data_section=data_section(dataset_stats, dataset_ref=str(dataset_ref) if dataset_ref else None),
        reward_section=reward_section(train_config),
        lora_table=settings_table(adapter_config, LORA_KEYS),
        grpo_table=settings_table(grpo_source, GRPO_KEYS),
        summary_table=summary_table(train_summary),
        learning_curves=learning_curves,
        results_section=results_section,
        adapter_ref=adapter_ref,
        repo_id=repo_id,
        vllm_max_lora_rank=_vllm_rank(adapter_config.get("r")),
        cli_snippet="\n".join(cli),
    )
