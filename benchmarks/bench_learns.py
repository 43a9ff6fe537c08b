""" "It learns": the tiny moderator's greedy control reward and format-valid rate before vs after training.

Trains with ``configs/train/tiny_sim.yaml`` (warm start + GRPO, SIMULATED debates) through ``metamod train``, then
greedy-decodes held-out rounds (the dataset's validation split: questions never seen in training) with

* the base tiny model (before), the warm-start adapter (SFT only), and the final adapter (after);
* and reports the constant baselines always-STOP / always-CONTINUE and the consensus heuristic on the same rows.

Control reward is computed on non-final rounds (final rounds have no choice); format-valid rate, STOP-answer
accuracy vs gold (``is_equivalent``), copy rate (STOP answer = some debater's answer) and the rate of outputs
ending with EOS on all rounds (see :func:`score`). Greedy decoding uses the run's ``max_completion_length``.
Writes benchmarks/results/bench_learns.json and benchmarks/results/learns_reward_curve.png.

    .venv/bin/python benchmarks/bench_learns.py [--output_dir runs/bench_learns] [--max_eval 400] [--key value ...]
    .venv/bin/python benchmarks/bench_learns.py --skip_train --output_dir runs/bench_learns --max_new_tokens 8

Unknown ``--key value`` pairs are passed to ``metamod train`` (e.g. ``--max_steps 10``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

from metamod.rewards import control_reward, format_reward, parse_decision  # noqa: E402
from metamod.train.sft import heuristic_target  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CONFIG = "configs/train/tiny_sim.yaml"


def greedy_outputs(
    model_path: str, adapter: str | None, prompts: list, *, max_new_tokens: int = 16
) -> tuple[list[str], list[bool]]:
    """Greedy completions (special tokens dropped) and whether each one ended with the EOS token in budget."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path)
    if adapter:
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.eval()
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    out: list[str] = []
    ended: list[bool] = []
    for i in range(0, len(texts), 32):
        batch = tok(texts[i : i + 32], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        new = gen[:, batch["input_ids"].shape[1] :]
        out += tok.batch_decode(new, skip_special_tokens=True)
        ended += [tok.eos_token_id in row.tolist() for row in new]
    return out, ended


def score(outputs: list[str], rows: dict, ended: list[bool] | None = None) -> dict:
    """Control/format rewards, STOP/CONTINUE rates, STOP-answer accuracy and copy rate, EOS rate.

    ``answer_accuracy``: STOP decisions (all rounds) whose answer is equivalent to gold (a missing or unparsable
    answer counts as wrong); ``final_round_accuracy``: the same on the forced rounds only (the moderator must
    answer there); ``copy_rate``: STOP answers equal (after normalisation) to some debater's answer.
    """
    from metamod.tasks.grading import is_equivalent, normalize_answer

    nonfinal = [i for i, f in enumerate(rows["is_final_round"]) if not f]
    ctrl = control_reward([outputs[i] for i in nonfinal], eta=[rows["eta"][i] for i in nonfinal])
    fmt = format_reward(outputs, is_final_round=rows["is_final_round"])
    decisions = [parse_decision(outputs[i]) for i in nonfinal]
    every = [parse_decision(o) for o in outputs]
    stops = [i for i, d in enumerate(every) if d.action == "STOP"]
    correct = {i for i in stops if is_equivalent(every[i].answer, rows["gold"][i], rows["kind"][i])}
    finals = [i for i, f in enumerate(rows["is_final_round"]) if f]

    def copied(i: int) -> bool:
        if every[i].answer is None:
            return False
        key = normalize_answer(every[i].answer, rows["kind"][i])
        return key is not None and any(
            a is not None and normalize_answer(a, rows["kind"][i]) == key for a in rows["answers"][i]
        )

    def rate(hits: int, total: int) -> float | None:
        return round(hits / total, 4) if total else None

    return {
        "answer_accuracy": rate(len(correct), len(stops)),
        "final_round_accuracy": rate(sum(i in correct for i in finals), len(finals)),
        "copy_rate": rate(sum(copied(i) for i in stops), len(stops)),
        "eos_rate": None if ended is None else rate(sum(ended), len(ended)),
        "control_reward": round(sum(ctrl) / len(ctrl), 4),
        "format_valid_rate": round(sum(parse_decision(o).valid for o in outputs) / len(outputs), 4),
        "format_reward": round(sum(fmt) / len(fmt), 4),
        "stop_rate": round(sum(d.action == "STOP" for d in decisions) / len(decisions), 4),
        "continue_rate": round(sum(d.action == "CONTINUE" for d in decisions) / len(decisions), 4),
    }


def plot_curve(log_history: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logged = [h for h in log_history if "reward" in h]
    steps = [h["step"] for h in logged]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("reward", "total"), ("rewards/control_reward/mean", "control"),
                       ("rewards/format_reward/mean", "format")):  # fmt: skip
        ax.plot(steps, [h.get(key) for h in logged], marker=".", label=label)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward (sampled, T=1)")
    ax.set_title("tiny moderator on SIMULATED debates (tiny_sim.yaml)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="Other --key value arguments are passed to `metamod train`."
    )
    parser.add_argument("--config", default=CONFIG, help="training config")
    parser.add_argument("--output_dir", default="runs/bench_learns")
    parser.add_argument("--max_eval", type=int, default=400, help="held-out rounds to decode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_new_tokens", type=int, default=None,
                        help="greedy decoding budget (default: the config's max_completion_length)")  # fmt: skip
    parser.add_argument("--skip_train", action="store_true", help="only evaluate the run already in output_dir")
    parser.add_argument("--results", default=str(RESULTS), help="folder for bench_learns.json and the curve")
    opts, train_overrides = parser.parse_known_args()

    from datasets import load_from_disk

    from metamod.config import setup_logging
    from metamod.train.grpo import main as train_main

    setup_logging()
    out = Path(opts.output_dir)
    started = time.time()
    if not opts.skip_train:
        argv = ["--config", opts.config, "--output_dir", str(out), "--seed", str(opts.seed), "--save_strategy", "no"]
        assert train_main(argv + train_overrides) == 0
    train_s = time.time() - started
    summary = json.loads((out / "train_summary.json").read_text())

    import yaml

    cfg = yaml.safe_load((out / "metamod_train_config.yaml").read_text())
    max_new = opts.max_new_tokens or int(cfg.get("max_completion_length") or 16)
    val = load_from_disk(cfg["dataset_path"])["validation"]
    val = val.select(range(min(opts.max_eval, len(val))))
    rows = {k: val[k] for k in ("eta", "is_final_round", "answers", "kind", "gold")}
    prompts = val["prompt"]
    model = cfg["model_name_or_path"]

    results = {"simulated": True, "config": opts.config, "train_overrides": train_overrides, "eval_rows": len(val),
               "max_new_tokens": max_new, "train_wall_s": round(train_s, 1) if not opts.skip_train else None,
               "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "train_summary": summary}  # fmt: skip
    texts, ended = greedy_outputs(model, None, prompts, max_new_tokens=max_new)
    results["before_base_model"] = score(texts, rows, ended)
    if (out / "warm_start" / "adapter_config.json").is_file():
        texts, ended = greedy_outputs(model, str(out / "warm_start"), prompts, max_new_tokens=max_new)
        results["after_warm_start_only"] = score(texts, rows, ended)
    texts, ended = greedy_outputs(model, str(out), prompts, max_new_tokens=max_new)
    results["after_grpo"] = score(texts, rows, ended)
    results["after_grpo_examples"] = texts[:8]
    n = len(val)
    results["baseline_always_stop"] = score(["STOP <answer>0</answer>"] * n, rows)
    results["baseline_always_continue"] = score(["CONTINUE"] * n, rows)
    heur = [heuristic_target(a, k, is_final_round=f) or "CONTINUE" for a, k, f in
            zip(rows["answers"], rows["kind"], rows["is_final_round"], strict=True)]  # fmt: skip
    results["baseline_consensus_heuristic"] = score(heur, rows)
    results["control_gain_after_vs_before"] = round(
        results["after_grpo"]["control_reward"] - results["before_base_model"]["control_reward"], 4
    )
    dest = Path(opts.results)
    dest.mkdir(parents=True, exist_ok=True)
    plot_curve(json.loads((out / "trainer_state.json").read_text())["log_history"], dest / "learns_reward_curve.png")
    (dest / "bench_learns.json").write_text(json.dumps(results, indent=2) + "\n")

    print(f"\n## It learns (SIMULATED debates, {n} held-out rounds; train {train_s:.0f}s; greedy, {max_new} tokens)\n")
    print(
        "| policy | control reward | format valid | STOP rate | STOP-answer acc. | forced-round acc. | copy rate | EOS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for key in ("before_base_model", "after_warm_start_only", "after_grpo", "baseline_always_stop",
                "baseline_always_continue", "baseline_consensus_heuristic"):  # fmt: skip
        if key in results:
            r = results[key]
            cells = [r[c] for c in ("control_reward", "format_valid_rate", "stop_rate", "answer_accuracy",
                                    "final_round_accuracy", "copy_rate", "eos_rate")]  # fmt: skip
            print(f"| {key} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    print(f"\ncontrol gain after vs before: {results['control_gain_after_vs_before']:+.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
