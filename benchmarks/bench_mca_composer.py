"""How often a memory LLM's composed role prompts pass the MCA composer's checks (MC² C.3), and what it costs.

Loads a saved MCA state (lessons and meta-knowledge learned in a run, e.g. ``runs/eval/mc2_smol/memory-seed0-mc2/<task>``),
turns the composer on, and composes the three role prompts for ``--questions`` held-out arith questions with the
memory LLM (one batched call, one batched regeneration for the questions with a failing role). Prints, per role,
how many prompts passed at the first attempt, after the regeneration, and fell back to the base prompt, the failure
reasons, and the composer's tokens and seconds per question.

    .venv/bin/python benchmarks/bench_mca_composer.py --state runs/eval/mc2_smol/memory-seed0-mc2/arith \\
        --model smollm2-135m-instruct --prompts configs/prompts/smol_mro.yaml --questions 20
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metamod.evaluate.memories import TokenCounter  # noqa: E402
from metamod.llm import BackendConfig, build_generator  # noqa: E402
from metamod.llm.base import SamplingConfig  # noqa: E402
from metamod.memory.mca import MCAOptions, MetaCognitiveAccumulator  # noqa: E402
from metamod.prompts import use_prompts  # noqa: E402
from metamod.tasks import load_task  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state", required=True, help="a saved mca memory folder (with lessons)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", default=str(ROOT / "configs" / "prompts" / "smol_mro.yaml"))
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--skip", type=int, default=40, help="held-out questions start after this many")
    parser.add_argument("--max_tokens", type=int, default=160)
    parser.add_argument("--budget", type=int, default=120, help="context_budget (tokens per role prompt)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    if args.prompts and Path(args.prompts).is_file():
        use_prompts(args.prompts)
    llm = TokenCounter(
        build_generator(
            BackendConfig(backend="hf", model=args.model, device="cpu", num_threads=args.threads, batch_size=32)
        )
    )
    sampling = SamplingConfig(temperature=0.0, max_tokens=args.max_tokens, seed=0)
    mca = MetaCognitiveAccumulator(MCAOptions(compose=True, context_budget=args.budget), llm=llm, llm_sampling=sampling)
    mca.load(args.state)
    task = load_task("arith", split="test", levels=[0])
    examples = list(task.examples(limit=args.skip + args.questions))[args.skip :]
    start = time.perf_counter()
    mca.begin_batch(examples)
    seconds = time.perf_counter() - start
    prompt, completion = llm.take()
    first, after_retry, fell_back = collections.Counter(), collections.Counter(), collections.Counter()
    reasons = collections.Counter()
    for ex in examples:
        for role in mca.options.roles:
            record = mca.policy_update(ex.id, role)
            if record is None:
                continue
            attempts = record["attempts"]
            if attempts and attempts[0]["ok"]:
                first[role] += 1
            elif record["ok"]:
                after_retry[role] += 1
            else:
                fell_back[role] += 1
            reasons.update(a["reason"].split(":")[0].split(" <")[0] for a in attempts if a["reason"])
    n = len(examples)
    print(f"composer: {args.model}, {n} questions, state {args.state} (batch {mca.batch_index})")
    for role in mca.options.roles:
        print(
            f"  {role:10s} passed first {first[role]}, after regeneration {after_retry[role]}, fell back {fell_back[role]}"
        )
    print(f"  failure reasons: {dict(reasons)}")
    print(
        f"  cost: {(prompt + completion) / n:.0f} tokens/question ({completion / n:.0f} completion), {seconds / n:.2f} s/question"
    )
    example = next((mca.policy_update(ex.id, "reasoner") for ex in examples), None)
    if example:
        print(f"  a reasoner attempt: {example['attempts']}; after: {example['after']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
