"""Calibrated stopping: P(STOP) on every moderator decision, the threshold layer, and the replayed sweep.

A hand-built moderator returns fixed top-k log-probs per (question, round), so the layer's decisions and the sweep's
are known exactly; the tiny hf model runs the same comparison end to end through ``evaluate``.
"""

from __future__ import annotations

import math
import re

import pytest

from metamod.errors import ConfigError
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.decision import LayerContext
from metamod.evaluate.methods import build_method
from metamod.evaluate.replay import replay
from metamod.evaluate.stop_curve import (
    ask_every_round,
    curve_points,
    reliability,
    replay_threshold,
    stop_curve_results,
    threshold_grid,
)
from metamod.llm.base import Generation
from metamod.rollout.traces import example_trace

#: per question, per round: (P(STOP), output text)
PLAN = {
    "a": [(0.9, "STOP <answer>4</answer>"), (0.2, "CONTINUE"), (0.95, "STOP <answer>4</answer>")],
    "b": [(0.33, "CONTINUE"), (0.7, "CONTINUE"), (0.99, "STOP <answer>5</answer>")],
    "c": [(0.6, "STOP <answer>"), (0.8, "STOP <answer>9</answer>"), (0.1, "CONTINUE")],  # an invalid STOP first
    "d": [(None, "I think so"), (0.4, "STOP <answer>7</answer>"), (0.5, "STOP <answer>7</answer>")],
}
ANSWERS = {"a": ("4", "5"), "b": ("5", "5"), "c": ("8", "8"), "d": ("7", "1")}


class PlannedModerator:
    """Answers each moderator prompt from :data:`PLAN`, with the P(STOP) as top-2 log-probs of its first token."""

    name = "planned"
    context_length = None

    def __init__(self, with_top: bool = True):
        self.with_top = with_top
        self.calls = 0

    def chat(self, conversations, sampling):
        self.calls += 1
        out = []
        for conversation in conversations:
            text = conversation[-1]["content"]
            qid = re.search(r"question (\w)", text).group(1)
            t = int(re.search(r"round (\d)", text).group(1))
            p, raw = PLAN[qid][t]
            g = Generation(raw, prompt_tokens=10, completion_tokens=3)
            if self.with_top and sampling.top_logprobs:
                first = raw.split()[0]
                top = {" ST": math.log(p), "CONT": math.log(1 - p)} if p not in (None, 1.0) else {first: -0.01}
                g.tokens, g.top_logprobs = [first, " x"], [top, {" x": -0.1}]
            out.append(g)
        return out

    def count_tokens(self, conversation):
        return 10


def _traces():
    """Three rounds per question of :data:`ANSWERS`, each response naming its round (the planned moderator's key)."""
    import copy

    traces = []
    for qid, (x, y) in ANSWERS.items():
        trace = example_trace(qid, answers=(x, y), gold=x)
        trace["question"] = f"question {qid}?"
        trace["rounds"] = [copy.deepcopy(trace["rounds"][0]) for _ in range(3)]
        for t, rnd in enumerate(trace["rounds"]):
            rnd["round"] = t
            for r in rnd["responses"]:
                r["text"] = f"round {t}: <answer>{r['answer']}</answer>"
            rnd["eta"] = int(qid in "ab")
        trace["num_rounds"] = 3
        traces.append(trace)
    return traces


def _layer(name="moderator_threshold", tau=None, generator=None, max_rounds=3):
    options = {name: {"stop_threshold": tau}} if tau is not None else {}
    context = LayerContext(max_rounds=max_rounds, moderator=generator or PlannedModerator(), method_options=options)
    return build_method(name, context)


def _grade(answer, qid):
    return answer is not None and answer == ANSWERS[qid][0]


def test_planned_moderator_and_the_trace_helper_fit():
    trace = _traces()[0]
    assert "question a?" in trace["question"] and len(trace["rounds"]) == 3


@pytest.mark.parametrize("tau", [0.0, 0.25, 0.5, 0.65, 0.9, 1.0])
def test_the_sweep_reproduces_the_deployed_threshold_layer(tau):
    """At every threshold (0.5 included) the replayed sweep stops where the layer stops, with the same answer."""
    traces = _traces()
    live = replay(_layer(tau=tau), traces)
    steps = ask_every_round(_layer(name="moderator"), traces, _grade, seed=0)
    for trace, record, question_steps in zip(traces, live, steps, strict=True):
        stop, answer, _correct, source, tokens = replay_threshold(question_steps, tau)
        assert (stop, answer) == (record["stop_round"], record["final_answer"]), (trace["id"], tau)
        assert source == record["decisions"][-1]["answer_source"]
        assert tokens == sum(record["tokens"].values())


def test_threshold_layer_answers_and_sources():
    a, b, c, d = replay(_layer(tau=0.5), _traces())
    assert (a["stop_round"], a["final_answer"], a["decisions"][-1]["answer_source"]) == (0, "4", "moderator")
    # CONTINUE said with P(STOP) 0.7 >= 0.5: stop with the round's majority
    assert (b["stop_round"], b["decisions"][-1]["answer_source"]) == (1, "majority")
    assert b["final_answer"] == "5"
    # an invalid STOP (no closed span) with P(STOP) 0.6: majority of round 0
    assert (c["stop_round"], c["final_answer"], c["decisions"][-1]["answer_source"]) == (0, "8", "majority")
    # P(STOP) unreadable at round 0 (None: continues), 0.4 < 0.5 at round 1, forced at round 2
    assert [x["p_stop"] for x in d["decisions"]] == [None, pytest.approx(0.4), pytest.approx(0.5)]
    assert (d["stop_round"], d["final_answer"], d["decisions"][-1]["answer_source"]) == (2, "7", "forced")


def test_moderator_rows_record_p_stop_and_heuristic_rows_do_not():
    record = replay(_layer(name="moderator"), _traces())[0]
    assert record["decisions"][0]["p_stop"] == pytest.approx(0.9)
    assert "answer_source" not in record["decisions"][0]
    majority = replay(build_method("majority_vote", LayerContext(max_rounds=3)), _traces())[0]
    assert "p_stop" not in majority["decisions"][-1]


def test_threshold_layer_refuses_a_backend_without_top_logprobs_and_a_bad_tau():
    with pytest.raises(ConfigError, match="backend 'planned' returned none"):
        replay(_layer(generator=PlannedModerator(with_top=False)), _traces())
    with pytest.raises(ConfigError, match=r"stop_threshold must be in \[0, 1\]"):
        _layer(tau=1.5)
    with pytest.raises(ConfigError, match="unknown setting"):
        build_method(
            "moderator_threshold",
            LayerContext(max_rounds=3, moderator=PlannedModerator(), method_options={"moderator_threshold": {"t": 1}}),
        )


def test_curve_points_reliability_and_results():
    steps = ask_every_round(_layer(name="moderator"), _traces(), _grade, seed=0)
    lines = [{"task": "arith", "role": "moderator", "id": t["id"], "seed": 0, "steps": s}
             for t, s in zip(_traces(), steps, strict=True)]  # fmt: skip
    points = {p["threshold"]: p for p in curve_points(lines, [0.0, 0.5, 1.0])}
    # tau 0: every readable P(STOP) stops at round 0 (d's is unreadable: stops at round 1)
    assert points[0.0]["mean_rounds"] == pytest.approx((1 + 1 + 1 + 2) / 4)
    assert points[1.0]["mean_rounds"] == 3 and points[1.0]["forced_answers"] == 4
    # forced answers at round 2: a "4" (right), b "5" (right: gold is x), c none (CONTINUE), d "7" (right)
    assert points[1.0]["accuracy"] == pytest.approx(3 / 4)
    assert points[0.5]["accuracy"] == 1.0  # a "4", b the majority "5", c the majority "8", d forced "7"
    rel = reliability(lines)
    assert rel["p_stop_missing"] == 1 and rel["steps"] == 7
    assert sum(b["count"] for b in rel["bins"]) == 7 and 0 <= rel["ece"] <= 1
    rows = [{"task": "arith", "methods": {"moderator": {"correct": True, "rounds": 1, "tokens": {"a": 5}}}}]
    result = stop_curve_results(lines, rows, ["moderator", "moderator_threshold"])["arith"]["moderator"]
    assert result["methods"] == ["moderator", "moderator_threshold"] and result["questions"] == 4
    assert result["live"] == {"moderator": {"accuracy": 1.0, "mean_rounds": 1.0, "mean_tokens": 5.0}}
    assert 0.33 in [p["threshold"] for p in result["points"]]  # observed values join the grid
    assert threshold_grid([None])[-1] == 1.0


def test_stop_curve_config_checks(tmp_path):
    from metamod.evaluate.harness import check_eval

    base = dict(tasks=["arith"], limit=2, output_dir=str(tmp_path / "x"), stop_curve=True)
    with pytest.raises(ConfigError, match="moderator-type method"):
        check_eval(EvalConfig(methods=["majority_vote"], **base))
    with pytest.raises(ConfigError, match="mode: replay"):
        check_eval(EvalConfig(methods=["majority_vote", "moderator_prompted"], mode="live", moderator_base="m", **base))


def test_moderator_top_logprobs_zero_asks_for_none_and_the_threshold_tools_refuse(tmp_path):
    """A server that rejects log-probs: moderator_top_logprobs: 0 asks for none, p_stop is null, and the rows and
    the curve that need P(STOP) refuse instead of running blind."""
    from dataclasses import replace

    from metamod.evaluate.harness import check_eval

    context = LayerContext(max_rounds=3, moderator=PlannedModerator())
    context.moderator_sampling = replace(context.moderator_sampling, top_logprobs=0)
    record = replay(build_method("moderator", context), _traces())[0]
    assert record["decisions"][0]["p_stop"] is None and record["decisions"][0]["stop"] is True
    with pytest.raises(ConfigError, match="returned none"):
        replay(build_method("moderator_threshold", context), _traces())
    base = dict(tasks=["arith"], limit=2, output_dir=str(tmp_path / "x"), stop_curve=True, moderator_base="m")
    with pytest.raises(ConfigError, match="moderator_top_logprobs: 0"):
        check_eval(EvalConfig(methods=["moderator_prompted"], moderator_top_logprobs=0, **base))
    with pytest.raises(ConfigError, match=r"moderator_top_logprobs must be in \[0, 20\]"):
        EvalConfig(tasks=["arith"], methods=["majority_vote"], moderator_top_logprobs=21)


# --------------------------------------------------------------------------------------------- end to end


def test_tiny_model_sweep_reproduces_the_threshold_row_at_one_half(tmp_path, tiny_model_dir):
    """The tiny hf model as moderator: the CLI's stop curve at 0.5 gives the deployed row's stop rounds and answers,
    and P(STOP) of every moderator decision equals the sweep's for the same round."""
    from metamod.cli import main as cli
    from metamod.evaluate.cells import read_samples
    from metamod.files import read_jsonl

    out = tmp_path / "ev"
    argv = ["eval", "--tasks", "arith", "--limit", "6", "--max_rounds", "3", "--seeds", "0",
            "--methods", "majority_vote", "moderator", "moderator_threshold",
            "--moderator", str(tiny_model_dir), "--moderator_backend_options", '{"device": "cpu"}',
            "--moderator_max_tokens", "6", "--stop_curve", "true", "--plots", "true",
            "--output_dir", str(out)]  # fmt: skip
    assert cli(argv) == 0
    samples = {r["id"]: r["methods"] for r in read_samples(out / "samples.jsonl")}
    lines = {ln["id"]: ln for ln in read_jsonl(out / "stop-curve.jsonl")}
    assert set(lines) == set(samples) and len(lines) == 6
    for qid, methods in samples.items():
        steps = lines[qid]["steps"]
        assert len(steps) == 3
        stop, answer, correct, source, tokens = replay_threshold(steps, 0.5)
        record = methods["moderator_threshold"]
        assert (stop, answer, correct) == (record["stop_round"], record["final_answer"], record["correct"])
        assert source == record["decisions"][-1]["answer_source"]
        for decision in methods["moderator"]["decisions"]:
            step = steps[decision["round"]]
            assert decision["raw"] == step["raw"]
            assert (decision["p_stop"] is None) == (step["p_stop"] is None)
            if step["p_stop"] is not None:
                assert decision["p_stop"] == pytest.approx(step["p_stop"], abs=1e-5)
    import json

    document = json.loads((out / "results.json").read_text())
    curve = document["stop_curve"]["arith"]["moderator"]
    assert curve["questions"] == 6 and set(curve["live"]) == {"moderator", "moderator_threshold"}
    assert (out / "plots" / "stop_curve.png").stat().st_size > 0
    assert (out / "plots" / "stop_reliability.png").stat().st_size > 0
    # resumable: a rerun asks nothing again (the lines are complete and fingerprinted)
    assert cli(argv) == 0
    assert len(read_jsonl(out / "stop-curve.jsonl")) == 6


# --------------------------------------------------------------------------------------------- MRO Controller


def test_mro_controller_sweep_counts_what_the_record_cannot_show():
    from metamod.evaluate.mro.stopping import controller_stop_details, controller_stopping, stop_sweep

    def record(action, p, eta, answer_correct):
        return {"eta": eta, "controller": {"action": action, "p_stop": p, "answer_correct": answer_correct}}

    # q1: Restart (p .3, candidate wrong), then Patch (p .8, right); q2: forced at the budget after two Restarts
    q1 = controller_stop_details([record(3, 0.3, 0, None), record(2, 0.8, 0, 1)])
    q2 = controller_stop_details([record(3, 0.6, 1, None), record(3, None, 1, None)])
    assert q1 == {"p_stop": [0.3, 0.8], "stop_correct": [0, 1]}
    assert q2["stop_correct"] == [1, 1] and controller_stop_details([{"eta": 1, "controller": {"action": 1}}]) == {}
    q1.update(eta=[0, 0], forced_last=False, iterations=2)
    q2.update(eta=[1, 1], forced_last=True, iterations=2)
    points = {p["threshold"]: p for p in stop_sweep([q1, q2], [0.2, 0.5, 0.7, 0.9])}
    assert points[0.2] == {"threshold": 0.2, "covered": 2, "beyond_record": 0, "accuracy": 0.5, "mean_iterations": 1}
    assert (points[0.5]["accuracy"], points[0.5]["mean_iterations"]) == (1.0, 1.5)  # q1 at 2, q2 at 1 (eta 1)
    assert (points[0.7]["covered"], points[0.7]["mean_iterations"]) == (2, 2)  # q2 runs to its forced end
    # above 0.8 q1 would go on after the live Controller's STOP: not in the record
    assert (points[0.9]["covered"], points[0.9]["beyond_record"], points[0.9]["accuracy"]) == (1, 1, 1.0)
    out = controller_stopping([q1, q2])
    rel = out["controller_reliability"]
    assert rel["steps"] == 3 and rel["p_stop_missing"] == 0  # q2's forced iteration is no decision
    assert [b["count"] for b in rel["bins"]] == [1, 1, 1]
    assert controller_stopping([{"iterations": 1}]) == {}


def test_mro_moderator_controller_records_p_stop(tmp_path, tiny_model_dir):
    """The tiny model as a prompted moderator Controller over simulated Reasoner / Monitor."""
    from metamod.evaluate.cells import read_samples
    from metamod.evaluate.harness import evaluate
    from metamod.files import read_jsonl

    config = EvalConfig(
        methods=["mro", "mro_prompted_moderator"],
        limit=6,
        max_iterations=2,
        moderator_base=str(tiny_model_dir),
        moderator_backend_options={"device": "cpu"},
        moderator_max_tokens=6,
        output_dir=str(tmp_path / "eval"),
        plots=False,
    )
    document = evaluate(config)
    traces = [
        t for t in read_jsonl(tmp_path / "eval" / "method-traces.jsonl") if t["method"] == "mro_prompted_moderator"
    ]
    assert len(traces) == 6
    rows = {r["id"]: r["methods"] for r in read_samples(tmp_path / "eval" / "samples.jsonl")}
    for line in traces:
        history = line["trace"]["history"]
        assert all("p_stop" in h["controller"] for h in history)
        details = rows[line["id"]]["mro_prompted_moderator"]["details"]["mro"]
        assert details["p_stop"] == [h["controller"]["p_stop"] for h in history]
        assert "p_stop" not in rows[line["id"]]["mro"]["details"]["mro"]  # the simulated Controller has none
    result = document["results"]["arith"]
    assert "controller_stop_curve" in result["mro_prompted_moderator"]
    assert "controller_stop_curve" not in result["mro"]
    assert result["mro_prompted_moderator"]["controller_stop_curve"][0]["threshold"] == 0.0
