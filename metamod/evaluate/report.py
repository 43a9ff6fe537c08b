"""Evaluation outputs: ``results.json`` (lm-eval-like), ``table.md`` (the paper's layout) and PNG plots.

>>> res = {"arith": {"majority_vote": {"accuracy": 0.5, "accuracy_ci_low": 0.4, "accuracy_ci_high": 0.6,
...        "mean_rounds": 5.0, "coverage": 0.7, "mis_aggregation": 3, "n": 10, "tokens_per_question": 100.0}}}
>>> print(markdown_tables(res, {"majority_vote": "MAD (Majority Voting)"}, simulated=True).splitlines()[0])
## Accuracy (%) -- simulated debaters
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .flips import flips_table, plot_flips
from .frontier import budget_rows, equal_tokens_cell, frontier_table, plot_frontier
from .mro.report import controller_stopping_table

logger = logging.getLogger(__name__)


def versions() -> dict[str, str]:
    """Versions of the packages that shape results (missing ones are skipped)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("meta-moderator", "torch", "transformers", "trl", "peft", "vllm", "math-verify"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


#: the mark a method that uses gold-derived signals carries in every label (tables, plots, model cards)
GOLD_MARK = "†"


def gold_labels(labels: Mapping[str, str], gold_use: Mapping[str, str | None]) -> dict[str, str]:
    """``labels`` with :data:`GOLD_MARK` after each method that uses gold-derived signals.

    >>> gold_labels({"mc2": "Full MC2", "cot": "CoT"}, {"mc2": "correctness tag", "cot": None})
    {'mc2': 'Full MC2 †', 'cot': 'CoT'}
    """
    return {m: f"{label} {GOLD_MARK}" if gold_use.get(m) else label for m, label in labels.items()}


def gold_footnote(labels: Mapping[str, str], gold_use: Mapping[str, str | None]) -> list[str]:
    """The footnote lines naming, per marked method, the gold-derived signal it uses ([] when none does).

    >>> gold_footnote({"mc2": "Full MC2 †"}, {"mc2": "correctness tag"})
    ['', '† Uses gold-derived signals (declared by the method; never the gold text in a prompt):', '- Full MC2: correctness tag']
    """
    used = [(m, reason) for m, reason in gold_use.items() if reason]
    if not used:
        return []
    lines = ["", f"{GOLD_MARK} Uses gold-derived signals (declared by the method; never the gold text in a prompt):"]
    for method, reason in used:
        lines.append(f"- {labels.get(method, method).removesuffix(f' {GOLD_MARK}')}: {reason}")
    return lines


def markdown_tables(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    labels: Mapping[str, str],
    *,
    simulated: bool,
    gold_use: Mapping[str, str | None] | None = None,
    budget: Mapping[str, Any] | None = None,
    reference: str | None = None,
) -> str:
    """Two markdown tables: accuracy (methods x tasks, with 95% intervals and the average), and
    rounds / coverage / mis-aggregation / tokens per method and task.

    Args:
        results: ``results[task][method]`` metric dicts.
        labels: display name per method (methods using gold signals already marked, :func:`gold_labels`).
        simulated: label the tables as simulated.
        gold_use: per method, the gold-derived signal it uses (a footnote under the accuracy table).
        budget: the ``budget_matched`` results (:mod:`metamod.evaluate.frontier`): a row "CoT-SC at <reference>'s
            budget" in the accuracy table and a column "CoT-SC at equal tokens" in the rounds table.
        reference: the method whose budget that row matches.

    Returns:
        Markdown text.
    """
    tasks = list(results)
    methods: list[str] = []
    for task in tasks:
        methods += [m for m in results[task] if m not in methods]
    tag = " -- simulated debaters" if simulated else ""
    lines = [
        f"## Accuracy (%){tag}",
        "",
        "| Method | " + " | ".join(tasks) + " | Avg |",
        "|---|" + "---|" * (len(tasks) + 1),
    ]
    for m in methods:
        cells, accs = [], []
        for task in tasks:
            r = results[task].get(m)
            if r is None:
                cells.append("-")
                continue
            accs.append(r["accuracy"])
            cells.append(f"{_pct(r['accuracy'])} [{_pct(r['accuracy_ci_low'])}, {_pct(r['accuracy_ci_high'])}]")
        avg = _pct(sum(accs) / len(accs)) if accs else "-"
        lines.append(f"| {labels.get(m, m)} | " + " | ".join(cells) + f" | {avg} |")
    lines += budget_rows(budget or {}, tasks, labels, reference)
    lines += gold_footnote(labels, gold_use or {})
    lines += [
        "",
        "Cells: accuracy [95% Wilson interval], n per task in the second table.",
        "",
        f"## Rounds, coverage and mis-aggregation{tag}",
        "",
        "| Method | Task | n | mean rounds | coverage (%) | mis-aggregation | correct w/o coverage | "
        "tokens/question | format-valid (%) | CoT-SC at equal tokens |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in methods:
        for task in tasks:
            r = results[task].get(m)
            if r is None:
                continue
            rounds = f"{r['mean_rounds']:.2f}" if "mean_rounds" in r else "-"
            valid = _pct(r["format_valid_rate"]) if "format_valid_rate" in r else "-"
            lines.append(
                f"| {labels.get(m, m)} | {task} | {r['n']} | {rounds} | {_pct(r['coverage'])} | "
                f"{r['mis_aggregation']} | {r.get('correct_without_coverage', 0)} | "
                f"{r['tokens_per_question']:.0f} | {valid} | {equal_tokens_cell(budget or {}, task, m)} |"
            )
    lines += _mro_table(results, labels, methods, tag)
    lines += controller_stopping_table(results, labels, methods, tag)
    lines += _batch_table(results, labels, methods, tag)
    return "\n".join(lines) + "\n"


def _batch_table(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]], labels: Mapping[str, str], methods: list[str], tag: str
) -> list[str]:
    """Accuracy per memory batch (the "improves with experience" curve as numbers), when the run had a memory."""
    rows = []
    for m, task, r in _cells(results, methods, "accuracy_by_batch"):
        if not r["accuracy_by_batch"]:
            continue
        curve = " · ".join("-" if a is None else _pct(a) for a in r["accuracy_by_batch"])
        items = f"{r['memory_items_per_question']:.1f}" if "memory_items_per_question" in r else "-"
        rows.append(f"| {labels.get(m, m)} | {task} | {curve} | {items} |")
    if not rows:
        return []
    return [
        "",
        f"## Accuracy (%) per memory batch{tag}",
        "",
        "| Method | Task | batch 1 · 2 · ... (pooled over seeds) | memory items per question |",
        "|---|---|---|---|",
        *rows,
    ]


def _cells(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]], methods: list[str], key: str
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(method, task, metrics)`` for every method (in order) and task whose metrics have ``key``."""
    return [
        (m, task, by_method[m])
        for m in methods
        for task, by_method in results.items()
        if m in by_method and key in by_method[m]
    ]


def _shares(shares: list[dict[str, float | None]]) -> str:
    """``A/P/R`` percentages per iteration, e.g. ``54/15/31 · 41/22/37``."""
    cells = []
    for share in shares:
        if share.get("accept") is None:
            continue
        cells.append("/".join(f"{100 * (share[a] or 0):.0f}" for a in ("accept", "patch", "restart")))
    return " · ".join(cells) or "-"


def _mro_table(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]], labels: Mapping[str, str], methods: list[str], tag: str
) -> list[str]:
    """The MRO loop table (iterations, actions per iteration, control accuracy, seed spread), when any method ran it."""
    rows = []
    for m, task, r in _cells(results, methods, "mean_iterations"):
        control = _pct(r["control_accuracy"]) if r.get("control_accuracy") is not None else "-"
        spread = (
            f"{_pct(r['accuracy_seed_mean'])} ± {_pct(r['accuracy_seed_std'])}" if "accuracy_seed_mean" in r else "-"
        )
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r.get("status_counts", {}).items()))
        fallbacks = sum(r.get("parse_fallbacks", {}).values())
        rows.append(
            f"| {labels.get(m, m)} | {task} | {r['mean_iterations']:.2f} | "
            f"{_shares(r['action_shares_by_iteration'])} | {control} | {spread} | {statuses} | {fallbacks} |"
        )
    if not rows:
        return []
    return [
        "",
        f"## MRO loop{tag}",
        "",
        "| Method | Task | mean iterations | Accept/Patch/Restart (%) by iteration | control accuracy (%) | "
        "accuracy per seed (mean ± std) | statuses | parse fallbacks |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def write_plots(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    labels: Mapping[str, str],
    output_dir: Path,
    *,
    simulated: bool,
) -> list[Path]:
    """Accuracy per method, mean rounds per debate method (cf. the paper's figure 3), accuracy per memory batch
    (with a memory) and accuracy vs tokens.

    Returns:
        The written PNG paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir.mkdir(parents=True, exist_ok=True)
    tasks = list(results)
    methods: list[str] = []
    for task in tasks:
        methods += [m for m in results[task] if m not in methods]
    suffix = " (simulated)" if simulated else ""
    written = []
    width = 0.8 / max(len(tasks), 1)

    def grouped_bars(metric: str, chosen: list[str], ylabel: str, title: str, name: str, error: bool) -> None:
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(chosen) + 2), 4))
        for k, task in enumerate(tasks):
            xs, ys, errs = [], [], [[], []]
            for i, m in enumerate(chosen):
                r = results[task].get(m)
                if r is None or metric not in r:
                    continue
                xs.append(i + k * width)
                ys.append(r[metric])
                if error:
                    errs[0].append(max(0.0, r[metric] - r["accuracy_ci_low"]))
                    errs[1].append(max(0.0, r["accuracy_ci_high"] - r[metric]))
            ax.bar(xs, ys, width, label=task, yerr=errs if error and xs else None, capsize=2)
        ax.set_xticks([i + width * (len(tasks) - 1) / 2 for i in range(len(chosen))])
        ax.set_xticklabels([labels.get(m, m) for m in chosen], rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title + suffix)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = output_dir / name
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    grouped_bars("accuracy", methods, "accuracy", "Accuracy per method (95% CI)", "accuracy.png", True)
    debate = [m for m in methods if any("mean_rounds" in results[t].get(m, {}) for t in tasks)]
    if debate:
        grouped_bars("mean_rounds", debate, "mean rounds", "Debate rounds used per method", "rounds.png", False)
    curves = [(t, m) for t in tasks for m in methods if results[t].get(m, {}).get("accuracy_by_batch")]
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4))
        for task, m in curves:
            ys = [float("nan") if a is None else a for a in results[task][m]["accuracy_by_batch"]]
            ax.plot(range(1, len(ys) + 1), ys, marker="o", label=f"{labels.get(m, m)} ({task})")
        ax.set_xlabel("memory batch")
        ax.set_ylabel("accuracy (pooled over seeds)")
        ax.set_title("Accuracy per memory batch" + suffix)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = output_dir / "accuracy_by_batch.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for task in tasks:
        for m in methods:
            r = results[task].get(m)
            if r is None:
                continue
            ax.scatter(r["tokens_per_question"], r["accuracy"], s=20)
            ax.annotate(f"{labels.get(m, m)} ({task})", (r["tokens_per_question"], r["accuracy"]), fontsize=6)
    ax.set_xlabel("tokens per question (debaters + decision layer)")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy vs tokens" + suffix)
    fig.tight_layout()
    path = output_dir / "accuracy_vs_tokens.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def structure_table(memories: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    """The cheatsheet memories' structure after the run (paper tables 7, 10, 11): components, births by cause,
    refits and their mean churn, behaviours by source. "" when no memory of the run reports an organiser.

    >>> stats = {"organiser": "hdp", "components": 9, "births": {"novelty": 2, "sample": 0, "refit": 1},
    ...          "refits": [{"k_before": 8, "k_after": 9, "churn": 0.04}], "behaviours_by_source": {"corpus": 90},
    ...          "mined": {"questions": 10, "behaviours": 4, "empty": 7}}
    >>> print(structure_table({"memory-seed0-bc_refit/aime25": {"stats": stats}}, {"bc_refit": "BC-TTT"}).splitlines()[5])
    | BC-TTT | aime25 | 0 | hdp | 9 | 2 / 0 / 1 | 1 | 4.0 | 90 / 0 | 7 of 10 |
    """
    rows = []
    for folder, summary in sorted(memories.items()):
        stats = summary.get("stats") or {}
        if "organiser" not in stats:
            continue
        base, _, task = folder.partition("/")  # memory-seed<k>[-<method>][/<task>] (memory_scope: task)
        seed, _, method = base.removeprefix("memory-seed").partition("-")
        births = stats.get("births", {})
        refits = stats.get("refits", [])
        churn = f"{100 * sum(r['churn'] for r in refits) / len(refits):.1f}" if refits else "-"
        sources = stats.get("behaviours_by_source", {})
        mined = stats.get("mined", {})
        rows.append(
            f"| {labels.get(method, method or 'shared')} | {task or 'all'} | {seed} | {stats['organiser']} "
            f"| {stats.get('components', 0)} "
            f"| {births.get('novelty', 0)} / {births.get('sample', 0)} / {births.get('refit', 0)} | {len(refits)} "
            f"| {churn} | {sources.get('corpus', 0)} / {sources.get('online', 0)} "
            f"| {mined.get('empty', 0)} of {mined.get('questions', 0)} |"
        )
    if not rows:
        return ""
    return (
        "\n".join(
            [
                "",
                "## Cheatsheet structure after the run",
                "",
                "| Method | task | seed | organiser | K final | births novelty / sample / refit | refits "
                "| mean churn (%) | behaviours corpus / online | questions with nothing mined |",
                "|---|---|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )


def analysis_tables(document: Mapping[str, Any]) -> str:
    """The ``table.md`` sections of the equal-compute frontier and the per-round flips of a ``results.json``
    document ("" for a document from before them)."""
    tag = " -- simulated debaters" if document.get("simulated") else ""
    labels = document.get("labels", {})
    return frontier_table(document.get("frontier") or {}, document.get("budget_matched") or {}, labels, tag) + (
        flips_table(document.get("flips") or {}, labels, tag)
    )


def write_analysis_plots(document: Mapping[str, Any], output_dir: Path) -> list[Path]:
    """``frontier.png`` (accuracy vs total tokens with the budget curves) and ``flips.png`` (per-round flips of the
    debate methods), when the document has them.

    Returns:
        The written PNG paths.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    suffix = " (simulated)" if document.get("simulated") else ""
    labels = document.get("labels", {})
    written = []
    if document.get("frontier"):
        path = output_dir / "frontier.png"
        plot_frontier(
            document["frontier"], document.get("budget_matched") or {}, labels, path, "Equal compute" + suffix
        )
        written.append(path)
    if any((document.get("flips") or {}).values()):
        path = output_dir / "flips.png"
        plot_flips(document["flips"], labels, path, "Per-round flips" + suffix)
        written.append(path)
    return written
