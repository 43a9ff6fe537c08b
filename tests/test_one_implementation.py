"""One implementation per job: the majority vote (tasks/voting.py) and the eta statistics (rollout/stats.py)."""

from __future__ import annotations

import pytest
from datasets import Dataset

from metamod.rollout.analysis import trace_dynamics
from metamod.rollout.debate import DebateStats, run_debates
from metamod.rollout.simulated import SimulatedDebaters
from metamod.rollout.snapshots import build_dataset
from metamod.rollout.stats import EtaTally, eta_tally
from metamod.rollout.traces import TraceWriter
from metamod.tasks import load_task
from metamod.tasks.voting import majority_answer
from metamod.train.model_card import dataset_statistics
from metamod.train.sft import build_warm_start_dataset, heuristic_target, reward_target

CHOICES = ["cat", "dog", "owl"]


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["5", "3", "3.0", "5"], "5"),  # tie: the lowest-index agent's class
        (["3", "5", "5.0", "3"], "3"),
        ([None, "7", "x"], "7"),  # unparsable answers never vote ("x" is not a number)
        (["1,000", "1000", "12"], "1,000"),  # normalised classes, the first agent's wording
        ([None, None], None),
    ],
)
def test_first_tie_break_is_the_lowest_agent(answers, expected):
    assert majority_answer(answers, kind="math", tie_break="first") == expected


def test_unknown_tie_break_fails():
    with pytest.raises(ValueError, match="tie_break must be one of"):
        majority_answer(["1"], kind="math", tie_break="random")


def test_warm_start_counts_option_text_as_a_vote_for_its_letter():
    # "dog" is option (B): with the choices it agrees with "(B)"; without them it is unparsable (the old bug)
    assert heuristic_target(["dog", "(B)"], "mc", is_final_round=False) == "CONTINUE"
    assert heuristic_target(["dog", "(B)"], "mc", is_final_round=False, choices=CHOICES) == "STOP <answer>dog</answer>"
    assert (
        heuristic_target(["cat", "owl", "(C)"], "mc", is_final_round=True, choices=CHOICES)
        == "STOP <answer>owl</answer>"
    )
    # the reward targets' forced-round fallback is the same majority, with the choices
    assert reward_target(["cat", "owl", "(C)"], "mc", gold="(B)", eta=0, is_final_round=True, choices=CHOICES) == (
        "STOP <answer>owl</answer>"
    )


def test_build_warm_start_dataset_passes_the_choices_column():
    prompt = [{"role": "user", "content": "moderate"}]
    rows = Dataset.from_list(
        [
            {"prompt": prompt, "answers": ["dog", "(B)"], "kind": "mc", "choices": CHOICES, "is_final_round": False},
            {
                "prompt": prompt,
                "answers": ["owl", "(C)", "cat"],
                "kind": "mc",
                "choices": CHOICES,
                "is_final_round": True,
            },
        ]
    )
    built = sorted(r["completion"][0]["content"] for r in build_warm_start_dataset(rows, targets="consensus"))
    assert built == ["STOP <answer>dog</answer>", "STOP <answer>owl</answer>"]


def test_eta_tally_counts_rows_rounds_and_questions():
    tally = EtaTally()
    for question, rnd, eta in [("a", 0, 0), ("a", 1, 1), ("b", 0, 0), ("b", 1, 0), ("c", 0, 1)]:
        tally.add(question, rnd, eta)
    assert tally.rows_by_round == {0: 3, 1: 2} and tally.eta_by_round == {0: 1, 1: 1}
    assert tally.eta_rate_by_round() == [0.3333, 0.5] and tally.eta_rate_per_round(digits=None) == {0: 1 / 3, 1: 0.5}
    assert tally.coverage() == 0.6667 and tally.eta_rate() == 0.4 and tally.questions == 3 and tally.rows == 5
    assert EtaTally().eta_rate_by_round() == [] and EtaTally().eta_rate() is None


def test_the_four_callers_agree(tmp_path):
    """Rollout engine, dataset builder, debate dynamics and model card report the same eta rates and coverage."""
    sim = SimulatedDebaters()
    stop = lambda t, debates: [d["id"].endswith("3") and t == 0 for d in debates]  # noqa: E731 (uneven lengths)
    stats = DebateStats()
    examples = load_task("arith", num_examples=40, seed=2).examples()
    traces = list(run_debates(examples, [sim, sim], max_rounds=3, stats=stats, stop_hook=stop, progress=False))
    with TraceWriter(tmp_path / "traces.jsonl") as writer:
        for trace in traces:
            writer.write(trace)
    engine = stats.summary()
    dynamics = trace_dynamics(traces)
    data = build_dataset(tmp_path / "traces.jsonl", tmp_path / "data", validation_fraction=0.25, seed=0)
    built = data.info_summary
    card = dataset_statistics(tmp_path / "data")
    rows = [row for split in data.values() for row in split]
    assert len({len(t["rounds"]) for t in traces}) > 1  # some debates stopped early
    assert engine["eta_rate_by_round"] == dynamics["eta_rate_by_round"] == built["eta_rate_by_round"]
    assert engine["eta_rate_by_round"] == [round(r, 4) for r in card["eta_rate_per_round"].values()]
    assert engine["eta_rate_by_round"] == eta_tally(rows).eta_rate_by_round()
    assert engine["coverage"] == dynamics["coverage"] == built["coverage"] == round(card["coverage"], 4)
    assert engine["questions"] == built["questions"] == card["questions"] == 40
