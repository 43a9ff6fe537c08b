"""The prompted MRO Controller's P(Accept): the ACTION reader, the recorded fields, the accept sweep, the eval keys.

A scripted generator plays the three roles: its Controller writes ``ACTION: ACCEPT`` exactly when the P(Accept) it
puts in the top-k log-probs is >= 0.5 (else RESTART), so the accept sweep at 0.5 must give the live row back.
"""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from metamod.evaluate.config import EvalConfig
from metamod.evaluate.mro.stopping import accept_sweep, controller_stop_details, controller_stopping
from metamod.llm.base import Generation
from metamod.rewards.moderator import decision_probability, keyword_probabilities
from metamod.rollout.mro.parse import action_probabilities

L = math.log

# --------------------------------------------------------------------------------------------- the reader


def test_reader_on_hand_built_top_k():
    top = {" ACCEPT": L(0.5), " PATCH": L(0.3), " RESTART": L(0.2), " I": L(0.4)}
    tokens = ["ACTION", ":", " ACCEPT", "\n"]
    odds = action_probabilities(tokens, [{}, {}, top, {}])
    assert odds == pytest.approx({"accept": 0.5, "patch": 0.3, "restart": 0.2})
    # the chosen word does not matter, only the alternatives: the same top-k under a PATCH or a RESTART
    for word in (" PATCH", " RESTART"):
        assert action_probabilities(["ACTION", ":", word], [{}, {}, top]) == pytest.approx(odds)
    # split tokens: " AC" + "CEPT" is read at " AC"; prefixes of each word count for it, case-insensitively
    split = {" AC": L(0.2), " Acc": L(0.2), " P": L(0.1), " RE": L(0.5), " the": L(0.9)}
    odds = action_probabilities(["ACTION", ":", " AC", "CEPT"], [{}, {}, split, {}])
    assert odds == pytest.approx({"accept": 0.4, "patch": 0.1, "restart": 0.5})
    # the field written in bold after other text, the value's token carrying the colon
    odds = action_probabilities(
        ["JUSTIFICATION", ": fine", "\n**", "ACTION", "**", ": RE", "START"],
        [{}, {}, {}, {}, {}, {": RE": L(0.3), ": ACC": L(0.1), " RE": L(0.5)}, {}],
    )
    assert odds == pytest.approx({"accept": 0.25, "patch": 0.0, "restart": 0.75})


def test_reader_returns_none_when_it_cannot_read():
    top = [{}, {}, {" ACCEPT": L(0.9)}]
    assert action_probabilities(["ACTION", ":", " ACCEPT"], None) is None  # no log-probs asked for
    assert action_probabilities(None, top) is None
    assert action_probabilities(["I", " accept", " it"], top) is None  # no ACTION field: the keyword fallback
    assert action_probabilities(["ACTION", ":", "\n"], [{}, {}, {"\n": -0.1}]) is None  # an empty value
    assert action_probabilities(["ACTION", ":", " I"], [{}, {}, {" I": -0.1, " We": -1.0}]) is None  # no action word
    assert action_probabilities(["xACTION", ":", " ACCEPT"], top) is None  # not a field at the start of a line


def test_one_prefix_mass_reader_for_both_protocols():
    top = [{"STOP": L(0.6), "CON": L(0.2), "I": -1.0}, {}]
    assert decision_probability(["STOP", " <"], top) == pytest.approx(0.75)
    assert decision_probability(["STOP", " <"], top, keyword="CONTINUE") == pytest.approx(0.25)
    assert keyword_probabilities(top[0], ("STOP", "CONTINUE")) == pytest.approx({"STOP": 0.75, "CONTINUE": 0.25})
    assert keyword_probabilities({"stop": -0.1}, ("STOP", "CONTINUE")) is None  # case matters for the moderator
    with pytest.raises(ValueError, match="distinct characters"):
        keyword_probabilities({}, ("PATCH", "PASS"))


# --------------------------------------------------------------------------------------------- a scripted world


def _p_accept(content: str) -> float:
    """A fixed P(Accept) per prompt, spread over (0, 1)."""
    digest = hashlib.sha256(content.encode()).digest()
    return 0.05 + 0.9 * digest[0] / 255


class ScriptedRoles:
    """One generator for the three MRO roles; the Controller's top-k say P(Accept) = :func:`_p_accept`."""

    name, context_length = "scripted", None

    def __init__(self) -> None:
        self.top_logprobs_asked: list[int] = []

    def chat(self, conversations, sampling):
        out = []
        for conversation in conversations:
            content = conversation[-1]["content"]
            if "ACTION: ACCEPT, PATCH or RESTART" in content:
                self.top_logprobs_asked.append(sampling.top_logprobs)
                p = _p_accept(content)
                word = " ACCEPT" if p >= 0.5 else " RESTART"
                tokens = ["ACTION", ":", word, "\n", "JUSTIFICATION", ": ok"]
                top = [{"ACTION": 0.0}, {":": 0.0}, {" ACCEPT": L(p), " RESTART": L(1 - p)}, {}, {}, {}]
                if not sampling.top_logprobs:  # not asked: no tokens, no top-k (as the backends do)
                    tokens, top = None, None
                text = "ACTION:" + word + "\nJUSTIFICATION: ok"
                out.append(Generation(text, 50, 6, "stop", tokens=tokens, top_logprobs=top))
            elif "ERROR_FOUND: yes or no" in content:
                out.append(Generation("ERROR_FOUND: no\nEXPLANATION: fine", 40, 8, "stop"))
            else:
                answer = "4" if _p_accept(content) > 0.4 else "5"
                out.append(Generation(f"2 + 2 = {answer}. <answer>{answer}</answer>", 30, 10, "stop"))
        return out


def test_the_prompted_controller_records_p_accept_and_p_stop():
    from metamod.llm.base import SamplingConfig
    from metamod.rollout.mro import MRORoles, run_mro
    from metamod.rollout.mro.roles import LLMController, LLMMonitor, LLMReasoner
    from metamod.tasks.base import Example

    generator = ScriptedRoles()
    sampling = SamplingConfig(temperature=0.0, max_tokens=16)
    roles = MRORoles(
        LLMReasoner(generator, sampling), LLMMonitor(generator, sampling), LLMController(generator, sampling)
    )
    examples = [Example(id=f"q{i}", question=f"What is 2 + 2? ({i})", gold="4", kind="math") for i in range(12)]
    traces = list(run_mro(examples, roles, max_iterations=3, progress=False))
    assert set(generator.top_logprobs_asked) == {10}  # the one chat call asks for the top-k
    seen = 0
    for trace in traces:
        for record in trace["history"]:
            controller = record["controller"]
            assert controller["p_stop"] == pytest.approx(controller["p_accept"])  # no PATCH mass here
            assert (controller["p_accept"] >= 0.5) == (controller["action_name"] == "accept")
            seen += 1
        details = controller_stop_details(trace["history"])
        assert details["p_accept"] == [r["controller"]["p_accept"] for r in trace["history"]]
    assert seen > len(traces)  # some questions were restarted
    # controller_top_logprobs: 0 asks for none: the same decisions, no probability
    quiet = MRORoles(roles.reasoner, roles.monitor, LLMController(generator, sampling, top_logprobs=0))
    again = list(run_mro(examples, quiet, max_iterations=3, progress=False))
    assert generator.top_logprobs_asked[-1] == 0
    assert [[r["controller"]["action"] for r in t["history"]] for t in again] == [
        [r["controller"]["action"] for r in t["history"]] for t in traces
    ]
    assert all(r["controller"]["p_accept"] is None and r["controller"]["p_stop"] is None
               for t in again for r in t["history"])  # fmt: skip


def test_controller_top_logprobs_option_is_checked():
    from metamod.evaluate.mro.methods import MROOptions

    assert (
        MROOptions().controller_top_logprobs == 10
        and MROOptions(controller_top_logprobs=0).controller_top_logprobs == 0
    )
    for bad in (-1, 21, True, 2.5):
        with pytest.raises(ValueError, match="controller_top_logprobs must be an integer in"):
            MROOptions(controller_top_logprobs=bad)


# --------------------------------------------------------------------------------------------- the accept sweep


def _record(action: int, p_accept: float | None, eta: int, answer_correct: int | None = None):
    p_stop = None if p_accept is None else p_accept + (0.1 if action == 2 else 0.0)
    return {"eta": eta, "controller": {"action": action, "p_stop": p_stop, "p_accept": p_accept,
                                       "answer_correct": eta if action == 1 else answer_correct}}  # fmt: skip


def _details(history, budget=3):
    d = controller_stop_details(history)
    d.update(eta=[r["eta"] for r in history], iterations=len(history), forced_last=len(history) == budget)
    return d


def test_accept_sweep_at_one_half_reproduces_the_live_accept_decisions():
    # the live Controller accepts exactly when P(Accept) >= 0.5 and never patches
    questions = [
        [_record(1, 0.9, 1)],  # accepted at 1, right
        [_record(3, 0.2, 0), _record(1, 0.7, 1)],  # restarted, accepted at 2, right
        [_record(3, 0.4, 1), _record(1, 0.5, 0)],  # restarted a right one, accepted a wrong one
        [_record(3, 0.1, 0), _record(3, None, 0), _record(3, 0.3, 1)],  # the budget: last candidate (right)
        [_record(3, 0.2, 0), _record(3, 0.45, 0), _record(1, 0.8, 0)],  # accepted at the budget, wrong
    ]
    live_correct = [1, 1, 0, 1, 0]
    details = [_details(h) for h in questions]
    point = accept_sweep(details, [0.5])[0]
    assert point["covered"] == 5 and point["beyond_record"] == 0
    assert point["accuracy"] == pytest.approx(sum(live_correct) / 5)
    assert point["mean_iterations"] == pytest.approx(sum(len(h) for h in questions) / 5)
    low, high = accept_sweep(details, [0.15, 0.95])
    # at 0.15 q2 stops at 1 (wrong), q3 at 1 (right), q4's 0.1 goes on to its None (never stops) and the budget
    assert (low["covered"], low["beyond_record"], low["accuracy"]) == (5, 0, pytest.approx(3 / 5))
    # at 0.95 the live Accepts of q1, q2, q3 are passed: those would go on past the record
    assert (high["covered"], high["beyond_record"]) == (2, 3)
    out = controller_stopping(details)
    rel = out["controller_accept_reliability"]
    assert rel["steps"] == 8 and rel["p_accept_missing"] == 1  # forced iterations (q4, q5: the 3rd) are none
    assert {"mean_p_accept", "eta_rate", "count"} <= set(rel["bins"][0])
    assert [p["threshold"] for p in out["controller_accept_curve"]][:3] == [0.0, 0.05, 0.1]


def test_accept_sweep_counts_a_live_patch_as_beyond_the_record():
    patched = _details([_record(3, 0.1, 0), _record(2, 0.3, 0, answer_correct=1)])
    point = accept_sweep([patched], [0.5])[0]
    assert (point["covered"], point["beyond_record"], point["accuracy"]) == (0, 1, None)
    assert accept_sweep([patched], [0.05])[0]["accuracy"] == 0.0  # stops at 1, takes the (wrong) candidate
    # the moderator-protocol Controller records no p_accept: only the P(STOP) keys
    moderator = _details([{"eta": 1, "controller": {"action": 1, "p_stop": 0.8, "answer_correct": 1}}])
    assert "p_accept" not in moderator
    assert set(controller_stopping([moderator])) == {"controller_reliability", "controller_stop_curve"}


# --------------------------------------------------------------------------------------------- end to end


def test_eval_writes_the_accept_keys_table_and_plots(tmp_path, tiny_model_dir, monkeypatch):
    """``evaluate`` with the scripted roles in place of the agent: results keys, the live point, table, plots."""
    from metamod.evaluate import harness
    from metamod.evaluate.cells import read_samples

    monkeypatch.setattr(harness, "build_generators", lambda specs: {role: ScriptedRoles() for role in specs})
    config = EvalConfig(
        methods=["mro"],
        limit=20,
        seeds=[0],
        max_iterations=3,
        debaters="hf",
        debater_model=str(tiny_model_dir),
        output_dir=str(tmp_path / "eval"),
        plots=True,
    )
    document = harness.evaluate(config)
    mro = document["results"]["arith"]["mro"]
    for key in ("controller_reliability", "controller_stop_curve", "controller_accept_reliability",
                "controller_accept_curve"):  # fmt: skip
        assert key in mro
    at_half = next(p for p in mro["controller_accept_curve"] if p["threshold"] == 0.5)
    assert at_half["beyond_record"] == 0 and at_half["covered"] == 20
    assert at_half["accuracy"] == pytest.approx(mro["accuracy"])
    assert at_half["mean_iterations"] == pytest.approx(mro["mean_iterations"])
    rows = read_samples(tmp_path / "eval" / "samples.jsonl")
    assert all(len(r["methods"]["mro"]["details"]["mro"]["p_accept"]) >= 1 for r in rows)
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["results"]["arith"]["mro"]["controller_accept_curve"] == mro["controller_accept_curve"]
    assert "## MRO Controller stopping" in (tmp_path / "eval" / "table.md").read_text()
    for name in ("controller_stop_curve.png", "controller_reliability.png"):
        assert (tmp_path / "eval" / "plots" / name).stat().st_size > 0


def test_the_moderator_controller_asks_for_the_configured_top_logprobs():
    """A moderator Controller reads P(STOP) from its own call's top-k; ``top_logprobs`` 0 (EvalConfig
    ``moderator_top_logprobs: 0``) asks for none: the same decision, no probability."""
    from metamod.llm.base import SamplingConfig
    from metamod.rollout.mro.roles import ACCEPT, ControllerRequest, ModeratorController
    from metamod.tasks.base import Example

    class Moderator:
        name, context_length = "scripted-moderator", None

        def __init__(self) -> None:
            self.asked: list[int] = []

        def chat(self, conversations, sampling):
            self.asked.append(sampling.top_logprobs)
            tokens = ["STOP", " <answer>", "4", "</answer>"] if sampling.top_logprobs else None
            top = [{"STOP": L(0.8), "CONTINUE": L(0.2)}, {}, {}, {}] if sampling.top_logprobs else None
            return [Generation("STOP <answer>4</answer>", 40, 4, "stop", tokens=tokens, top_logprobs=top)
                    for _ in conversations]  # fmt: skip

    example = Example(id="q", question="What is 2 + 2?", gold="4", kind="math")
    request = ControllerRequest(example, 1, "2 + 2 = 4. <answer>4</answer>", "4", None, "No error found.")
    generator, sampling = Moderator(), SamplingConfig(temperature=0.0, max_tokens=16)
    turn = ModeratorController(generator, sampling).decide([request])[0]
    assert generator.asked == [10] and turn.decision.action == ACCEPT and turn.p_stop == pytest.approx(0.8)
    quiet = ModeratorController(generator, sampling, top_logprobs=0).decide([request])[0]
    assert generator.asked[-1] == 0 and quiet.decision.action == ACCEPT and quiet.p_stop is None
