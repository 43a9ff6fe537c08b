"""The MARCO loop: batching, interpreter feedback, cross-referencing prompts, stopping, meta-reflection (fast tier)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from metamod.config import ConfigError
from metamod.llm.base import Generation, SamplingConfig
from metamod.memory.marco import MarcoMemory, MarcoOptions
from metamod.rollout.coding.agents import CodeAgent
from metamod.rollout.coding.simulated import CodeSimulationConfig, SimulatedCoder
from metamod.rollout.marco import MarcoSettings, choose_final, run_marco
from metamod.sandbox import capabilities
from metamod.tasks.base import Example

#: the checks and grades run model-written code in the sandbox, which needs user + network namespaces
pytestmark = pytest.mark.skipif(not capabilities().namespaces, reason="the sandbox needs user + network namespaces")

WRONG_FN = "```python\ndef f(xs):\n    return xs\n```"
RIGHT_FN = "```python\ndef f(xs):\n    return [x * 2 for x in xs]\n```"


def induction(qid: str = "i1") -> Example:
    visible = [["[1, 2]", "[2, 4]"], ["[3]", "[6]"]]
    gold = {"tests": [["[5, 1]", "[10, 2]"], ["[]", "[]"]], "entry": "f", "language": "python", "reference": None}
    meta = {"code": {"subtask": "induction", "entry": "f", "function": None, "input": None, "output": None,
                     "visible": visible, "language": "python", "dataset": "test", "level": 1}}  # fmt: skip
    return Example(id=qid, question="infer f", gold=json.dumps(gold), kind="code_function", meta=meta)


def deduction(qid: str = "d1") -> Example:
    meta = {"code": {"subtask": "deduction", "entry": "f", "function": "def f(x):\n    return x + 3", "input": "4",
                     "output": None, "visible": [], "language": "python", "dataset": "test", "level": 1}}  # fmt: skip
    return Example(id=qid, question="f(4)?", gold="7", kind="code_output", meta=meta)


class Scripted:
    """A fake LLM: replies by a rule on the conversation, records every batched call."""

    def __init__(self, rule):
        self.rule, self.calls = rule, []

    def chat(self, conversations, sampling):
        self.calls.append([list(c) for c in conversations])
        return [Generation(text=self.rule(c), prompt_tokens=10, completion_tokens=5) for c in conversations]


def agent_of(llm) -> CodeAgent:
    return CodeAgent(llm, SamplingConfig(temperature=0.0, max_tokens=64))


def test_cross_referencing_prompts_feedback_and_batching():
    # agent 0 is wrong at iteration 1, agent 1 is wrong too; at iteration 2 both see their verdicts and the peer's lesson
    llm = Scripted(lambda conv: WRONG_FN if len(conv) == 1 else RIGHT_FN)
    traces = run_marco([induction("a"), induction("b")], agent_of(llm), MarcoSettings(agents=2, iterations=2))
    assert [len(c) for c in llm.calls] == [4, 4]  # one batched call per iteration: 2 problems x 2 agents
    second = llm.calls[1][0]  # problem a, agent 0 at iteration 2: its own history + verdict + peer lesson
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    revise = second[-1]["content"]
    assert "not consistent with the examples" in revise
    assert "Another agent (agent 2) proposed:" in revise and "return xs" in revise
    assert "Another agent (agent 1)" not in revise  # not its own lesson
    t = traces[0]
    assert t["num_iterations"] == 2 and t["iterations"][0]["eta"] == 0 and t["iterations"][1]["eta"] == 1
    assert [p["feedback"]["passed"] for p in t["iterations"][0]["proposals"]] == [False, False]
    assert t["passed_visible"] and "x * 2" in t["final_answer"] and t["final_agent"] == 0
    assert t["iterations"][1]["proposals"][0]["peer_lessons"] == 1
    assert t["takeaways"] == []  # no memory: no meta-reflection


def test_no_cross_referencing_shows_no_peer_lessons():
    llm = Scripted(lambda conv: WRONG_FN)
    run_marco([induction()], agent_of(llm), MarcoSettings(agents=2, iterations=2, cross_reference=False))
    revise = llm.calls[1][0][-1]["content"]
    assert "Another agent" not in revise and "not consistent" in revise


def test_stops_early_when_a_proposal_passes_and_rich_feedback_lists_failures():
    llm = Scripted(lambda conv: RIGHT_FN if "agent" not in conv[0]["content"] else WRONG_FN)
    traces = run_marco([induction()], agent_of(llm), MarcoSettings(agents=2, iterations=3))
    assert len(llm.calls) == 1 and traces[0]["num_iterations"] == 1 and traces[0]["stopped_early"]
    llm = Scripted(lambda conv: WRONG_FN)
    run_marco([induction()], agent_of(llm), MarcoSettings(agents=1, iterations=2, feedback="rich"))
    assert "0 of 2 checks passed" in llm.calls[1][0][-1]["content"]


def test_meta_reflection_with_memory_guidance_and_takeaways():
    memory = MarcoMemory(MarcoOptions(condense=False))
    bank = [{"id": "R1", "text": "Double-check every element.", "problem": "old", "agent": 0}]
    memory.scopes = {"test/induction": {"knowledge": [], "bank": bank, "problems_since": 1}}

    def rule(conv):
        if "ONE short lesson" in conv[-1]["content"]:
            return "Lesson: compare each output element with its input element."
        return RIGHT_FN

    llm = Scripted(rule)
    traces = run_marco([induction()], agent_of(llm), MarcoSettings(agents=2, iterations=2), memory=memory)
    first = llm.calls[0][0][0]["content"]
    assert first.startswith("Guidance from earlier problems") and "Double-check every element." in first
    assert traces[0]["guidance_items"] == [1, 1]
    summarise = llm.calls[1]  # the meta-reflection call, batched over both agents
    assert len(summarise) == 2 and "consistent with everything the problem shows" in summarise[0][-1]["content"]
    assert [t["agent"] for t in traces[0]["takeaways"]] == [0, 1]
    assert traces[0]["tokens"]["summarise"]["completion"] == 10


def test_deduction_format_check_and_oracle():
    llm = Scripted(lambda conv: "<answer>8</answer>")
    t = run_marco([deduction()], agent_of(llm), MarcoSettings(agents=1, iterations=2))[0]
    assert t["num_iterations"] == 1 and t["passed_visible"] and not t["iterations"][0]["proposals"][0]["correct"]
    t = run_marco([deduction()], agent_of(llm), MarcoSettings(agents=1, iterations=2, deduction_check="oracle"))[0]
    assert t["num_iterations"] == 2 and not t["passed_visible"]


def test_malformed_and_malicious_answers_are_wrong():
    llm = Scripted(lambda conv: "<answer>__import__('os').system('echo pwned')</answer>")
    t = run_marco([deduction()], agent_of(llm), MarcoSettings(agents=2, iterations=1))[0]
    assert not any(p["correct"] for p in t["iterations"][0]["proposals"])
    assert not t["iterations"][0]["proposals"][0]["feedback"]["passed"]  # not a literal: fails the format check
    llm = Scripted(lambda conv: "I am not sure.")
    t = run_marco([deduction()], agent_of(llm), MarcoSettings(agents=1, iterations=1))[0]
    assert t["final_answer"] is None


def test_simulated_coder_is_deterministic_and_labelled():
    sim = CodeAgent(simulated=SimulatedCoder(CodeSimulationConfig(code_sim_seed=3)))
    exs = [induction(f"q{i}") for i in range(4)]
    a = run_marco(exs, sim, MarcoSettings())
    b = run_marco(exs, sim, MarcoSettings())
    assert a == b and all(t["simulated"] for t in a)


def test_choose_final_prefers_passing_then_most_checks_then_majority():
    ex = deduction()
    fb = lambda ok, n: {"passed": ok, "n_passed": n}  # noqa: E731
    props = [
        {"agent": 0, "answer": "1", "feedback": fb(False, 1)},
        {"agent": 1, "answer": "2", "feedback": fb(False, 2)},
    ]
    assert choose_final(ex, props) == ("2", 1)
    props = [{"agent": 0, "answer": None, "feedback": fb(False, 0)}]
    assert choose_final(ex, props) == (None, None)


def _context(**kw):
    base = dict(agent=None, agent_sampling=SamplingConfig(), seed=0, memory=None, method_options={},
                code_simulation=CodeSimulationConfig())  # fmt: skip
    base.update(kw)
    return SimpleNamespace(**base)


def test_ablation_switches_cannot_be_turned_back_on():
    from metamod.evaluate.methods import build_method

    with pytest.raises(ConfigError, match="contradicts the ablation"):
        build_method("marco_v3", _context(method_options={"marco_v3": {"cross_reference": True}}))
    assert build_method("marco_v3", _context()).settings.cross_reference is False
    with pytest.raises(ConfigError, match="leave condense out of memory_options"):
        build_method("marco_v2", _context(memory=MarcoMemory(MarcoOptions(condenser="rule"))))
    with pytest.raises(ConfigError, match="unknown setting"):
        build_method("marco_v3", _context(method_options={"marco_v3": {"agent": 3}}))


def test_settings_checks():
    with pytest.raises(ValueError, match="agents must be >= 1"):
        MarcoSettings(agents=0)
    with pytest.raises(ValueError, match="deduction_check must be one of"):
        MarcoSettings(deduction_check="peek")
