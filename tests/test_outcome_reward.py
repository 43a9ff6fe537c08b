"""The outcome reward: recorded futures per estimator (debate and MRO), the reward on hand-built completions, the
refusal of datasets built before it, warm-start targets, and `metamod build-dataset` + `metamod train` end to end."""

import copy
import json

import pytest

from metamod.cli import main as cli
from metamod.config import ConfigError
from metamod.rewards import get_reward_funcs
from metamod.rewards.outcome import OutcomeReward, check_outcome_columns, continue_value
from metamod.rollout.mro.snapshots import mro_snapshot_rows
from metamod.rollout.mro.traces import example_mro_trace
from metamod.rollout.snapshots import build_dataset, snapshot_rows
from metamod.rollout.traces import example_trace
from metamod.train.sft import build_warm_start_dataset, warm_start_gold_use


def debate(answers_by_round, *, gold="4", stop_reason="max_rounds", trace_id="q1"):
    """A debate trace with the given answers per round (eta graded from them)."""
    trace = example_trace(trace_id, answers=tuple(answers_by_round[0]), gold=gold)
    first = trace["rounds"][0]
    rounds = []
    for t, answers in enumerate(answers_by_round):
        rnd = copy.deepcopy(first)
        rnd["round"] = t
        rnd["responses"] = [
            {**first["responses"][0], "agent": i, "text": f"<answer>{a}</answer>", "answer": a}
            for i, a in enumerate(answers)
        ]
        rnd["eta"] = int(gold in answers)
        rounds.append(rnd)
    trace.update(rounds=rounds, num_rounds=len(rounds), stop_reason=stop_reason)
    return trace


# majority per round: wrong (5), right (4), wrong (6), right (4); three agents, no ties; the first agent alone is
# right at rounds 1, 2 and 3
FOUR_ROUNDS = [["5", "5", "4"], ["4", "4", "5"], ["4", "6", "6"], ["4", "4", "4"]]


@pytest.mark.parametrize(
    ("estimator", "values"),
    [
        ("next_majority", [1.0, 0.0, 1.0, None]),
        ("best_later", [1.0, 1.0, 1.0, None]),
        ("final_majority", [1.0, 1.0, 1.0, None]),
    ],
)
def test_debate_future_per_estimator(estimator, values):
    rows = snapshot_rows(debate(FOUR_ROUNDS), outcome_estimator=estimator)
    assert [r["future_correct"] for r in rows] == [[1, 0, 1], [0, 1], [1], []]
    assert [r["continue_value"] for r in rows] == values
    assert {r["outcome_estimator"] for r in rows} == {estimator}


def test_estimators_differ_and_price_rounds():
    future = [0, 0, 1, 0]  # a right majority only two rounds later
    assert continue_value(future, "next_majority", 0.1) == pytest.approx(-0.1)
    assert continue_value(future, "best_later", 0.1) == pytest.approx(0.7)  # 1 - 3 rounds x 0.1
    assert continue_value(future, "final_majority", 0.1) == pytest.approx(-0.4)
    assert continue_value([0, 0, 0, 0, 0, 0, 1], "best_later", 0.2) == pytest.approx(-0.2)  # too far: the next round
    with pytest.raises(ValueError, match="outcome_estimator must be one of"):
        continue_value(future, "oracle")


def test_debate_future_truncation_keep_agents_and_early_stop():
    trace = debate(FOUR_ROUNDS)
    rows = snapshot_rows(trace, max_rounds=2)  # the budget is 2 rounds: the second row has nothing to continue to
    assert [r["future_correct"] for r in rows] == [[1], []]
    # the first agent alone: 5, 4, 4, 4 -> right from round 1 on
    assert [r["future_correct"] for r in snapshot_rows(trace, keep_agents=1)] == [[1, 1, 1], [1, 1], [1], []]
    early = debate(FOUR_ROUNDS[:2], stop_reason="hook")  # stopped before its budget: the last future is unknown
    assert [r["future_correct"] for r in snapshot_rows(early)] == [[1], None]
    assert [r["continue_value"] for r in snapshot_rows(early)] == [1.0, None]
    longer_budget = snapshot_rows(debate(FOUR_ROUNDS[:2]), max_rounds=5)  # ran 2 rounds of a 5-round budget
    assert longer_budget[-1]["future_correct"] is None


def mro_trace(etas_actions, max_iterations=3):
    """An MRO trace whose iterations have the given (eta, action) pairs (1 accept, 2 patch, 3 restart)."""
    trace = example_mro_trace("m1")
    template = trace["history"][0]
    history = []
    for k, (eta, action) in enumerate(etas_actions, start=1):
        record = copy.deepcopy(template)
        record["iteration"], record["eta"] = k, eta
        record["reasoner"]["answer"] = "4" if eta else "5"
        record["controller"]["action"] = action
        history.append(record)
    trace.update(history=history, num_iterations=len(history), max_iterations=max_iterations)
    return trace


def test_mro_future_restart_accept_and_budget():
    # restart (candidate wrong), restart (wrong), accept at iteration 3 of 3: the budget's end
    rows = mro_snapshot_rows(mro_trace([(0, 3), (0, 3), (1, 1)]), outcome_estimator="next_majority")
    assert [r["future_correct"] for r in rows] == [[0, 1], [1], []]
    assert [r["continue_value"] for r in rows] == [0.0, 1.0, None]
    best = mro_snapshot_rows(mro_trace([(0, 3), (0, 3), (1, 1)]), outcome_estimator="best_later")
    assert [r["continue_value"] for r in best] == [1.0, 1.0, None]
    # a live accept at iteration 2 of 3: what a restart would have brought was never recorded
    accepted = mro_snapshot_rows(mro_trace([(0, 3), (1, 1)]))
    assert [r["future_correct"] for r in accepted] == [[1], None]
    assert [r["future_correct"] for r in mro_snapshot_rows(example_mro_trace("q"))] == [[0], None]  # patched at 2


def test_reward_on_hand_built_completions():
    reward = OutcomeReward(round_cost=0.05)
    completions = [
        "STOP <answer>4</answer>",  # right
        "STOP <answer>5</answer>",  # wrong
        "CONTINUE",  # next majority right
        "CONTINUE",  # next majority wrong
        "STOP <answer>4</answer> sure",  # invalid format, right answer: 0
        "STOP",  # no answer: 0
        "continue",  # no action: 0
        "CONTINUE",  # forced-answer round
        "CONTINUE",  # last round of the budget
        "CONTINUE",  # future unknown
        [{"role": "assistant", "content": "STOP <answer>dog</answer>"}],  # option text graded against the letter
    ]
    n = len(completions)
    got = reward(
        completions,
        gold=["4"] * 10 + ["B"],
        kind=["math"] * 10 + ["mc"],
        future_correct=[[0], [0], [1, 0], [0, 1], [1], [1], [1], [1], [], None, []],
        outcome_estimator=["next_majority"] * n,
        is_final_round=[False] * 7 + [True, False, False, False],
        choices=[None] * 10 + [["cat", "dog"]],
    )
    assert got == [1.0, 0.0, pytest.approx(0.95), pytest.approx(-0.05), 0.0, 0.0, 0.0, 0.0, 0.0, None, 1.0]
    free = OutcomeReward(0.0)(["CONTINUE"], gold=["4"], kind=["math"], future_correct=[[0, 1]],
                              outcome_estimator=["final_majority"])  # fmt: skip
    assert free == [1.0]
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        OutcomeReward(1.5)


def test_registry_and_round_cost_option():
    funcs, _ = get_reward_funcs(["format", "outcome"], outcome_round_cost=0.2)
    assert funcs[1].__name__ == "outcome_reward" and funcs[1].round_cost == 0.2
    columns = {"gold": ["4"], "kind": ["math"], "future_correct": [[1]], "outcome_estimator": ["next_majority"]}
    assert funcs[1](["CONTINUE"], **columns) == [pytest.approx(0.8)]
    default, _ = get_reward_funcs(["outcome"])
    assert default[0](["CONTINUE"], **columns) == [pytest.approx(0.95)]


def test_old_dataset_refused_in_one_line():
    with pytest.raises(ValueError, match="build-dataset") as err:
        OutcomeReward()(["CONTINUE"], gold=["4"], kind=["math"])  # a dataset built before the outcome columns
    assert "\n" not in str(err.value) and "future_correct" in str(err.value)
    with pytest.raises(ValueError, match=r"\['future_correct', 'outcome_estimator'\]"):
        check_outcome_columns(["prompt", "eta", "gold", "kind"], where="old[train]")


def test_gold_use_label():
    assert warm_start_gold_use("reward", ["format", "control"]) is None
    assert "outcome reward" in warm_start_gold_use(None, ["format", "outcome"])


def test_warm_start_targets_follow_outcome_without_control():
    from datasets import Dataset

    rows = snapshot_rows(debate([["5", "6"], ["5", "6"], ["4", "4"]]), single_template=True)
    ds = Dataset.from_list(rows)
    # eta 0 at rounds 0 and 1; the next majority is wrong after round 0, right after round 1
    by_eta = build_warm_start_dataset(ds, targets="reward", answer_reward=True)
    by_outcome = build_warm_start_dataset(ds, targets="reward", answer_reward=True, outcome_round_cost=0.05)

    def targets(out):
        return sorted((r["prompt"][0]["content"], r["completion"][0]["content"]) for r in out)

    assert [t for _, t in targets(by_eta)].count("CONTINUE") == 2
    outcome_targets = [t for _, t in targets(by_outcome)]
    assert outcome_targets.count("CONTINUE") == 1 and outcome_targets.count("STOP <answer>4</answer>") == 1


def test_build_dataset_option_summary_and_fingerprint(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(debate(FOUR_ROUNDS)) + "\n" + json.dumps(debate(FOUR_ROUNDS, trace_id="q2")) + "\n")
    out = tmp_path / "data"
    ds = build_dataset(traces, out, validation_fraction=0.0)
    assert ds.info_summary["outcome"]["estimator"] == "next_majority"
    assert ds.info_summary["outcome"]["continue_value_by_round"] == [1.0, 0.0, 1.0, None]
    assert "outcome_estimator" not in ds.info_summary["options"]  # the default keeps old fingerprints
    with pytest.raises(Exception, match="outcome_estimator"):  # other settings in the same folder: refused
        build_dataset(traces, out, validation_fraction=0.0, outcome_estimator="best_later")
    best = build_dataset(traces, out, validation_fraction=0.0, outcome_estimator="best_later", overwrite=True)
    assert best.info_summary["options"]["outcome_estimator"] == "best_later"
    assert best["train"]["continue_value"][:4] == [1.0, 1.0, 1.0, None]
    with pytest.raises(ConfigError, match="outcome_estimator must be one of"):
        build_dataset(traces, None, outcome_estimator="oracle")


def test_build_dataset_and_train_from_the_cli(tiny_model_dir, tmp_path, capsys):
    quiet = ["--progress", "false"]
    assert cli(["rollout", "--config", "configs/rollout/sim_arith.yaml", "--output_dir", str(tmp_path / "rollout"),
                "--limit", "8", *quiet]) == 0  # fmt: skip
    assert cli(["build-dataset", "--traces", str(tmp_path / "rollout"), "--output_dir", str(tmp_path / "data"),
                "--outcome_estimator", "best_later"]) == 0  # fmt: skip
    assert "continue_value by round (best_later)" in capsys.readouterr().out
    out = tmp_path / "train"
    assert cli(["train", "--config", "configs/train/tiny_sim.yaml", "--model_name_or_path", str(tiny_model_dir),
                "--build_tiny_model", "false", "--dataset_path", str(tmp_path / "data"), "--output_dir", str(out),
                "--reward_funcs", "format", "outcome", "--reward_weights", "1.0", "1.0", "--outcome_round_cost", "0.1",
                "--warm_start_steps", "2", "--warm_start_batch_size", "8", "--max_steps", "2",
                "--per_device_train_batch_size", "8", "--logging_steps", "1", "--save_strategy", "no",
                "--sample_log_steps", "1"]) == 0  # fmt: skip
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["last_logged"]["outcome_reward"] is not None
    assert "outcome reward" in summary["gold_use"]
    sample = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert set(sample["rewards"]) == {"format_reward", "outcome_reward"}


def test_train_refuses_a_dataset_without_the_columns(tiny_model_dir, tmp_path, capsys):
    from tests._train_data import save_dataset

    data = save_dataset(tmp_path / "old", n_train=8, n_val=4)  # the columns of a dataset built before
    code = cli(["train", "--model_name_or_path", str(tiny_model_dir), "--dataset_path", data,
                "--output_dir", str(tmp_path / "run"), "--reward_funcs", "format", "outcome",
                "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_steps", "1",
                "--report_to", "none"])  # fmt: skip
    assert code != 0
    error = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(error) == 1 and "['future_correct', 'outcome_estimator']" in error[0]
    assert "rebuild it with `metamod build-dataset" in error[0]
    assert not (tmp_path / "run").exists()


def test_round_cost_enters_the_run_fingerprint_only_with_the_outcome_reward():
    from metamod.train.grpo import ModeratorGRPOConfig, ModeratorModelConfig
    from metamod.train.run_folder import train_settings

    model = ModeratorModelConfig(model_name_or_path="m")

    def settings(rewards, cost):
        args = ModeratorGRPOConfig(reward_funcs=rewards, outcome_round_cost=cost, per_device_train_batch_size=4,
                                   num_generations=2, report_to="none")  # fmt: skip
        return train_settings(args, model)

    assert "outcome_round_cost" not in settings(["format", "control"], 0.05)  # old run folders keep their fingerprint
    assert settings(["format", "outcome"], 0.1)["outcome_round_cost"] == 0.1
    with pytest.raises(ValueError, match="outcome_round_cost must be in"):
        settings(["format", "outcome"], 1.0)
