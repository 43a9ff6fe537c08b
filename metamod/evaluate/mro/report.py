"""The MRO Controller's calibrated stopping in the report: a table section and two plots.

From the ``controller_*`` keys of :func:`metamod.evaluate.mro.stopping.controller_stopping` in ``results.json``:

* :func:`controller_stopping_table`: the ``## MRO Controller stopping`` section of ``table.md``, one row per method
  and task with probabilities: decisions read / unreadable, the ECE of P(STOP) and of P(Accept), each sweep at
  ``tau = 0.5`` (accuracy over the covered questions, mean iterations, ``beyond_record``) next to the live row;
* :func:`write_controller_plots`: ``controller_stop_curve.png`` (accuracy vs mean iterations per threshold, for
  P(STOP) and P(Accept); hollow markers where some questions are ``beyond_record``; the live row as a star) and
  ``controller_reliability.png`` (the reliability diagrams).

>>> r = {"arith": {"mro": {"accuracy": 0.5, "mean_iterations": 1.5,
...      "controller_reliability": {"bins": [], "ece": 0.1, "steps": 4, "p_stop_missing": 1},
...      "controller_stop_curve": [{"threshold": 0.5, "covered": 2, "beyond_record": 0, "accuracy": 0.5,
...                                 "mean_iterations": 1.5}]}}}
>>> controller_stopping_table(r, {"mro": "MRO"}, ["mro"], "")[-1]
'| MRO | arith | 4 / 1 | 0.100 | - | - | 50.0 @ 1.50 (0 beyond) | - | 50.0 @ 1.50 |'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: the sweeps drawn and tabulated: results key -> (reliability key, probability name, its field in the bins)
SWEEPS = {
    "controller_stop_curve": ("controller_reliability", "P(STOP)", "p_stop"),
    "controller_accept_curve": ("controller_accept_reliability", "P(Accept)", "p_accept"),
}


def _at(points: Sequence[Mapping[str, Any]] | None, tau: float) -> Mapping[str, Any] | None:
    return next((p for p in points or () if abs(p["threshold"] - tau) < 1e-9), None)


def _point_cell(point: Mapping[str, Any] | None) -> str:
    if point is None or point["accuracy"] is None:
        return "-"
    return f"{100 * point['accuracy']:.1f} @ {point['mean_iterations']:.2f} ({point['beyond_record']} beyond)"


def _reliability_cells(rel: Mapping[str, Any] | None, field: str) -> list[str]:
    if rel is None:
        return ["-", "-"]
    ece = "-" if rel["ece"] is None else f"{rel['ece']:.3f}"
    return [f"{rel['steps']} / {rel[f'{field}_missing']}", ece]


def controller_stopping_table(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]], labels: Mapping[str, str], methods: Sequence[str], tag: str
) -> list[str]:
    """The Controller-stopping section of ``table.md`` (``[]`` when no method recorded probabilities)."""
    rows = []
    for m in methods:
        for task, by_method in results.items():
            r = by_method.get(m)
            if not r or "controller_stop_curve" not in r:
                continue
            cells = [labels.get(m, m), task]
            cells += _reliability_cells(r.get("controller_reliability"), "p_stop")
            cells += _reliability_cells(r.get("controller_accept_reliability"), "p_accept")
            cells += [_point_cell(_at(r.get("controller_stop_curve"), 0.5))]
            cells += [_point_cell(_at(r.get("controller_accept_curve"), 0.5))]
            cells += [f"{100 * r['accuracy']:.1f} @ {r['mean_iterations']:.2f}"]
            rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    return [
        "",
        f"## MRO Controller stopping{tag}",
        "",
        "Probabilities from the Controller's own request (top-k log-probs). Decisions: non-forced iterations with a "
        "readable probability / unreadable (left out). Sweeps at 0.5: accuracy (%) over the covered questions @ mean "
        "iterations; `beyond` questions would go on past the recorded run (docs/evaluation.md).",
        "",
        "| Method | Task | P(STOP) decisions / missing | ECE P(STOP) | P(Accept) decisions / missing | ECE P(Accept) | "
        "P(STOP) >= 0.5 | P(Accept) >= 0.5 | live |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def write_controller_plots(
    results: Mapping[str, Mapping[str, Mapping[str, Any]]],
    labels: Mapping[str, str],
    folder: Path,
    *,
    simulated: bool,
) -> list[Path]:
    """``controller_stop_curve.png`` and ``controller_reliability.png`` when some MRO row recorded probabilities.

    Returns:
        The written PNG paths (``[]`` when there is nothing to draw).
    """
    cells = [(task, m, r) for task, by in results.items() for m, r in by.items() if r.get("controller_stop_curve")]
    if not cells:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    suffix = " (simulated)" if simulated else ""
    curve_path, reliability_path = folder / "controller_stop_curve.png", folder / "controller_reliability.png"
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for task, m, r in cells:
        name = f"{task}: {labels.get(m, m)}"
        color = None
        for key, (_, prob, _) in SWEEPS.items():
            points = [p for p in r.get(key) or () if p["accuracy"] is not None]
            if not points:
                continue
            xs = [p["mean_iterations"] for p in points]
            ys = [100 * p["accuracy"] for p in points]
            style = "-" if key == "controller_stop_curve" else "--"
            (line,) = ax.plot(xs, ys, linestyle=style, color=color, label=f"{name}, {prob} >= tau")
            color = line.get_color()
            full = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if p["beyond_record"] == 0]
            part = [(x, y) for x, y, p in zip(xs, ys, points, strict=True) if p["beyond_record"] > 0]
            if full:
                ax.plot(*zip(*full, strict=True), marker="o", markersize=3, linestyle="none", color=color)
            if part:
                ax.plot(*zip(*part, strict=True), marker="o", markersize=4, linestyle="none", color=color,
                        markerfacecolor="none")  # fmt: skip
        ax.plot(r["mean_iterations"], 100 * r["accuracy"], marker="*", markersize=12, linestyle="none", color=color,
                label=f"{name} (live)")  # fmt: skip
    ax.set_xlabel("mean iterations")
    ax.set_ylabel("accuracy (%) over covered questions")
    ax.set_title("MRO Controller: threshold sweeps (hollow: some beyond the record)" + suffix, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(curve_path, dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for task, m, r in cells:
        for rel_key, prob, field in SWEEPS.values():
            rel = r.get(rel_key)
            if not rel or not rel["bins"]:
                continue
            bins = rel["bins"]
            ece = rel["ece"]
            ax.plot([b[f"mean_{field}"] for b in bins], [b["eta_rate"] for b in bins], marker="o",
                    label=f"{task}: {labels.get(m, m)}, {prob}, ECE {ece if ece is None else round(ece, 3)}")  # fmt: skip
            for b in bins:
                ax.annotate(str(b["count"]), (b[f"mean_{field}"], b["eta_rate"]), fontsize=6)
    ax.set_xlabel("probability (bin mean)")
    ax.set_ylabel("eta rate (candidate right)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title("Reliability of the MRO Controller's P(STOP) / P(Accept)" + suffix, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(reliability_path, dpi=120)
    plt.close(fig)
    return [curve_path, reliability_path]
