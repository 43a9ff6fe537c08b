"""Per-round flips of the debate methods: answers that turn correct -> wrong and wrong -> correct, round by round.

Computed from an evaluation's ``samples.jsonl`` rows (so a resumed or rebuilt run recomputes it), per task and per
debate method (a row of the method table with ``loop == "debate"``). A method's record lists the answers it saw,
``seen_answers``: every agent's extracted answer in rounds ``0..stop_round``, agent order within a round. For each
round ``t >= 1`` and each debate the method was still running at ``t`` (``stop_round >= t``):

* per agent ``i``: a *correct -> wrong* flip when agent ``i``'s round ``t-1`` answer is graded correct and its round
  ``t`` answer is not (an unparsable answer is wrong), a *wrong -> correct* flip the other way round;
* the same for the round majority (:func:`metamod.tasks.voting.majority_answer` over the round's answers, with the
  seeded tie rule the decision layers use: the row's seed and question id).

And, of the method's final errors (``correct`` false), how many had a correct answer on the table (eta = 1: some
agent's answer graded correct) at some round ``<= stop_round``, with a histogram of the LAST such round: errors
whose correct answer was still on the table at the stop round were lost by the aggregation; earlier ones were
talked out of it.

Every answer is graded by the one grader (:class:`metamod.rollout.engine.Grader`, memoised
:func:`~metamod.tasks.grading.is_equivalent`).

>>> rows = [{"task": "t", "seed": 0, "id": "q", "gold": "4", "kind": "math", "choices": None, "methods": {
...     "majority_vote": {"stop_round": 1, "seen_answers": ["4", "4", "5", "5", "5", "5"], "correct": False}}}]
>>> out = debate_flips(rows, ["majority_vote"])["majority_vote"]
>>> out["rounds"][0]["agent_correct_to_wrong"], out["rounds"][0]["majority_correct_to_wrong"]
([1, 1, 0], 1)
>>> out["final_errors"], out["final_errors_covered"], out["last_covered_round"]
(1, 1, {'0': 1})
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from metamod.rollout.engine import Grader
from metamod.tasks.voting import majority_answer

from .methods import method_spec

logger = logging.getLogger(__name__)

__all__ = ["debate_flips", "flips_table", "per_round_answers"]


def per_round_answers(record: dict[str, Any]) -> list[list[str | None]] | None:
    """A debate method's ``seen_answers`` cut into rounds ``0..stop_round`` (``None`` when they do not divide).

    >>> per_round_answers({"stop_round": 1, "seen_answers": ["1", "2", "3", None]})
    [['1', '2'], ['3', None]]
    """
    stop = record.get("stop_round")
    seen = record.get("seen_answers") or []
    if stop is None or not seen or len(seen) % (stop + 1):
        return None
    agents = len(seen) // (stop + 1)
    return [list(seen[t * agents : (t + 1) * agents]) for t in range(stop + 1)]


def _empty_round(t: int, agents: int) -> dict[str, Any]:
    return {
        "round": t,
        "debates": 0,
        "agent_correct_to_wrong": [0] * agents,
        "agent_wrong_to_correct": [0] * agents,
        "correct_to_wrong": 0,
        "wrong_to_correct": 0,
        "majority_correct_to_wrong": 0,
        "majority_wrong_to_correct": 0,
    }


def _method_flips(rows: Sequence[dict[str, Any]], method: str, grade: Grader) -> dict[str, Any] | None:
    """One debate method's flips over ``rows`` (one task); ``None`` when no row has a usable record."""
    by_round: dict[int, dict[str, Any]] = {}
    errors = covered_errors = skipped = 0
    last_covered: dict[int, int] = {}
    for row in rows:
        record = row.get("methods", {}).get(method)
        if record is None:
            continue
        rounds = per_round_answers(record)
        if rounds is None:
            skipped += 1
            continue
        kind, choices, seed, qid = row["kind"], row.get("choices"), row.get("seed", 0), str(row["id"])
        right = [[grade(a, row["gold"], kind, choices) for a in answers] for answers in rounds]
        majority = [
            grade(
                majority_answer(a, kind=kind, choices=choices, seed=seed, question_id=qid), row["gold"], kind, choices
            )
            for a in rounds
        ]
        for t in range(1, len(rounds)):
            cell = by_round.setdefault(t, _empty_round(t, len(rounds[t])))
            cell["debates"] += 1
            for i, (before, after) in enumerate(zip(right[t - 1], right[t], strict=True)):
                cell["agent_correct_to_wrong"][i] += before and not after
                cell["agent_wrong_to_correct"][i] += after and not before
            cell["majority_correct_to_wrong"] += majority[t - 1] and not majority[t]
            cell["majority_wrong_to_correct"] += majority[t] and not majority[t - 1]
        if not record.get("correct"):
            errors += 1
            on_table = [t for t, graded in enumerate(right) if any(graded)]
            if on_table:
                covered_errors += 1
                last_covered[on_table[-1]] = last_covered.get(on_table[-1], 0) + 1
    if skipped:
        logger.warning(
            "flips: %d %s record(s) whose seen_answers do not split into rounds were skipped", skipped, method
        )
    if not by_round and not errors and skipped:
        return None
    for cell in by_round.values():
        cell["correct_to_wrong"] = sum(cell["agent_correct_to_wrong"])
        cell["wrong_to_correct"] = sum(cell["agent_wrong_to_correct"])
    return {
        "rounds": [by_round[t] for t in sorted(by_round)],
        "final_errors": errors,
        "final_errors_covered": covered_errors,
        "last_covered_round": {str(t): last_covered[t] for t in sorted(last_covered)},
    }


def debate_flips(
    rows: Sequence[dict[str, Any]], methods: Sequence[str], grade: Grader | None = None
) -> dict[str, dict[str, Any]]:
    """Per-round flips of every debate method in ``methods`` over one task's samples rows (module docstring).

    Args:
        rows: the task's ``samples.jsonl`` rows (``gold``, ``kind``, ``choices``, ``seed``, ``id``, ``methods``).
        methods: the evaluation's methods; those whose row of the method table is not a debate loop are skipped.
        grade: the memoised grader to share (a new one when ``None``).

    Returns:
        ``{method: {"rounds": [per round t >= 1: debates still running, per-agent and summed flips, majority
        flips], "final_errors": n, "final_errors_covered": m, "last_covered_round": {round: count}}}``.
    """
    grade = grade or Grader()
    out = {}
    for method in methods:
        if method_spec(method).loop != "debate":
            continue
        flips = _method_flips(rows, method, grade)
        if flips is not None:
            out[method] = flips
    return out


def flips_table(flips: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str], tag: str = "") -> str:
    """The ``table.md`` section: per task, debate method and round, the flips (agents summed, then majority), and
    the final errors with a correct answer on the table ("" when there are no flips).

    >>> flips = {"arith": {"majority_vote": {"rounds": [{"round": 1, "debates": 3, "correct_to_wrong": 2,
    ...     "wrong_to_correct": 1, "majority_correct_to_wrong": 1, "majority_wrong_to_correct": 0}],
    ...     "final_errors": 2, "final_errors_covered": 1, "last_covered_round": {"1": 1}}}}
    >>> print(flips_table(flips, {"majority_vote": "MAD"}).splitlines()[-1])
    | MAD | arith | 3 | 1: 2/1 (1/0) | 1 of 2 | 1: 1 |
    """
    lines = []
    for task, by_method in flips.items():
        for method, f in by_method.items():
            per_round = " · ".join(
                f"{c['round']}: {c['correct_to_wrong']}/{c['wrong_to_correct']} "
                f"({c['majority_correct_to_wrong']}/{c['majority_wrong_to_correct']})"
                for c in f["rounds"]
            )
            debates = f["rounds"][0]["debates"] if f["rounds"] else 0
            last = " · ".join(f"{t}: {n}" for t, n in f["last_covered_round"].items()) or "-"
            lines.append(
                f"| {labels.get(method, method)} | {task} | {debates} | {per_round or '-'} | "
                f"{f['final_errors_covered']} of {f['final_errors']} | {last} |"
            )
    if not lines:
        return ""
    return (
        "\n".join(
            [
                "",
                f"## Per-round flips{tag}",
                "",
                "| Method | Task | debates at round 1 | round t: agents correct->wrong/wrong->correct (majority) | "
                "final errors with a correct answer on the table | last round it was on the table: errors |",
                "|---|---|---|---|---|---|",
                *lines,
            ]
        )
        + "\n"
    )


def plot_flips(flips: dict[str, dict[str, dict[str, Any]]], labels: dict[str, str], path: Any, title: str) -> None:
    """``plots/flips.png``: per task, the agents' correct -> wrong (solid) and wrong -> correct (dashed) flips per
    round, one colour per debate method (methods with identical curves, e.g. full-length layers over the same
    replayed debates, share one, named together; methods that never reached round 1 are left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t, by_method in flips.items() if by_method]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        series: dict[tuple, list[str]] = {}
        for method, f in flips[task].items():
            key = tuple((c["round"], c["correct_to_wrong"], c["wrong_to_correct"]) for c in f["rounds"])
            if key:
                series.setdefault(key, []).append(labels.get(method, method))
        for n, (key, names) in enumerate(series.items()):
            rounds = [r for r, _, _ in key]
            colour, name = f"C{n % 10}", ", ".join(names)
            ax.plot(rounds, [c for _, c, _ in key], "-o", color=colour, ms=3, label=f"{name}: correct->wrong")
            ax.plot(rounds, [w for _, _, w in key], "--s", color=colour, ms=3, label=f"{name}: wrong->correct")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("round t (flip between t-1 and t)")
        ax.set_ylabel("answers flipped (all agents)")
        ax.set_title(f"{title} ({task})")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=5)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
