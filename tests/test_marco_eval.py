"""MARCO and the code baselines through ``metamod eval`` and ``metamod sweep`` in the simulated world (fast tier)."""

from __future__ import annotations

import json

import pytest

from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate
from metamod.evaluate.sweep import run_sweep
from metamod.memory import MemoryConfig
from metamod.sandbox import capabilities

#: the checks and grades run model-written code in the sandbox, which needs user + network namespaces
pytestmark = pytest.mark.skipif(not capabilities().namespaces, reason="the sandbox needs user + network namespaces")

METHODS = ["cot", "chain_of_code", "rhda", "marco", "marco_v1", "marco_v2", "marco_v3"]


def _config(tmp_path, **kw) -> tuple[EvalConfig, MemoryConfig]:
    tasks = ["synthetic_code@deduction", "synthetic_code@induction"]
    options = {t: {"task_subtask": t.split("@")[1], "task_split": "test", "task_levels": [1, 2],
                   "task_num_examples": 8} for t in tasks}  # fmt: skip
    base = dict(tasks=tasks, task_options=options, methods=METHODS, seeds=[0], reference_method="cot",
                debaters="simulated", output_dir=str(tmp_path / "run"), plots=False,
                method_options={"rhda": {"iterations": 2}},
                code_simulation={"accuracy": 0.4, "overfit_prob": 0.2})  # fmt: skip
    base.update(kw)
    memory = MemoryConfig(memory_batch_size=4, memory_options={"condenser": "rule", "condense_every": 4})
    return EvalConfig(**base), memory


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("marco_eval")
    config, memory = _config(tmp)
    return evaluate(config, memory), config, memory


def test_every_row_runs_and_is_labelled_simulated(sim_run):
    document, config, _ = sim_run
    assert document["simulated"] is True
    for task in config.tasks:
        assert set(document["results"][task]) == set(METHODS)
    induction = document["results"]["synthetic_code@induction"]
    for method in METHODS:
        m = induction[method]
        assert 0.0 <= m["pair_accuracy"] <= 1.0 and 0.0 <= m["hidden_pair_accuracy"] <= 1.0
        assert m["pair_accuracy"] >= m["accuracy"]  # all pairs right => score 1
        assert m["hidden_problem_accuracy"] >= m["accuracy"]  # all pairs right => all hidden pairs right
    deduction = document["results"]["synthetic_code@deduction"]["cot"]
    assert not {"pair_accuracy", "hidden_pair_accuracy", "hidden_problem_accuracy"} & set(deduction)


def test_induction_metrics_count_every_pair_as_marco_does(sim_run):
    """MARCO: accuracy = correct pairs / all pairs; problem accuracy = every pair right (visible ones included)."""
    document, config, _ = sim_run
    rows = [json.loads(line) for line in open(f"{config.output_dir}/samples.jsonl")]
    induction = [r for r in rows if r["task"] == "synthetic_code@induction"]
    for method in METHODS:
        records = [r["methods"][method] for r in induction]
        assert all(rec["pairs"][1] == 6 and rec["hidden_pairs"][1] == 3 for rec in records)  # 3 visible + 3 hidden
        assert all(rec["correct"] == (rec["pairs"][0] == 6) for rec in records)
        pooled = sum(rec["pairs"][0] for rec in records) / sum(rec["pairs"][1] for rec in records)
        m = document["results"]["synthetic_code@induction"][method]
        assert m["pair_accuracy"] == pytest.approx(pooled)
        assert m["hidden_problem_accuracy"] == pytest.approx(
            sum(rec["hidden_pairs"][0] == 3 for rec in records) / len(records)
        )
    marco = document["results"]["synthetic_code@deduction"]["marco"]
    assert {"first_half_gain_vs_cot", "second_half_gain_vs_cot"} <= set(marco)


def test_samples_carry_marco_details_and_memories_are_saved(sim_run):
    _, config, _ = sim_run
    out = config.output_dir
    rows = [json.loads(line) for line in open(f"{out}/samples.jsonl")]
    assert len(rows) == 16 and all(r["simulated"] for r in rows)
    details = [r["methods"]["marco"]["details"]["marco"] for r in rows]
    assert all(d["agents"] == 2 and 1 <= d["iterations"] <= 2 for d in details)
    assert all(len(d["takeaways"]) == 2 for d in details)
    assert all(r["methods"]["marco_v1"]["details"]["marco"]["takeaways"] == [] for r in rows)
    # the second memory batch of each task is guided by what the first one condensed
    later = [r for r in rows if r["memory_batch"] == 1]
    assert later and all(r["methods"]["marco"]["memory_items"] for r in later)
    assert all(not r["methods"]["marco"]["memory_items"] for r in rows if r["memory_batch"] == 0)
    for task, scope in (("deduction", "synthetic/deduction"), ("induction", "synthetic/induction")):
        # one memory per task (memory_scope: task), and within it MARCO's one bank per dataset and sub-task
        manifest = json.loads(open(f"{out}/memory-seed0-marco/synthetic_code@{task}/manifest.json").read())
        assert set(manifest["state"]["scopes"]) == {scope}
        assert manifest["state"]["counters"]["condensations"] == 2
        v2 = json.loads(open(f"{out}/memory-seed0-marco_v2/synthetic_code@{task}/manifest.json").read())
        assert v2["config"]["condense"] is False and v2["state"]["counters"]["condensations"] == 0


def test_method_traces_record_every_proposal_verdict_and_lesson(sim_run):
    _, config, _ = sim_run
    lines = [json.loads(line) for line in open(f"{config.output_dir}/method-traces.jsonl")]
    marco = [x for x in lines if x["method"] == "marco"]
    assert len(marco) == 16 and {x["task"] for x in marco} == set(config.tasks)
    assert not [x for x in lines if x["method"] == "cot"]  # single-call methods have no trace of their own
    again = [x for x in marco if x["trace"]["num_iterations"] == 2]
    assert again, "some problem needed a second iteration"
    second = again[0]["trace"]["iterations"][1]["proposals"]
    assert all(p["peer_lessons"] == 1 and "feedback" in p and "text" in p for p in second)
    v3 = [x for x in lines if x["method"] == "marco_v3" and x["trace"]["num_iterations"] == 2]
    assert v3 and all(p["peer_lessons"] == 0 for p in v3[0]["trace"]["iterations"][1]["proposals"])


def test_rerun_resumes_without_new_cells(sim_run):
    document, config, memory = sim_run
    again = evaluate(config, memory)
    assert again["results"] == document["results"]


def test_sweep_over_iterations_writes_one_run_per_value(tmp_path):
    config, _ = _config(tmp_path)
    cfg = {"tasks": ["synthetic_code@induction"], "task_options": {"synthetic_code@induction": config.task_options[
        "synthetic_code@induction"]}, "methods": ["marco_v1"], "seeds": [0], "debaters": "simulated", "plots": False,
        "reference_method": "marco_v1", "code_simulation": {"accuracy": 0.3, "overfit_prob": 0.0}}  # fmt: skip
    path = tmp_path / "base.yaml"
    path.write_text(json.dumps(cfg))
    doc = run_sweep(path, "method_options.marco_v1.iterations", [1, 3], output_dir=tmp_path / "sweep", plots=True)
    assert [r["value"] for r in doc["runs"]] == [1, 3]
    first, third = (r["results"]["synthetic_code@induction"]["marco_v1"] for r in doc["runs"])
    assert first["tokens_per_question"] < third["tokens_per_question"]  # later iterations only add calls
    assert (tmp_path / "sweep" / "sweep.json").is_file() and (tmp_path / "sweep" / "sweep-accuracy.png").is_file()
    saved = (tmp_path / "sweep" / "method_options.marco_v1.iterations=3" / "sweep_config.yaml").read_text()
    assert "iterations: 3" in saved


@pytest.mark.slow
def test_smollm2_marco_on_generated_functions(tmp_path):
    """The real CPU world at a reduced size: SmolLM2 agents and condenser, MARCO and CoT, deduction level 1."""
    tasks = ["synthetic_code@deduction"]
    options = {tasks[0]: {"task_subtask": "deduction", "task_split": "test", "task_levels": [1],
                          "task_num_examples": 4}}  # fmt: skip
    config = EvalConfig(tasks=tasks, task_options=options, methods=["cot", "marco"], seeds=[0],
                        reference_method="cot", debaters="hf", debater_model="smollm2-135m-instruct",
                        debater_backend_options={"device": "cpu", "num_threads": 2}, max_tokens=32,
                        stop=["\nNow this one", "\nExample"],
                        output_dir=str(tmp_path / "smol"), plots=False)  # fmt: skip
    memory = MemoryConfig(memory_batch_size=2, memory_model="smollm2-135m-instruct", memory_max_tokens=48,
                          memory_options={"condenser": "llm", "condense_every": 2})  # fmt: skip
    from metamod.prompts import use_prompts

    use_prompts("configs/prompts/smol_marco.yaml")  # the worked-example prompts of configs/eval/marco_smol.yaml
    try:
        document = evaluate(config, memory)
    finally:
        use_prompts(None)
    assert document["simulated"] is False
    rows = [json.loads(line) for line in open(tmp_path / "smol" / "samples.jsonl")]
    assert len(rows) == 4
    for row in rows:
        details = row["methods"]["marco"]["details"]["marco"]
        assert details["simulated"] is False and len(details["takeaways"]) == 2
        # whatever SmolLM2 wrote, an answer is either parsed and graded or None (wrong)
        record = row["methods"]["marco"]
        assert record["final_answer"] is not None or record["correct"] is False
    manifest = json.loads((tmp_path / "smol" / "memory-seed0-marco" / tasks[0] / "manifest.json").read_text())
    assert manifest["state"]["counters"]["condensations"] == 2  # after each batch of 2 = T_c
