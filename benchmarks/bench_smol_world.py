"""The real CPU world, measured: SmolLM2 debates -> dataset -> SFT warm start + GRPO -> evaluation of every method.

Runs the user-facing commands with the shipped smol configs (configs/rollout/smol_arith.yaml,
configs/train/smol_moderator.yaml, configs/eval/smol_debate.yaml), then evaluates the warm-start-only adapter on
the SAME held-out debates (``--traces``), so "what GRPO adds on top of the bootstrap" is a paired comparison.
Stages whose outputs exist are skipped (a rerun resumes). Prints one JSON summary (also written to
``<out>/summary.json``): per method accuracy with its 95% interval, mean rounds, tokens per question, format-valid
rate, and for the moderator layers the control accuracy on held-out rounds (STOP iff eta = 1, before T_max).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_smol_world.py --train-questions 160 --eval-questions 200

To compare a training change on the same data, reuse a finished run's dataset and held-out debates: ``--dataset``
skips the rollout, ``--eval-traces`` replays the recorded evaluation debates, and only the rows that depend on the
adapter (``--methods``, default the three trained-moderator layers) are evaluated; the others (majority vote,
judge, Meta-Moderator*, single agents) do not change with the adapter and stay in the first run's table:

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_smol_world.py --out benchmarks/results/smol_world_reward \
        --dataset benchmarks/results/smol_world/dataset \
        --eval-traces benchmarks/results/smol_world/eval/traces-seed0.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from metamod.cli import main as metamod


def control_accuracy(samples_path: Path, method: str, max_rounds: int) -> dict[str, float | int]:
    """Share of a moderator's non-final decisions that match eta (STOP when a correct answer is on the table)."""
    hits = total = stops = 0
    for line in samples_path.read_text().splitlines():
        record = json.loads(line)
        entry = record["methods"].get(method)
        if not entry:
            continue
        eta = {r["round"]: r["eta"] for r in record["rounds"]}
        for decision in entry["decisions"]:
            if decision["round"] >= max_rounds - 1:
                continue  # the forced round has no choice to make
            stop = bool(decision["stop"])
            hits += int(stop == bool(eta[decision["round"]]))
            stops += int(stop)
            total += 1
    return {
        "control_accuracy": round(hits / total, 4) if total else None,
        "decisions": total,
        "stop_rate": round(stops / total, 4) if total else None,
    }


def correctness(samples_path: Path, prefix: str = "") -> tuple[dict[str, dict[str, bool]], set[str]]:
    """Per method, question id -> correct; and the ids where the debaters disagree at round 0 (or one is unparsable)."""
    from metamod.tasks.grading import normalize_answer

    by_method: dict[str, dict[str, bool]] = {}
    disagree: set[str] = set()
    for line in samples_path.read_text().splitlines():
        record = json.loads(line)
        answers = record["rounds"][0]["answers"] if record["rounds"] else []
        keys = [normalize_answer(a, record["kind"]) if a is not None else None for a in answers]
        if answers and (None in keys or len(set(keys)) > 1):
            disagree.add(record["id"])
        for method, entry in record["methods"].items():
            by_method.setdefault(prefix + method, {})[record["id"]] = bool(entry["correct"])
    return by_method, disagree


def paired_table(by_method: dict[str, dict[str, bool]], disagree: set[str], reference: str) -> list[dict]:
    """Accuracy overall and where the debaters disagree, with an exact McNemar p against ``reference``."""
    from metamod.evaluate.metrics import mcnemar_exact

    ref = by_method[reference]
    rows = []
    for method, correct in by_method.items():
        shared = sorted(set(correct) & set(ref))
        b = sum(ref[i] and not correct[i] for i in shared)
        c = sum(correct[i] and not ref[i] for i in shared)
        split = [i for i in shared if i in disagree]
        rows.append({
            "method": method,
            "n": len(shared),
            "accuracy": round(100 * sum(correct[i] for i in shared) / len(shared), 1),
            "accuracy_where_debaters_disagree": round(100 * sum(correct[i] for i in split) / len(split), 1)
            if split else None,
            "n_disagree": len(split),
            "mcnemar_p_vs_reference": None if method == reference else round(mcnemar_exact(b, c), 4),
        })  # fmt: skip
    return rows


def run(stage: str, argv: list[str], marker: Path, timings: dict[str, float]) -> None:
    if marker.exists():
        logging.info("%s: done already (%s)", stage, marker)
        return
    started = time.perf_counter()
    code = metamod(argv)
    timings[stage] = round(time.perf_counter() - started, 1)
    if code:
        raise SystemExit(f"{stage} failed with exit code {code}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/smol_world")
    parser.add_argument("--train-questions", type=int, default=160)
    parser.add_argument("--eval-questions", type=int, default=200)
    parser.add_argument("--dataset", default=None, help="reuse this moderator dataset (skips rollout and build)")
    parser.add_argument("--eval-traces", default=None, help="evaluate on these recorded held-out debates")
    parser.add_argument("--methods", nargs="+", default=["moderator", "adjudication_only", "stopping_only"],
                        help="with --eval-traces: the methods to evaluate")  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    traces, dataset, moderator, evaluation, warm_eval = (
        out / "rollout",
        out / "dataset",
        out / "moderator",
        out / "eval",
        out / "eval_warm_start",
    )
    timings: dict[str, float] = {}
    if args.dataset:
        dataset = Path(args.dataset)
        traces = dataset.parent / "rollout"
    run("rollout", ["rollout", "--config", "configs/rollout/smol_arith.yaml", "--output_dir", str(traces),
                    "--task_options", f"{{arith: {{task_split: train, task_num_examples: {args.train_questions}, "
                    "task_levels: [0]}}", "--progress", "false"],
        traces / "summary.json", timings)  # fmt: skip
    run("build-dataset", ["build-dataset", "--traces", str(traces / "traces.jsonl"), "--output_dir", str(dataset)],
        dataset / "dataset_dict.json", timings)  # fmt: skip
    run("train", ["train", "--config", "configs/train/smol_moderator.yaml", "--dataset_path", str(dataset),
                  "--output_dir", str(moderator)], moderator / "train_summary.json", timings)  # fmt: skip
    eval_argv = ["eval", "--config", "configs/eval/smol_debate.yaml", "--moderator", str(moderator),
                 "--output_dir", str(evaluation), "--limit", str(args.eval_questions)]  # fmt: skip
    if args.eval_traces:
        eval_argv += ["--traces", args.eval_traces, "--methods", *args.methods, "--reference_method", args.methods[0]]
    run("eval", eval_argv, evaluation / "results.json", timings)
    held_out = args.eval_traces or str(evaluation / "traces-seed0.jsonl")
    run("eval-warm-start", ["eval", "--config", "configs/eval/smol_debate.yaml", "--moderator",
                            str(moderator / "warm_start"), "--output_dir", str(warm_eval), "--limit",
                            str(args.eval_questions), "--traces", held_out,
                            "--methods", "moderator", "stopping_only", "--reference_method", "moderator"],
        warm_eval / "results.json", timings)  # fmt: skip
    results = json.loads((evaluation / "results.json").read_text())
    warm = json.loads((warm_eval / "results.json").read_text())
    rows = dict(results["results"]["arith"])
    rows.update({f"warm_start_only:{k}": v for k, v in warm["results"]["arith"].items()})
    summary = {
        "simulated": results["simulated"],
        "timings_s": timings,
        "rollout": json.loads((traces / "summary.json").read_text()),
        "train": json.loads((moderator / "train_summary.json").read_text()),
        "methods": rows,
        "control": {
            "moderator": control_accuracy(evaluation / "samples.jsonl", "moderator", 3),
            "moderator_prompted": (
                control_accuracy(evaluation / "samples.jsonl", "moderator_prompted", 3)
                if not args.eval_traces
                else None
            ),
            "warm_start_only": control_accuracy(warm_eval / "samples.jsonl", "moderator", 3),
        },
    }
    # one paired table over the same held-out debates: this run's rows (+ the first run's, with --eval-traces)
    by_method, disagree = correctness(evaluation / "samples.jsonl")
    if args.eval_traces:
        base, _ = correctness(Path(args.eval_traces).parent / "samples.jsonl", prefix="first_run:")
        by_method.update(base)
    warm_rows, _ = correctness(warm_eval / "samples.jsonl", prefix="warm_start_only:")
    by_method.update(warm_rows)
    summary["paired"] = paired_table(by_method, disagree, reference="moderator")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({"timings_s": timings, "control": summary["control"], "paired": summary["paired"]}, indent=2))
    print((evaluation / "table.md").read_text())
    print((warm_eval / "table.md").read_text())


if __name__ == "__main__":
    main()
