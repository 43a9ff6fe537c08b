"""Decision layers on hand-built transcripts with known answers; moderator layers via a scripted fake generator."""

from __future__ import annotations

import pytest

from metamod.evaluate.decision import LayerContext, final_answer
from metamod.evaluate.methods import METHODS, build_method
from metamod.evaluate.metrics import method_metrics
from metamod.evaluate.replay import replay
from metamod.llm.base import Generation, SamplingConfig
from metamod.rollout.trace_schema import SCHEMA_VERSION
from metamod.tasks.voting import majority_answer


def make_trace(qid: str, rounds: list[list[str | None]], gold: str = "7", kind: str = "math") -> dict:
    """A trace whose round t has the given debater answers (None: unparsable)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "id": qid,
        "task": "arith",
        "question": f"Question {qid}?",
        "gold": gold,
        "kind": kind,
        "choices": None,
        "meta": {},
        "simulated": True,
        "agents": [{"index": i, "backend": "sim", "model": "sim", "settings": {}} for i in range(len(rounds[0]))],
        "rounds": [
            {
                "round": t,
                "eta": int(gold in answers),
                "responses": [
                    {
                        "agent": i,
                        "text": f"step {t}. <answer>{a}</answer>" if a is not None else "I am not sure",
                        "answer": a,
                        "prompt_tokens": 10 * (t + 1),
                        "completion_tokens": 5,
                        "trimmed": False,
                    }
                    for i, a in enumerate(answers)
                ],
            }
            for t, answers in enumerate(rounds)
        ],
        "num_rounds": len(rounds),
        "stop_reason": "max_rounds",
    }


class ScriptedGenerator:
    """Returns scripted texts: ``script(conversation_text) -> str``; records every batched call."""

    name = "scripted"
    context_length = None

    def __init__(self, script):
        self.script = script
        self.calls: list[int] = []

    def chat(self, conversations, sampling: SamplingConfig):
        self.calls.append(len(conversations))
        return [
            Generation(text=self.script(c[-1]["content"]), prompt_tokens=7, completion_tokens=3)
            for c in conversations
            for _ in range(sampling.n)
        ]

    def count_tokens(self, conversation):
        return 7


# all agree at round 0 (right), gold only at round 2, never right, a tie at the end
AGREE = make_trace("agree", [["7", "7"], ["7", "7"], ["7", "7"]])
LATE = make_trace("late", [["5", "6"], ["5", "6"], ["7", "6"]])
NEVER = make_trace("never", [["5", "5"], ["5", "6"], ["6", "6"]])
TIE = make_trace("tie", [["7", "8"], ["7", "8"], ["7", "8"]])
UNPARSABLE = make_trace("junk", [[None, "3"], [None, "3"], [None, None]])
TRACES = [AGREE, LATE, NEVER, TIE, UNPARSABLE]


def _by_id(records):
    return {t["id"]: r for t, r in zip(TRACES, records, strict=True)}


def test_registry_lists_every_method_and_unknown_fails():
    gates = {name for name in METHODS if name.startswith("gate_")}  # the gate rows: tests/test_gate.py
    debate = {name for name, spec in METHODS.items() if spec.replays_debates} - gates
    assert debate == {"majority_vote", "consensus", "judge", "moderator_prompted", "moderator", "adjudication_only",
                      "stopping_only", "moderator_threshold"}  # fmt: skip
    assert {"single_naive", "single_cot", "single_reflection", "single_cot_sc"} <= set(METHODS) - debate
    with pytest.raises(KeyError, match="Valid names: .*majority_vote"):
        build_method("majority", LayerContext(max_rounds=3))


def test_majority_vote_uses_last_round_and_seeded_ties():
    out = _by_id(replay(build_method("majority_vote", LayerContext(max_rounds=3, seed=0)), TRACES))
    assert all(r["rounds"] == 3 for r in out.values())
    assert out["agree"]["final_answer"] == "7"
    assert out["late"]["final_answer"] in {"7", "6"}
    assert out["never"]["final_answer"] == "6"
    assert out["junk"]["final_answer"] is None  # unparsable answers never win
    # tie rule: deterministic per (seed, question id), independent of agent order, and seed-dependent
    winners = {majority_answer(["7", "8"], kind="math", seed=s, question_id="tie") for s in range(20)}
    assert winners == {"7", "8"}
    for s in range(5):
        assert majority_answer(["7", "8"], kind="math", seed=s, question_id="tie") == majority_answer(
            ["8", "7"], kind="math", seed=s, question_id="tie"
        )
    assert out["tie"]["final_answer"] == majority_answer(["7", "8"], kind="math", seed=0, question_id="tie")
    # debater tokens of 3 rounds: 2 agents x (10 + 20 + 30) prompt, 2 x 3 x 5 completion
    assert out["agree"]["tokens"] == {
        "debater_prompt": 120,
        "debater_completion": 30,
        "moderator_prompt": 0,
        "moderator_completion": 0,
    }


def test_majority_vote_normalises_answers():
    assert majority_answer(["1,000", "7", "1000"], kind="math", seed=0, question_id="x") == "1,000"
    assert majority_answer(["(B)", "A", "b"], kind="mc", choices=["x", "y"], seed=0, question_id="x") == "(B)"


def test_consensus_stops_at_first_agreement():
    out = _by_id(replay(build_method("consensus", LayerContext(max_rounds=3)), TRACES))
    assert out["agree"]["rounds"] == 1 and out["agree"]["final_answer"] == "7"
    assert out["never"]["rounds"] == 1 and out["never"]["final_answer"] == "5"
    assert out["late"]["rounds"] == 3
    assert out["tie"]["rounds"] == 3
    assert out["junk"]["rounds"] == 3 and out["junk"]["final_answer"] is None  # two None never "agree"
    assert out["agree"]["tokens"]["debater_prompt"] == 20


def test_judge_reads_last_round_with_one_batched_call():
    judge = ScriptedGenerator(lambda text: "The agents argue well. <answer>7</answer>")
    layer = build_method("judge", LayerContext(max_rounds=3, judge=judge))
    out = replay(layer, TRACES)
    assert judge.calls == [len(TRACES)]
    assert all(r["final_answer"] == "7" and r["rounds"] == 3 for r in out)
    assert out[0]["tokens"]["moderator_prompt"] == 7


def _moderator_script(text: str) -> str:
    """'agree' stops at round 0, 'late' at round 1, 'tie' says STOP without answer, 'never' writes prose."""
    if "Question never?" in text:
        return "I think we should keep going"
    if "last round" in text:  # forced prompt
        return "STOP <answer>6</answer>"
    if "Question agree?" in text:
        return "STOP <answer>7</answer>"
    if "Question late?" in text and "step 1." in text:
        return "STOP <answer>7</answer>"
    if "Question tie?" in text:
        return "STOP"  # invalid (no answer span): counts as CONTINUE
    return "CONTINUE"


def test_moderator_stops_parses_and_forces_final():
    gen = ScriptedGenerator(_moderator_script)
    out = _by_id(replay(build_method("moderator", LayerContext(max_rounds=3, moderator=gen)), TRACES))
    assert gen.calls == [5, 4, 3]  # one batched call per round over the still-active debates
    assert (out["agree"]["rounds"], out["agree"]["final_answer"]) == (1, "7")
    assert (out["late"]["rounds"], out["late"]["final_answer"]) == (2, "7")
    # invalid output: CONTINUE before T_max, no answer at T_max
    assert (out["never"]["rounds"], out["never"]["final_answer"]) == (3, None)
    assert out["never"]["valid"] == [False, False, False]
    # invalid STOP continues; forced prompt at the last round answers 6
    assert (out["tie"]["rounds"], out["tie"]["final_answer"]) == (3, "6")
    assert out["tie"]["valid"] == [False, False, True]
    assert out["junk"]["decisions"][-1]["raw"] == "STOP <answer>6</answer>"
    assert out["agree"]["tokens"]["moderator_prompt"] == 7 and out["late"]["tokens"]["moderator_completion"] == 6


def test_prompted_moderator_uses_the_base_generator():
    base = ScriptedGenerator(lambda text: "CONTINUE" if "last round" not in text else "STOP <answer>7</answer>")
    with pytest.raises(ValueError, match="moderator_base"):
        build_method("moderator_prompted", LayerContext(max_rounds=2))
    out = replay(build_method("moderator_prompted", LayerContext(max_rounds=2, moderator_base=base)), TRACES)
    assert all(r["rounds"] == 2 and r["final_answer"] == "7" for r in out)


def test_adjudication_only_fixed_three_rounds():
    gen = ScriptedGenerator(lambda text: "STOP <answer>7</answer>" if "last round" in text else "CONTINUE")
    out = replay(build_method("adjudication_only", LayerContext(max_rounds=5, moderator=gen)), TRACES)
    assert gen.calls == [5]  # only the forced call at round index 2
    assert all(r["rounds"] == 3 and r["final_answer"] == "7" for r in out)


def test_stopping_only_uses_majority_of_stopping_round():
    gen = ScriptedGenerator(lambda text: "STOP <answer>999</answer>")
    out = _by_id(replay(build_method("stopping_only", LayerContext(max_rounds=3, moderator=gen)), TRACES))
    assert all(r["rounds"] == 1 for r in out.values())
    assert out["never"]["final_answer"] == "5"  # round-0 majority, not the moderator's 999
    assert out["agree"]["final_answer"] == "7"
    cont = ScriptedGenerator(lambda text: "CONTINUE")
    out = _by_id(replay(build_method("stopping_only", LayerContext(max_rounds=3, moderator=cont)), TRACES))
    assert cont.calls == [5, 5]  # no moderator call at T_max: the majority answers there
    assert out["never"]["final_answer"] == "6" and out["never"]["rounds"] == 3


def test_replay_rejects_short_traces():
    with pytest.raises(ValueError, match="needs 5"):
        replay(build_method("majority_vote", LayerContext(max_rounds=5)), [AGREE])


# --------------------------------------------------------------------------------------------- final-round parse policy

FINAL_CASES = [
    # (forced-round output, answer, strict format validity, lenient)
    ("STOP <answer>7</answer>.", "7", False, True),
    ("<answer>7</answer>", "7", False, True),
    ("The final answer is 7", "7", False, True),
    ("7", "7", False, True),
    ("I cannot tell", None, False, False),
    ("\r\ufffdmememe\ufffdmeme", None, False, False),  # junk of the untrained tiny model is no answer
    ("CONTINUE", None, True, False),
    ("STOP <answer></answer>", None, False, False),
    ("STOP <answer>7</answer>", "7", True, False),
]


@pytest.mark.parametrize(("text", "answer", "valid", "lenient"), FINAL_CASES)
@pytest.mark.parametrize("method", ["moderator", "moderator_prompted", "adjudication_only"])
def test_forced_final_answer_is_lenient_but_validity_stays_strict(method, text, answer, valid, lenient):
    gen = ScriptedGenerator(lambda prompt: text if "last round" in prompt else "CONTINUE")
    ctx = LayerContext(max_rounds=3, moderator=gen, moderator_base=gen)
    rec = replay(build_method(method, ctx), [AGREE])[0]
    assert rec["rounds"] == 3 and rec["final_answer"] == answer
    last = rec["decisions"][-1]
    assert (last["answer"], last["valid"], last["lenient"], last["raw"]) == (answer, valid, lenient, text)
    assert rec["valid"][-1] is valid
    assert all(d["lenient"] is False for d in rec["decisions"][:-1])


def test_invalid_stop_before_the_last_round_still_continues():
    gen = ScriptedGenerator(lambda prompt: "STOP <answer>7</answer>.")  # also at the forced round
    rec = replay(build_method("moderator", LayerContext(max_rounds=3, moderator=gen)), [AGREE])[0]
    assert gen.calls == [1, 1, 1] and rec["rounds"] == 3
    assert [(d["stop"], d["answer"], d["valid"], d["lenient"]) for d in rec["decisions"]] == [
        (False, None, False, False),
        (False, None, False, False),
        (True, "7", False, True),
    ]


def test_stopping_only_never_uses_the_lenient_path():
    gen = ScriptedGenerator(lambda prompt: "STOP <answer>999</answer>.")
    rec = replay(build_method("stopping_only", LayerContext(max_rounds=3, moderator=gen)), [LATE])[0]
    assert rec["rounds"] == 3 and rec["final_answer"] in {"7", "6"}  # majority of the last round, not 999
    assert not any(d["lenient"] for d in rec["decisions"])


@pytest.mark.parametrize("text", [text for text, *_ in FINAL_CASES] + ["Both agents agree. <answer>(B)</answer>"])
def test_judge_and_moderator_read_final_outputs_the_same_way(text):
    gen = ScriptedGenerator(lambda prompt: text)
    judged = replay(build_method("judge", LayerContext(max_rounds=2, judge=gen)), [AGREE])[0]
    moderated = replay(build_method("adjudication_only", LayerContext(max_rounds=2, moderator=gen)), [AGREE])[0]
    assert judged["final_answer"] == moderated["final_answer"] == final_answer(text)
    assert judged["decisions"][-1]["lenient"] is False and judged["decisions"][-1]["valid"] is None


def test_lenient_final_answers_are_counted_per_method():
    gen = ScriptedGenerator(lambda prompt: "STOP <answer>7</answer>." if "Question late?" in prompt else "CONTINUE")
    records = replay(build_method("moderator", LayerContext(max_rounds=3, moderator=gen)), TRACES)
    metrics = method_metrics([{**r, "correct": False} for r in records])
    assert metrics["lenient_final_answers"] == 1 and metrics["moderator_calls"] == 15
    assert metrics["format_valid_rate"] == 12 / 15  # validity stays strict: the lenient answer's call is invalid
