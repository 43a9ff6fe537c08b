"""Warm-start targets: the consensus heuristic (no labels) and the reward-maximising targets (eta + gold)."""

from __future__ import annotations

import pytest
from datasets import Dataset

from metamod.rewards.moderator import control_reward, format_reward
from metamod.train.sft import build_warm_start_dataset, heuristic_target, reward_target


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


def test_reward_targets_score_highest_under_the_rewards():
    built = build_warm_start_dataset(rows(), targets="reward")
    assert targets_of(built) == ["CONTINUE", "STOP <answer>13</answer>", "STOP <answer>9</answer>"]
    for row, eta in ((["12", "13"], 1), (["12", "12"], 0)):
        target = reward_target(row, "math", gold="13", eta=eta, is_final_round=False)
        assert format_reward([target]) == [1.0] and control_reward([target], eta=[eta]) == [1.0]


def test_consensus_targets_ignore_the_labels():
    built = build_warm_start_dataset(rows(), targets="consensus")
    assert targets_of(built) == ["CONTINUE", "STOP <answer>12</answer>", "STOP <answer>7</answer>"]
    assert heuristic_target(["12", "13"], "math", is_final_round=False) == "CONTINUE"


def test_reward_target_skips_rows_whose_labels_disagree_with_the_grader():
    # eta says a correct answer is on the table but none of the answers grades correct: no target, not a guess
    assert reward_target(["12", "14"], "math", gold="13", eta=1, is_final_round=False) is None
    # forced round without a correct answer falls back to the majority
    assert (
        reward_target(["12", "12", "14"], "math", gold="13", eta=0, is_final_round=True) == "STOP <answer>12</answer>"
    )


def test_reward_targets_need_the_label_columns():
    with pytest.raises(ValueError, match=r"\['eta', 'gold'\]"):
        build_warm_start_dataset(rows().remove_columns(["gold", "eta"]), targets="reward")
    with pytest.raises(ValueError, match="warm_start_targets must be one of"):
        build_warm_start_dataset(rows(), targets="oracle")
