"""Metric identities, intervals and the exact McNemar test."""

from __future__ import annotations

import math
import random

import pytest

from metamod.evaluate import metrics
from metamod.evaluate.metrics import mcnemar_exact, method_metrics, task_metrics, wilson_interval


def _records(seed: int, n: int = 200) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        covered = rng.random() < 0.7
        correct = rng.random() < (0.8 if covered else 0.1)
        out.append(
            {
                "correct": correct,
                "covered": covered,
                "rounds": rng.randint(1, 5),
                "valid": [rng.random() < 0.9],
                "tokens": {
                    "debater_prompt": 100,
                    "debater_completion": 50,
                    "moderator_prompt": 20,
                    "moderator_completion": 3,
                },
            }
        )
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_identities(seed):
    recs = _records(seed)
    m = method_metrics(recs)
    n_correct = sum(r["correct"] for r in recs)
    assert m["correct_with_coverage"] + m["correct_without_coverage"] == n_correct
    assert m["mis_aggregation"] == m["coverage_count"] - m["correct_with_coverage"]
    assert m["mis_aggregation"] == sum(1 for r in recs if r["covered"] and not r["correct"])
    assert m["accuracy"] == pytest.approx(n_correct / len(recs))
    assert m["accuracy_ci_low"] <= m["accuracy"] <= m["accuracy_ci_high"]
    assert m["accuracy_stderr"] == pytest.approx(math.sqrt(m["accuracy"] * (1 - m["accuracy"]) / len(recs)))
    assert m["tokens_per_question"] == 173
    assert m["moderator_prompt_tokens_per_question"] == 20
    assert 0 < m["format_valid_rate"] <= 1 and m["moderator_calls"] == len(recs)
    assert 1 <= m["mean_rounds"] <= 5


def test_wilson_matches_known_values():
    low, high = wilson_interval(50, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)


def test_mcnemar_hand_and_scipy_agree(monkeypatch):
    for b, c in [(0, 5), (8, 1), (12, 9), (30, 10), (1, 1)]:
        by_hand = metrics._binom_two_sided_half(min(b, c), b + c)
        assert mcnemar_exact(b, c) == pytest.approx(by_hand, abs=1e-12)
    assert mcnemar_exact(8, 1) == pytest.approx(2 * 10 / 512)  # 2 * P(X <= 1), X ~ Bin(9, 1/2)


def test_task_metrics_pairs_by_seed_and_id():
    rows = []
    for seed in (0, 1):
        for i in range(10):
            rows.append(
                {
                    "id": f"q{i}",
                    "seed": seed,
                    "methods": {
                        "moderator": {"correct": True, "covered": True},
                        "majority_vote": {"correct": i < 2, "covered": True},
                    },
                }
            )
    results, sig = task_metrics(rows, ["moderator", "majority_vote"], reference="moderator")
    assert sig["majority_vote"] == {"n": 20, "b": 16, "c": 0, "p_value": pytest.approx(2 / 2**16)}
    assert results["majority_vote"]["mcnemar_p_vs_moderator"] == sig["majority_vote"]["p_value"]
    assert results["majority_vote"]["accuracy_per_seed"] == [0.2, 0.2]
    assert results["moderator"]["mis_aggregation"] == 0
    assert results["majority_vote"]["mis_aggregation"] == 16


def test_pair_metrics_pool_every_pair_and_report_the_hidden_ones_apart():
    from metamod.evaluate.metrics import method_metrics, pair_metrics

    records = [
        {"correct": True, "score": 1.0, "pairs": [6, 6], "hidden_pairs": [3, 3]},
        {"correct": False, "score": 0.5, "pairs": [3, 6], "hidden_pairs": [0, 3]},  # the visible pairs only
        {"correct": False, "score": 0.25, "pairs": [1, 4], "hidden_pairs": [1, 2]},
    ]
    m = method_metrics(records)
    assert m["accuracy"] == pytest.approx(1 / 3)  # MARCO's problem accuracy: every pair right
    assert m["pair_accuracy"] == pytest.approx(10 / 16)  # MARCO's accuracy: correct pairs / all pairs, pooled
    assert m["hidden_pair_accuracy"] == pytest.approx(4 / 8) and m["hidden_problem_accuracy"] == pytest.approx(1 / 3)
    assert m["pair_accuracy_stderr"] > 0
    legacy = pair_metrics([{"score": 1.0}, {"score": 0.5}])  # older samples rows: the mean share
    assert legacy["pair_accuracy"] == 0.75 and "hidden_pair_accuracy" not in legacy
