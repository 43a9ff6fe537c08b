"""Where SmolLM2 debate time goes on a CPU: prefill vs decode, with and without metamod's CPU attention, side by side.

Runs the same 32-question SmolLM2 debate (N=2, T_max=3, the few-shot prompts of configs/prompts/smol_arith.yaml,
temperature 0.5, seed 0, max_tokens 40, stop ``\\nQuestion:``) with:

- ``sdpa``: transformers' own attention (it repeats every KV head before attending when a mask is given);
- ``metamod_sdpa``: :mod:`metamod.llm.cpu_attention` (grouped-query attention on the mask, no copy), at the
  ``--batch_sizes`` given.

Each run times every forward pass of the decoding loop (prefill passes vs one-token decode steps) and prints the
completion tokens per second, and the ceiling that prefill alone sets (completion tokens / prefill seconds: the
speed with free decoding). Both attentions produce the same tokens (identical logits), so the rows compare equal
work.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_smol_decode.py [--questions 32 --batch_sizes 32 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run(attention: str, batch_size: int, questions: int, threads: int) -> dict[str, float]:
    import torch

    import metamod.llm.hf_decode as decode_module
    from metamod.llm import BackendConfig, SamplingConfig, build_generator
    from metamod.rollout.debate import DebateStats, run_debates
    from metamod.rollout.debaters import LLMDebaters
    from metamod.tasks import load_task

    torch.set_num_threads(threads)
    gen = build_generator(
        BackendConfig(backend="hf", model="smollm2-135m-instruct", device="cpu", batch_size=batch_size)
    )
    if attention == "sdpa":
        gen.model.set_attn_implementation("sdpa")
    assert gen.model.config._attn_implementation == attention, gen.model.config._attn_implementation
    timing = {"prefill_s": 0.0, "decode_s": 0.0, "decode_steps": 0}
    original = decode_module._forward

    def timed(model, **kwargs):
        started = time.perf_counter()
        out = original(model, **kwargs)
        key = "prefill_s" if kwargs["input_ids"].shape[1] > 1 else "decode_s"
        timing[key] += time.perf_counter() - started
        timing["decode_steps"] += int(key == "decode_s")
        return out

    decode_module._forward = timed
    try:
        sampling = SamplingConfig(temperature=0.5, max_tokens=40, stop=["\nQuestion:"], seed=0)
        examples = list(load_task("arith", num_examples=questions, seed=0, levels=[0]).examples())
        group = LLMDebaters(gen, sampling, backend="hf")
        stats = DebateStats()
        started = time.perf_counter()
        for _trace in run_debates(
            examples, [group, group], max_rounds=3, stats=stats, batch_questions=questions, progress=False, task="arith"
        ):
            pass
        total = time.perf_counter() - started
    finally:
        decode_module._forward = original
    completion = stats.completion_tokens
    return {
        "total_s": total,
        **timing,
        "completion_tokens": completion,
        "prompt_tokens": stats.prompt_tokens,
        "tok_per_s": completion / total,
        "prefill_ceiling_tok_per_s": completion / timing["prefill_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from metamod.prompts import use_prompts

    use_prompts("configs/prompts/smol_arith.yaml")
    runs = [("sdpa", args.batch_sizes[0])] + [("metamod_sdpa", b) for b in args.batch_sizes]
    rows = []
    for attention, batch in runs:
        rows.append((attention, batch, run(attention, batch, args.questions, args.threads)))
    print(f"SmolLM2 debates: {args.questions} questions x N=2 x 3 rounds, {args.threads} threads")
    print(f"{'attention':<14}{'batch':>6}{'total s':>9}{'prefill s':>11}{'decode s':>10}{'steps':>7}"
          f"{'tokens':>8}{'tok/s':>7}{'prefill cap':>13}")  # fmt: skip
    for attention, batch, r in rows:
        print(
            f"{attention:<14}{batch:>6}{r['total_s']:>9.1f}{r['prefill_s']:>11.1f}{r['decode_s']:>10.1f}"
            f"{r['decode_steps']:>7}{r['completion_tokens']:>8}{r['tok_per_s']:>7.1f}"
            f"{r['prefill_ceiling_tok_per_s']:>13.1f}"
        )
    base = rows[0][2]
    for attention, batch, r in rows[1:]:
        print(
            f"{attention} batch {batch} vs sdpa batch {rows[0][1]}: total x{base['total_s'] / r['total_s']:.2f}, "
            f"decode x{base['decode_s'] / r['decode_s']:.2f}, prefill x{base['prefill_s'] / r['prefill_s']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
