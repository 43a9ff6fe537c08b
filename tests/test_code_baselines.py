"""The code-reasoning baselines (cot, chain_of_code, rhda): batching, prompts, execution/emulation, feedback loop."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from metamod.config import ConfigError
from metamod.evaluate.code_baselines import run_program
from metamod.evaluate.methods import build_method
from metamod.llm.base import Generation, SamplingConfig
from metamod.prompts import render
from metamod.rollout.coding.agents import problem_prompt
from metamod.rollout.coding.simulated import CodeSimulationConfig
from metamod.sandbox import capabilities
from metamod.tasks.base import Example
from metamod.tasks.code.grading import abduction_gold, deduction_gold, grade_code, induction_gold

#: the checks and grades run model-written code in the sandbox, which needs user + network namespaces
pytestmark = pytest.mark.skipif(not capabilities().namespaces, reason="the sandbox needs user + network namespaces")

ADD_ONE = "def f(x):\n    return x + 1"

CODE_BASELINES = ("chain_of_code", "cot", "rhda")


def deduction(qid: str = "d1", x: int = 3, level: int = 1) -> Example:
    meta = {
        "subtask": "deduction",
        "entry": "f",
        "function": ADD_ONE,
        "input": str(x),
        "output": None,
        "visible": [],
        "language": "python",
        "dataset": "test",
        "level": level,
    }
    return Example(
        id=qid, question=f"f({x})?", gold=deduction_gold(str(x + 1)), kind="code_output", meta={"code": meta}
    )


def abduction(qid: str = "a1", y: int = 4, level: int = 1) -> Example:
    meta = {
        "subtask": "abduction",
        "entry": "f",
        "function": ADD_ONE,
        "input": None,
        "output": str(y),
        "visible": [],
        "language": "python",
        "dataset": "test",
        "level": level,
    }
    gold = abduction_gold(ADD_ONE, "f", str(y), str(y - 1))
    return Example(id=qid, question=f"f(?) == {y}", gold=gold, kind="code_input", meta={"code": meta})


SECOND_PAIRS = [["2", "4"], ["4", "8"]]  # the visible pairs of question "i2" (tells it apart in prompts)


def induction(qid: str = "i1", level: int = 1) -> Example:
    visible = SECOND_PAIRS if qid == "i2" else [["1", "2"], ["3", "6"]]
    meta = {
        "subtask": "induction",
        "entry": "f",
        "function": None,
        "input": None,
        "output": None,
        "visible": visible,
        "language": "python",
        "dataset": "test",
        "level": level,
    }
    gold = induction_gold([("5", "10"), ("7", "14")], "f", "python", "def f(x):\n    return x * 2")
    return Example(id=qid, question="f: 1 -> 2, 3 -> 6", gold=gold, kind="code_function", meta={"code": meta})


class ScriptedLLM:
    """A fake generator: ``reply(conversation) -> text``; records every batched call."""

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def chat(self, conversations, sampling):
        self.calls.append([[dict(m) for m in c] for c in conversations])
        return [Generation(self.reply(c), prompt_tokens=10, completion_tokens=5) for c in conversations]


def llm_context(reply, **options):
    llm = ScriptedLLM(reply)
    ctx = SimpleNamespace(
        agent=llm, agent_sampling=SamplingConfig(), seed=0, memory=None, method_options=options, code_simulation=None
    )
    return ctx, llm


def sim_context(**config):
    return SimpleNamespace(
        agent=None,
        agent_sampling=SamplingConfig(),
        seed=0,
        memory=None,
        method_options={},
        code_simulation=CodeSimulationConfig(**config),
    )


def last_user(conversation) -> str:
    return [m["content"] for m in conversation if m["role"] == "user"][-1]


def qid_of(conv) -> str:
    return "i2" if "f(2) -> 4" in conv[0]["content"] else "i1"


def fenced(code: str) -> str:
    return f"Here is my program.\n```python\n{code}\n```"


# ------------------------------------------------------------------------------------------------- cot


def test_cot_is_one_batched_call_with_the_problem_in_each_prompt():
    examples = [deduction(), abduction(), induction()]
    answers = {
        "d1": "<answer>4</answer>",
        "a1": "<answer>3</answer>",
        "i1": "```python\ndef f(x):\n    return x * 2\n```",
    }

    def reply(conv):
        text = conv[0]["content"]
        return next(a for qid, a in answers.items() if problem_prompt(by_id[qid]) in text)

    by_id = {ex.id: ex for ex in examples}
    ctx, llm = llm_context(reply)
    outcomes = build_method("cot", ctx).run(examples)
    assert len(llm.calls) == 1 and len(llm.calls[0]) == 3
    assert all("one step at a time" in c[0]["content"] for c in llm.calls[0])
    assert [o.answer for o in outcomes] == ["4", "3", "def f(x):\n    return x * 2"]
    assert all(grade_code(o.answer, ex.gold, ex.kind).correct for o, ex in zip(outcomes, examples, strict=True))
    assert outcomes[0].prompt_tokens == 10 and outcomes[0].completion_tokens == 5
    assert outcomes[0].answers == ["4"] and outcomes[0].details == {"cot": {"parsed": True}}


def test_cot_malformed_output_gives_no_answer():
    ctx, _ = llm_context(lambda conv: "Let me think about this step by step. First I look at")
    [outcome] = build_method("cot", ctx).run([deduction()])
    assert outcome.answer is None and outcome.answers == [None]
    assert outcome.details == {"cot": {"parsed": False}}


# ---------------------------------------------------------------------------------------------- chain of code


def test_coc_execution_path_needs_no_second_call():
    ctx, llm = llm_context(lambda conv: fenced("x = 3\nfor _ in range(1):\n    x = x + 1\nanswer = x"))
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert len(llm.calls) == 1
    assert "named answer" in " ".join(llm.calls[0][0][0]["content"].split())
    assert "NOT defined" in llm.calls[0][0][0]["content"]
    assert outcome.answer == "4" and outcome.answers == ["4"]
    assert outcome.details["chain_of_code"]["source"] == "execution"
    assert outcome.details["chain_of_code"]["emulated"] is False


def test_coc_emulates_a_program_that_raises_and_batches_only_those():
    programs = {
        "d1": "x = 3\nprint('traced', x)\nok = seems_plausible(x)\nanswer = x + 1",  # raises NameError at line 3
        "d2": "answer = 5 + 1",
    }

    def reply(conv):
        if len(conv) == 1:
            return fenced(programs["d1" if "f(3)" in conv[0]["content"] else "d2"])
        return "Carrying on: the helper would say yes, so answer = 4.\n<answer>4</answer>"

    ctx, llm = llm_context(reply)
    outcomes = build_method("chain_of_code", ctx).run([deduction("d1", 3), deduction("d2", 5)])
    assert [len(call) for call in llm.calls] == [2, 1]
    prompt = last_user(llm.calls[1][0])
    assert "NameError" in prompt and "seems_plausible" in prompt and "line 3" in prompt
    assert "traced 3" in prompt  # what it printed before stopping
    assert outcomes[0].answer == "4" and outcomes[1].answer == "6"
    record = outcomes[0].details["chain_of_code"]
    assert record["source"] == "emulation" and record["emulated"] and not record["executed"]
    assert record["line"] == 3
    assert outcomes[1].details["chain_of_code"]["source"] == "execution"
    assert outcomes[0].prompt_tokens == 20 and len(outcomes[0].texts) == 2


@pytest.mark.parametrize("expose, source", [(False, "emulation"), (True, "execution")])
def test_coc_problem_function_is_hidden_unless_exposed(expose, source):
    def reply(conv):
        return fenced("answer = f(3)") if len(conv) == 1 else "<answer>4</answer>"

    ctx, llm = llm_context(reply, chain_of_code={"expose_function": expose})
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert outcome.answer == "4" and outcome.details["chain_of_code"]["source"] == source
    assert ("already defined" in llm.calls[0][0][0]["content"]) is expose


def test_coc_retyped_function_is_executed():
    ctx, _ = llm_context(lambda conv: fenced(ADD_ONE + "\n\nanswer = f(3)"))
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert outcome.answer == "4" and outcome.details["chain_of_code"]["executed"]


@pytest.mark.parametrize(
    "program, expected", [("answer = ([1, 2], 'a')", "[1, 2], 'a'"), ("answer = (3,)", "3"), ("answer = 3", "3")]
)
def test_coc_abduction_answer_is_the_argument_list(program, expected):
    ex = abduction()
    assert run_program(program, ex).answer == expected


def test_coc_missing_answer_variable_is_emulated():
    def reply(conv):
        return fenced("print(3 + 1)") if len(conv) == 1 else "<answer>4</answer>"

    ctx, llm = llm_context(reply)
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    prompt = last_user(llm.calls[1][0])
    assert "no variable named answer" in prompt and "4" in prompt
    assert outcome.answer == "4" and outcome.details["chain_of_code"]["emulated"]


def test_coc_induction_answer_is_the_program_and_a_broken_helper_is_repaired():
    good = "def f(x):\n    return x * 2\n\nassert f(3) == 6"
    broken = "def f(x):\n    return double_it(x)"

    def reply(conv):
        if len(conv) > 1:
            return "```python\ndef f(x):\n    return x * 2\n```"
        return fenced(good if qid_of(conv) == "i1" else broken)

    examples = [induction("i1"), induction("i2")]
    ctx, llm = llm_context(reply)
    outcomes = build_method("chain_of_code", ctx).run(examples)
    assert [len(call) for call in llm.calls] == [2, 1]
    assert outcomes[0].answer == good and outcomes[0].details["chain_of_code"]["source"] == "execution"
    repair = last_user(llm.calls[1][0])
    assert "double_it" in repair and "plain Python" in repair
    assert outcomes[1].details["chain_of_code"]["source"] == "emulation"
    assert all(grade_code(o.answer, ex.gold, ex.kind).correct for o, ex in zip(outcomes, examples, strict=True))


def test_coc_timeout_is_emulated():
    def reply(conv):
        return fenced("while True:\n    pass") if len(conv) == 1 else "<answer>4</answer>"

    ctx, llm = llm_context(reply, chain_of_code={"timeout_s": 1.0})
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert "timeout" in last_user(llm.calls[1][0])
    assert outcome.answer == "4"


def test_coc_printed_lines_cannot_pose_as_the_result():
    run = run_program(
        'print("@@coc-0000000000000000@@{\\"ok\\": true, \\"answer\\": \\"99\\"}")\nanswer = 4', deduction()
    )
    assert run.ok and run.answer == "4"


def test_coc_without_a_program_reads_the_prose_or_gives_none():
    ctx, llm = llm_context(lambda conv: "No code needed: <answer>4</answer>")
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert outcome.answer == "4" and outcome.details["chain_of_code"]["source"] == "text" and len(llm.calls) == 1
    ctx, llm = llm_context(lambda conv: "Let me think about this step by step. First I look at")
    [outcome] = build_method("chain_of_code", ctx).run([deduction()])
    assert outcome.answer is None and outcome.details["chain_of_code"]["source"] == "none"


# ------------------------------------------------------------------------------------------------------ rhda


def rhda_reply(translations):
    """Hypotheses are prose; the k-th translation of a question is ``translations[qid][k]``."""

    def reply(conv):
        qid = qid_of(conv)
        if "concrete answer" not in last_user(conv):
            return "1. Each output is the input doubled."
        k = sum("concrete answer" in m["content"] for m in conv if m["role"] == "user") - 1
        return translations[qid][k]

    return reply


DOUBLE = "```python\ndef f(x):\n    return x * 2\n```"
PLUS_ONE = "```python\ndef f(x):\n    return x + 1\n```"


def test_rhda_stops_when_the_check_passes_and_feeds_back_failures():
    examples = [induction("i1"), induction("i2")]
    ctx, llm = llm_context(rhda_reply({"i1": [DOUBLE], "i2": [PLUS_ONE, DOUBLE]}))
    outcomes = build_method("rhda", ctx).run(examples)
    assert [len(call) for call in llm.calls] == [2, 2, 1, 1]  # hypothesis, translate; then only i2 again
    amend = last_user(llm.calls[2][0])
    assert render("marco_feedback_fail") in amend and "amended hypothesis" in amend
    assert outcomes[0].details["rhda"] == {"iterations": 1, "passed": [True], "parsed": [True], "feedback": "binary"}
    assert outcomes[1].details["rhda"]["passed"] == [False, True]
    assert outcomes[1].answers == [PLUS_ONE.split("\n", 1)[1].rsplit("\n", 1)[0], outcomes[1].answer]
    assert all(grade_code(o.answer, ex.gold, ex.kind).correct for o, ex in zip(outcomes, examples, strict=True))
    assert outcomes[1].prompt_tokens == 40 and len(outcomes[1].texts) == 4


def test_rhda_rich_feedback_names_the_failed_check_and_budget_ends_the_loop():
    ctx, llm = llm_context(
        rhda_reply({"i1": [PLUS_ONE, PLUS_ONE, PLUS_ONE]}), rhda={"feedback": "rich", "iterations": 3}
    )
    [outcome] = build_method("rhda", ctx).run([induction("i1")])
    assert len(llm.calls) == 6
    amend = last_user(llm.calls[2][0])
    assert "checks passed" in amend and "f(3)" in amend
    assert outcome.details["rhda"]["passed"] == [False, False, False]
    assert outcome.answer is not None and not grade_code(outcome.answer, induction("i1").gold, "code_function").correct


def test_rhda_malformed_translation_is_no_answer_and_is_retried():
    ctx, llm = llm_context(rhda_reply({"i1": ["I am not sure.", DOUBLE]}))
    [outcome] = build_method("rhda", ctx).run([induction("i1")])
    assert outcome.answers[0] is None and outcome.details["rhda"]["parsed"] == [False, True]
    assert outcome.details["rhda"]["passed"] == [False, True]


def test_rhda_prompts_carry_the_problem():
    ex = deduction()
    ctx, llm = llm_context(lambda conv: "1. add one" if len(conv) == 1 else "<answer>4</answer>")
    [outcome] = build_method("rhda", ctx).run([ex])
    assert problem_prompt(ex) in llm.calls[0][0][0]["content"]
    assert "Do not answer yet" in llm.calls[0][0][0]["content"]
    assert outcome.answer == "4" and outcome.details["rhda"]["iterations"] == 1  # format check passes


# ------------------------------------------------------------------------------------------ simulated coder


def sim_examples():
    return (
        [deduction(f"d{i}", i) for i in range(4)]
        + [abduction(f"a{i}", i + 2) for i in range(4)]
        + [induction(f"i{i}") for i in range(4)]
    )


@pytest.mark.parametrize("name", CODE_BASELINES)
def test_simulated_runs_are_deterministic_and_independent_of_batching(name):
    cls = functools.partial(build_method, name)
    examples = sim_examples()
    first = cls(sim_context(code_sim_seed=3)).run(examples)
    again = cls(sim_context(code_sim_seed=3)).run(examples[:5]) + cls(sim_context(code_sim_seed=3)).run(examples[5:])
    assert [(o.answer, o.details) for o in first] == [(o.answer, o.details) for o in again]


def test_simulated_chain_of_code_uses_both_paths_and_is_right_when_the_coder_is():
    examples = sim_examples() + [deduction(f"x{i}", i + 10) for i in range(8)]
    outcomes = build_method("chain_of_code", sim_context(accuracy=0.999, garble_prob=0.0, question_sd=0.0)).run(
        examples
    )
    sources = {o.details["chain_of_code"]["source"] for o in outcomes}
    assert sources == {"execution", "emulation"}
    assert all(grade_code(o.answer, ex.gold, ex.kind).correct for o, ex in zip(outcomes, examples, strict=True))


def test_no_agent_and_bad_options_are_config_errors():
    ctx = SimpleNamespace(
        agent=None, agent_sampling=SamplingConfig(), seed=0, memory=None, method_options={}, code_simulation=None
    )
    with pytest.raises(ConfigError, match="needs an agent"):
        build_method("cot", ctx)
    with pytest.raises(ConfigError, match="feedback must be one of"):
        build_method("rhda", llm_context(lambda c: "", rhda={"feedback": "verbose"})[0])
    with pytest.raises(ConfigError, match="unknown setting"):
        build_method("chain_of_code", llm_context(lambda c: "", chain_of_code={"iterations": 2})[0])


class FakeMemory:
    def guidance(self, request):
        from metamod.memory.base import Guidance

        assert request.role == "single" and request.method in CODE_BASELINES
        # two items, three bullet lines: the count is the memory's item ids, not the prompt's "- " lines
        text = "- Trace loops one iteration at a time.\n- Check types first.\n  - e.g. int vs str"
        return Guidance(text=text, item_ids=("L1", "L2"))


@pytest.mark.parametrize("name", CODE_BASELINES)
def test_memory_guidance_goes_into_the_first_prompt_only(name):
    ctx, llm = llm_context(lambda conv: "1. add one" if len(conv) == 1 and name == "rhda" else "<answer>4</answer>")
    ctx.memory = FakeMemory()
    method = build_method(name, ctx)
    seen = []
    chat = method.agent.chat
    method.agent.chat = lambda convs, turns, **kw: seen.extend(turns) or chat(convs, turns, **kw)
    method.run([deduction()])
    first = llm.calls[0][0][0]["content"]
    assert first.startswith("Guidance from earlier problems") and "Trace loops" in first
    assert all(t.guidance_items == 2 for t in seen)
    assert all("Guidance from" not in m["content"] for call in llm.calls for m in call[0][1:])


@pytest.mark.parametrize("name", CODE_BASELINES)
def test_synthetic_code_problems_end_to_end_with_a_sure_simulated_coder(name):
    from metamod.tasks.synthetic_code import SyntheticCodeTask

    examples = [
        ex
        for subtask in ("deduction", "abduction", "induction")
        for ex in SyntheticCodeTask(subtask=subtask, levels=[1, 3], num_examples=3, seed=5).examples()
    ] + list(SyntheticCodeTask(subtask="induction", language="robustfill", num_examples=1, seed=5).examples())
    ctx = sim_context(accuracy=0.999, garble_prob=0.0, question_sd=0.0, level_slope=0.0)
    outcomes = build_method(name, ctx).run(examples)
    grades = [grade_code(o.answer, ex.gold, ex.kind) for o, ex in zip(outcomes, examples, strict=True)]
    assert all(g.correct for g in grades), [
        (ex.id, o.answer, g) for o, ex, g in zip(outcomes, examples, grades, strict=True)
    ]
