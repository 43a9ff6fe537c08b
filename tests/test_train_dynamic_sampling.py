"""Zero-variance groups: constant-group detection, the merge of generation outputs, refill draws, the curriculum,
and one tiny end-to-end run with dynamic sampling, the curriculum and held-out curves on."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from metamod.train.curriculum import oversample, oversample_indices, signal_keys
from metamod.train.dynamic_sampling import (
    DynamicSamplingGRPOTrainer,
    RefillPrompts,
    constant_groups,
    merge_rows,
    prompt_key,
    total_rewards,
)
from metamod.train.grpo import ModeratorGRPOConfig, main
from tests._train_data import save_dataset

REPO = Path(__file__).resolve().parents[1]

NAN = float("nan")


# ---------------------------------------------------------------- which groups are constant


def test_constant_groups_on_a_reward_table():
    # four groups of 3: all equal; one differs; float noise only; all unscorable
    table = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0],
                          [1.0, 1.0], [1.0, 0.0], [1.0, 1.0],
                          [1.0, 1.0], [1.0, 1.0000003], [1.0, 1.0],
                          [NAN, NAN], [NAN, NAN], [NAN, NAN]])  # fmt: skip
    totals = total_rewards(table, torch.tensor([1.0, 1.0]))
    assert torch.isnan(totals[-1]) and totals[3].item() == 2.0
    assert constant_groups(totals, num_generations=3, tolerance=1e-6).tolist() == [True, False, True, True]
    # without tolerance the float noise counts as signal (and TRL would give it a nonzero advantage)
    assert constant_groups(totals, num_generations=3, tolerance=0.0).tolist() == [True, False, False, True]
    # weights decide: the second reward weighted 0 leaves only the constant first one
    totals0 = total_rewards(table, torch.tensor([1.0, 0.0]))
    assert constant_groups(totals0, num_generations=3, tolerance=0.0).tolist() == [True, True, True, True]
    # a NaN inside a group is ignored, the rest decides
    mixed = torch.tensor([1.0, NAN, 0.0, 1.0, NAN, 1.0])
    assert constant_groups(mixed, num_generations=3, tolerance=1e-6).tolist() == [False, True]
    with pytest.raises(ValueError, match="whole groups"):
        constant_groups(torch.zeros(5), num_generations=2, tolerance=0.0)


def test_float_noise_gets_an_advantage_in_trl_arithmetic_but_the_tolerance_drops_it():
    rewards = torch.tensor([1.0, 1.0000001, 1.0, 1.0])
    std = rewards.std()
    advantages = (rewards - rewards.mean()) / (std + 1e-4)  # TRL's scale_rewards="group"
    assert advantages.abs().max() > 0  # not zero: noise would steer the policy
    assert constant_groups(rewards, num_generations=4, tolerance=1e-6).tolist() == [True]


# ---------------------------------------------------------------- merging generation outputs


def _output(prompt_lens, completion_lens, advantages, *, offset=0, extra=()):
    rows = len(prompt_lens)
    width_p, width_c = max(prompt_lens), max(completion_lens)
    prompt_ids = torch.zeros(rows, width_p, dtype=torch.long)
    prompt_mask = torch.zeros(rows, width_p, dtype=torch.long)
    completion_ids = torch.zeros(rows, width_c, dtype=torch.long)
    completion_mask = torch.zeros(rows, width_c, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_lens, completion_lens, strict=True)):
        prompt_ids[i, width_p - p :] = torch.arange(1, p + 1) + 100 * (i + offset)
        prompt_mask[i, width_p - p :] = 1
        completion_ids[i, :c] = torch.arange(1, c + 1) + 100 * (i + offset)
        completion_mask[i, :c] = 1
    out = {
        "prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
        "completion_mask": completion_mask, "advantages": torch.tensor(advantages),
        "old_per_token_logps": completion_mask.float() * -0.5, "num_items_in_batch": completion_mask.sum(),
    }  # fmt: skip
    out.update({k: completion_mask.float() for k in extra})
    return out


def test_merge_keeps_rows_shapes_and_masks():
    a = _output([2, 2, 4, 4], [3, 3, 1, 1], [0.5, -0.5, 0.0, 0.0])
    b = _output([6, 6], [5, 2], [1.0, -1.0], offset=10)
    merged = merge_rows([(a, [0, 1]), (b, [0, 1]), (a, [2, 3])], pad_token_id=0)
    assert "num_items_in_batch" not in merged
    assert merged["prompt_ids"].shape == (6, 6) and merged["completion_ids"].shape == (6, 5)
    # real tokens keep their order; padding stays on the left of prompts, on the right of completions
    for i, (p, c) in enumerate([(2, 3), (2, 3), (6, 5), (6, 2), (4, 1), (4, 1)]):
        assert merged["prompt_mask"][i].tolist() == [0] * (6 - p) + [1] * p
        assert merged["completion_mask"][i].tolist() == [1] * c + [0] * (5 - c)
        assert (merged["prompt_ids"][i][merged["prompt_mask"][i] == 0] == 0).all()
    assert merged["prompt_ids"][2, 0].item() == 1 + 1000 and merged["completion_ids"][4, 0].item() == 1 + 200
    assert merged["advantages"].tolist() == [0.5, -0.5, 1.0, -1.0, 0.0, 0.0]
    assert merged["old_per_token_logps"][3].tolist() == [-0.5, -0.5, 0.0, 0.0, 0.0]


def test_merge_refuses_unknown_or_mismatched_keys():
    a = _output([2], [1], [0.0], extra=("pixel_values",))
    with pytest.raises(ValueError, match="pixel_values"):
        merge_rows([(a, [0])], pad_token_id=0)
    b = _output([2], [1], [0.0], extra=("ref_per_token_logps",))
    with pytest.raises(ValueError, match="disagree"):
        merge_rows([(_output([2], [1], [0.0]), [0]), (b, [0])], pad_token_id=0)


# ---------------------------------------------------------------- refill draws


def test_refill_draws_other_prompts_in_a_seeded_order():
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "eta": i % 2} for i in range(10)]
    own = {prompt_key(rows[i]) for i in (0, 1, 2)}
    first = RefillPrompts(rows, seed=3).draw(4, exclude=own)
    again = RefillPrompts(rows, seed=3).draw(4, exclude=own)
    other = RefillPrompts(rows, seed=4).draw(4, exclude=own)
    keys = [prompt_key(r) for r in first]
    assert len(first) == 4 and len(set(keys)) == 4 and not set(keys) & own
    assert first == again and first != other
    # the cursor persists: the next draw continues the walk, then a new pass starts
    refill = RefillPrompts(rows, seed=3)
    drawn = [prompt_key(r) for r in refill.draw(7, exclude=own)]
    assert sorted(drawn) == sorted(prompt_key(r) for r in rows[3:])
    assert len(refill.draw(20, exclude=own)) == 7  # a new pass, each prompt at most once per call


class _FakeTrainer(DynamicSamplingGRPOTrainer):
    """The refill logic over scripted generation calls: each call returns a table of rewards per group."""

    def __init__(self, dataset, tables, *, group=2, tolerance=1e-6, refills=2):
        self.num_generations, self.constant_reward_tolerance, self.max_refill_batches = group, tolerance, refills
        self.reward_weights = torch.tensor([1.0])
        self._refill = RefillPrompts(dataset, seed=0)
        self._tables, self.calls = list(tables), []
        self._metrics = {"train": __import__("collections").defaultdict(list)}
        self.accelerator = SimpleNamespace(
            process_index=0, num_processes=1, device="cpu", gather=lambda t: t.reshape(-1) if t.dim() == 0 else t
        )
        self._tokenizer = SimpleNamespace(pad_token_id=0)

    def _score_batch(self, inputs):
        rewards = torch.tensor(self._tables.pop(0), dtype=torch.float32).view(-1, 1)
        assert rewards.shape[0] == len(inputs)
        self._last_rewards_per_func = rewards
        self.calls.append([r["prompt"] for r in inputs[:: self.num_generations]])
        n = len(inputs)
        return _output([3] * n, [2] * n, [float(x) for x in rewards.view(-1)], offset=len(self.calls) * 10)


def _scripted(trainer, inputs):
    return trainer._refill_constant_groups(inputs, trainer._score_batch(inputs))


def _rows(n):
    return [{"prompt": f"p{i}", "eta": 0} for i in range(n)]


def test_refill_replaces_constant_groups_with_other_prompts():
    data = _rows(12)
    batch = [dict(r) for r in data[:3] for _ in range(2)]
    # the batch: group 0 varies, groups 1 and 2 are constant; refill call 1: one useful group of two
    trainer = _FakeTrainer(data, [[1, 0, 1, 1, 0, 0], [0, 0, 1, 0], [0, 1]])
    merged = _scripted(trainer, batch)
    assert len(trainer.calls) == 3  # the batch + two refill calls
    drawn = [p for call in trainer.calls[1:] for p in call]
    assert not set(drawn) & {"p0", "p1", "p2"} and len(set(drawn)) == len(drawn)
    assert trainer.calls[1] == [r["prompt"] for r in RefillPrompts(data, seed=0).draw(2, exclude={
        prompt_key(r) for r in data[:3]})]  # fmt: skip
    assert merged["advantages"].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]  # kept group, then one group per refill
    assert merged["completion_mask"].sum().item() == 12 and merged["num_items_in_batch"].item() == 12
    metrics = trainer._metrics["train"]
    assert metrics["refill/dropped_groups"] == [2.0] and metrics["refill/calls"] == [2.0]
    assert metrics["refill/still_constant"] == [0.0]


def test_groups_still_constant_are_masked_and_leave_the_normaliser():
    data = _rows(8)
    batch = [dict(r) for r in data[:2] for _ in range(2)]
    # the batch: group 0 varies, group 1 constant within float noise; both refills constant too
    trainer = _FakeTrainer(data, [[1, 0, 1, 1.0000001], [1, 1], [0, 0]], refills=2)
    merged = _scripted(trainer, batch)
    assert len(trainer.calls) == 3
    assert merged["prompt_ids"].shape[0] == 4  # the batch keeps its size
    assert merged["completion_mask"][2:].sum().item() == 0 and merged["advantages"][2:].abs().sum().item() == 0
    assert merged["num_items_in_batch"].item() == 4  # only the varying group's tokens
    assert trainer._metrics["train"]["refill/still_constant"] == [1.0]


def test_no_constant_group_means_no_refill_call():
    data = _rows(4)
    batch = [dict(r) for r in data[:2] for _ in range(2)]
    trainer = _FakeTrainer(data, [[1, 0, 0, 1]])
    merged = _scripted(trainer, batch)
    assert len(trainer.calls) == 1 and merged["advantages"].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert trainer._metrics["train"]["refill/calls"] == [0.0]


# ---------------------------------------------------------------- curriculum


def test_signal_rows_and_oversampling():
    rows = [
        {"id": "a", "round": 0, "eta": 0, "answers": ["3", "3"], "kind": "math"},  # eta flips to round 1
        {"id": "a", "round": 1, "eta": 1, "answers": ["4", "4"], "kind": "math"},
        {"id": "a", "round": 2, "eta": 1, "answers": ["4", "4"], "kind": "math"},  # no signal
        {"id": "b", "round": 0, "eta": 1, "answers": ["4", None], "kind": "math"},  # a missing answer
        {"id": "c", "round": 1, "eta": 0, "answers": ["B", "b"], "kind": "mc", "choices": ["x", "y"]},  # agree
        {"id": "m", "round": 0, "eta": 0, "answers": ["7"], "kind": "math"},  # MRO: one answer, eta flip
        {"id": "m", "round": 1, "eta": 1, "answers": ["8"], "kind": "math"},
    ]
    assert signal_keys(rows) == {("a", 0), ("a", 1), ("b", 0), ("m", 0), ("m", 1)}
    assert oversample_indices([True, False, True], 2) == [0, 0, 1, 2, 2]

    from datasets import Dataset

    data = Dataset.from_list([{**r, "choices": r.get("choices", [])} for r in rows])
    same, count = oversample(data, times=1)
    assert same is data and count is None
    more, count = oversample(data, times=3)
    assert count == 5 and len(more) == len(rows) + 5 * 2
    assert more["id"].count("c") == 1 and more["id"].count("b") == 3
    # signal judged on the unfiltered rows: round 1 of "a" alone still counts (its neighbour was dropped)
    alone = data.select([1])
    assert oversample(alone, times=2, source_rows=data)[1] == 1 and oversample(alone, times=2)[1] == 0


# ---------------------------------------------------------------- config


def test_config_checks_the_new_options():
    base = dict(dataset_path="d", per_device_train_batch_size=4, num_generations=2, report_to="none")
    cfg = ModeratorGRPOConfig(**base)
    assert (cfg.curriculum_oversample, cfg.drop_constant_groups, cfg.curve_eval_steps) == (1, False, 0)
    from metamod.train.grpo import ModeratorModelConfig
    from metamod.train.run_folder import train_settings

    model = ModeratorModelConfig(model_name_or_path="m")
    new = ("curriculum_oversample", "drop_constant_groups", "constant_reward_tolerance", "max_refill_batches",
           "curve_eval_steps", "curve_eval_rows", "init_adapter")  # fmt: skip
    at_default = train_settings(cfg, model)
    assert not set(new) & set(at_default)  # folders recorded before these options existed keep their fingerprint
    changed = dict(curriculum_oversample=3, drop_constant_groups=True, constant_reward_tolerance=0.1,
                   max_refill_batches=4, curve_eval_steps=5, curve_eval_rows=8)  # fmt: skip
    settings = train_settings(ModeratorGRPOConfig(**base, **changed), model)
    for key, value in changed.items():
        assert settings[key] == value, key  # a rerun with another value is refused, like every training option
    for key, value, message in [
        ("curriculum_oversample", 0, "curriculum_oversample"),
        ("constant_reward_tolerance", -1.0, "constant_reward_tolerance"),
        ("max_refill_batches", 0, "max_refill_batches"),
        ("curve_eval_steps", -1, "curve_eval_steps"),
        ("curve_eval_rows", 0, "curve_eval_rows"),
    ]:
        with pytest.raises(ValueError, match=message):
            ModeratorGRPOConfig(**{**base, key: value})


# ---------------------------------------------------------------- end to end (tiny model)


def test_tiny_run_with_refill_curriculum_and_curves(tiny_model_dir, tmp_path):
    data = save_dataset(tmp_path / "data")
    out = tmp_path / "run"
    argv = [
        "--config", "configs/train/tiny_sim.yaml", "--model_name_or_path", str(tiny_model_dir),
        "--build_tiny_model", "false", "--dataset_path", data, "--output_dir", str(out), "--warm_start", "false",
        "--per_device_train_batch_size", "8", "--max_completion_length", "6", "--logging_steps", "1",
        "--max_steps", "2", "--save_strategy", "no", "--sample_log_steps", "0",
        "--drop_constant_groups", "true", "--max_refill_batches", "2",
        "--curriculum_oversample", "2", "--curve_eval_steps", "1", "--curve_eval_rows", "6",
    ]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((out / "train_summary.json").read_text())
    for key in ("frac_reward_zero_std", "reward_std"):
        assert set(summary[key]) == {"first", "last", "mean"}
    assert summary["curriculum_signal_rows"] > 0 and summary["train_rows"] > 48
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = [h for h in history if "reward" in h]
    assert len(logged) == 2 and all("refill/calls" in h and "protocol/format_valid" in h for h in logged)
    # the untrained tiny model writes no protocol: every reward is equal, so every group is refilled
    assert sum(h["refill/dropped_groups"] for h in logged) > 0 and sum(h["refill/calls"] for h in logged) > 0
    curves = json.loads((out / "curves.json").read_text())
    assert [p["step"] for p in curves["steps"]] == [1, 2]
    assert curves["heldout"]["source"] == "validation split" and curves["heldout"]["rows"] == 6
    assert [p["step"] for p in curves["heldout"]["points"]] == [0, 1, 2]
    assert all(0.0 <= p["stop_rate"] <= 1.0 for p in curves["heldout"]["points"])
    assert (out / "plots" / "learning_curves.png").stat().st_size > 1000
    assert (
        "held-out control acc" in (out / "curves.md").read_text() and "refill calls" in (out / "curves.md").read_text()
    )

    # the export carries the curves: table and plot in the model card, files copied
    from metamod.train.export import export_adapter

    exported = export_adapter(out, tmp_path / "export")
    card = (exported / "README.md").read_text()
    assert "## Learning curves" in card and "![learning curves](plots/learning_curves.png)" in card
    assert "held-out control acc" in card and (exported / "plots" / "learning_curves.png").is_file()
    assert json.loads((exported / "curves.json").read_text()) == curves


def test_refill_under_two_processes(tiny_model_dir, tmp_path):
    """The multi-process path: two CPU processes under ``accelerate launch`` (gloo) agree on the number of refill
    calls and the prompts drawn (a disagreement would hang in a gather or fail in the merge), and the run ends."""
    import subprocess
    import sys

    data = save_dataset(tmp_path / "data")
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "metamod.cli", "train",
        "--config", "configs/train/tiny_sim.yaml", "--model_name_or_path", str(tiny_model_dir),
        "--build_tiny_model", "false", "--dataset_path", data, "--output_dir", str(out), "--warm_start", "false",
        "--per_device_train_batch_size", "8", "--max_completion_length", "6", "--logging_steps", "1",
        "--max_steps", "2", "--save_strategy", "no", "--sample_log_steps", "0", "--drop_constant_groups", "true",
        "--max_refill_batches", "2",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "train_summary.json").read_text())["global_step"] == 2
    logged = [h for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "reward" in h]
    # the untrained tiny model writes no protocol: every group is constant, so each step refills on both processes
    assert len(logged) == 2 and all(h["refill/calls"] > 0 and h["refill/dropped_groups"] > 0 for h in logged)
