"""MCA bookkeeping per instance (LLM calls excluded), side by side with the simulated MRO engine per instance.

One process: (a) ``run_mro`` with the simulated roles over ``--questions`` arith questions (levels 1-5), timed per
instance; (b) the MetaCognitive Accumulator (``memory: mca``, the LLM writer with every option at its default)
driven over those traces exactly as ``metamod eval`` drives it, in memory batches of ``--batch`` questions:
``begin_batch`` (retrieval + composition with its checks), three guidance requests per instance (Reasoner,
Monitor, Controller), ``observe`` and ``end_batch`` (reflections, S+/S- selection, distillation and consolidation
parsing, window upkeep). The memory LLM is a zero-latency fake returning well-formed replies; the time spent
inside it is measured and subtracted, so what remains is the MCA's own bookkeeping. Target: < 1 ms per instance.
Components are timed separately too: ``reflect`` per record, ``retrieve`` per (instance, role), ``check_composed``
per composer reply (retrieval with the batch's questions embedded in one call, as ``prepare`` does).

    .venv/bin/python benchmarks/bench_mca.py [--questions 1000 --batch 50 --repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metamod.llm.base import Generation  # noqa: E402
from metamod.memory.base import GuidanceRequest, Observation  # noqa: E402
from metamod.memory.mca import MCAOptions, MetaCognitiveAccumulator  # noqa: E402
from metamod.memory.mca.parse import check_composed, word_count  # noqa: E402
from metamod.memory.mca.reflect import reflect  # noqa: E402
from metamod.rollout.mro import MROStats, run_mro  # noqa: E402
from metamod.rollout.mro.simulated import MROSimulationConfig, simulated_roles  # noqa: E402
from metamod.tasks import load_task  # noqa: E402

COMPOSED = (
    "<P_R>Number the steps, keep intermediate results, check units before the final answer.</P_R>\n"
    "<P_M>Check each step in order and name the first wrong one with a reason.</P_M>\n"
    "<P_C>Accept a clean audit, patch a located slip, restart only with a new plan.</P_C>"
)


class FakeLLM:
    """Instant, well-formed replies per prompt kind; records the time spent inside ``chat`` (to subtract)."""

    name = "fake-instant"
    context_length = None

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def chat(self, conversations, sampling):
        start = time.perf_counter()
        out = []
        for conv in conversations:
            text = conv[-1]["content"]
            if "<P_" in text:
                reply = COMPOSED
            elif "rule" in text.lower() and "lessons from the most recent" in text.lower():
                reply = (
                    "1. Check every step before answering.\n2. Restart only with a new plan.\n3. Name the wrong step."
                )
            else:
                reply = "DO: check each intermediate result.\nAVOID: repeating a rejected answer.\nTAGS: arithmetic, checking"
            out.append(Generation(reply, 10, 10))
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return out

    def count_tokens(self, conversation):
        return word_count(conversation[-1]["content"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    examples = list(load_task("arith", split="test", levels=[1, 2, 3, 4, 5]).examples(limit=args.questions))
    engine_best, traces = float("inf"), []
    for _ in range(args.repeats):
        start = time.perf_counter()
        traces = list(
            run_mro(
                examples, simulated_roles(MROSimulationConfig()), max_iterations=3, stats=MROStats(), progress=False
            )
        )
        engine_best = min(engine_best, time.perf_counter() - start)
    by_id = {t["id"]: t for t in traces}

    best = float("inf")
    for _ in range(args.repeats):
        llm = FakeLLM()
        mca = MetaCognitiveAccumulator(MCAOptions(), llm=llm)
        start = time.perf_counter()
        for b in range(0, len(examples), args.batch):
            batch = examples[b : b + args.batch]
            mca.begin_batch(batch)
            for ex in batch:
                for role in ("reasoner", "monitor", "controller"):
                    mca.guidance(GuidanceRequest(ex, role, step=0, method="mc2"))
            for ex in batch:
                t = by_id[ex.id]
                outcome = {"correct": bool(t["final_correct"]), "final_answer": t["final_answer"], "method": "mc2"}
                mca.observe(Observation(ex, t, outcome, served=mca.served_ids(ex.id, "mc2")))
            mca.end_batch()
        elapsed = time.perf_counter() - start - llm.seconds
        best = min(best, elapsed)
    per_instance_ms = 1000 * best / len(examples)
    engine_ms = 1000 * engine_best / len(examples)
    stats = mca.stats()["totals"]

    # components
    records = [
        mca.record(Observation(ex, by_id[ex.id], {"correct": True, "final_answer": "1", "method": "mc2"}))
        for ex in examples
    ]
    start = time.perf_counter()
    for r in records:
        reflect(r)
    reflect_us = 1e6 * (time.perf_counter() - start) / len(records)
    start = time.perf_counter()
    queries = mca.embedder.embed([ex.prompt_text() for ex in examples])  # as prepare() does: one call per batch
    for ex, query in zip(examples, queries, strict=True):
        for role in ("reasoner", "monitor", "controller"):
            mca.retrieve(ex.prompt_text(), role, query)
    retrieve_us = 1e6 * (time.perf_counter() - start) / (3 * len(examples))
    start = time.perf_counter()
    for ex in examples:
        check_composed(COMPOSED, ["reasoner", "monitor", "controller"], ex.prompt_text(), 400, word_count)
    check_us = 1e6 * (time.perf_counter() - start) / len(examples)

    print(f"questions {len(examples)}, memory batches of {args.batch}, best of {args.repeats}")
    print(f"MCA bookkeeping (LLM calls excluded): {per_instance_ms:.3f} ms / instance  (target < 1 ms)")
    print(f"simulated MRO engine:                 {engine_ms:.3f} ms / instance")
    print(f"ratio MCA bookkeeping / MRO engine:   x{per_instance_ms / engine_ms:.2f}")
    print(
        f"components: reflect {reflect_us:.1f} us/record, retrieve {retrieve_us:.1f} us/(instance, role), "
        f"check_composed {check_us:.1f} us/reply"
    )
    print(
        f"memory LLM calls (fake, excluded): {llm.calls}; lessons {stats.get('lessons')}; "
        f"compose updates {stats.get('compose_updates')}, fallbacks {stats.get('compose_fallbacks')}"
    )
    return 0 if per_instance_ms < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
