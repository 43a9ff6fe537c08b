"""Metrics over per-question method records: accuracy with intervals, rounds, tokens, coverage, significance.

A *record* is one method's outcome on one question (the ``methods[name]`` entry of a ``samples.jsonl`` row):
``correct`` (bool), ``covered`` (gold among the debaters' answers in rounds ``0..stop``), ``rounds`` (rounds
played, ``None`` for single-agent baselines), ``tokens`` (``debater_prompt``, ``debater_completion``,
``moderator_prompt``, ``moderator_completion``, and with a memory LLM ``memory_prompt``, ``memory_completion``),
``valid`` (list of the moderator calls' format validity),
``decisions`` (per-round decision dicts; ``lenient`` marks a forced final answer read from a format-invalid output)
and, for answer kinds with partial credit (induction, ``code_function``), ``score`` (this problem's share of graded
pairs passed), ``pairs`` (``[passed, total]``) and, when the gold marks its visible pairs, ``hidden_pairs``
(``[passed, total]`` over the pairs the agent never saw).

Induction metrics follow MARCO's definitions, over every input/output pair (the induction tasks grade visible and
hidden pairs alike by default): ``pair_accuracy`` is its "accuracy", correct pairs / all pairs pooled over the
problems, and ``accuracy`` (the share of problems with ``correct``) is its "problem accuracy", every pair right.
``hidden_pair_accuracy`` and ``hidden_problem_accuracy`` are the same two numbers on the hidden pairs only, the pairs
the agent could not check against: how well a proposed function generalises beyond what it was shown.

Identities (checked in tests): ``correct = correct_with_coverage + correct_without_coverage`` and
``mis_aggregation = covered - correct_with_coverage``.

>>> recs = [{"correct": True, "covered": True}, {"correct": False, "covered": True},
...         {"correct": True, "covered": False}, {"correct": False, "covered": False}]
>>> m = method_metrics(recs)
>>> m["accuracy"], m["coverage"], m["mis_aggregation"], m["correct_with_coverage"], m["correct_without_coverage"]
(0.5, 0.5, 1, 1, 1)
>>> round(mcnemar_exact(b=8, c=1), 4)
0.0391
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import mean, pstdev
from typing import Any

#: z for a two-sided 95% interval
Z95 = 1.959963984540054

TOKEN_KEYS = (
    "debater_prompt",
    "debater_completion",
    "moderator_prompt",
    "moderator_completion",
    "memory_prompt",
    "memory_completion",
)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Args:
        successes: number of successes.
        n: number of trials (``0`` gives ``(0.0, 1.0)``).
        z: normal quantile (1.96 for 95%).

    Returns:
        ``(low, high)``.

    >>> [round(x, 3) for x in wilson_interval(8, 10)]
    [0.49, 0.943]
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def _binom_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided p-value of ``k`` successes out of ``n`` under p=0.5 (by hand, no scipy)."""
    tail = sum(math.comb(n, i) for i in range(0, min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact McNemar test p-value from the discordant pair counts.

    Uses ``scipy.stats.binomtest`` when scipy is importable, else the exact binomial sum (identical values).

    Args:
        b: questions method A got right and method B wrong.
        c: questions method A got wrong and method B right.

    Returns:
        The two-sided p-value (``1.0`` when there is no discordant pair).

    >>> mcnemar_exact(0, 0), mcnemar_exact(3, 3)
    (1.0, 1.0)
    >>> abs(mcnemar_exact(10, 2) - _binom_two_sided_half(2, 12)) < 1e-12
    True
    """
    n = b + c
    if n == 0:
        return 1.0
    try:
        from scipy.stats import binomtest
    except ImportError:
        return _binom_two_sided_half(min(b, c), n)
    return float(min(1.0, binomtest(min(b, c), n, 0.5).pvalue))


def paired_comparison(reference: dict[Any, bool], other: dict[Any, bool]) -> dict[str, float | int]:
    """Exact McNemar comparison of two methods on the questions both answered.

    Args:
        reference: per-question correctness of the reference method (key: e.g. ``(seed, id)``).
        other: per-question correctness of the compared method.

    Returns:
        ``{"n": paired questions, "b": reference right/other wrong, "c": reference wrong/other right,
        "p_value": ...}``.

    >>> paired_comparison({1: True, 2: True, 3: False}, {1: False, 2: True, 3: False})
    {'n': 3, 'b': 1, 'c': 0, 'p_value': 1.0}
    """
    keys = sorted(set(reference) & set(other), key=str)
    b = sum(1 for k in keys if reference[k] and not other[k])
    c = sum(1 for k in keys if other[k] and not reference[k])
    return {"n": len(keys), "b": b, "c": c, "p_value": mcnemar_exact(b, c)}


def _stderr(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    return pstdev(values) * math.sqrt(len(values) / (len(values) - 1)) / math.sqrt(len(values))


def pooled_ratio(counts: Sequence[Sequence[int]]) -> tuple[float, float]:
    """``sum(passed) / sum(total)`` over ``[passed, total]`` pairs and its standard error (the ratio estimator's,
    with the problems as clusters).

    >>> ratio, stderr = pooled_ratio([[2, 4], [3, 3], [0, 1]])
    >>> ratio, round(stderr, 4)
    (0.625, 0.2114)
    """
    k = len(counts)
    passed = sum(int(p) for p, _ in counts)
    total = sum(int(t) for _, t in counts)
    if k == 0 or total == 0:
        return 0.0, 0.0
    ratio = passed / total
    if k < 2:
        return ratio, 0.0
    spread = sum((int(p) - ratio * int(t)) ** 2 for p, t in counts) / (k * (k - 1))
    return ratio, math.sqrt(spread) / (total / k)


def pair_metrics(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """MARCO's induction metrics (module docstring): ``pair_accuracy`` (+ ``_stderr``) over every graded pair and,
    where the records carry ``hidden_pairs``, ``hidden_pair_accuracy`` (+ ``_stderr``) and ``hidden_problem_accuracy``.
    Records without ``pairs`` (older samples) give ``pair_accuracy`` as the mean of their ``score``.

    >>> m = pair_metrics([{"pairs": [6, 6], "hidden_pairs": [3, 3]}, {"pairs": [4, 6], "hidden_pairs": [1, 3]}])
    >>> m["pair_accuracy"], m["hidden_pair_accuracy"], m["hidden_problem_accuracy"]
    (0.8333333333333334, 0.6666666666666666, 0.5)
    """
    out: dict[str, Any] = {}
    counts = [r["pairs"] for r in records if r.get("pairs") is not None]
    if counts:
        out["pair_accuracy"], out["pair_accuracy_stderr"] = pooled_ratio(counts)
    else:
        scores = [float(r["score"]) for r in records if r.get("score") is not None]
        if scores:
            out["pair_accuracy"] = mean(scores)
            out["pair_accuracy_stderr"] = _stderr(scores)
    hidden = [r["hidden_pairs"] for r in records if r.get("hidden_pairs") is not None]
    if hidden:
        out["hidden_pair_accuracy"], out["hidden_pair_accuracy_stderr"] = pooled_ratio(hidden)
        out["hidden_problem_accuracy"] = sum(int(p) == int(t) for p, t in hidden) / len(hidden)
    return out


def seed_interval(values: Sequence[float]) -> float:
    """Half-width of the 95% Student-t interval of the mean of per-seed values (0.0 for fewer than 2).

    >>> round(seed_interval([0.80, 0.84, 0.82]), 4)
    0.0497
    """
    if len(values) < 2:
        return 0.0
    from scipy.stats import t

    mu = sum(values) / len(values)
    sd = math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))
    return float(t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values)))


def method_metrics(records: Sequence[dict[str, Any]], *, seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """Aggregate one method's records on one task.

    Args:
        records: per-question records (see module docstring).
        seeds: the seed of each record, aligned with ``records`` (adds per-seed accuracy mean/std when > 1 seed).

    Returns:
        A flat ``{metric: value}`` dict; ``*_stderr`` keys give standard errors.
    """
    n = len(records)
    correct = [bool(r["correct"]) for r in records]
    covered = [bool(r.get("covered")) for r in records]
    k = sum(correct)
    acc = k / n if n else 0.0
    low, high = wilson_interval(k, n)
    cwc = sum(1 for a, c in zip(correct, covered, strict=True) if a and c)
    out: dict[str, Any] = {
        "n": n,
        "accuracy": acc,
        "accuracy_stderr": math.sqrt(acc * (1 - acc) / n) if n else 0.0,
        "accuracy_ci_low": low,
        "accuracy_ci_high": high,
        "coverage": sum(covered) / n if n else 0.0,
        "coverage_count": sum(covered),
        "mis_aggregation": sum(covered) - cwc,
        "correct_with_coverage": cwc,
        "correct_without_coverage": k - cwc,
    }
    out.update(pair_metrics(records))
    rounds = [r["rounds"] for r in records if r.get("rounds") is not None]
    if rounds:
        out["mean_rounds"] = mean(rounds)
        out["mean_rounds_stderr"] = _stderr(rounds)
    totals = []
    for key in TOKEN_KEYS:
        values = [int((r.get("tokens") or {}).get(key, 0)) for r in records]
        out[f"{key}_tokens_per_question"] = mean(values) if values else 0.0
    for r in records:
        totals.append(sum(int((r.get("tokens") or {}).get(key, 0)) for key in TOKEN_KEYS))
    out["tokens_per_question"] = mean(totals) if totals else 0.0
    out["tokens_per_question_stderr"] = _stderr(totals)
    # generated tokens only (MC²'s #Tokens counts decoding tokens): every *_completion key
    completion = [sum(int(v) for k, v in (r.get("tokens") or {}).items() if k.endswith("_completion")) for r in records]
    out["completion_tokens_per_question"] = mean(completion) if completion else 0.0
    out["completion_tokens_per_question_stderr"] = _stderr(completion)
    # the prompt budget (metamod.llm.budget): questions with a prompt cut to fit, and with one that could not fit
    # (graded wrong); always reported, so a paper run shows 0 when nothing was cut
    out["prompt_cut_questions"] = sum(1 for r in records if r.get("prompt_cuts"))
    out["prompt_too_long_questions"] = sum(1 for r in records if r.get("prompts_too_long"))
    validity = [bool(v) for r in records for v in (r.get("valid") or [])]
    if validity:
        out["format_valid_rate"] = sum(validity) / len(validity)
        out["moderator_calls"] = len(validity)
        out["lenient_final_answers"] = sum(1 for r in records for d in (r.get("decisions") or []) if d.get("lenient"))
    from .mro.metrics import mro_metrics

    out.update(mro_metrics(records))
    from .gate_metrics import gate_metrics

    out.update(gate_metrics(records))
    if seeds is not None and len(set(seeds)) > 1:
        per_seed = []
        for seed in sorted(set(seeds)):
            chosen = [c for c, s in zip(correct, seeds, strict=True) if s == seed]
            per_seed.append(sum(chosen) / len(chosen))
        out["accuracy_seed_mean"] = mean(per_seed)
        out["accuracy_seed_std"] = pstdev(per_seed)
        # MC² reports the mean and a 95% interval over its runs: Student's t over the seeds' accuracies
        out["accuracy_seed_ci95"] = seed_interval(per_seed)
        out["accuracy_per_seed"] = per_seed
    return out


def task_metrics(
    rows: Sequence[dict[str, Any]], methods: Sequence[str], *, reference: str | None = "moderator"
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Metrics of every method on one task's ``samples.jsonl`` rows, plus paired tests against ``reference``.

    Args:
        rows: the task's sample rows (``row["methods"][name]`` records, ``row["seed"]``, ``row["id"]``).
        methods: the methods to report, in order.
        reference: the method compared to every other one by the exact McNemar test (skipped when absent).

    Returns:
        ``(metrics_by_method, significance_by_other_method)``; each method's metrics also get
        ``mcnemar_p_vs_<reference>``.
    """
    results: dict[str, dict[str, Any]] = {}
    correctness: dict[str, dict[Any, bool]] = {}
    for method in methods:
        chosen = [row for row in rows if method in row.get("methods", {})]
        records = [row["methods"][method] for row in chosen]
        if not records:
            continue
        results[method] = method_metrics(records, seeds=[row.get("seed", 0) for row in chosen])
        correctness[method] = {
            (row.get("seed", 0), row["id"]): bool(row["methods"][method]["correct"]) for row in chosen
        }
    significance: dict[str, dict[str, Any]] = {}
    if reference in correctness:
        for method, values in correctness.items():
            if method == reference:
                continue
            test = paired_comparison(correctness[reference], values)
            significance[method] = test
            results[method][f"mcnemar_p_vs_{reference}"] = test["p_value"]
    return results, significance
