"""The debate engine against scripted fake generators: batching, eta, stop hook, trimming, memory guidance."""

import logging
import re

import pytest

from metamod.llm.base import Generation, SamplingConfig
from metamod.memory.base import Guidance
from metamod.prompts import render
from metamod.rollout.debate import DebateStats, run_debates
from metamod.rollout.debaters import TRIM_MARKER, DebateRequest, LLMDebaters
from metamod.rollout.simulated import SimulatedDebaters
from metamod.rollout.traces import validate_trace
from metamod.tasks import load_task
from metamod.tasks.base import Example

QUESTIONS = [
    Example(id="q1", question="What is 2 + 2?", gold="4", kind="math"),
    Example(id="q2", question="What is 3 + 4?", gold="7", kind="math"),
]
# answers[agent][question][round]; None means a response with no parsable answer
SCRIPT = {
    0: {"q1": ["4", "4", "5"], "q2": ["6", "6", "6"]},
    1: {"q1": [None, "3", "3"], "q2": ["6", "7", "6"]},
}
EXPECTED_ETA = {"q1": [1, 1, 0], "q2": [0, 1, 0]}


class ScriptedGenerator:
    """A fake backend that answers from SCRIPT; the round is the number of calls made so far."""

    def __init__(self, agent, context_length=None):
        self.agent = agent
        self.name = f"scripted-{agent}"
        self.context_length = context_length
        self.batches: list[list[list[dict]]] = []

    def _question_id(self, conversation):
        text = conversation[0]["content"]
        return next(ex.id for ex in QUESTIONS if ex.question in text)

    def chat(self, conversations, sampling):
        round_index = len(self.batches)
        self.batches.append(conversations)
        out = []
        for conv in conversations:
            answer = SCRIPT[self.agent][self._question_id(conv)][round_index]
            text = f"Step by step... <answer>{answer}</answer>" if answer is not None else "I am not sure"
            out.append(
                Generation(text=text, prompt_tokens=self.count_tokens(conv), completion_tokens=len(text.split()))
            )
        return out

    def count_tokens(self, conversation):
        return sum(len(m["content"].split()) for m in conversation)


def test_hand_checked_trace_and_one_call_per_backend_per_round():
    gens = [ScriptedGenerator(0), ScriptedGenerator(1)]
    sampling = SamplingConfig(temperature=0, max_tokens=16)
    debaters = [LLMDebaters(g, sampling, backend="fake") for g in gens]
    stats = DebateStats()
    traces = list(run_debates(QUESTIONS, debaters, max_rounds=3, stats=stats, progress=False, task="toy"))
    assert [t["id"] for t in traces] == ["q1", "q2"]
    for trace in traces:
        validate_trace(trace)
        assert trace["num_rounds"] == 3 and trace["stop_reason"] == "max_rounds" and trace["simulated"] is False
        assert [r["eta"] for r in trace["rounds"]] == EXPECTED_ETA[trace["id"]]
        for agent in (0, 1):
            got = [r["responses"][agent]["answer"] for r in trace["rounds"]]
            assert got == SCRIPT[agent][trace["id"]]
    # one batched call per backend per round, each carrying both questions
    assert [len(b) for b in gens[0].batches] == [2, 2, 2] and len(gens[1].batches) == 3
    assert stats.calls == {"fake:scripted-0": 3, "fake:scripted-1": 3}
    assert debaters[0].num_calls == 3
    # round-1 conversation: [user initial, assistant own previous, user round prompt with the peer's response]
    conv = gens[0].batches[1][0]
    assert [m["role"] for m in conv] == ["user", "assistant", "user"]
    assert conv[1]["content"] == "Step by step... <answer>4</answer>"
    assert "Agent 1: I am not sure" in conv[2]["content"]
    summary = stats.summary()
    assert summary["eta_rate_by_round"] == [0.5, 1.0, 0.0]
    assert summary["coverage"] == 1.0 and summary["questions"] == 2


def test_shared_backend_is_one_call_per_round():
    class Both(ScriptedGenerator):
        def chat(self, conversations, sampling):
            self.batches.append(conversations)
            return [Generation(text="<answer>4</answer>") for _ in conversations]

    gen = Both(0)
    group = LLMDebaters(gen, SamplingConfig(max_tokens=8))
    stats = DebateStats()
    list(run_debates(QUESTIONS, [group, group, group], max_rounds=2, stats=stats, progress=False))
    assert [len(b) for b in gen.batches] == [6, 6]  # 2 questions x 3 agents, one call per round
    assert list(stats.calls.values()) == [2]


def test_simulated_engine_round_count_and_calls():
    sim = SimulatedDebaters()
    examples = list(load_task("arith", num_examples=10, seed=0).examples())
    stats = DebateStats()
    traces = list(run_debates(examples, [sim, sim], max_rounds=4, batch_questions=4, stats=stats, progress=False))
    assert len(traces) == 10 and all(t["num_rounds"] == 4 for t in traces)
    assert [t["index"] for t in traces] == list(range(10))
    assert stats.calls == {"sim:simulated-debater-v1": 3 * 4}  # 3 chunks x 4 rounds
    assert stats.debate_rounds == 40


def test_stop_hook_stops_debates():
    sim = SimulatedDebaters()
    examples = list(load_task("arith", num_examples=20, seed=1).examples())
    seen_rounds = []

    def stop_when_covered(round_index, debates):
        seen_rounds.append((round_index, len(debates)))
        assert all(d["num_rounds"] == round_index + 1 for d in debates)
        return [d["rounds"][-1]["eta"] == 1 for d in debates]

    traces = list(run_debates(examples, [sim, sim], max_rounds=5, stop_hook=stop_when_covered, progress=False))
    for t in traces:
        etas = [r["eta"] for r in t["rounds"]]
        if t["stop_reason"] == "hook":
            assert etas[-1] == 1 and 1 not in etas[:-1] and t["num_rounds"] < 5
        else:
            assert t["num_rounds"] == 5 and 1 not in etas[:-1]
    assert any(t["stop_reason"] == "hook" for t in traces)
    assert seen_rounds[0] == (0, 20) and seen_rounds[1][1] < 20  # only active debates are passed on

    with pytest.raises(ValueError, match="stop_hook returned 0 decisions for 20"):
        list(run_debates(examples, [sim, sim], max_rounds=2, stop_hook=lambda t, d: [], progress=False))


def test_engine_argument_checks():
    sim = SimulatedDebaters()
    with pytest.raises(ValueError, match="at least 2 agents"):
        list(run_debates(QUESTIONS, [sim], progress=False))
    with pytest.raises(ValueError, match="max_rounds must be >= 1"):
        list(run_debates(QUESTIONS, [sim, sim], max_rounds=0, progress=False))


def test_trimming_oldest_peer_first_with_warning(caplog):
    ex = QUESTIONS[0]
    long_peer = " ".join(f"w{i}" for i in range(60)) + " <answer>4</answer>"
    request = DebateRequest(
        example=ex,
        agent=2,
        round=1,
        own_previous="my work <answer>4</answer>",
        peer_previous=[long_peer, long_peer.replace("w", "v")],
        peer_agents=[0, 1],
    )
    gen = ScriptedGenerator(0)
    full = LLMDebaters(gen, SamplingConfig(max_tokens=20))._fit(request, Guidance())[0]
    # room for the prompt minus ~40 words: only the first (oldest) peer needs cutting
    gen.context_length = gen.count_tokens(full) - 40 + 20
    group = LLMDebaters(gen, SamplingConfig(max_tokens=20))
    with caplog.at_level(logging.WARNING):
        conversation, trimmed = group._fit(request, Guidance())
    assert trimmed
    assert gen.count_tokens(conversation) <= gen.context_length - 20
    content = conversation[2]["content"]
    first, second = re.search(r"Agent 1: (.*?)\n\nAgent 2: (.*)", content, re.S).groups()
    assert first.startswith(TRIM_MARKER.strip()) and first.rstrip().endswith("<answer>4</answer>")
    assert len(first.split()) < len(second.split())  # the oldest (first) peer is cut first
    assert not second.startswith(TRIM_MARKER.strip())
    assert conversation[1]["content"] == "my work <answer>4</answer>"  # own previous kept while peers suffice
    # through respond(): the warning is counted and the response records trimmed=True
    gen.batches = [[]]  # answer as round 1
    out = group.respond([request])
    assert out[0].trimmed and group.num_trimmed == 1
    assert "trimmed 1 of 1 prompt(s)" in caplog.text


def test_memory_guidance_is_prepended():
    class Memory:
        def guidance(self, request):
            from metamod.memory import Guidance

            assert request.role == "debater" and request.agent == 0 and request.step == 0
            return Guidance(text="Check the units." if request.example.id == "q1" else "")

    gen = ScriptedGenerator(0)
    group = LLMDebaters(gen, SamplingConfig(max_tokens=8), memory=Memory(), confidence=True)
    group.respond([DebateRequest(example=q, agent=0, round=0) for q in QUESTIONS])
    first, second = (c[0]["content"] for c in gen.batches[0])
    assert first.startswith(render("memory_guidance", guidance="Check the units."))
    assert not second.startswith(render("memory_guidance", guidance="x").split("\n")[0])
    assert render("confidence_instruction") in first


def test_llm_debaters_reject_n_samples():
    with pytest.raises(ValueError, match="sampling.n must be 1"):
        LLMDebaters(ScriptedGenerator(0), SamplingConfig(n=2))
