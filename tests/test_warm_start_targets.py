"""Warm-start targets: the consensus heuristic (no labels), the reward-maximising targets (eta; gold only with an
answer reward) and the labelled gold-supervised variant."""

from __future__ import annotations

import pytest
from datasets import Dataset

from metamod.rewards.moderator import control_reward, format_reward
from metamod.train.sft import build_warm_start_dataset, heuristic_target, reward_target, warm_start_gold_use


def rows() -> Dataset:
    prompt = [{"role": "user", "content": "moderate"}]
    return Dataset.from_list(
        [  # eta 1 with disagreement: the consensus heuristic says CONTINUE, the rewards want STOP + the right answer
            {
                "prompt": prompt,
                "answers": ["12", "13"],
                "kind": "math",
                "gold": "13",
                "eta": 1,
                "is_final_round": False,
            },
            {
                "prompt": prompt,
                "answers": ["12", "12"],
                "kind": "math",
                "gold": "13",
                "eta": 0,
                "is_final_round": False,
            },
            {"prompt": prompt, "answers": ["7", "9"], "kind": "math", "gold": "9", "eta": 1, "is_final_round": True},
            {"prompt": prompt, "answers": [None, None], "kind": "math", "gold": "9", "eta": 0, "is_final_round": True},
        ]
    )


def targets_of(dataset: Dataset) -> list[str]:
    return sorted(r["completion"][0]["content"] for r in dataset)


def test_reward_targets_score_highest_under_the_configured_rewards_without_reading_gold():
    built = build_warm_start_dataset(rows(), targets="reward")
    # the decision follows eta (the control reward); the answer is the label-free majority (ties: first agent)
    assert targets_of(built) == ["CONTINUE", "STOP <answer>12</answer>", "STOP <answer>7</answer>"]
    canary = rows().map(lambda r: {"gold": "GOLD-CANARY-913"})
    assert targets_of(build_warm_start_dataset(canary, targets="reward")) == targets_of(built)
    for row, eta in ((["12", "13"], 1), (["12", "12"], 0)):
        target = reward_target(row, "math", gold="13", eta=eta, is_final_round=False)
        assert format_reward([target]) == [1.0] and control_reward([target], eta=[eta]) == [1.0]


def test_an_answer_reward_or_reward_gold_makes_the_answer_gold_correct_and_says_so():
    gold = ["CONTINUE", "STOP <answer>13</answer>", "STOP <answer>9</answer>"]
    assert targets_of(build_warm_start_dataset(rows(), targets="reward", answer_reward=True)) == gold
    assert targets_of(build_warm_start_dataset(rows(), targets="reward_gold")) == gold
    assert warm_start_gold_use("reward", ["format", "control"]) is None
    assert warm_start_gold_use("consensus", ["format", "control", "answer"]).startswith("trained to give gold-correct")
    assert "reward_gold" in warm_start_gold_use("reward_gold", ["format", "control"])


def test_consensus_targets_ignore_the_labels():
    built = build_warm_start_dataset(rows(), targets="consensus")
    assert targets_of(built) == ["CONTINUE", "STOP <answer>12</answer>", "STOP <answer>7</answer>"]
    assert heuristic_target(["12", "13"], "math", is_final_round=False) == "CONTINUE"


def test_reward_target_skips_rows_whose_labels_disagree_with_the_grader():
    # eta says a correct answer is on the table but none of the answers grades correct: no target, not a guess
    assert reward_target(["12", "14"], "math", gold="13", eta=1, is_final_round=False, gold_answers=True) is None
    # forced round without a correct answer falls back to the majority
    assert (
        reward_target(["12", "12", "14"], "math", gold="13", eta=0, is_final_round=True) == "STOP <answer>12</answer>"
    )


def test_reward_targets_need_the_label_columns():
    with pytest.raises(ValueError, match=r"\['eta', 'gold'\]"):
        build_warm_start_dataset(rows().remove_columns(["gold", "eta"]), targets="reward")
    with pytest.raises(ValueError, match="warm_start_targets must be one of"):
        build_warm_start_dataset(rows(), targets="oracle")
