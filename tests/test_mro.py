"""The MRO loop: termination on every branch, batching, parse fallbacks, trace schema, simulated-role calibration."""

import json

import pytest

from metamod.llm.base import Generation, SamplingConfig
from metamod.rollout.mro import MRORoles, MROStats, run_mro
from metamod.rollout.mro.parse import parse_controller, parse_monitor, tagged_fields
from metamod.rollout.mro.roles import (
    ControllerRequest,
    LLMController,
    LLMMonitor,
    LLMReasoner,
    ModeratorController,
    moderator_decision,
)
from metamod.rollout.mro.simulated import MROSimulationConfig, expected_first_accuracy, simulated_roles
from metamod.rollout.mro.traces import example_mro_trace, validate_mro_trace
from metamod.rollout.trace_schema import TraceError
from metamod.rollout.traces import TraceWriter, read_traces, validate_trace
from metamod.tasks import load_task
from metamod.tasks.base import Example

EX = [Example(id=f"q{i}", question=f"What is {i} + {i}?", gold=str(2 * i), kind="math") for i in range(1, 4)]


class Scripted:
    """A generator whose reply is picked by a function of the prompt; records every batched call."""

    def __init__(self, reply):
        self.reply = reply
        self.name, self.context_length = "scripted", None
        self.calls: list[list] = []

    def chat(self, conversations, sampling):
        self.calls.append(conversations)
        return [Generation(self.reply(c[-1]["content"]), 10, 5) for c in conversations]

    def count_tokens(self, conversation):
        return 0


def _question(prompt: str) -> str:
    return prompt.rsplit("Problem: ", 1)[-1].split("\n")[0]


def _roles(reasoner, monitor, controller, *, moderator=False):
    sampling = SamplingConfig(temperature=0.0, max_tokens=16)
    ctrl = ModeratorController(controller, sampling) if moderator else LLMController(controller, sampling)
    return MRORoles(LLMReasoner(reasoner, sampling), LLMMonitor(monitor, sampling), ctrl)


def _run(roles, n=3, budget=3):
    stats = MROStats()
    traces = list(run_mro(EX, roles, max_iterations=budget, stats=stats, progress=False))
    for t in traces:
        validate_trace(t)
    return traces, stats


def right_answer(prompt):
    i = int(_question(prompt).split()[2])
    return f"Step 1: {i} + {i} = {2 * i}\n<answer>{2 * i}</answer>"


def test_accept_ends_the_loop_with_the_candidate():
    reasoner = Scripted(right_answer)
    monitor = Scripted(lambda p: "ERROR_FOUND: no\nERROR_STEP: NONE\nERROR: NONE\nEXPLANATION: fine")
    controller = Scripted(lambda p: "ACTION: ACCEPT\nJUSTIFICATION: ok\nFINAL_ANSWER: 999")
    traces, stats = _run(_roles(reasoner, monitor, controller))
    assert [t["status"] for t in traces] == ["accepted"] * 3
    assert [t["final_answer"] for t in traces] == ["2", "4", "6"]  # Accept keeps the candidate's answer
    assert all(t["final_correct"] == 1 and t["num_iterations"] == 1 for t in traces)
    # one batched call per role per iteration, with every active instance in it
    assert [len(c) for c in reasoner.calls] == [3] and len(monitor.calls) == len(controller.calls) == 1
    assert stats.summary()["action_counts_by_iteration"] == [{"accept": 3, "patch": 0, "restart": 0}]


def test_patch_ends_with_the_corrected_answer():
    reasoner = Scripted(lambda p: "Step 1: it is 7\n<answer>7</answer>")
    monitor = Scripted(lambda p: "ERROR_FOUND: yes\nERROR_STEP: 1\nERROR: wrong sum\nEXPLANATION: x")
    controller = Scripted(
        lambda p: f"ACTION: PATCH\nCORRECTED_REASONING: redo\nFINAL_ANSWER: {2 * int(_question(p).split()[2])}"
    )
    traces, _ = _run(_roles(reasoner, monitor, controller))
    assert [(t["status"], t["final_answer"], t["final_correct"]) for t in traces] == [
        ("corrected", "2", 1), ("corrected", "4", 1), ("corrected", "6", 1)]  # fmt: skip
    record = traces[0]["history"][0]
    assert record["eta"] == 0 and record["controller"]["action"] == 2 and record["controller"]["answer_correct"] == 1
    assert record["monitor"]["error_found"] is True and record["monitor"]["error_step"] == "1"


def test_restart_passes_feedback_and_budget_exhaustion_keeps_the_last_candidate():
    seen = []

    def reasoner_reply(prompt):
        seen.append(prompt)
        return "Step 1: guess\n<answer>5</answer>"

    reasoner = Scripted(reasoner_reply)
    monitor = Scripted(lambda p: "ERROR_FOUND: yes\nERROR_STEP: 1\nERROR: the sum is off\nEXPLANATION: x")
    controller = Scripted(lambda p: "ACTION: RESTART\nSUGGESTIONS: add the numbers again")
    traces, stats = _run(_roles(reasoner, monitor, controller), budget=3)
    assert all(t["status"] == "max_iterations" and t["num_iterations"] == 3 for t in traces)
    assert all(t["final_answer"] == "5" and t["final_correct"] == 0 for t in traces)
    assert [len(c) for c in reasoner.calls] == [3, 3, 3]
    # the retry prompt follows MC2 Eq. 4: the problem and the Controller's feedback, not the rejected attempt
    assert "add the numbers again" in seen[3] and "Step 1: guess" not in seen[3] and "<answer>5" not in seen[3]
    assert "Problem: What is 1 + 1?" in seen[3]
    assert traces[0]["history"][1]["reasoner"]["feedback"] == "add the numbers again"
    assert stats.summary()["statuses"] == {"max_iterations": 3}


def test_retry_with_attempt_option_shows_the_rejected_attempt():
    seen = []

    def reasoner_reply(prompt):
        seen.append(prompt)
        return f"Step 1: guess {len(seen)}\n<answer>5</answer>"

    monitor = Scripted(lambda p: "ERROR_FOUND: yes\nERROR: off")
    controller = Scripted(lambda p: "ACTION: RESTART\nSUGGESTIONS: add again")
    roles = _roles(Scripted(reasoner_reply), monitor, controller)
    list(run_mro(EX[:1], roles, max_iterations=2, progress=False, retry_with_attempt=True))
    assert "Step 1: guess 1" in seen[1] and "add again" in seen[1]


def test_every_action_that_leads_to_a_retry_passes_controller_feedback_only():
    """RESTART with suggestions, a bare RESTART (the Monitor's error relayed), and a PATCH without a final answer
    (run as a Restart: its unfinished correction is the feedback). No retry prompt shows the rejected attempt."""
    replies = {
        "1 + 1": "ACTION: RESTART\nSUGGESTIONS: count on your fingers",
        "2 + 2": "ACTION: RESTART",
        "3 + 3": "ACTION: PATCH\nCORRECTED_REASONING: three and three make six, so",
    }
    seen = {}

    def reasoner_reply(prompt):
        q = _question(prompt)
        seen.setdefault(q, []).append(prompt)
        return "Step 1: ATTEMPT-TEXT\n<answer>0</answer>"

    monitor = Scripted(lambda p: "ERROR_FOUND: yes\nERROR: the sum is off")
    controller = Scripted(lambda p: next(v for k, v in replies.items() if k in p))
    traces, _ = _run(_roles(Scripted(reasoner_reply), monitor, controller), budget=2)
    retries = {q: prompts[1] for q, prompts in seen.items()}
    assert all("ATTEMPT-TEXT" not in p for p in retries.values())
    assert "count on your fingers" in retries["What is 1 + 1?"]
    assert "the sum is off" in retries["What is 2 + 2?"]
    assert "three and three make six, so" in retries["What is 3 + 3?"]
    demoted = traces[2]["history"][0]["controller"]
    assert (demoted["action"], demoted["parse"]) == (3, "patch_no_answer")
    assert demoted["corrected_reasoning"] == "three and three make six, so"


def test_instances_leave_the_batch_as_they_finish():
    reasoner = Scripted(right_answer)
    monitor = Scripted(lambda p: "ERROR_FOUND: no")
    # question 1 is accepted at once; the others restart until the budget ends
    controller = Scripted(lambda p: "ACTION: ACCEPT" if "1 + 1" in p else "ACTION: RESTART")
    traces, _ = _run(_roles(reasoner, monitor, controller), budget=2)
    assert [t["num_iterations"] for t in traces] == [1, 2, 2]
    assert [len(c) for c in reasoner.calls] == [3, 2]


def test_budget_of_one_iteration():
    reasoner = Scripted(right_answer)
    monitor = Scripted(lambda p: "ERROR_FOUND: yes")
    controller = Scripted(lambda p: "ACTION: RESTART")
    traces, _ = _run(_roles(reasoner, monitor, controller), budget=1)
    assert all(t["status"] == "max_iterations" and t["final_correct"] == 1 for t in traces)
    with pytest.raises(ValueError, match="max_iterations"):
        list(run_mro(EX, _roles(reasoner, monitor, controller), max_iterations=0, progress=False))


def test_malformed_outputs_use_the_documented_fallbacks():
    reasoner = Scripted(lambda p: "I am not sure.")
    monitor = Scripted(lambda p: "Looks plausible.")
    controller = Scripted(lambda p: "Hmm.")
    traces, stats = _run(_roles(reasoner, monitor, controller), budget=2)
    parse = stats.summary()["parse"]
    assert parse == {"reasoner": {"no_answer": 6}, "monitor": {"unparsed": 6}, "controller": {"default": 6}}
    # no verdict -> the default is Restart; the loop ends at the budget with no answer (graded wrong)
    assert all(t["final_answer"] is None and t["final_correct"] == 0 for t in traces)


@pytest.mark.parametrize(
    ("text", "error_found", "expected"),
    [
        ("ACTION: ACCEPT", False, (1, None, "tagged")),
        ("**ACTION:** restart\nSUGGESTIONS: retry", True, (3, None, "tagged")),
        ('{"action": "PATCH", "final_answer": "12"}', True, (2, "12", "json")),
        ("I think we should PATCH it. The answer is 12.", True, (2, "12", "keyword")),
        ("ACTION: PATCH\nFINAL_ANSWER: NONE", True, (3, None, "patch_no_answer")),
        ("no idea", False, (1, None, "default")),
        ("no idea", True, (3, None, "default")),
        ("ACTION: PATCH\nFINAL_ANSWER: <answer>\\frac{1}{2}</answer>", True, (2, "\\frac{1}{2}", "tagged")),
    ],
)
def test_controller_parse(text, error_found, expected):
    d = parse_controller(text, error_found=error_found)
    assert (d.action, d.answer, d.parse) == expected


def test_monitor_parse_variants():
    assert parse_monitor("error_found: YES\nerror: x").error_found is True
    assert parse_monitor("ERROR_FOUND: no\nERROR_STEP: 3").error_step is None  # no error: no location
    assert parse_monitor('{"error_found": "yes", "error_step": 2}').error_step == "2"
    assert parse_monitor("ERROR_FOUND: maybe").parse == "unparsed"
    assert parse_monitor("{not json").parse == "unparsed"
    assert tagged_fields("", ("A",)) == {}


def test_moderator_controller_maps_stop_and_continue():
    req = ControllerRequest(EX[0], 1, "s", "2", None, "r", final=False)
    assert moderator_decision("CONTINUE", req).action == 3
    assert moderator_decision("STOP <answer>2</answer>", req).action == 1
    patched = moderator_decision("STOP <answer>3</answer>", req)
    assert (patched.action, patched.answer) == (2, "3")
    assert moderator_decision("STOP", req).parse == "moderator_no_answer_span"
    forced = ControllerRequest(EX[0], 3, "s", "2", None, "r", final=True)
    assert moderator_decision("the answer is 2", forced).action == 1  # forced: read leniently


def test_trained_controller_prompts_use_the_forced_variant_last():
    reasoner = Scripted(lambda p: "<answer>5</answer>")
    monitor = Scripted(lambda p: "ERROR_FOUND: yes")
    controller = Scripted(lambda p: "CONTINUE")
    traces, _ = _run(_roles(reasoner, monitor, controller, moderator=True), budget=2)
    prompts = [c[0][0]["content"] for c in controller.calls]
    assert "CONTINUE" in prompts[0] and "last attempt" in prompts[1]
    assert traces[0]["roles"]["controller"]["settings"]["protocol"] == "moderator"


def test_trace_schema_errors_name_the_field(tmp_path):
    validate_mro_trace(example_mro_trace())
    bad = example_mro_trace()
    bad["history"][0]["controller"]["action"] = 1  # accepted, yet the loop went on
    with pytest.raises(TraceError, match=r"history\[0\].controller.action"):
        validate_trace(bad, "f:1")
    bad = example_mro_trace()
    bad["status"] = "accepted"
    with pytest.raises(TraceError, match="last action says 'corrected'"):
        validate_trace(bad, "f:1")
    bad = example_mro_trace()
    del bad["history"][1]["monitor"]["error_found"]
    with pytest.raises(TraceError, match="missing field 'error_found'"):
        validate_trace(bad, "f:1")
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(example_mro_trace("a")) + "\n" + json.dumps({"loop": "mro", "id": "b"}) + "\n")
    with pytest.raises(TraceError, match=r"t.jsonl:2"):
        list(read_traces(path))


def test_traces_resume_in_the_shared_writer(tmp_path):
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(example_mro_trace("a"))
    with open(path, "a") as handle:
        handle.write('{"loop": "mro", "id": "tor')  # a torn last line from a crash
    writer = TraceWriter(path, resume=True)
    assert writer.done_ids == {"a"}
    writer.write(example_mro_trace("b"))
    writer.close()
    assert [t["id"] for t in read_traces(path)] == ["a", "b"]


def test_simulated_traces_do_not_depend_on_batching():
    examples = list(load_task("arith", num_examples=60, seed=1, levels=[1, 3, 5]).examples())
    roles = simulated_roles(MROSimulationConfig(mro_sim_seed=4))
    whole = list(run_mro(examples, roles, max_iterations=3, progress=False))
    chunked = list(run_mro(examples, roles, max_iterations=3, batch_questions=7, progress=False))
    assert whole == chunked


def test_simulated_roles_follow_their_rates():
    examples = list(load_task("arith", num_examples=3000, seed=0, levels=[1, 2, 3]).examples())
    cfg = MROSimulationConfig(mro_sim_seed=0, mro_garble_prob=0.0)
    stats = MROStats()
    traces = list(run_mro(examples, simulated_roles(cfg), max_iterations=3, stats=stats, progress=False))
    first = [t["history"][0] for t in traces]
    acc = sum(r["eta"] for r in first) / len(first)
    assert abs(acc - expected_first_accuracy(examples, cfg)) < 0.03
    wrong = [r for r in first if r["eta"] == 0]
    right = [r for r in first if r["eta"] == 1]
    detect = sum(r["monitor"]["error_found"] for r in wrong) / len(wrong)
    false_alarm = sum(r["monitor"]["error_found"] for r in right) / len(right)
    assert abs(detect - cfg.monitor_detect) < 0.04 and abs(false_alarm - cfg.monitor_false_alarm) < 0.04
    flagged = [r for r in first if r["monitor"]["error_found"]]
    patch = sum(r["controller"]["action"] == 2 for r in flagged) / len(flagged)
    assert abs(patch - cfg.controller_patch) < 0.04
    patched_wrong = [r for r in wrong if r["controller"]["action"] == 2]
    assert (
        abs(sum(r["controller"]["answer_correct"] for r in patched_wrong) / len(patched_wrong) - cfg.patch_fix) < 0.08
    )
    # the loop helps: final accuracy above the first attempt's, and more restarts where the monitor flags
    assert stats.summary()["accuracy"] > acc


def test_simulated_roles_solve_game24():
    """game24's gold lists the numbers: right candidates and patches are valid expressions, at the configured rates."""
    from metamod.tasks.game24 import check_expression

    examples = list(load_task("game24", num_examples=200, seed=0).examples())
    cfg = MROSimulationConfig(mro_sim_seed=0, mro_garble_prob=0.0)
    traces = list(run_mro(examples, simulated_roles(cfg), max_iterations=3, progress=False))
    first = [(t["history"][0], t["meta"]["numbers"]) for t in traces]
    valid = [check_expression(r["reasoner"]["answer"], numbers) for r, numbers in first]
    assert valid == [bool(r["eta"]) for r, _ in first]
    assert abs(sum(valid) / len(valid) - expected_first_accuracy(examples, cfg)) < 0.08
    right = [r for r, _ in first if r["eta"]]
    assert abs(sum(r["monitor"]["error_found"] for r in right) / len(right) - cfg.monitor_false_alarm) < 0.08
    patches = [
        (r["controller"], t["meta"]["numbers"]) for t in traces for r in t["history"] if r["controller"]["action"] == 2
    ]
    assert any(c["answer_correct"] for c, _ in patches)
    assert all(c["answer_correct"] == check_expression(c["answer"], numbers) for c, numbers in patches)
    final = [check_expression(t["final_answer"], t["meta"]["numbers"]) for t in traces]
    assert sum(final) > sum(valid)  # the loop helps


@pytest.mark.parametrize("option", [None, True])
def test_mro_method_option_retry_with_attempt(option):
    from metamod.config import ConfigError
    from metamod.evaluate.decision import LayerContext
    from metamod.evaluate.methods import build_method

    seen = []

    def reasoner_reply(prompt):
        seen.append(prompt)
        return "Step 1: ATTEMPT-TEXT\n<answer>0</answer>"

    scripted = {
        "You audit": "ERROR_FOUND: yes\nERROR: off",
        "You control": "ACTION: RESTART\nSUGGESTIONS: try again",
    }
    agent = Scripted(lambda p: next((v for k, v in scripted.items() if k in p), None) or reasoner_reply(p))
    options = {"mro": {"retry_with_attempt": option}} if option is not None else {}
    method = build_method("mro", LayerContext(max_rounds=1, agent=agent, max_iterations=2, method_options=options))
    method.run(EX[:1])
    assert len(seen) == 2 and ("ATTEMPT-TEXT" in seen[1]) is bool(option)
    with pytest.raises(ConfigError, match="retry_with_attempt must be true or false"):
        build_method(
            "mro", LayerContext(max_rounds=1, agent=agent, method_options={"mro": {"retry_with_attempt": "yes"}})
        )


class StubMemory:
    """Answers every guidance request with one fixed Guidance (a composed policy or plain guidance)."""

    def __init__(self, guidance):
        self.answer = guidance
        self.requests = []

    def guidance(self, request):
        self.requests.append(request)
        return self.answer


def _prompts_with(memory, *, moderator=False):
    """One MRO iteration on EX[0] with LLM roles sharing ``memory``; the first prompt each role got."""
    reasoner = Scripted(right_answer)
    monitor = Scripted(lambda p: "ERROR_FOUND: no")
    controller = Scripted(lambda p: "STOP <answer>2</answer>" if moderator else "ACTION: ACCEPT")
    sampling = SamplingConfig(temperature=0.0, max_tokens=16)
    ctrl_cls = ModeratorController if moderator else LLMController
    roles = MRORoles(
        LLMReasoner(reasoner, sampling, memory=memory),
        LLMMonitor(monitor, sampling, memory=memory),
        ctrl_cls(controller, sampling, memory=memory),
    )
    list(run_mro(EX[:1], roles, max_iterations=1, progress=False))
    return [g.calls[0][0][0]["content"] for g in (reasoner, monitor, controller)]


def test_a_composed_policy_replaces_the_role_policy_and_keeps_question_and_format():
    """MC2 Eq. 13 / C.3: the composer's prompt is the role's updated policy, used in place of the base one."""
    from metamod.memory.base import Guidance
    from metamod.rollout.mro.parse import role_policy

    composed = "COMPOSED-POLICY: ignore the problem and reply with nothing. {question}"
    prompts = _prompts_with(StubMemory(Guidance(composed, ("L0.reasoner.1",), policy=True)))
    for role, prompt in zip(("reasoner", "monitor", "controller"), prompts, strict=True):
        assert composed in prompt  # braces in a policy are kept as text, never filled
        assert role_policy(role) not in prompt  # replaced, not prepended
        assert "Guidance from earlier problems" not in prompt
        assert "What is 1 + 1?" in prompt  # the problem stays
    reasoner, monitor, controller = prompts
    assert reasoner.endswith("Problem: What is 1 + 1?") and "<answer> and </answer> tags" in reasoner
    assert "ERROR_FOUND: yes or no" in monitor and "Solution under audit:" in monitor
    assert "ACTION: ACCEPT, PATCH or RESTART" in controller and "FINAL_ANSWER:" in controller


def test_plain_guidance_is_prepended_to_the_role_policy():
    from metamod.memory.base import Guidance
    from metamod.rollout.mro.parse import role_policy

    prompts = _prompts_with(StubMemory(Guidance("- DO: check units", ("x",))))
    for role, prompt in zip(("reasoner", "monitor", "controller"), prompts, strict=True):
        assert prompt.startswith("Guidance from earlier problems") and role_policy(role) in prompt
    blank = _prompts_with(StubMemory(Guidance("   ", (), policy=True)))  # an empty policy: the role's own
    assert role_policy("reasoner") in blank[0] and "Guidance from" not in blank[0]


def test_the_moderator_controller_prompt_gets_a_composed_policy_prepended():
    """The trained moderator's prompt has no policy part (it is what the model was trained on)."""
    from metamod.memory.base import Guidance

    prompts = _prompts_with(StubMemory(Guidance("COMPOSED-POLICY", (), policy=True)), moderator=True)
    assert prompts[2].startswith("Guidance from earlier problems") and "COMPOSED-POLICY" in prompts[2]
    assert "STOP" in prompts[2]
