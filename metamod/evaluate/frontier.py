"""Equal compute: the accuracy-vs-tokens frontier of every method, and baselines matched to a method's token budget.

Computed from an evaluation's ``samples.jsonl`` rows and its per-method metrics (no model runs), per task:

**Frontier.** Each method's accuracy (95% Wilson interval) against its mean COMPLETION tokens and its mean TOTAL
tokens per question (each with its standard error), and whether it is Pareto-optimal on that cost: no other method
is at least as accurate for at most as many tokens, and strictly better on one of the two.

**Budget curves built from the same samples.**

* ``cot_sc``: CoT-SC at ``k = 1..K`` from the ``single_cot_sc`` record's ``K`` samples (``seen_answers`` in sample
  order): the majority vote of the first ``k`` answers, with the method's own tie rule
  (:func:`metamod.tasks.voting.majority_answer`, seeded by the row's seed and question id). Its cost at ``k``: ``k``
  times the per-sample prompt tokens (a call with ``n`` samples is booked by every backend as ``n`` prompts, so the
  record's prompt tokens are ``K`` prompts; a backend that shares the prompt's cache computes it once, but the count
  is the record's), plus the completion tokens of the first ``k`` samples (``details.sample_completion_tokens``; a run
  from before they were recorded splits the record's completion tokens equally, labelled ``per_sample_tokens:
  "equal split"``), plus any other tokens of the record (a memory's), the same at every ``k``. At ``k = K`` it is the
  method's own accuracy and cost.
* ``majority_after_round``: the majority vote of the round ``t-1`` answers of the shared debate transcripts
  (``t = 1..T_max`` rounds), costing the debaters' tokens of rounds ``0..t-1``.

**Accuracy at a method's budget.** For a method ``M`` with mean cost ``c`` and a curve with mean costs
``cost(1) <= ... <= cost(K)``: the two integer points ``k_lo <= k_hi`` bracketing ``c`` and the weight
``w = (c - cost(k_lo)) / (cost(k_hi) - cost(k_lo))``; the accuracy is ``(1 - w) acc(k_lo) + w acc(k_hi)``. That is
the expected accuracy of the randomised policy that runs ``k_hi`` with probability ``w`` and ``k_lo`` otherwise,
which spends exactly ``c`` tokens per question on average. Outside ``[cost(1), cost(K)]`` there is no number (the
reason is stated). ``M`` is compared with each bracketing point by the exact McNemar test on the questions both
answered (:func:`metamod.evaluate.metrics.paired_comparison`, ``b``: ``M`` right and the point wrong). Both for
total and for completion tokens.

>>> curve = {"total_tokens": [100.0, 200.0, 300.0], "accuracy": [0.5, 0.6, 0.8]}
>>> point = at_budget(curve, 250.0)
>>> point["lo"], point["hi"], point["weight"], round(point["accuracy"], 3)
(2, 3, 0.5, 0.7)
>>> at_budget(curve, 50.0)["reason"]
'a budget of 50 tokens is below the curve at 1 (100 tokens)'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from metamod.rollout.engine import Grader
from metamod.tasks.voting import majority_answer

from .metrics import TOKEN_KEYS, paired_comparison, wilson_interval

logger = logging.getLogger(__name__)

__all__ = ["at_budget", "budget_matched", "cot_sc_curve", "frontier_points", "majority_round_curve", "pareto"]

#: the method whose samples give the CoT-SC curve
COT_SC = "single_cot_sc"
#: the cost measures: (name, metrics key of the mean, metrics key of its standard error)
COSTS = (
    ("total", "tokens_per_question", "tokens_per_question_stderr"),
    ("completion", "completion_tokens_per_question", "completion_tokens_per_question_stderr"),
)


def pareto(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """The names whose ``(cost, accuracy)`` no other point dominates (at most the cost, at least the accuracy, and
    strictly better in one).

    >>> sorted(pareto({"a": (10, 0.5), "b": (20, 0.7), "c": (30, 0.6), "d": (10, 0.5)}))
    ['a', 'b', 'd']
    """
    return {
        name
        for name, (cost, acc) in points.items()
        if not any(c <= cost and a >= acc and (c < cost or a > acc) for c, a in points.values())
    }


def frontier_points(metrics: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """One task's frontier: per method, accuracy with its Wilson interval, mean total and completion tokens with
    their standard errors, and the Pareto flags ``pareto_total`` / ``pareto_completion``.

    Args:
        metrics: ``results[task]``: per method, the metrics of :func:`metamod.evaluate.metrics.method_metrics`.
    """
    out: dict[str, dict[str, Any]] = {}
    for method, r in metrics.items():
        out[method] = {
            "n": r["n"],
            "accuracy": r["accuracy"],
            "accuracy_ci_low": r["accuracy_ci_low"],
            "accuracy_ci_high": r["accuracy_ci_high"],
        }
        for name, mean_key, stderr_key in COSTS:
            out[method][f"{name}_tokens"] = r[mean_key]
            out[method][f"{name}_tokens_stderr"] = r.get(stderr_key, 0.0)
    for name, _, _ in COSTS:
        best = pareto({m: (p[f"{name}_tokens"], p["accuracy"]) for m, p in out.items()})
        for method, point in out.items():
            point[f"pareto_{name}"] = method in best
    return out


def _key(row: Mapping[str, Any]) -> tuple[int, str]:
    return (int(row.get("seed", 0)), str(row["id"]))


def _curve(costs: dict[str, list[list[float]]], right: list[list[bool]], points: list[int], **extra: Any) -> dict:
    """A curve's JSON: per point, accuracy with its Wilson interval and the mean costs over the questions."""
    n = len(right)
    correct = [sum(r[j] for r in right) for j in range(len(points))]
    intervals = [wilson_interval(c, n) for c in correct]
    return {
        "points": points,
        "n": n,
        "accuracy": [c / n for c in correct],
        "accuracy_ci_low": [low for low, _ in intervals],
        "accuracy_ci_high": [high for _, high in intervals],
        **{
            f"{name}_tokens": [sum(q[j] for q in per_q) / n for j in range(len(points))]
            for name, per_q in costs.items()
        },
        **extra,
    }


def cot_sc_curve(rows: Sequence[Mapping[str, Any]], grade: Grader | None = None) -> tuple[dict, dict] | None:
    """CoT-SC at ``k = 1..K`` from the ``single_cot_sc`` records of one task's rows (module docstring).

    Returns:
        ``(curve, correct)``: the curve (``points`` = k, ``accuracy``, intervals, ``total_tokens``,
        ``completion_tokens``, ``per_sample_tokens``) and the per-question correctness ``{(seed, id): [at k]}``;
        ``None`` when no row has a ``single_cot_sc`` record with answers.
    """
    grade = grade or Grader()
    chosen = [r for r in rows if (r.get("methods", {}).get(COT_SC) or {}).get("seen_answers")]
    if not chosen:
        return None
    sizes = {len(r["methods"][COT_SC]["seen_answers"]) for r in chosen}
    if len(sizes) > 1:
        logger.warning("budget curve: %s records have %s samples; the curve stops at the fewest", COT_SC, sizes)
    k_max = min(sizes)
    costs: dict[str, list[list[float]]] = {"total": [], "completion": []}
    correct: dict[tuple[int, str], list[bool]] = {}
    split = False
    for row in chosen:
        record = row["methods"][COT_SC]
        answers = record["seen_answers"]
        tokens = record.get("tokens") or {}
        samples = (record.get("details") or {}).get("sample_completion_tokens")
        if samples is None or len(samples) != len(answers):
            split = True
            samples = [int(tokens.get("debater_completion", 0)) / len(answers)] * len(answers)
        prompt = int(tokens.get("debater_prompt", 0)) / len(answers)
        # the record's other tokens (a memory's), counted as method_metrics counts them, the same at every k
        debater = int(tokens.get("debater_prompt", 0)) + int(tokens.get("debater_completion", 0))
        other_total = sum(int(tokens.get(k, 0)) for k in TOKEN_KEYS) - debater
        other_completion = sum(int(v) for k, v in tokens.items() if k.endswith("_completion"))
        other_completion -= int(tokens.get("debater_completion", 0))
        sampled = [sum(samples[:k]) for k in range(1, k_max + 1)]
        costs["completion"].append([c + other_completion for c in sampled])
        costs["total"].append([k * prompt + c + other_total for k, c in zip(range(1, k_max + 1), sampled, strict=True)])
        kind, choices = row["kind"], row.get("choices")
        correct[_key(row)] = [
            grade(
                majority_answer(
                    answers[:k], kind=kind, choices=choices, seed=row.get("seed", 0), question_id=row["id"]
                ),
                row["gold"],
                kind,
                choices,
            )
            for k in range(1, k_max + 1)
        ]
    curve = _curve(
        costs,
        list(correct.values()),
        list(range(1, k_max + 1)),
        per_sample_tokens="equal split" if split else "recorded",
    )
    return curve, correct


def majority_round_curve(rows: Sequence[Mapping[str, Any]], grade: Grader | None = None) -> tuple[dict, dict] | None:
    """The majority vote after ``t = 1..T`` rounds of the shared debate transcripts (the row's ``rounds``).

    Returns:
        ``(curve, correct)`` as :func:`cot_sc_curve` (``points`` = rounds played); ``None`` without transcripts.
    """
    grade = grade or Grader()
    chosen = [r for r in rows if r.get("rounds")]
    if not chosen:
        return None
    t_max = min(len(r["rounds"]) for r in chosen)
    costs: dict[str, list[list[float]]] = {"total": [], "completion": []}
    correct: dict[tuple[int, str], list[bool]] = {}
    for row in chosen:
        rounds = row["rounds"][:t_max]
        completion = [sum(int(r["completion_tokens"]) for r in rounds[:t]) for t in range(1, t_max + 1)]
        prompt = [sum(int(r["prompt_tokens"]) for r in rounds[:t]) for t in range(1, t_max + 1)]
        costs["completion"].append(completion)
        costs["total"].append([p + c for p, c in zip(prompt, completion, strict=True)])
        kind, choices = row["kind"], row.get("choices")
        correct[_key(row)] = [
            grade(
                majority_answer(
                    r["answers"], kind=kind, choices=choices, seed=row.get("seed", 0), question_id=row["id"]
                ),
                row["gold"],
                kind,
                choices,
            )
            for r in rounds
        ]
    return _curve(costs, list(correct.values()), list(range(1, t_max + 1))), correct


def at_budget(curve: Mapping[str, Any], budget: float, cost: str = "total") -> dict[str, Any]:
    """The curve's accuracy at a mean budget, interpolated linearly in tokens between the bracketing points.

    Args:
        curve: a curve (``<cost>_tokens`` and ``accuracy`` per point, ``points`` their labels: 1, 2, ... by default).
        budget: the mean tokens per question to match.
        cost: ``total`` or ``completion``.

    Returns:
        ``{"budget", "accuracy", "lo", "hi", "weight", "reason"}``: ``lo`` / ``hi`` the bracketing points' labels,
        ``weight`` the probability of ``hi`` in the randomised policy; ``accuracy`` ``None`` with a ``reason``
        outside the curve's range.

    >>> at_budget({"completion_tokens": [10, 20], "accuracy": [0.4, 0.6], "points": [1, 2]}, 20, "completion")
    {'budget': 20, 'accuracy': 0.6, 'lo': 2, 'hi': 2, 'weight': 0.0, 'reason': None}
    """
    costs = list(curve[f"{cost}_tokens"])
    accs = list(curve["accuracy"])
    labels = list(curve.get("points") or range(1, len(costs) + 1))
    out: dict[str, Any] = {"budget": budget, "accuracy": None, "lo": None, "hi": None, "weight": None, "reason": None}
    if budget < costs[0]:
        out["reason"] = f"a budget of {budget:.0f} tokens is below the curve at {labels[0]} ({costs[0]:.0f} tokens)"
        out["out_of_range"] = "below"
        return out
    if budget > costs[-1]:
        out["reason"] = f"a budget of {budget:.0f} tokens is above the curve at {labels[-1]} ({costs[-1]:.0f} tokens)"
        out["out_of_range"] = "above"
        return out
    hi = next(j for j, c in enumerate(costs) if c >= budget)
    lo = hi if costs[hi] == budget else hi - 1
    weight = 0.0 if lo == hi or costs[hi] == costs[lo] else (budget - costs[lo]) / (costs[hi] - costs[lo])
    out.update(accuracy=(1 - weight) * accs[lo] + weight * accs[hi], lo=labels[lo], hi=labels[hi], weight=float(weight))
    return out


def _matched(
    curve: dict, correct: dict, metrics: Mapping[str, Mapping[str, Any]], method_correct: Mapping[str, dict]
) -> dict[str, dict[str, Any]]:
    """Per method and cost measure: :func:`at_budget` at the method's mean cost, with its McNemar tests."""
    out: dict[str, dict[str, Any]] = {}
    labels = list(curve["points"])
    for method, r in metrics.items():
        out[method] = {}
        for name, mean_key, _ in COSTS:
            point = at_budget(curve, float(r[mean_key]), name)
            point["method_accuracy"] = r["accuracy"]
            if point["accuracy"] is not None:
                point["tests"] = {}
                for side in ("lo", "hi"):
                    j = labels.index(point[side])
                    at_point = {key: values[j] for key, values in correct.items()}
                    point["tests"][side] = paired_comparison(method_correct[method], at_point)
            out[method][name] = point
    return out


def budget_matched(
    rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, Mapping[str, Any]], grade: Grader | None = None
) -> dict[str, Any]:
    """One task's budget-matched baselines: each curve (``cot_sc``, ``majority_after_round``) and, for every method
    of ``metrics``, the curve's accuracy at that method's budget with the paired tests (module docstring).

    Args:
        rows: the task's ``samples.jsonl`` rows.
        metrics: ``results[task]`` (the methods' mean costs and accuracies).
        grade: the memoised grader to share.
    """
    grade = grade or Grader()
    method_correct = {
        m: {_key(row): bool(row["methods"][m]["correct"]) for row in rows if m in row.get("methods", {})}
        for m in metrics
    }
    out: dict[str, Any] = {}
    curves = {
        "cot_sc": cot_sc_curve(rows, grade) if COT_SC in metrics else None,
        "majority_after_round": majority_round_curve(rows, grade),
    }
    for name, built in curves.items():
        if built is None:
            continue
        curve, correct = built
        out[name] = {"curve": curve, "at_budget": _matched(curve, correct, metrics, method_correct)}
    return out


# --------------------------------------------------------------------------------------------- table.md and plot


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _point_text(point: Mapping[str, Any] | None, mark: str = "k") -> str:
    """``acc (k=lo..hi, w=weight)`` of :func:`at_budget`, ``n/a (above)`` / ``n/a (below)`` out of the curve's
    range, ``-`` when absent."""
    if not point:
        return "-"
    if point.get("accuracy") is None:
        return f"n/a ({point.get('out_of_range', '-')})"
    if point["lo"] == point["hi"]:
        return f"{_pct(point['accuracy'])} ({mark}={point['lo']})"
    return f"{_pct(point['accuracy'])} ({mark}={point['lo']}..{point['hi']}, w={point['weight']:.2f})"


def equal_tokens_cell(budget: Mapping[str, Any], task: str, method: str) -> str:
    """The rounds table's "CoT-SC at equal tokens" cell: CoT-SC's accuracy at ``method``'s mean total tokens.

    >>> b = {"arith": {"cot_sc": {"at_budget": {"moderator": {"total": {"accuracy": 0.7, "lo": 2, "hi": 3,
    ...      "weight": 0.5}}}}}}
    >>> equal_tokens_cell(b, "arith", "moderator"), equal_tokens_cell(b, "arith", "judge")
    ('70.0 (k=2..3, w=0.50)', '-')
    """
    return _point_text(((budget.get(task) or {}).get("cot_sc") or {}).get("at_budget", {}).get(method, {}).get("total"))


def budget_rows(
    budget: Mapping[str, Any], tasks: Sequence[str], labels: Mapping[str, str], method: str | None
) -> list[str]:
    """The accuracy table's rows "CoT-SC at <label>'s budget", on total and on completion tokens, each cell with the
    exact McNemar p of ``method`` against the bracketing k (one p when the budget hits a k); [] without a CoT-SC
    curve or ``method``.

    >>> b = {"arith": {"cot_sc": {"at_budget": {"moderator": {"total": {"accuracy": 0.7, "lo": 2, "hi": 3,
    ...      "weight": 0.5, "tests": {"lo": {"p_value": 0.5}, "hi": {"p_value": 0.25}}},
    ...      "completion": {"accuracy": None, "out_of_range": "below"}}}}}}
    >>> for line in budget_rows(b, ["arith"], {"moderator": "MM"}, "moderator"): print(line)
    | CoT-SC at MM's budget (total tokens) | 70.0 (k=2..3, w=0.50; p=0.5, 0.25) | 70.0 |
    | CoT-SC at MM's budget (completion tokens) | n/a (below) | - |
    """
    if method is None or not any("cot_sc" in (budget.get(t) or {}) for t in tasks):
        return []
    lines = []
    for cost, _, _ in COSTS:
        cells, accs = [], []
        for task in tasks:
            point = ((budget.get(task) or {}).get("cot_sc") or {}).get("at_budget", {}).get(method, {}).get(cost)
            text = _point_text(point)
            if point and point.get("accuracy") is not None:
                accs.append(point["accuracy"])
                tests = point.get("tests", {})
                sides = ("lo",) if point["lo"] == point["hi"] else ("lo", "hi")
                text = text[:-1] + "; p=" + ", ".join(f"{tests[s]['p_value']:.3g}" for s in sides if s in tests) + ")"
            cells.append(text)
        avg = _pct(sum(accs) / len(accs)) if accs else "-"
        label = f"CoT-SC at {labels.get(method, method)}'s budget ({cost} tokens)"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {avg} |")
    return lines


def frontier_table(
    frontier: Mapping[str, Mapping[str, Any]], budget: Mapping[str, Any], labels: Mapping[str, str], tag: str = ""
) -> str:
    """The ``table.md`` section "Equal compute": every method's point (Pareto-optimal ones starred), the budget
    curves, and each method's accuracy against CoT-SC and majority vote at its budget ("" without a frontier)."""
    if not frontier:
        return ""
    lines = [
        "",
        f"## Equal compute{tag}",
        "",
        "| Method | Task | accuracy (%) | total tokens | completion tokens | CoT-SC at its total / completion budget "
        "| majority vote at its total / completion budget |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, points in frontier.items():
        matched = budget.get(task) or {}
        for method, p in points.items():
            curves = []
            for name in ("cot_sc", "majority_after_round"):
                at = (matched.get(name) or {}).get("at_budget", {}).get(method, {})
                mark = "k" if name == "cot_sc" else "t"
                curves.append(f"{_point_text(at.get('total'), mark)} / {_point_text(at.get('completion'), mark)}")
            lines.append(
                f"| {labels.get(method, method)} | {task} | {_pct(p['accuracy'])} "
                f"[{_pct(p['accuracy_ci_low'])}, {_pct(p['accuracy_ci_high'])}] "
                f"| {p['total_tokens']:.0f} ± {p['total_tokens_stderr']:.0f}{' *' if p['pareto_total'] else ''} "
                f"| {p['completion_tokens']:.0f} ± {p['completion_tokens_stderr']:.0f}"
                f"{' *' if p['pareto_completion'] else ''} | {curves[0]} | {curves[1]} |"
            )
    lines += ["", "Tokens: mean per question ± standard error; * Pareto-optimal on that cost.", ""]
    for task, matched in budget.items():
        for name, title in (
            ("cot_sc", "CoT-SC at k samples"),
            ("majority_after_round", "majority vote after t rounds"),
        ):
            curve = (matched.get(name) or {}).get("curve")
            if curve:
                cells = " · ".join(
                    f"{k}: {_pct(a)} @ {c:.0f}"
                    for k, a, c in zip(curve["points"], curve["accuracy"], curve["total_tokens"], strict=True)
                )
                note = f" (per-sample tokens: {curve['per_sample_tokens']})" if "per_sample_tokens" in curve else ""
                lines.append(f"- {task}, {title}{note}: accuracy (%) @ total tokens: {cells}")
    return "\n".join(lines) + "\n"


def plot_frontier(
    frontier: Mapping[str, Mapping[str, Any]],
    budget: Mapping[str, Any],
    labels: Mapping[str, str],
    path: Any,
    title: str,
) -> None:
    """``plots/frontier.png``: per task, accuracy vs mean total tokens, one point per method with both intervals
    (Pareto-optimal ones filled), and the CoT-SC and majority-vote budget curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(frontier)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for method, p in frontier[task].items():
            acc = p["accuracy"]
            ax.errorbar(
                p["total_tokens"],
                acc,
                xerr=p["total_tokens_stderr"],
                yerr=[[max(0.0, acc - p["accuracy_ci_low"])], [max(0.0, p["accuracy_ci_high"] - acc)]],
                fmt="o",
                mfc=None if p["pareto_total"] else "white",
                capsize=2,
                ms=5,
            )
            ax.annotate(labels.get(method, method), (p["total_tokens"], acc), fontsize=6)
        for name, style, label, mark in (
            ("cot_sc", "--", "CoT-SC at k samples", "k="),
            ("majority_after_round", ":", "majority vote after t rounds", "t="),
        ):
            curve = ((budget.get(task) or {}).get(name) or {}).get("curve")
            if curve:
                ax.plot(curve["total_tokens"], curve["accuracy"], style, color="grey", label=label)
                for k, x, y in zip(curve["points"], curve["total_tokens"], curve["accuracy"], strict=True):
                    ax.annotate(f"{mark}{k}", (x, y), fontsize=5, color="grey")
        ax.set_xlabel("mean total tokens per question")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{title} ({task})")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
