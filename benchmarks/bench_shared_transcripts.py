"""Shared transcripts vs one debate per method: wall time of evaluating the 7 debate methods, identical results.

Debaters, moderator, prompted moderator and judge all run on the offline tiny model with the hf backend (greedy
decoding, small ``max_tokens``). ``replay`` runs one full-length debate per question and replays every decision
layer over it; ``live`` runs each method's own debate with the layer as the engine's stop hook. The script asserts
that both give the same per-question answers, rounds, tokens and metrics, and prints the wall-time ratio.

    .venv/bin/python benchmarks/bench_shared_transcripts.py --questions 16 --max-tokens 12
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from metamod.evaluate.config import DEFAULT_METHODS  # noqa: E402

#: the 7 debate decision layers (every default method except the single-agent baselines)
DEBATE_METHODS = [m for m in DEFAULT_METHODS if not m.startswith("single_")]


def tiny_adapter(root: Path) -> Path:
    """The tiny model plus a randomly initialised LoRA adapter (stands in for a trained moderator)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from metamod.llm.tiny import ensure_tiny_model

    base = ensure_tiny_model(root / "tiny-model")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    model.save_pretrained(root / "adapter")
    return root / "adapter"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=12, help="debater max new tokens")
    parser.add_argument("--batch-size", type=int, default=8, help="hf micro-batch size")
    parser.add_argument("--adapter", default=None, help="moderator adapter (default: a random tiny LoRA)")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from metamod.evaluate.cells import read_samples
    from metamod.evaluate.config import EvalConfig
    from metamod.evaluate.harness import evaluate

    work = Path(args.output_dir or tempfile.mkdtemp(prefix="bench_shared_"))
    work.mkdir(parents=True, exist_ok=True)
    adapter = Path(args.adapter) if args.adapter else tiny_adapter(work)
    base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    options = {"device": "cpu", "batch_size": args.batch_size}
    timings, docs = {}, {}
    for mode in ("replay", "live"):
        config = EvalConfig(
            tasks=["arith"],
            task_options={"arith": {"task_split": "test", "task_limit": args.questions}},
            methods=DEBATE_METHODS,
            mode=mode,
            max_rounds=args.max_rounds,
            debaters="hf",
            debater_model=str(base),
            debater_backend_options=options,
            temperature=0.0,
            max_tokens=args.max_tokens,
            moderator=str(adapter),
            moderator_backend_options=options,
            moderator_max_tokens=8,
            judge_max_tokens=args.max_tokens,
            output_dir=str(work / mode),
            resume=False,
            plots=False,
            batch_questions=args.questions,
        )
        start = time.perf_counter()
        docs[mode] = evaluate(config)
        timings[mode] = time.perf_counter() - start
    a = {r["id"]: r["methods"] for r in read_samples(work / "replay" / "samples.jsonl")}
    b = {r["id"]: r["methods"] for r in read_samples(work / "live" / "samples.jsonl")}
    assert a == b, "replay and live disagree on some question"
    assert docs["replay"]["results"] == docs["live"]["results"], "replay and live metrics differ"
    ratio = timings["replay"] / timings["live"]
    res = docs["replay"]["results"]["arith"]
    print(
        f"questions={args.questions} T_max={args.max_rounds} max_tokens={args.max_tokens} "
        f"methods={len(DEBATE_METHODS)} (tiny model, hf, greedy)"
    )
    print(f"replay (shared transcripts): {timings['replay']:.1f} s")
    print(f"live (one debate per method): {timings['live']:.1f} s")
    print(f"ratio replay/live: {ratio:.3f}  -- identical per-question results: yes")
    print("mean rounds: " + ", ".join(f"{m}={res[m]['mean_rounds']:.2f}" for m in DEBATE_METHODS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
