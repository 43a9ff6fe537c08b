"""Does GRPO beat its own bootstrap? GRPO variants from ONE bootstrap adapter, on the same held-out questions, paired.

Every variant starts from the same gold-free warm-start adapter (``--init_adapter``), trains on the same rows
(``--dataset``) with the loop's training config plus its own options, and is evaluated on the same held-out
questions. The bootstrap itself is evaluated the same way. Two loops (``--loop``):

* ``debate``: the debate moderator (``configs/train/smol_moderator.yaml``), evaluated on recorded held-out debates
  (``--eval-traces``: replay, no debater generation) as the ``moderator`` row of ``configs/eval/smol_debate.yaml``;
* ``mro``: the MRO Controller (``configs/train/smol_controller.yaml`` on ``build-dataset --source mro``
  snapshots), evaluated live as the ``mro_trained_controller`` row of ``configs/eval/mro_smol.yaml`` (seed 0: the
  Reasoner's first attempts are the same for every variant; later ones follow each Controller's decisions). The
  MRO rows of ``--reference-methods`` (e.g. the prompted Controller ``mro``) are evaluated once on the same questions
  and joined to the table.

One table (markdown + JSON):

* accuracy (live moderator row) with its 95% interval and an exact McNemar p against the bootstrap, mean rounds,
  tokens per question;
* control accuracy of the live non-final decisions on the held-out questions (STOP iff eta; MRO: Accept or Patch
  iff the candidate is correct), next to always-STOP's on the same decisions, the STOP rate and the format-valid
  rate of those decisions;
* training: mean ``frac_reward_zero_std`` and ``reward_std`` over the logged steps, seconds per step; each run
  folder has its learning curves (``curves.md``, ``plots/learning_curves.png``, held-out control accuracy on 32
  validation rounds every ``--curve-every`` steps).

The bootstrap's evaluation also draws its P(STOP) threshold curve (``stop_curve``); the variants' only with
``--stop-curve`` (it asks the moderator at every round of every debate: about as long again as the live row).
Stages whose outputs exist are skipped (a rerun resumes); ``--variants`` picks which to run.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_grpo_variants.py --out benchmarks/results/issue29_smol \\
        --dataset <smol world run>/dataset --eval-traces <smol world run>/eval/traces-seed0.jsonl \\
        --bootstrap <smol world run>/moderator/warm_start --steps 24
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_grpo_variants.py --loop mro \\
        --out benchmarks/results/issue29_mro_smol --dataset <mro run>/dataset \\
        --bootstrap <mro run>/controller/warm_start --reference-methods mro mro_prompted_moderator --steps 16
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from metamod.cli import main as metamod

#: variant name -> options on top of configs/train/smol_moderator.yaml (+ --init_adapter, --max_steps)
VARIANTS: dict[str, list[str]] = {
    "grpo_paper": ["--reward_funcs", "format", "control"],
    "grpo_outcome": ["--reward_funcs", "format", "outcome"],
    "grpo_refill": ["--reward_funcs", "format", "control", "--curriculum_oversample", "3", "--drop_constant_groups",
                    "true"],
    # the small-model preset of configs/train/smol_moderator_dapo.yaml on the same bootstrap: 8 generations at
    # temperature 1.0 (2 prompts x 8 per step), curriculum x2, dynamic sampling
    "grpo_dapo_preset": ["--reward_funcs", "format", "control", "--per_device_train_batch_size", "16",
                         "--num_generations", "8", "--temperature", "1.0", "--curriculum_oversample", "2",
                         "--drop_constant_groups", "true"],
    "grpo_outcome_refill": ["--reward_funcs", "format", "outcome", "--curriculum_oversample", "3",
                            "--drop_constant_groups", "true"],
    # the same preset with the outcome reward
    "grpo_outcome_dapo_preset": ["--reward_funcs", "format", "outcome", "--per_device_train_batch_size", "16",
                                 "--num_generations", "8", "--temperature", "1.0", "--curriculum_oversample", "2",
                                 "--drop_constant_groups", "true"],
}  # fmt: skip


@dataclass(frozen=True)
class Loop:
    """Where a loop's moderator is trained and evaluated."""

    train_config: str
    eval_config: str
    method: str  # the evaluation row of the trained adapter


LOOPS = {
    "debate": Loop("configs/train/smol_moderator.yaml", "configs/eval/smol_debate.yaml", "moderator"),
    "mro": Loop("configs/train/smol_controller.yaml", "configs/eval/mro_smol.yaml", "mro_trained_controller"),
}
MAX_ROUNDS = 3  # configs/eval/smol_debate.yaml


def stage(name: str, argv: list[str], marker: Path, timings: dict[str, float], methods: tuple[str, ...] = ()) -> None:
    """Run ``metamod argv`` unless ``marker`` exists (for an evaluation: and its results hold every method of
    ``methods``; the evaluation then resumes, computing only the added methods' cells)."""
    if marker.exists():
        done = json.loads(marker.read_text())["results"] if methods else {}
        if all(m in task for m in methods for task in done.values()):
            logging.info("%s: done already (%s)", name, marker)
            return
    started = time.perf_counter()
    logging.info("%s: metamod %s", name, " ".join(argv))
    code = metamod(argv)
    timings[name] = round(time.perf_counter() - started, 1)
    if code:
        raise SystemExit(f"{name} failed with exit code {code}")


def _decisions(record: dict, method: str) -> list[tuple[bool, bool, bool]]:
    """``(stop, eta, valid)`` of each non-forced live decision of ``method`` on one question."""
    entry = record["methods"].get(method)
    if not entry:
        return []
    mro = (entry.get("details") or {}).get("mro")
    if mro is not None:  # Accept (1) / Patch (2) stop the loop with an answer; the forced last iteration is left out
        last = len(mro["actions"]) - 1 if mro.get("forced_last") else None
        parses = mro["parse"]["controller"]
        return [(action in (1, 2), bool(eta), parses[k] in ("ok", "tagged"))
                for k, (action, eta) in enumerate(zip(mro["actions"], mro["eta"], strict=True)) if k != last]  # fmt: skip
    eta = {r["round"]: bool(r["eta"]) for r in record["rounds"]}
    # the forced last round has no choice
    return [(bool(d["stop"]), eta[d["round"]], bool(d.get("valid"))) for d in entry["decisions"] if d["round"] < MAX_ROUNDS - 1]  # fmt: skip


def held_out_control(samples: Path, method: str = "moderator") -> dict[str, float | int | None]:
    """Control accuracy of the moderator's live non-final decisions (STOP iff eta), vs always-STOP on the same
    decisions, with the STOP rate and the format-valid rate of those decisions."""
    hits = always = stops = valid = total = 0
    for line in samples.read_text().splitlines():
        for stop, eta, ok in _decisions(json.loads(line), method):
            hits += int(stop == eta)
            always += int(eta)
            stops += int(stop)
            valid += int(ok)
            total += 1
    share = lambda k: round(k / total, 4) if total else None  # noqa: E731
    return {"decisions": total, "control_accuracy": share(hits), "always_stop_control_accuracy": share(always),
            "stop_rate": share(stops), "format_valid": share(valid)}  # fmt: skip


def correct_by_question(samples: Path, method: str = "moderator") -> dict[str, bool]:
    out = {}
    for line in samples.read_text().splitlines():
        record = json.loads(line)
        if method in record["methods"]:
            out[record["id"]] = bool(record["methods"][method]["correct"])
    return out


def training_stats(run: Path) -> dict[str, float | None]:
    state = json.loads((run / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "reward" in h]
    mean = lambda key: round(statistics.fmean(h[key] for h in logged if key in h), 4) if logged else None  # noqa: E731
    summary = json.loads((run / "train_summary.json").read_text())
    steps = summary.get("global_step") or 0
    return {"frac_reward_zero_std": mean("frac_reward_zero_std"), "reward_std": mean("reward_std"),
            "reward": mean("reward"), "steps": steps,
            "s_per_step": round(summary["train_runtime_s"] / steps, 2) if steps else None}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/issue29_smol")
    parser.add_argument("--loop", choices=list(LOOPS), default="debate")
    parser.add_argument("--dataset", required=True, help="moderator dataset (the same rows for every variant)")
    parser.add_argument("--eval-traces", help="debate: the recorded held-out debates (traces-seed0.jsonl)")
    parser.add_argument("--reference-methods", nargs="*", default=[], help="mro: untrained rows on the same questions")
    parser.add_argument("--bootstrap", required=True, help="the warm-start adapter every variant starts from")
    parser.add_argument("--eval-questions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=24, help="GRPO steps per variant")
    parser.add_argument("--stop-curve", action="store_true", help="also the P(STOP) curve of every variant")
    parser.add_argument("--curve-every", type=int, default=8, help="held-out learning-curve point every N steps")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    if args.loop == "debate" and not args.eval_traces:
        parser.error("--loop debate needs --eval-traces (the recorded held-out debates)")
    if args.reference_methods and args.loop != "mro":
        parser.error("--reference-methods: MRO rows only (--loop mro)")
    loop = LOOPS[args.loop]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = Path(args.out)
    timings: dict[str, float] = {}

    def evaluate(name: str, adapter: str, stop_curve: bool, methods: tuple[str, ...] = (loop.method,)) -> Path:
        folder = out / f"eval_{name}"
        argv = ["eval", "--config", loop.eval_config, "--moderator", adapter, "--output_dir", str(folder),
                "--limit", str(args.eval_questions), "--methods", *methods, "--reference_method", methods[0]]  # fmt: skip
        if args.loop == "debate":
            argv += ["--traces", args.eval_traces, "--stop_curve", str(stop_curve).lower()]
        else:
            argv += ["--seeds", "0"]
        stage(f"eval-{name}", argv, folder / "results.json", timings, methods)
        return folder

    folders = {"bootstrap": evaluate("bootstrap", args.bootstrap, True)}
    reference = (
        evaluate("reference", args.bootstrap, False, tuple(args.reference_methods)) if args.reference_methods else None
    )
    runs: dict[str, Path] = {}
    for name in args.variants:
        run = out / name
        stage(f"train-{name}", ["train", "--config", loop.train_config, "--dataset_path",
                                args.dataset, "--output_dir", str(run), "--warm_start", "false", "--init_adapter",
                                args.bootstrap, "--max_steps", str(args.steps), "--save_steps", str(args.steps),
                                "--curve_eval_steps", str(args.curve_every), "--curve_eval_rows", "32",
                                *VARIANTS[name]], run / "train_summary.json", timings)  # fmt: skip
        runs[name] = run
        folders[name] = evaluate(name, str(run), args.stop_curve)

    from metamod.evaluate.metrics import mcnemar_exact, wilson_interval

    base = correct_by_question(folders["bootstrap"] / "samples.jsonl", loop.method)
    rows = []
    evaluated = [(name, folder, loop.method) for name, folder in folders.items()]
    if reference is not None:
        evaluated += [(method, reference, method) for method in args.reference_methods]
    for name, folder, method in evaluated:
        result = json.loads((folder / "results.json").read_text())["results"]["arith"][method]
        correct = correct_by_question(folder / "samples.jsonl", method)
        shared = sorted(set(correct) & set(base))
        b = sum(1 for q in shared if correct[q] and not base[q])
        c = sum(1 for q in shared if base[q] and not correct[q])
        low, high = wilson_interval(sum(correct.values()), len(correct))
        row = {"variant": name, "n": len(correct), "accuracy": round(result["accuracy"], 4),
               "ci": [round(low, 4), round(high, 4)], "p_vs_bootstrap": None if name == "bootstrap" else
               round(mcnemar_exact(b, c), 4), "wins_losses_vs_bootstrap": [b, c],
               "mean_rounds": round(result.get("mean_iterations") or result.get("mean_rounds") or 1, 3),  # reasoner_only: 1 call
               "tokens_per_question": round(result["tokens_per_question"], 1),
               **held_out_control(folder / "samples.jsonl", method),
               **(training_stats(runs[name]) if name in runs else {})}  # fmt: skip
        rows.append(row)
    (out / "table.json").write_text(json.dumps({"timings_s": timings, "rows": rows}, indent=2) + "\n")
    header = ("| variant | accuracy [95% CI] | p vs bootstrap (W/L) | rounds | tokens/q | control acc. (always-STOP) "
              "| STOP rate | format-valid | frac_reward_zero_std | s/step |")  # fmt: skip
    lines = [header, "|" + "---|" * 10]
    for r in rows:
        p = (
            "-"
            if r["p_vs_bootstrap"] is None
            else f"{r['p_vs_bootstrap']:.3f} ({r['wins_losses_vs_bootstrap'][0]}/{r['wins_losses_vs_bootstrap'][1]})"
        )
        lines.append(
            f"| {r['variant']} | {r['accuracy']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {p} | {r['mean_rounds']:.2f} "
            f"| {r['tokens_per_question']:.0f} | {r['control_accuracy']} ({r['always_stop_control_accuracy']}) "
            f"| {r['stop_rate']} | {r['format_valid']} | {r.get('frac_reward_zero_std', '-')} | {r.get('s_per_step', '-')} |"
        )  # fmt: skip
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
