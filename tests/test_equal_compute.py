"""Equal compute and per-round flips (metamod.evaluate.frontier, metamod.evaluate.flips): hand-built records whose
counts, vote@k accuracies, interpolation weights and McNemar counts are known, and one simulated evaluation."""

from __future__ import annotations

import pytest

from metamod.evaluate.config import EvalConfig
from metamod.evaluate.flips import debate_flips, per_round_answers
from metamod.evaluate.frontier import at_budget, budget_matched, cot_sc_curve, frontier_points, majority_round_curve
from metamod.evaluate.harness import evaluate
from metamod.evaluate.metrics import task_metrics


def _row(qid: str, methods: dict, *, seed: int = 0, rounds: list | None = None) -> dict:
    return {"task": "arith", "seed": seed, "id": qid, "gold": "4", "kind": "math", "choices": None,
            "rounds": rounds or [], "methods": methods}  # fmt: skip


def _debate(stop: int, rounds: list[list[str | None]], correct: bool) -> dict:
    return {"stop_round": stop, "rounds": stop + 1, "seen_answers": [a for r in rounds for a in r], "correct": correct}


# ---------------------------------------------------------------------------------------------- flips


def _flip_rows() -> list[dict]:
    """Three agents, gold 4. Round majorities never tie, so the seeded tie rule plays no part."""
    return [
        # a: the majority goes wrong -> right at round 1; agent 0 right -> wrong and agent 2 wrong -> right at round 2
        _row(
            "a",
            {
                "majority_vote": _debate(2, [["4", "5", "5"], ["4", "4", "5"], ["5", "4", "4"]], True),
                "consensus": _debate(0, [["4", "5", "5"]], True),
                "single_cot": {"stop_round": None, "seen_answers": ["4"], "correct": True},
            },
        ),  # fmt: skip
        # b: agents 0 and 1 lose the right answer at round 1 (None is unparsable: wrong); an error it had on the table
        _row("b", {"majority_vote": _debate(1, [["4", "4", None], [None, None, "5"]], False)}),
        # c: never right, stopped at round 0
        _row("c", {"majority_vote": _debate(0, [["5", "5", "5"]], False)}),
        # d: right at rounds 0 and 1, agents 0 and 1 go wrong at round 2: a correct answer still on the table at 2
        _row("d", {"majority_vote": _debate(2, [["4", "4", "4"], ["4", "4", "4"], ["5", "5", "4"]], False)}),
    ]


def test_flip_counts_on_a_hand_built_record_set():
    flips = debate_flips(_flip_rows(), ["single_cot", "majority_vote", "consensus"])
    assert set(flips) == {"majority_vote", "consensus"}  # single_cot is no debate method
    first, second = flips["majority_vote"]["rounds"]
    assert first == {
        "round": 1,
        "debates": 3,  # a, b, d (c stopped at round 0)
        "agent_correct_to_wrong": [1, 1, 0],
        "agent_wrong_to_correct": [0, 1, 0],
        "correct_to_wrong": 2,
        "wrong_to_correct": 1,
        "majority_correct_to_wrong": 1,
        "majority_wrong_to_correct": 1,
    }
    assert second == {
        "round": 2,
        "debates": 2,  # a, d
        "agent_correct_to_wrong": [2, 1, 0],
        "agent_wrong_to_correct": [0, 0, 1],
        "correct_to_wrong": 3,
        "wrong_to_correct": 1,
        "majority_correct_to_wrong": 1,
        "majority_wrong_to_correct": 0,
    }
    assert flips["majority_vote"]["final_errors"] == 3
    assert flips["majority_vote"]["final_errors_covered"] == 2  # b and d; c never had 4
    assert flips["majority_vote"]["last_covered_round"] == {"0": 1, "2": 1}
    assert flips["consensus"] == {"rounds": [], "final_errors": 0, "final_errors_covered": 0, "last_covered_round": {}}


def test_seen_answers_split_into_rounds_or_not_at_all():
    assert per_round_answers({"stop_round": 2, "seen_answers": list("abcdef")}) == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert per_round_answers({"stop_round": 1, "seen_answers": list("abc")}) is None
    assert per_round_answers({"stop_round": None, "seen_answers": ["a"]}) is None


# ---------------------------------------------------------------------------------------------- budget matching


def _sc(answers: list[str | None], samples: list[int] | None) -> dict:
    record = {"stop_round": None, "rounds": None, "seen_answers": answers, "correct": False, "covered": False,
              "tokens": {"debater_prompt": 10 * len(answers), "debater_completion": 60}}  # fmt: skip
    if samples is not None:
        record["tokens"]["debater_completion"] = sum(samples)
        record["details"] = {"sample_completion_tokens": samples}
    return record


def _flat(correct: bool, prompt: int, completion: int) -> dict:
    return {"stop_round": None, "rounds": None, "seen_answers": [], "correct": correct, "covered": correct,
            "tokens": {"debater_prompt": prompt, "debater_completion": completion}}  # fmt: skip


def _budget_rows(recorded: bool = True) -> list[dict]:
    """Gold 4, K = 3 samples (no vote at any k ties); 10 prompt tokens per sample.

    vote@k correct: q1 [4,4,5] 1 1 1; q2 [5,5,4] 0 0 0; q3 [None,4,4] 0 1 1; q4 [None,None,4] 0 0 1
    -> accuracy 0.25, 0.5, 0.75. Completion cost at k: (10+10+20+0)/4 = 10, (30+20+40+10)/4 = 25, 210/4 = 52.5;
    total: + 10 k -> 20, 45, 82.5.
    """
    samples = {"q1": [10, 20, 30], "q2": [10, 10, 10], "q3": [20, 20, 20], "q4": [0, 10, 50]}
    answers = {"q1": ["4", "4", "5"], "q2": ["5", "5", "4"], "q3": [None, "4", "4"], "q4": [None, None, "4"]}
    mod_correct = {"q1": True, "q2": True, "q3": False, "q4": False}
    rows = []
    for qid in answers:
        methods = {
            "single_cot_sc": _sc(answers[qid], samples[qid] if recorded else None),
            "moderator": _flat(mod_correct[qid], 20, 10),  # total 30, completion 10
            "judge": _flat(True, 90, 10),  # total 100: above CoT-SC at k = 3
            "single_naive": _flat(False, 3, 2),  # total 5: below k = 1
        }
        rows.append(_row(qid, methods))
    return rows


def test_vote_at_k_accuracy_and_costs():
    curve, correct = cot_sc_curve(_budget_rows())
    assert curve["points"] == [1, 2, 3]
    assert curve["accuracy"] == [0.25, 0.5, 0.75]
    assert curve["completion_tokens"] == [10, 25, 52.5]
    assert curve["total_tokens"] == [20, 45, 82.5]
    assert curve["per_sample_tokens"] == "recorded"
    assert correct[(0, "q3")] == [False, True, True] and correct[(0, "q4")] == [False, False, True]


def test_older_runs_split_completion_tokens_equally():
    curve, _ = cot_sc_curve(_budget_rows(recorded=False))
    assert curve["per_sample_tokens"] == "equal split"
    assert curve["completion_tokens"] == [20, 40, 60]  # 60 tokens over 3 samples per question
    assert curve["accuracy"] == [0.25, 0.5, 0.75]  # the votes do not depend on the token split


def test_a_memorys_tokens_count_at_every_k():
    record = _sc(["4", "4"], [3, 5])
    record["tokens"].update(memory_prompt=5, memory_completion=7)
    curve, _ = cot_sc_curve([_row("q", {"single_cot_sc": record})])
    assert curve["completion_tokens"] == [3 + 7, 8 + 7]
    assert curve["total_tokens"] == [10 + 3 + 12, 20 + 8 + 12]  # at k = K: every token of the record


def test_accuracy_at_a_methods_budget_interpolates_and_tests_both_bracketing_k():
    rows = _budget_rows()
    metrics, _ = task_metrics(rows, ["single_cot_sc", "moderator", "judge", "single_naive"], reference=None)
    matched = budget_matched(rows, metrics)["cot_sc"]["at_budget"]
    total = matched["moderator"]["total"]
    assert (total["lo"], total["hi"]) == (1, 2)
    assert total["weight"] == pytest.approx((30 - 20) / (45 - 20))
    assert total["accuracy"] == pytest.approx(0.6 * 0.25 + 0.4 * 0.5)
    assert total["method_accuracy"] == 0.5
    # moderator right on q1, q2; k = 1 right on q1 only; k = 2 right on q1, q3
    assert {k: total["tests"]["lo"][k] for k in ("n", "b", "c")} == {"n": 4, "b": 1, "c": 0}
    assert {k: total["tests"]["hi"][k] for k in ("n", "b", "c")} == {"n": 4, "b": 1, "c": 1}
    assert total["tests"]["hi"]["p_value"] == 1.0
    completion = matched["moderator"]["completion"]  # 10 tokens: exactly k = 1
    assert (completion["lo"], completion["hi"], completion["weight"], completion["accuracy"]) == (1, 1, 0.0, 0.25)
    above, below = matched["judge"]["total"], matched["single_naive"]["total"]
    assert above["accuracy"] is None and above["out_of_range"] == "above" and "above the curve at 3" in above["reason"]
    assert below["accuracy"] is None and below["out_of_range"] == "below" and "below the curve at 1" in below["reason"]
    assert "tests" not in above


def test_at_budget_edges():
    curve = {"total_tokens": [20.0, 45.0, 45.0, 82.5], "accuracy": [0.25, 0.5, 0.6, 0.75], "points": [1, 2, 3, 4]}
    assert at_budget(curve, 20.0)["lo"] == at_budget(curve, 20.0)["hi"] == 1
    assert at_budget(curve, 82.5)["accuracy"] == 0.75
    assert at_budget(curve, 45.0)["accuracy"] == 0.5  # the first point at that cost
    assert at_budget(curve, 63.75)["weight"] == pytest.approx(0.5)
    assert at_budget(curve, 63.75)["accuracy"] == pytest.approx(0.675)


def test_majority_after_t_rounds_curve():
    def rnd(answers, prompt, completion):
        return {"answers": answers, "prompt_tokens": prompt, "completion_tokens": completion}

    rows = [
        _row("a", {}, rounds=[rnd(["5", "5", "4"], 30, 10), rnd(["4", "4", "5"], 90, 20)]),
        _row("b", {}, rounds=[rnd(["4", "4", "4"], 50, 10), rnd([None, None, "4"], 70, 40)]),
    ]
    curve, correct = majority_round_curve(rows)
    assert curve["points"] == [1, 2]
    assert curve["accuracy"] == [0.5, 1.0]
    assert curve["total_tokens"] == [50, 160]  # (40 + 60) / 2, (150 + 170) / 2
    assert curve["completion_tokens"] == [10, 40]
    assert correct == {(0, "a"): [False, True], (0, "b"): [True, True]}


def test_frontier_flags_the_pareto_methods():
    def m(acc, total, completion):
        return {"n": 10, "accuracy": acc, "accuracy_ci_low": 0.0, "accuracy_ci_high": 1.0,
                "tokens_per_question": total, "completion_tokens_per_question": completion}  # fmt: skip

    points = frontier_points({"a": m(0.5, 100, 50), "b": m(0.7, 300, 40), "c": m(0.6, 400, 60)})
    assert [points[x]["pareto_total"] for x in "abc"] == [True, True, False]
    assert [points[x]["pareto_completion"] for x in "abc"] == [False, True, False]
    assert points["b"]["total_tokens"] == 300 and points["b"]["completion_tokens_stderr"] == 0.0


# ---------------------------------------------------------------------------------------------- end to end


def test_simulated_eval_reports_frontier_budget_and_flips(tmp_path):
    methods = ["single_cot", "single_cot_sc", "majority_vote", "consensus"]
    out = tmp_path / "out"
    doc = evaluate(
        EvalConfig(methods=methods, limit=16, output_dir=str(out), seeds=[0], plots=True, max_rounds=3, sc_samples=4)
    )
    results = doc["results"]["arith"]
    curve = doc["budget_matched"]["arith"]["cot_sc"]["curve"]
    # at k = K the curve is the method itself: its accuracy and its tokens (recorded per sample)
    assert curve["per_sample_tokens"] == "recorded" and curve["points"] == [1, 2, 3, 4]
    assert curve["accuracy"][-1] == results["single_cot_sc"]["accuracy"]
    assert curve["total_tokens"][-1] == pytest.approx(results["single_cot_sc"]["tokens_per_question"])
    assert curve["completion_tokens"][-1] == pytest.approx(results["single_cot_sc"]["completion_tokens_per_question"])
    # majority vote after all rounds is the majority_vote method
    rounds_curve = doc["budget_matched"]["arith"]["majority_after_round"]["curve"]
    assert rounds_curve["accuracy"][-1] == results["majority_vote"]["accuracy"]
    assert rounds_curve["total_tokens"][-1] == pytest.approx(results["majority_vote"]["tokens_per_question"])
    assert set(doc["frontier"]["arith"]) == set(methods)
    assert set(doc["flips"]["arith"]) == {"majority_vote", "consensus"}
    flips = doc["flips"]["arith"]["majority_vote"]
    assert [c["debates"] for c in flips["rounds"]] == [16, 16]
    assert flips["final_errors"] == round(16 * (1 - results["majority_vote"]["accuracy"]))
    assert flips["final_errors_covered"] == results["majority_vote"]["mis_aggregation"]
    table = (out / "table.md").read_text()
    assert "## Equal compute" in table and "## Per-round flips" in table and "CoT-SC at equal tokens" in table
    assert all((out / "plots" / name).is_file() for name in ("frontier.png", "flips.png"))
