"""SmolLM2 debates through hf-torch vs llama.cpp's server, side by side in one run: completion tokens/s and accuracy.

The same questions (arith level 0, ``--questions``), the same debaters as configs/rollout/smol_arith.yaml (the
embedded SmolLM2-135M-Instruct, few-shot prompts configs/prompts/smol_arith.yaml, temperature 0.5, top_p 1, seed 0,
max_tokens 40, stop ``\\nQuestion:``; ``--temperature 0`` for greedy), ``--agents`` debaters, ``--rounds`` rounds
(default: round 0 only), in chunks of ``--batch`` questions. Arms:

- ``hf``: the hf backend on the dequantised fp32 weights (batch ``--batch``, torch with ``--threads`` threads);
- ``llamacpp``: the openai backend against llama.cpp's server on the embedded Q4_1 GGUF itself
  (``--llamacpp_threads`` threads; the server answers one request at a time, ``--concurrency`` requests in flight;
  plain temperature + top-p sampling, ``LLAMACPP_PLAIN_SAMPLING``).

The arms alternate chunk by chunk (hf first on even chunks, llamacpp first on odd ones), so load from other jobs on
a shared machine hits both. Each arm is warmed up on one question before timing; the server's start-up is reported
apart. Accuracy is per (question, agent) round-0 answer, graded by metamod.tasks.grading; the arms are compared
with an exact McNemar test on those pairs.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_llamacpp.py --questions 64 --agents 3 --batch 32 \\
        --threads 2 --llamacpp_threads 1 --out benchmarks/results/issue30
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_arm(generator, backend: str, examples, *, agents: int, rounds: int, sampling, batch: int) -> dict:
    """One chunk of debates through one arm: its traces, wall seconds and token counts."""
    from metamod.rollout.debate import DebateStats, run_debates
    from metamod.rollout.debaters import LLMDebaters

    group = LLMDebaters(generator, sampling, backend=backend)
    stats = DebateStats()
    started = time.perf_counter()
    traces = list(
        run_debates(examples, [group] * agents, max_rounds=rounds, stats=stats, batch_questions=batch, progress=False)
    )
    seconds = time.perf_counter() - started
    return {
        "traces": traces,
        "seconds": seconds,
        "completion_tokens": stats.completion_tokens,
        "prompt_tokens": stats.prompt_tokens,
    }


def round0_correct(traces: list[dict]) -> dict[tuple[str, int], bool]:
    """(question id, agent) -> whether that agent's round-0 answer is right (an unparsable answer is wrong)."""
    from metamod.tasks.grading import is_equivalent

    out = {}
    for trace in traces:
        for response in trace["rounds"][0]["responses"]:
            right = is_equivalent(response.get("answer"), trace["gold"], trace["kind"], trace.get("choices"))
            out[(trace["id"], response["agent"])] = bool(right)
    return out


def identical_texts(first: list[dict], second: list[dict]) -> dict:
    """How many (question, agent) round-0 responses of two arms have the same text, and the same parsed answer."""

    def responses(traces):
        return {(t["id"], r["agent"]): r for t in traces for r in t["rounds"][0]["responses"]}

    a, b = responses(first), responses(second)
    keys = sorted(set(a) & set(b), key=str)
    return {
        "pairs": len(keys),
        "same_text": sum(a[k]["text"] == b[k]["text"] for k in keys),
        "same_answer": sum(a[k].get("answer") == b[k].get("answer") for k in keys),
    }


def summarise(arm: str, chunks: list[dict]) -> dict:
    from metamod.evaluate.metrics import wilson_interval

    traces = [t for c in chunks for t in c["traces"]]
    correct = round0_correct(traces)
    seconds = sum(c["seconds"] for c in chunks)
    completion = sum(c["completion_tokens"] for c in chunks)
    responses = [r for t in traces for r in t["rounds"][0]["responses"]]
    low, high = wilson_interval(sum(correct.values()), len(correct))
    return {
        "arm": arm,
        "questions": len(traces),
        "responses": len(correct),
        "seconds": round(seconds, 2),
        "chunk_seconds": [round(c["seconds"], 2) for c in chunks],
        "completion_tokens": completion,
        "prompt_tokens": sum(c["prompt_tokens"] for c in chunks),
        "completion_tok_per_s": round(completion / seconds, 2),
        "round0_accuracy": round(sum(correct.values()) / len(correct), 4),
        "round0_accuracy_ci95": [round(low, 4), round(high, 4)],
        "round0_unparsable": sum(1 for r in responses if r.get("answer") is None),
        "mean_round0_prompt_tokens": round(sum(r["prompt_tokens"] for r in responses) / len(responses), 2),
        "mean_round0_completion_tokens": round(sum(r["completion_tokens"] for r in responses) / len(responses), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="debate rounds (1: round 0 only)")
    parser.add_argument("--batch", type=int, default=32, help="questions per chunk; hf batch size")
    parser.add_argument("--threads", type=int, default=2, help="hf: torch threads")
    parser.add_argument("--llamacpp_threads", type=int, default=2, help="llamacpp: server threads")
    parser.add_argument("--concurrency", type=int, default=4, help="llamacpp: requests in flight")
    parser.add_argument("--temperature", type=float, default=0.5, help="0: greedy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/issue30"))
    args = parser.parse_args()

    import torch

    from metamod.llm import BackendConfig, SamplingConfig, build_generator
    from metamod.llm.llamacpp.server import ServerConfig, llamacpp_server
    from metamod.llm.openai_backend import LLAMACPP_PLAIN_SAMPLING
    from metamod.prompts import use_prompts
    from metamod.tasks import load_task

    torch.set_num_threads(args.threads)
    use_prompts("configs/prompts/smol_arith.yaml")
    sampling = SamplingConfig(
        temperature=args.temperature, top_p=1.0, max_tokens=40, stop=["\nQuestion:"], seed=args.seed
    )
    examples = list(load_task("arith", num_examples=args.questions + 1, seed=0, levels=[0]).examples())
    warmup, examples = examples[:1], examples[1:]
    chunks = [examples[i : i + args.batch] for i in range(0, len(examples), args.batch)]
    common = {"agents": args.agents, "rounds": args.rounds, "sampling": sampling, "batch": args.batch}

    hf = build_generator(
        BackendConfig(backend="hf", model="smollm2-135m-instruct", device="cpu", batch_size=args.batch)
    )
    started = time.perf_counter()
    with llamacpp_server(ServerConfig(n_threads=args.llamacpp_threads)) as server:
        startup = time.perf_counter() - started
        llama = build_generator(
            BackendConfig(
                backend="openai",
                model=server.model_name,
                base_url=server.base_url,
                max_concurrency=args.concurrency,
                max_retries=2,
                timeout=600,
                extra_body=LLAMACPP_PLAIN_SAMPLING,
            )
        )
        arms = {"hf": hf, "llamacpp": llama}
        backends = {"hf": "hf", "llamacpp": "openai"}
        for name, generator in arms.items():
            run_arm(generator, backends[name], warmup, **common)
        results: dict[str, list[dict]] = {"hf": [], "llamacpp": []}
        for index, chunk in enumerate(chunks):
            order = ["hf", "llamacpp"] if index % 2 == 0 else ["llamacpp", "hf"]
            for name in order:
                result = run_arm(arms[name], backends[name], chunk, **common)
                results[name].append(result)
                print(
                    f"chunk {index} {name:<9} {len(chunk)} questions {result['seconds']:7.1f} s "
                    f"{result['completion_tokens'] / result['seconds']:6.1f} tok/s",
                    flush=True,
                )

    from metamod.evaluate.metrics import paired_comparison
    from metamod.files import atomic_write_json, atomic_write_text

    rows = {name: summarise(name, chunks_) for name, chunks_ in results.items()}
    hf_correct = round0_correct([t for c in results["hf"] for t in c["traces"]])
    llama_correct = round0_correct([t for c in results["llamacpp"] for t in c["traces"]])
    summary = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared with other jobs",
        "settings": {
            "questions": len(examples),
            "agents": args.agents,
            "rounds": args.rounds,
            "batch": args.batch,
            "hf_threads": args.threads,
            "llamacpp_threads": args.llamacpp_threads,
            "llamacpp_sampling": LLAMACPP_PLAIN_SAMPLING,
            "concurrency": args.concurrency,
            "temperature": args.temperature,
            "top_p": 1.0,
            "max_tokens": 40,
            "seed": args.seed,
            "task": "arith level 0",
            "prompts": "configs/prompts/smol_arith.yaml",
        },
        "llamacpp_server_startup_s": round(startup, 2),
        "arms": rows,
        "speedup_llamacpp_over_hf": round(
            rows["llamacpp"]["completion_tok_per_s"] / rows["hf"]["completion_tok_per_s"], 3
        ),
        "round0_paired_mcnemar_hf_vs_llamacpp": paired_comparison(hf_correct, llama_correct),
        # token-for-token agreement: meaningful with --temperature 0 (greedy), where each arm is deterministic
        "round0_identical_texts": identical_texts(
            [t for c in results["hf"] for t in c["traces"]], [t for c in results["llamacpp"] for t in c["traces"]]
        ),
    }
    tag = ("greedy" if args.temperature == 0 else f"t{args.temperature:g}") + f"_llama{args.llamacpp_threads}t"
    atomic_write_json(args.out / f"bench_llamacpp_{tag}.json", summary, indent=2, sort_keys=False)
    for name, chunks_ in results.items():
        traces = [t for c in chunks_ for t in c["traces"]]
        atomic_write_text(args.out / f"traces_{name}_{tag}.jsonl", "".join(json.dumps(t) + "\n" for t in traces))
    print("\n| arm | questions x agents | seconds | completion tokens | tok/s | round-0 accuracy [95% CI] |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows.values():
        low, high = row["round0_accuracy_ci95"]
        print(
            f"| {row['arm']} | {row['questions']} x {args.agents} | {row['seconds']:.1f} | {row['completion_tokens']} | "
            f"{row['completion_tok_per_s']:.1f} | {100 * row['round0_accuracy']:.1f}% [{100 * low:.1f}, {100 * high:.1f}] |"
        )
    keys = ("speedup_llamacpp_over_hf", "round0_paired_mcnemar_hf_vs_llamacpp", "round0_identical_texts")
    print(json.dumps({k: summary[k] for k in keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
