"""Learning curves: protocol rates through log_metric, held-out sampling and scoring, the curve files."""

import json

import pytest
from datasets import Dataset

from metamod.errors import ConfigError
from metamod.rewards import get_reward_funcs
from metamod.train.curves import (
    ProtocolMetrics,
    copy_curves,
    heldout_sample,
    score_decisions,
    with_protocol_metrics,
    write_curves,
    zero_variance_summary,
)


def test_protocol_metrics_log_rates_and_keep_reward_values():
    funcs, _ = get_reward_funcs(["format", "control"])
    wrapped = with_protocol_metrics(funcs)
    assert wrapped[0].__name__ == "format_reward" and wrapped[1] is funcs[1]
    completions = [[{"role": "assistant", "content": c}] for c in ("STOP <answer>4</answer>", "STOP", "CONTINUE", "x")]
    logged = []
    columns = {"eta": [1, 1, 0, 0], "is_final_round": [False] * 4}
    values = wrapped[0](completions=completions, log_metric=lambda k, v: logged.append((k, v)), **columns)
    assert values == funcs[0](completions=completions, **columns)
    assert logged == [("protocol/format_valid", 0.5), ("protocol/stop_rate", 0.5)]
    assert ProtocolMetrics(funcs[1])(completions=completions, **columns) == funcs[1](completions, **columns)


def test_heldout_sample_sources_and_refusal():
    val = Dataset.from_list([{"prompt": f"v{i}", "eta": i % 2} for i in range(10)])
    unused = Dataset.from_list([{"prompt": f"u{i}", "eta": 0} for i in range(3)])
    rows, source = heldout_sample(val, unused, rows=4, seed=0)
    assert source == "validation split" and len(rows) == 4 and len({r["prompt"] for r in rows}) == 4
    assert (
        heldout_sample(val, unused, rows=4, seed=0)[0] == rows and heldout_sample(val, None, rows=4, seed=1)[0] != rows
    )
    rows, source = heldout_sample(None, unused, rows=4, seed=0)
    assert source == "train rows not used for training" and [r["prompt"] for r in rows] == ["u0", "u1", "u2"]
    with pytest.raises(ConfigError, match="curve_eval_steps"):
        heldout_sample(val.select([]), None, rows=4, seed=0)


def test_score_decisions_counts_no_decision_as_wrong():
    rows = [{"eta": 0, "is_final_round": False}] * 2 + [{"eta": 1, "is_final_round": False}]
    assert score_decisions(["nonsense", "CONTINUE", "STOP"], rows) == {
        "control_accuracy": 0.6667, "stop_rate": 0.3333, "format_valid": 0.3333,
    }  # fmt: skip


def test_curve_files_without_heldout(tmp_path):
    history = [
        {"step": 5, "reward": 0.5, "rewards/format_reward/mean": 0.25, "protocol/format_valid": 0.2,
         "protocol/stop_rate": 0.9, "frac_reward_zero_std": 0.75, "reward_std": 0.1},
        {"step": 10, "reward": 1.0, "rewards/format_reward/mean": 0.5, "protocol/format_valid": 0.6,
         "protocol/stop_rate": 0.5, "frac_reward_zero_std": 0.25, "reward_std": 0.4},
        {"step": 10, "train_runtime": 3.0},
    ]  # fmt: skip
    doc = write_curves(tmp_path, history, reward_names=["format_reward"])
    assert doc["heldout"] is None and [p["step"] for p in doc["steps"]] == [5, 10]
    assert doc["steps"][1]["rewards"] == {"format_reward": 0.5} and doc["steps"][0]["refill_calls"] is None
    assert json.loads((tmp_path / "curves.json").read_text()) == doc
    table = (tmp_path / "curves.md").read_text()
    assert "| 10 | 1 | 0.5 | 0.6 | 0.5 | 0.25 | 0.4 |" in table and "held-out" not in table
    assert (tmp_path / "plots" / "learning_curves.png").stat().st_size > 1000
    assert zero_variance_summary(history)["reward_std"] == {"first": 0.1, "last": 0.4, "mean": 0.25}
    assert zero_variance_summary([{"step": 1, "train_runtime": 1.0}]) == {
        "frac_reward_zero_std": None,
        "reward_std": None,
    }
    exported = tmp_path / "export"
    exported.mkdir()
    text = copy_curves(tmp_path, exported)
    assert text.startswith("![learning curves](plots/learning_curves.png)") and "| 5 |" in text
    assert (exported / "curves.md").is_file() and copy_curves(exported / "nothing", exported) is None
