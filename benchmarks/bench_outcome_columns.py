"""The outcome reward's columns on recorded debates: what each estimator says continuing is worth, per round.

Builds the moderator dataset once per estimator (``metamod build-dataset --outcome_estimator ...``, no
generation) from a traces file and reports, per round over all rows (train + validation): the ``eta`` rate (the
control reward's STOP label), the majority's correctness at that round (what stopping with the majority scores
under the outcome reward), the mean ``continue_value`` of each estimator (no round cost), and at the given round
cost the share of ``eta``-0 rows where the outcome reward prefers STOP (continuing is worth at most 0, what a wrong
STOP scores), i.e. where it disagrees with the control reward's CONTINUE label. Writes
``benchmarks/results/outcome_columns/<name>.json`` and prints a markdown table.

    .venv/bin/python benchmarks/bench_outcome_columns.py --traces /work/smol_run/rollout/traces.jsonl \\
        --output_dir /tmp/outcome_ds --name smol_world
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metamod.files import atomic_write_json
from metamod.rewards.outcome import ESTIMATORS, continue_value
from metamod.rollout.outcome import majority_correct
from metamod.rollout.snapshots import build_dataset

RESULTS = Path(__file__).parent / "results" / "outcome_columns"


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def round_table(rows_by_estimator: dict[str, list[dict]], round_cost: float) -> list[dict]:
    """Per round: rows, eta rate, majority-correct rate, mean continue_value per estimator, STOP-preferred share."""
    first = next(iter(rows_by_estimator.values()))
    rounds = sorted({int(r["round"]) for r in first})
    table = []
    for t in rounds:
        at = [r for r in first if int(r["round"]) == t]
        majority = [majority_correct(r, [r["answers"]])[0] for r in at]  # the row holds gold, kind, id, choices
        entry = {
            "round": t,
            "rows": len(at),
            "eta_rate": _mean([float(r["eta"]) for r in at]),
            "majority_correct": _mean([float(c) for c in majority]),
        }
        for name, rows in rows_by_estimator.items():
            here = [r for r in rows if int(r["round"]) == t]
            entry[f"continue_{name}"] = _mean([r["continue_value"] for r in here if r["continue_value"] is not None])
            eta0 = [r for r in here if int(r["eta"]) == 0 and r["future_correct"] is not None]
            prefers_stop = [
                (continue_value(r["future_correct"], name, round_cost) or 0.0) <= 0.0 for r in eta0
            ]  # no later round: CONTINUE scores 0 as well
            entry[f"stop_preferred_eta0_{name}"] = _mean([float(x) for x in prefers_stop])
        table.append(entry)
    return table


def markdown(table: list[dict]) -> str:
    names = list(ESTIMATORS)
    head = ["round", "rows", "eta rate", "majority correct"] + [f"continue ({n})" for n in names]
    head += [f"eta=0: STOP preferred ({n})" for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in table:
        cells = [e["round"], e["rows"], e["eta_rate"], e["majority_correct"]]
        cells += [e[f"continue_{n}"] for n in names] + [e[f"stop_preferred_eta0_{n}"] for n in names]
        lines.append("| " + " | ".join("-" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", required=True, help="traces.jsonl of the recorded debates (or MRO traces)")
    parser.add_argument("--output_dir", required=True, help="where the per-estimator datasets are built")
    parser.add_argument("--name", required=True, help="results file name (benchmarks/results/outcome_columns/)")
    parser.add_argument("--source", default="debate", help="debate or mro (as build-dataset)")
    parser.add_argument("--round_cost", type=float, default=0.05, help="outcome_round_cost for the STOP share")
    args = parser.parse_args(argv)
    rows_by_estimator = {}
    for name in ESTIMATORS:
        dataset = build_dataset(
            args.traces, Path(args.output_dir) / name, source=args.source, outcome_estimator=name, overwrite=True
        )
        rows_by_estimator[name] = [*dataset["train"], *dataset["validation"]]
    table = round_table(rows_by_estimator, args.round_cost)
    result = {"traces": args.traces, "source": args.source, "round_cost": args.round_cost, "by_round": table}
    RESULTS.mkdir(parents=True, exist_ok=True)
    atomic_write_json(RESULTS / f"{args.name}.json", result, indent=2, sort_keys=False)
    print(markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
