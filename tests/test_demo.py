"""The whole pipeline (rollout -> dataset -> train -> eval -> export -> report) at a reduced size."""

import json

import pytest

from metamod.config import ConfigError
from metamod.demo import WORLDS, DemoConfig, run_demo


def test_demo_quick_writes_every_artefact(tmp_path):
    out = tmp_path / "demo"
    report = run_demo(DemoConfig(world="simulated", output_dir=str(out), quick=True))
    text = report.read_text()
    assert "SIMULATED" in text and "## Evaluation" in text and "Meta-Moderator" in text
    results = json.loads((out / "eval" / "results.json").read_text())
    assert results["simulated"] is True
    methods = results["results"]["arith"]
    assert {
        "majority_vote",
        "consensus",
        "judge",
        "moderator",
        "moderator_prompted",
        "adjudication_only",
        "stopping_only",
        "single_cot",
    } <= set(methods)
    assert (out / "export" / "adapter_model.safetensors").is_file()
    assert "base_model" in (out / "export" / "README.md").read_text()
    assert list((out / "eval" / "plots").glob("*.png"))
    # a rerun skips finished stages and rewrites the same report
    assert (
        run_demo(DemoConfig(world="simulated", output_dir=str(out), quick=True)).read_text().split("## Artefacts")[0]
        == text.split("## Artefacts")[0]
    )


def test_demo_missing_config_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="train_config"):
        DemoConfig(output_dir=str(tmp_path), train_config=str(tmp_path / "nope.yaml"))


def test_demo_worlds_pick_their_configs(tmp_path):
    real, sim = DemoConfig(output_dir=str(tmp_path)), DemoConfig(world="simulated", output_dir=str(tmp_path))
    assert real.world == "real" and "smol" in real.rollout_config and "smol" in real.eval_config
    assert sim.train_config.endswith("tiny_sim.yaml") and sim.train_questions == 400
    assert DemoConfig().output_dir == "checkpoints/demo"
    assert DemoConfig(world="simulated").output_dir == "checkpoints/demo-simulated"
    with pytest.raises(ConfigError, match="world must be one of real, simulated"):
        DemoConfig(world="fake")


@pytest.mark.slow
def test_demo_real_world_quick(tmp_path):
    """The real CPU world end to end at a reduced size: SmolLM2 debates, training, evaluation, export."""
    out = tmp_path / "demo"
    report = run_demo(DemoConfig(output_dir=str(out), quick=True)).read_text()
    assert "real (real world)" in report
    results = json.loads((out / "eval" / "results.json").read_text())
    assert results["simulated"] is False
    assert {"moderator", "moderator_prompted", "consensus"} <= set(results["results"]["arith"])
    card = (out / "export" / "README.md").read_text()
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in card


def test_the_real_demo_separates_stopping_from_adjudication_and_imitates_no_gold_answer():
    """The demo's table carries both ablations, and its moderator config is the gold-free bootstrap."""
    import yaml

    methods = WORLDS["real"].methods
    assert {"moderator", "moderator_prompted", "adjudication_only", "stopping_only"} <= set(methods)
    train = yaml.safe_load(open(WORLDS["real"].train_config))
    assert train["warm_start_targets"] == "reward" and "answer" not in train["reward_funcs"]
