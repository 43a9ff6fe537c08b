"""Debate-engine overhead: debates on the tiny model (hf backend) vs the same prompts as raw batched calls.

Runs, in one process and side by side: (a) ``run_debates`` over 128 arith questions with N=2 agents and 3 rounds
(one batched ``chat`` call per round), recording every conversation the engine sends; (b) the very same
conversations replayed as raw ``generator.chat`` calls, one per round, with the same sampling (greedy, so both
generate the same tokens). The ratio (a)/(b) is the engine's overhead: prompt building, token counting for the
context check, answer extraction, grading and trace assembly. Target <= 1.05. Each side runs ``--repeats``
times, alternating, and the best time of each is compared.

    .venv/bin/python benchmarks/bench_engine_overhead.py [--questions 128 --rounds 3 --max_tokens 8]

With ``--model smollm2-135m-instruct`` it measures the real CPU world instead: SmolLM2 debaters with the few-shot
prompts of configs/prompts/smol_arith.yaml on direct arithmetic (arith level 0), stop string ``\nQuestion:``,
and also prints completion tokens per second of both sides:

    .venv/bin/python benchmarks/bench_engine_overhead.py --model smollm2-135m-instruct --questions 32 \
        --batch_size 32 --max_tokens 40 --threads 2 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class Recording:
    """Delegate to a generator and keep each batch of conversations it was sent."""

    def __init__(self, generator):
        self.generator = generator
        self.name = generator.name
        self.context_length = generator.context_length
        self.batches = []

    def chat(self, conversations, sampling):
        self.batches.append(list(conversations))
        return self.generator.chat(conversations, sampling)

    def count_tokens(self, conversation):
        return self.generator.count_tokens(conversation)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max_tokens", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64, help="hf backend micro-batch size")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="tiny", help="tiny (offline random model) or smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from metamod.llm import BackendConfig, SamplingConfig, build_generator
    from metamod.llm.tiny import ensure_tiny_model
    from metamod.rollout.debate import DebateStats, run_debates
    from metamod.rollout.debaters import LLMDebaters
    from metamod.tasks import load_task

    real = args.model != "tiny"
    sampling = SamplingConfig(temperature=0.0, max_tokens=args.max_tokens, stop=["\nQuestion:"] if real else None)
    with tempfile.TemporaryDirectory() as tmp:
        if real:
            from metamod.prompts import use_prompts

            use_prompts("configs/prompts/smol_arith.yaml")
            model_dir = args.model
        else:
            model_dir = ensure_tiny_model(os.path.join(tmp, "tiny"))
        gen = build_generator(
            BackendConfig(backend="hf", model=str(model_dir), device="cpu", batch_size=args.batch_size)
        )
        levels = [0] if real else None
        examples = list(load_task("arith", num_examples=args.questions, seed=0, levels=levels).examples())
        gen.chat([[{"role": "user", "content": "warm up"}]], sampling)

        engine_times, raw_times, tokens, completion = [], [], 0, 0
        for _ in range(args.repeats):
            recorder = Recording(gen)
            group = LLMDebaters(recorder, sampling, backend="hf")
            stats = DebateStats()
            start = time.perf_counter()
            for _trace in run_debates(
                examples,
                [group, group],
                max_rounds=args.rounds,
                stats=stats,
                batch_questions=args.questions,
                progress=False,
                task="arith",
            ):
                pass
            engine_times.append(time.perf_counter() - start)
            tokens = stats.prompt_tokens + stats.completion_tokens
            completion = stats.completion_tokens

            start = time.perf_counter()
            for batch in recorder.batches:
                gen.chat(batch, sampling)
            raw_times.append(time.perf_counter() - start)

    engine, raw = min(engine_times), min(raw_times)
    calls = len(recorder.batches)
    print(
        f"{args.model} model, hf backend, {args.threads} thread(s), {args.questions} questions x N=2 x {args.rounds} rounds, "
        f"max_tokens={args.max_tokens}, {calls} batched calls of {len(recorder.batches[0])} conversations"
    )
    print(f"{'':<28}{'best s':>8}   runs")
    print(f"{'debate engine (run_debates)':<28}{engine:>8.2f}   {[round(t, 2) for t in engine_times]}")
    print(f"{'raw batched chat calls':<28}{raw:>8.2f}   {[round(t, 2) for t in raw_times]}")
    mean_ratio = sum(engine_times) / sum(raw_times)
    print(
        f"overhead ratio engine/raw: best {engine / raw:.3f}, mean {mean_ratio:.3f} (target <= 1.05); "
        f"{tokens} tokens per debate run"
    )
    print(
        f"completion tokens/s: engine {completion / engine:.1f}, raw {completion / raw:.1f} "
        f"({completion} completion tokens per run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
