"""The gate baseline (metamod.evaluate.gate): stop after round 0 on a confidence signal, else delegate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from metamod.errors import ConfigError
from metamod.evaluate.build import build_debaters
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.decision import LayerContext
from metamod.evaluate.methods import METHODS, build_method, gate_row
from metamod.evaluate.replay import replay, run_live
from metamod.llm.base import Generation, SamplingConfig
from metamod.rollout.debate import run_debates
from metamod.tasks import load_task
from metamod.tasks.voting import majority_answer
from tests.test_decision import TRACES, ScriptedGenerator, make_trace

ROOT = Path(__file__).resolve().parents[1]


def _by_id(traces, records):
    return {t["id"]: r for t, r in zip(traces, records, strict=True)}


class SampleScript:
    """A fake debater model for self-consistency: question ``Question <id>?`` gets the scripted sample texts
    (cycled over ``n``); records each batched call as ``(conversations, n)``."""

    name = "sample-script"
    context_length = None

    def __init__(self, samples: dict[str, list[str]]):
        self.samples = samples
        self.calls: list[tuple[int, int]] = []
        self.prompts: list[str] = []

    def chat(self, conversations, sampling: SamplingConfig):
        self.calls.append((len(conversations), sampling.n))
        out = []
        for conv in conversations:
            self.prompts.append(conv[-1]["content"])
            qid = re.search(r"Question (\w+)\?", conv[-1]["content"]).group(1)
            texts = self.samples[qid]
            out += [
                Generation(text=texts[j % len(texts)], prompt_tokens=7, completion_tokens=3) for j in range(sampling.n)
            ]
        return out

    def count_tokens(self, conversation):
        return 7


def _sc_context(agent, **kw):
    return LayerContext(max_rounds=3, agent=agent, agent_sampling=SamplingConfig(temperature=0.7, max_tokens=32), **kw)


# --------------------------------------------------------------------------------------------- the rows


def test_gate_rows_follow_their_delegate():
    gates = {n: s for n, s in METHODS.items() if n.startswith("gate_")}
    assert set(gates) == {
        "gate_agree_majority", "gate_share_majority", "gate_sc_majority", "gate_share_consensus", "gate_sc_consensus",
        "gate_agree_moderator", "gate_share_moderator", "gate_sc_moderator",
    }  # fmt: skip
    assert all(s.replays_debates for s in gates.values())
    assert gates["gate_agree_majority"].label == "Gate (round-0 agreement) -> MAD (Majority Voting)"
    assert gates["gate_sc_moderator"].label == "Gate (self-consistency) -> Meta-Moderator"
    assert gates["gate_sc_moderator"].needs == ("moderator", "agent") and gates["gate_share_majority"].needs == ()
    assert gates["gate_sc_majority"].knobs == ("sc_samples",) and gates["gate_share_majority"].knobs == ()
    custom = gate_row("my_gate", "vote_share", "adjudication_only")
    assert custom.needs == ("moderator",) and custom.knobs == ("fixed_rounds",)
    with pytest.raises(ConfigError, match=r"then must be one of the debate rows .*'single_cot'"):
        gate_row("bad", "agree", "single_cot")
    with pytest.raises(ConfigError, match="signal must be one of"):
        gate_row("bad", "confidence", "majority_vote")


def test_self_consistency_rows_load_the_debater_model_even_with_reused_traces(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(make_trace("q", [["1", "2"]])) + "\n")
    llm = dict(debaters="hf", debater_model="some/model", traces=str(traces))
    assert EvalConfig(methods=["gate_sc_majority"], **llm).needs() == {"agent"}
    assert EvalConfig(methods=["gate_share_majority"], **llm).needs() == set()
    assert EvalConfig(methods=["gate_sc_moderator"]).needs() == {"moderator"}  # simulated: the debaters sample
    with pytest.raises(ValueError, match="needs a agent generator"):
        build_method("gate_sc_majority", LayerContext(max_rounds=3))


# --------------------------------------------------------------------------------------------- round-0 signals


def test_agree_gate_stops_on_round0_agreement_else_majority_vote():
    gate = _by_id(TRACES, replay(build_method("gate_agree_majority", LayerContext(max_rounds=3)), TRACES))
    majority = _by_id(TRACES, replay(build_method("majority_vote", LayerContext(max_rounds=3)), TRACES))
    # AGREE (7, 7) and NEVER (5, 5) agree at round 0: stop there with the common answer, right or wrong
    assert (gate["agree"]["stop_round"], gate["agree"]["final_answer"]) == (0, "7")
    assert (gate["never"]["stop_round"], gate["never"]["final_answer"]) == (0, "5")
    assert gate["agree"]["decisions"][0]["details"]["gate"] == {
        "signal": "agree", "value": 1.0, "threshold": 1.0, "fired": True,
    }  # fmt: skip
    # the others debate on: exactly majority vote's records from round 1 on
    for qid in ("late", "tie", "junk"):
        assert gate[qid]["stop_round"] == 2
        assert gate[qid]["final_answer"] == majority[qid]["final_answer"]
        assert gate[qid]["tokens"] == majority[qid]["tokens"]
        assert gate[qid]["decisions"][0]["details"]["gate"]["fired"] is False
        assert [d.get("details") for d in gate[qid]["decisions"][1:]] == [None, None]
    assert gate["junk"]["decisions"][0]["details"]["gate"]["value"] == 0.5  # one of two answers parsable
    # cost: a stopped debate pays its debaters' round 0 only (2 agents x 10 prompt, 2 x 5 completion)
    assert gate["agree"]["tokens"] == {
        "debater_prompt": 20, "debater_completion": 10, "moderator_prompt": 0, "moderator_completion": 0,
    }  # fmt: skip
    json.dumps(list(gate.values()))  # records stay JSON-ready


THREE = [
    make_trace("two", [["7", "7", "8"], ["8", "8", "8"]]),
    make_trace("one", [["7", None, None], ["7", "7", "7"]]),
    make_trace("all", [["9", "9.0", "9"], ["8", "8", "8"]]),
]


@pytest.mark.parametrize(
    ("threshold", "stopped"),
    [(None, {"two", "all"}), (2 / 3, {"two", "all"}), (0.67, {"all"}), (1.0, {"all"}), (1 / 3, {"two", "one", "all"})],
)
def test_vote_share_gate_threshold_edges(threshold, stopped):
    options = {"gate_share_majority": {} if threshold is None else {"threshold": threshold}}
    layer = build_method("gate_share_majority", LayerContext(max_rounds=2, method_options=options))
    out = _by_id(THREE, replay(layer, THREE))
    assert {qid for qid, r in out.items() if r["stop_round"] == 0} == stopped  # share == threshold stops
    values = {qid: r["decisions"][0]["details"]["gate"]["value"] for qid, r in out.items()}
    assert values == {"two": 2 / 3, "one": 1 / 3, "all": 1.0}
    assert out["two"]["final_answer"] == ("7" if "two" in stopped else "8")
    assert out["all"]["final_answer"] == "9"
    assert all(r["decisions"][0]["details"]["gate"]["threshold"] == (threshold or 0.6) for r in out.values())


# --------------------------------------------------------------------------------------------- the delegate


def test_moderator_delegate_is_never_asked_at_round0():
    moderator = ScriptedGenerator(lambda text: "CONTINUE")
    layer = build_method("gate_agree_moderator", LayerContext(max_rounds=3, moderator=moderator))
    out = _by_id(TRACES, replay(layer, TRACES))
    # round 0: no moderator call (two debates stop on agreement); rounds 1 and 2: the three others, one call each
    assert moderator.calls == [3, 3]
    assert [out[q]["stop_round"] for q in ("agree", "never", "late", "tie", "junk")] == [0, 0, 2, 2, 2]
    assert out["late"]["decisions"][1]["raw"] == "CONTINUE" and out["late"]["decisions"][1]["valid"] is True
    assert out["late"]["tokens"]["moderator_prompt"] == 2 * 7  # the moderator's two calls are the layer's cost
    with pytest.raises(ValueError, match="needs a moderator generator"):
        build_method("gate_agree_moderator", LayerContext(max_rounds=3))


def test_consensus_delegate_stops_on_later_agreement():
    late = [make_trace("late", [["7", None, None], ["7", "7", "7"], ["8", "8", "8"]])]
    gate = replay(build_method("gate_share_consensus", LayerContext(max_rounds=3)), late)[0]
    majority = replay(build_method("gate_share_majority", LayerContext(max_rounds=3)), late)[0]
    # share 1/3 < 0.6 at round 0: consensus stops at round 1 where all three say 7; majority vote runs on to 8
    assert (gate["stop_round"], gate["final_answer"]) == (1, "7")
    assert (majority["stop_round"], majority["final_answer"]) == (2, "8")


# --------------------------------------------------------------------------------------------- self-consistency


SC_TRACES = [
    make_trace("a", [["5", "6"], ["5", "6"], ["5", "6"]]),
    make_trace("b", [["7", "7"], ["7", "7"], ["7", "7"]]),
]
SC_SAMPLES = {
    "a": ["<answer>7</answer>"] * 4 + ["<answer>8</answer>"],  # share 0.8: stops with 7 (not a debater answer)
    "b": ["<answer>7</answer>"] * 3 + ["<answer>3</answer>", "no idea"],  # share 0.6: debates on
}


def test_self_consistency_gate_samples_one_agent_in_one_call_and_books_the_cost():
    agent = SampleScript(SC_SAMPLES)
    layer = build_method("gate_sc_majority", _sc_context(agent, sc_samples=5))
    out = _by_id(SC_TRACES, replay(layer, SC_TRACES))
    assert agent.calls == [(2, 5)]  # ONE call, n = k, at round 0 only
    assert all("Question" in p and "step by step" in p.lower() for p in agent.prompts)  # the single_cot template
    a, b = out["a"], out["b"]
    assert (a["stop_round"], a["final_answer"]) == (0, "7")
    assert a["decisions"][0]["details"]["gate"] == {
        "signal": "self_consistency", "value": 0.8, "threshold": 0.8, "fired": True,
        "samples": ["7", "7", "7", "7", "8"],
    }  # fmt: skip
    assert "7" in a["seen_answers"] and a["seen_answers"][:2] == ["5", "6"]  # the samples count for coverage
    assert a["tokens"]["moderator_prompt"] == 5 * 7 and a["tokens"]["moderator_completion"] == 5 * 3
    assert (b["stop_round"], b["decisions"][0]["details"]["gate"]["value"]) == (2, 0.6)
    assert b["tokens"]["moderator_prompt"] == 5 * 7  # the samples are paid whether the gate fires or not
    assert b["final_answer"] == "7"  # majority vote at T_max


def test_self_consistency_samples_and_threshold_options():
    agent = SampleScript(SC_SAMPLES)
    options = {"gate_sc_majority": {"samples": 3, "threshold": 1.0}}
    out = _by_id(
        SC_TRACES, replay(build_method("gate_sc_majority", _sc_context(agent, method_options=options)), SC_TRACES)
    )
    assert agent.calls == [(2, 3)]
    assert out["a"]["stop_round"] == 0 and out["b"]["stop_round"] == 0  # the first 3 samples agree for both
    assert out["a"]["tokens"]["moderator_completion"] == 3 * 3


def test_self_consistency_gate_reuses_single_cot_sc_in_the_simulated_world():
    config = EvalConfig(methods=["gate_sc_majority"], max_rounds=3, num_agents=2, sc_samples=5)
    debaters = build_debaters(config, 0)
    examples = list(load_task("arith", split="test", num_examples=30, seed=3).examples())
    traces = list(run_debates(examples, debaters, max_rounds=3, progress=False))
    context = LayerContext(max_rounds=3, simulated_agent=debaters[0], sc_samples=5)
    gate = replay(build_method("gate_sc_majority", context), traces)
    sc = build_method("single_cot_sc", context).run(examples)
    for ex, record, outcome in zip(examples, gate, sc, strict=True):
        info = record["decisions"][0]["details"]["gate"]
        assert info["samples"] == outcome.answers  # the very samples single_cot_sc draws
        assert record["tokens"]["moderator_completion"] == outcome.completion_tokens
        if info["fired"]:
            assert (
                record["final_answer"]
                == outcome.answer
                == majority_answer(outcome.answers, kind=ex.kind, seed=0, question_id=ex.id)
            )
    fired = [r["decisions"][0]["details"]["gate"]["fired"] for r in gate]
    assert any(fired) and not all(fired)


@pytest.mark.parametrize("method", ["gate_agree_moderator", "gate_sc_consensus"])
def test_replay_equals_live(method):
    from tests.test_eval import AgreementModerator

    examples = list(load_task("arith", split="test", num_examples=30, seed=3).examples())
    config = EvalConfig(methods=[method], max_rounds=4, num_agents=2)
    debaters = build_debaters(config, 1)
    fake = AgreementModerator()
    ctx = LayerContext(max_rounds=4, seed=1, moderator=fake, simulated_agent=debaters[0])
    shared = list(run_debates(examples, debaters, max_rounds=4, progress=False))
    replayed = replay(build_method(method, ctx), shared)
    live, live_traces = run_live(build_method(method, ctx), examples, debaters, max_rounds=4, progress=False)
    assert replayed == live
    rounds = {r["rounds"] for r in live}
    assert 1 in rounds and max(rounds) > 1  # the gate stops some debates at round 0, the delegate decides others
    for record, trace in zip(live, live_traces, strict=True):
        assert len(trace["rounds"]) == record["rounds"]


# --------------------------------------------------------------------------------------------- bad settings


@pytest.mark.parametrize(
    ("method", "options", "match"),
    [
        ("gate_share_majority", {"threshold": 0}, r"threshold must be in \(0, 1\], got 0"),
        ("gate_share_majority", {"threshold": 1.5}, r"threshold must be in \(0, 1\], got 1.5"),
        ("gate_share_majority", {"threshold": "high"}, "threshold must be a number"),
        ("gate_share_majority", {"samples": 3}, "samples applies only to signal 'self_consistency'"),
        ("gate_agree_majority", {"threshold": 0.5}, "threshold does not apply to signal 'agree'"),
        ("gate_sc_majority", {"samples": 0}, "samples must be an integer >= 1, got 0"),
        ("gate_sc_majority", {"k": 3}, r"unknown setting\(s\) \['k'\]; valid settings: \['threshold', 'samples'\]"),
    ],
)
def test_bad_options_are_one_line_config_errors(method, options, match):
    context = LayerContext(max_rounds=3, simulated_agent=object(), method_options={method: options})
    with pytest.raises(ConfigError, match=match) as err:
        build_method(method, context)
    assert f"method_options[{method!r}]" in str(err.value) and "\n" not in str(err.value)


def test_one_round_budget_is_refused():
    with pytest.raises(ConfigError, match="needs|budget must be >= 2 rounds"):
        build_method("gate_agree_majority", LayerContext(max_rounds=1))


# --------------------------------------------------------------------------------------------- end to end


def test_gate_rows_from_the_cli_on_the_simulated_config(tmp_path, capsys):
    from metamod.cli import main

    out = tmp_path / "ev"
    methods = ["majority_vote", "single_cot_sc", "gate_agree_majority", "gate_share_consensus", "gate_sc_majority"]
    argv = ["eval", "--config", str(ROOT / "configs/eval/sim_debate.yaml"), "--methods", *methods,
            "--limit", "12", "--output_dir", str(out), "--plots", "false"]  # fmt: skip
    assert main(argv) == 0
    assert "Gate (self-consistency) -> MAD (Majority Voting)" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())["results"]["arith"]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and set(results) == set(methods)
    for method in methods[2:]:
        records = [row["methods"][method] for row in rows]
        gate = [r["decisions"][0]["details"]["gate"] for r in records]
        assert all((g["fired"]) == (r["stop_round"] == 0) for g, r in zip(gate, records, strict=True))
        assert results[method]["accuracy"] == pytest.approx(sum(r["correct"] for r in records) / 12)
        stopped = [r["correct"] for g, r in zip(gate, records, strict=True) if g["fired"]]
        assert results[method]["gate_stops"] == len(stopped) and 0 < len(stopped) < 12
        assert results[method]["gate_stop_accuracy"] == pytest.approx(sum(stopped) / len(stopped))
        assert results[method]["gate_signal_mean"] == pytest.approx(sum(g["value"] for g in gate) / 12)
    assert "gate_stops" not in results["majority_vote"]
    # the self-consistency gate pays single_cot_sc's samples on every question, and the debate's rounds on top
    for row in rows:
        sc, gated = row["methods"]["single_cot_sc"], row["methods"]["gate_sc_majority"]
        assert gated["tokens"]["moderator_completion"] == sc["tokens"]["debater_completion"]
        assert gated["decisions"][0]["details"]["gate"]["samples"] == sc["seen_answers"]
