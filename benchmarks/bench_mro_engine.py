"""MRO-engine overhead: MRO loops on the tiny model (hf backend) vs the same prompts as raw batched calls.

Runs, in one process and side by side: (a) ``run_mro`` over 128 arith questions with LLM Reasoner / Monitor /
Controller roles (``build_mro_roles``) sharing ONE hf generator, up to 3 iterations (one batched ``chat`` call per
role per iteration), recording every batch each role sends, in order, with that role's sampling; (b) the very
same batches replayed as raw ``generator.chat`` calls with the same sampling (greedy, so both sides generate the
same tokens: checked). The ratio (a)/(b) is the engine's overhead: prompt building, answer extraction, grading,
Monitor / Controller parsing and trace assembly. Target <= 1.05. Each side runs ``--repeats`` times, alternating,
and the best time of each is compared. With the random tiny model the Controller's output is garbage, so the
parse fallback decides (no verdict: Restart) and most instances run every iteration: the most calls, the worst
case for overhead. The action / status / parse counts of ``MROStats.summary()`` are printed.

    .venv/bin/python benchmarks/bench_mro_engine.py [--questions 128 --max_iterations 3 --max_tokens 8 --repeats 2]

With ``--model smollm2-135m-instruct`` it measures the real CPU world instead: SmolLM2 in all three roles with the
few-shot prompts of configs/prompts/smol_mro.yaml (shipped templates, said so, when that file is absent) on direct
arithmetic (arith level 0), stop string ``\\nQuestion:`` by default when the prompts file is used (``--stop``
overrides it; ``\\n`` and ``\\t`` there are read as escapes), and also reports completion tokens/s of both sides:

    .venv/bin/python benchmarks/bench_mro_engine.py --model smollm2-135m-instruct --questions 32 \\
        --batch_size 32 --max_tokens 48 --threads 2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
SMOL_PROMPTS = ROOT / "configs" / "prompts" / "smol_mro.yaml"
SMOL_STOP = ["\nQuestion:"]  # the few-shot layout of smol_mro.yaml: the model goes on to invent the next example


@dataclass
class Call:
    """One batched ``chat`` call of a role: what it sent, with which sampling, and what came back."""

    role: str
    conversations: list
    sampling: Any
    generations: list


class Recording:
    """Delegate to a generator and append each call of ``role`` (a :class:`Call`) to the shared ``log``."""

    def __init__(self, generator: Any, role: str, log: list[Call]) -> None:
        self.generator = generator
        self.role = role
        self.log = log
        self.name = generator.name
        self.context_length = generator.context_length

    def chat(self, conversations: list, sampling: Any) -> list:
        generations = self.generator.chat(conversations, sampling)
        self.log.append(Call(self.role, list(conversations), sampling, list(generations)))
        return generations

    def count_tokens(self, conversation: list) -> int:
        return self.generator.count_tokens(conversation)


def _roles(generator: Any, sampling: Any, log: list[Call]) -> Any:
    """The three LLM roles through the shared factory, each on its own recording view of ONE generator."""
    from metamod.rollout.mro.factory import build_mro_roles
    from metamod.rollout.mro.traces import ROLES

    views = {role: Recording(generator, role, log) for role in ROLES}
    # a per-role mapping whose "model" names a key of `loaded` uses that generator instead of loading one
    return build_mro_roles({role: {"backend": "hf", "model": role} for role in ROLES}, sampling, loaded=views)


def _stop(values: list[str] | None, prompts_used: bool) -> list[str] | None:
    if values is None:
        return list(SMOL_STOP) if prompts_used else None
    return [v.replace("\\n", "\n").replace("\\t", "\t") for v in values] or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=128)
    parser.add_argument("--max_iterations", type=int, default=3, help="N, the MRO iteration budget")
    parser.add_argument("--max_tokens", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64, help="hf backend micro-batch size")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="tiny", help="tiny (offline random model) or smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--stop", nargs="*", default=None, help="stop strings (default: see the module docstring)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from metamod.llm import BackendConfig, SamplingConfig, build_generator
    from metamod.llm.tiny import ensure_tiny_model
    from metamod.prompts import active_prompts_file, use_prompts
    from metamod.rollout.mro import MROStats, run_mro
    from metamod.rollout.mro.traces import ROLES
    from metamod.tasks import load_task

    real = args.model != "tiny"
    missing = ""
    if real and SMOL_PROMPTS.is_file():
        use_prompts(SMOL_PROMPTS)
    elif real:
        missing = f" ({SMOL_PROMPTS.relative_to(ROOT)} is absent)"
    active = active_prompts_file()
    prompts_note = f"prompts file {active}" if active else f"shipped templates{missing}"
    stop = _stop(args.stop, real and not missing)
    sampling = SamplingConfig(temperature=0.0, max_tokens=args.max_tokens, stop=stop)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model if real else ensure_tiny_model(os.path.join(tmp, "tiny"))
        gen = build_generator(
            BackendConfig(backend="hf", model=str(model_dir), device="cpu", batch_size=args.batch_size)
        )
        levels = [0] if real else None
        examples = list(load_task("arith", num_examples=args.questions, seed=0, levels=levels).examples())
        gen.chat([[{"role": "user", "content": "warm up"}]], sampling)

        engine_times: list[float] = []
        raw_times: list[float] = []
        first_log: list[Call] = []
        raw_texts: list[list[str]] = []
        raw_completion = 0
        for repeat in range(args.repeats):
            log: list[Call] = []
            roles = _roles(gen, sampling, log)
            stats = MROStats()
            start = time.perf_counter()
            for _trace in run_mro(
                examples,
                roles,
                max_iterations=args.max_iterations,
                batch_questions=args.questions,
                task="arith",
                stats=stats,
                progress=False,
            ):
                pass
            engine_times.append(time.perf_counter() - start)
            if repeat == 0:
                first_log = log

            texts, raw_completion = [], 0
            start = time.perf_counter()
            for call in log:
                outputs = gen.chat(call.conversations, call.sampling)
                texts.extend(g.text for g in outputs)
                raw_completion += sum(g.completion_tokens for g in outputs)
            raw_times.append(time.perf_counter() - start)
            raw_texts.append(texts)

    engine, raw = min(engine_times), min(raw_times)
    summary = stats.summary()
    calls = {r: sum(c.role == r for c in log) for r in ROLES}
    rows = {r: sum(len(c.conversations) for c in log if c.role == r) for r in ROLES}
    completion = sum(g.completion_tokens for c in log for g in c.generations)
    print(
        f"{args.model} model, hf backend (micro-batch {args.batch_size}), {args.threads} thread(s), {prompts_note}, "
        f"{args.questions} questions, max_iterations={args.max_iterations}, greedy, max_tokens={args.max_tokens}, "
        f"stop={stop!r}"
    )
    print(
        f"{len(log)} batched calls: "
        + ", ".join(f"{r} {calls[r]} ({rows[r]} conversations)" for r in ROLES)
        + f"; engine counted {summary['calls_per_role']}"
    )
    print(f"{'':<30}{'best s':>8}   runs")
    print(f"{'MRO engine (run_mro)':<30}{engine:>8.2f}   {[round(t, 2) for t in engine_times]}")
    print(f"{'raw batched chat calls':<30}{raw:>8.2f}   {[round(t, 2) for t in raw_times]}")
    mean_ratio = sum(engine_times) / sum(raw_times)
    print(f"overhead ratio engine/raw: best {engine / raw:.3f}, mean {mean_ratio:.3f} (target <= 1.05)")
    print(
        f"instances/s (engine, best run): {args.questions / engine:.2f}; iterations {summary['iterations']} "
        f"(mean {summary['mean_iterations']}), accuracy {summary['accuracy']}"
    )
    print(
        f"completion tokens/s: engine {completion / engine:.1f}, raw {raw_completion / raw:.1f} "
        f"({completion} completion tokens per run)"
    )
    for key in ("action_counts_by_iteration", "statuses", "parse"):
        print(f"{key}: {json.dumps(summary[key])}")

    first = [g.text for c in first_log for g in c.generations]
    for repeat, texts in enumerate(raw_texts):
        if len(texts) != len(first):
            print(f"WARNING: raw run {repeat + 1}: {len(texts)} texts vs {len(first)} from the first engine run")
            continue
        differ = sum(a != b for a, b in zip(first, texts, strict=True))
        if differ:
            print(f"WARNING: raw run {repeat + 1}: {differ} of {len(first)} texts differ from the first engine run")
    if all(texts == first for texts in raw_texts):
        print(f"same tokens: all {len(first)} texts of every raw run equal the first engine run's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
