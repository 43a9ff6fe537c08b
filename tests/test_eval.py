"""The evaluation harness: replay == live, outputs schema, resume, bad input caught before any generation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metamod.config import parse_config
from metamod.errors import ConfigError
from metamod.evaluate.cells import read_samples
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.decision import LayerContext
from metamod.evaluate.harness import evaluate, main
from metamod.evaluate.methods import build_method
from metamod.evaluate.replay import replay, run_live
from metamod.llm.base import Generation
from metamod.rollout.debate import run_debates
from metamod.rollout.simulated import SimulatedDebaters, SimulationConfig
from metamod.tasks import load_task
from metamod.tasks.grading import extract_answer

ROOT = Path(__file__).resolve().parents[1]
HEURISTIC = ["single_naive", "single_cot", "single_reflection", "single_cot_sc", "majority_vote", "consensus"]


class AgreementModerator:
    """A deterministic fake moderator: STOP with the shared answer once both agents agree, else CONTINUE."""

    name = "fake-moderator"
    context_length = None

    def chat(self, conversations, sampling):
        out = []
        for conv in conversations:
            text = conv[-1]["content"]
            answers = [extract_answer(part) for part in text.split("Agent ")[1:]]
            if answers and None not in answers and len(set(answers)) == 1:
                reply = f"STOP <answer>{answers[0]}</answer>"
            elif "last round" in text:
                reply = f"STOP <answer>{answers[-1]}</answer>" if answers and answers[-1] else "no idea"
            else:
                reply = "CONTINUE"
            out.append(Generation(text=reply, prompt_tokens=len(text.split()), completion_tokens=len(reply.split())))
        return out

    def count_tokens(self, conversation):
        return sum(len(m["content"].split()) for m in conversation)


@pytest.fixture(scope="module")
def arith_examples():
    return list(load_task("arith", split="test", num_examples=40, seed=3).examples())


@pytest.mark.parametrize(
    "method",
    ["majority_vote", "consensus", "judge", "moderator", "moderator_prompted", "adjudication_only", "stopping_only"],
)
def test_replay_equals_live(method, arith_examples):
    fake = AgreementModerator()
    ctx = LayerContext(max_rounds=4, seed=1, moderator=fake, moderator_base=fake, judge=fake)
    sim = SimulatedDebaters(SimulationConfig(sim_seed=11))
    shared = list(run_debates(arith_examples, [sim, sim], max_rounds=4, progress=False))
    replayed = replay(build_method(method, ctx), shared)
    live, live_traces = run_live(build_method(method, ctx), arith_examples, [sim, sim], max_rounds=4, progress=False)
    assert replayed == live
    for rec, trace in zip(live, live_traces, strict=True):
        assert len(trace["rounds"]) == rec["rounds"]
    if method == "moderator":  # the fake really stops early on some questions and not on others
        assert 1 in {r["rounds"] for r in live} and 4 in {r["rounds"] for r in live}


def _run(tmp_path: Path, **overrides) -> dict:
    options = dict(
        methods=HEURISTIC,
        limit=12,
        output_dir=str(tmp_path / "out"),
        seeds=[0, 1],
        plots=False,
        max_rounds=3,
        batch_questions=5,
    )
    options.update(overrides)
    return evaluate(EvalConfig(**options))


def test_outputs_schema_and_identities(tmp_path):
    doc = _run(tmp_path, plots=True)
    out = tmp_path / "out"
    assert doc["simulated"] is True
    assert set(doc) >= {"results", "config", "simulated", "versions", "n_samples", "significance"}
    assert doc["n_samples"]["arith"] == {"questions": 12, "rows": 24, "seeds": [0, 1]}
    for m in doc["results"]["arith"].values():
        assert m["n"] == 24
        assert m["correct_with_coverage"] + m["correct_without_coverage"] == round(m["accuracy"] * 24)
        assert m["mis_aggregation"] == m["coverage_count"] - m["correct_with_coverage"]
        assert "accuracy_stderr" in m and m["accuracy_ci_low"] <= m["accuracy"] <= m["accuracy_ci_high"]
        assert len(m["accuracy_per_seed"]) == 2
    assert doc["results"]["arith"]["majority_vote"]["mean_rounds"] == 3
    assert doc["results"]["arith"]["consensus"]["mean_rounds"] <= 3
    rows = read_samples(out / "samples.jsonl")
    assert len(rows) == 24
    row = rows[0]
    assert set(row) >= {"task", "seed", "id", "gold", "rounds", "methods", "simulated"}
    assert len(row["rounds"]) == 3 and {"eta", "answers"} <= set(row["rounds"][0])
    rec = row["methods"]["consensus"]
    assert set(rec) >= {"final_answer", "correct", "covered", "rounds", "decisions", "tokens"}
    assert rec["tokens"]["debater_prompt"] == sum(r["prompt_tokens"] for r in row["rounds"][: rec["rounds"]])
    table = (out / "table.md").read_text()
    assert "simulated" in table and "MAD (Consensus)" in table
    assert all((out / "plots" / name).is_file() for name in ("accuracy.png", "rounds.png", "accuracy_vs_tokens.png"))
    assert json.loads((out / "results.json").read_text())["results"] == json.loads(json.dumps(doc["results"]))


def test_resume_after_crash(tmp_path):
    full = _run(tmp_path / "a")["results"]
    out = tmp_path / "b" / "out"
    _run(tmp_path / "b")
    lines = (out / "samples.jsonl").read_text().splitlines()
    # a crash: 7 rows kept, the 8th torn mid-write
    (out / "samples.jsonl").write_text("\n".join(lines[:7]) + "\n" + lines[7][:40])
    resumed = _run(tmp_path / "b")["results"]
    rows = read_samples(out / "samples.jsonl")
    assert len(rows) == 24 and len({(r["seed"], r["id"]) for r in rows}) == 24
    assert resumed == full


def test_task_batch_questions_changes_batches_not_rows(tmp_path, caplog):
    import logging

    two_tasks = dict(tasks=["arith", "game24"], task_options={"game24": {"task_source": "generated"}}, limit=9)
    one = _run(tmp_path / "one", batch_questions=9, **two_tasks)
    with caplog.at_level(logging.INFO, logger="metamod.evaluate.harness"):
        per_task = _run(tmp_path / "per", task_batch_questions={"arith": 4, "game24": 2}, **two_tasks)
    sizes = [(r.args[1], r.args[2]) for r in caplog.records if r.msg.startswith("eval seed") and r.args[0] == 0]
    assert sizes == [("arith", 4), ("arith", 4), ("arith", 1)] + [("game24", 2)] * 4 + [("game24", 1)]

    def rows(name):
        return sorted(
            read_samples(tmp_path / name / "out" / "samples.jsonl"), key=lambda r: (r["task"], r["seed"], r["id"])
        )

    assert len(rows("one")) == 36 and rows("one") == rows("per")
    assert per_task["results"] == one["results"]
    with pytest.raises(ConfigError, match=r"task_batch_questions has a batch size for 'gsm8k', which is not in tasks"):
        EvalConfig(tasks=["arith"], task_batch_questions={"gsm8k": 100})
    with pytest.raises(ConfigError, match=r"task_batch_questions\['arith'\] must be an integer >= 1.*got 0"):
        EvalConfig(tasks=["arith"], task_batch_questions={"arith": 0})


def test_bad_inputs_fail_before_generation(tmp_path):
    with pytest.raises(ValueError, match="Valid names"):
        EvalConfig(methods=["majority_vote", "best_of_n"])
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(ValueError, match="neither a LoRA adapter"):
        _run(tmp_path, methods=["moderator"], moderator=str(not_a_model))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _run(tmp_path, methods=["moderator"], moderator=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="need a trained moderator"):
        _run(tmp_path, methods=["stopping_only"])
    no_gold = tmp_path / "nogold.jsonl"
    no_gold.write_text(json.dumps({"question": "1+1?", "answer": ""}) + "\n")
    with pytest.raises(ValueError, match="no questions"):
        _run(
            tmp_path,
            tasks=["local"],
            limit=None,
            task_options={
                "local": {
                    "task_data_files": str(no_gold),
                    "task_kind": "math",
                    "task_question_column": "question",
                    "task_answer_column": "answer",
                }
            },
        )
    assert not (tmp_path / "out" / "samples.jsonl").exists()


def test_reused_traces_and_cli(tmp_path, capsys):
    first = _run(tmp_path, seeds=[0])
    traces = tmp_path / "out" / "traces-seed0.jsonl"
    assert traces.is_file()
    argv = [
        "--methods",
        *HEURISTIC,
        "--traces",
        str(traces),
        "--max_rounds",
        "3",
        "--output_dir",
        str(tmp_path / "cli"),
        "--plots",
        "false",
    ]
    assert main(argv) == 0
    assert "SIMULATED" in capsys.readouterr().out
    again = json.loads((tmp_path / "cli" / "results.json").read_text())
    for method in HEURISTIC:
        assert again["results"]["arith"][method]["accuracy"] == first["results"]["arith"][method]["accuracy"]


@pytest.mark.parametrize("name", ["sim_debate", "paper_llama8b", "paper_qwen7b", "paper_decoupled_3b", "paper_n3"])
def test_shipped_configs_parse(name):
    from metamod.memory import MemoryConfig

    config, _ = parse_config([EvalConfig, MemoryConfig], ["--config", str(ROOT / "configs" / "eval" / f"{name}.yaml")])
    assert config.max_rounds == 5 and "moderator" in config.methods
    for task in config.tasks:
        config.task_config(task)


@pytest.mark.parametrize(
    ("name", "model", "template_kwargs"),
    [
        ("mc2_paper", "meta-llama/Llama-3.1-8B-Instruct", {}),
        ("mc2_paper_qwen3", "Qwen/Qwen3-8B", {"enable_thinking": False}),
    ],
)
def test_mc2_paper_configs_parse(name, model, template_kwargs):
    """The GPU configs parse and resolve on the CPU (nothing loads): models, batches (C.8), ToT settings (B)."""
    from metamod.evaluate.baselines.tree_of_thought import ToTOptions
    from metamod.evaluate.build import resolve_models
    from metamod.memory import MemoryConfig

    config, memory_cfg = parse_config(
        [EvalConfig, MemoryConfig], ["--config", str(ROOT / "configs" / "eval" / f"{name}.yaml")]
    )
    assert config.tasks == ["gsm8k", "math500", "theoremqa", "game24"] and config.seeds == [0, 1, 2]
    assert {"tot", "meta_prompting", "meta_reasoner", "ttpi", "reasoner_only", "mro"} <= set(config.methods)
    sizes = {"gsm8k": 1319, "math500": 500, "theoremqa": 800, "game24": 100}
    assert config.task_batch_questions == {t: min(100, max(10, n // 10)) for t, n in sizes.items()}
    assert config.max_iterations == 3 and config.sc_samples == 5 and config.max_tokens >= 4096
    assert ToTOptions(**config.method_options["tot"]) == ToTOptions(candidates=5, keep=2, depth=2)
    assert config.task_config("game24").task_source == "hub"
    # MC2's 100 Game-of-24 puzzles are ToT's ranks 901-1000 (the default selection), TheoremQA all 800 (the default)
    assert config.task_config("game24").task_limit is None and config.task_config("game24").task_selection is None
    assert config.task_config("game24").load().selection == "tot_hard"
    assert config.task_config("theoremqa").load().include_images is True
    for task in config.tasks:
        config.task_config(task)
    agent = resolve_models(config)["agent"]
    assert (agent.backend, agent.model, agent.chat_template_kwargs) == ("vllm", model, template_kwargs)
    # the MC2 ablation rows (table 2) and Buffer-of-Thought, with the backbone as memory LLM (the same engine)
    from metamod.evaluate.memories import memory_llm_spec, needs_memory_llm

    assert {"reasoner_updates", "mro_micro", "mc2", "bot"} <= set(config.methods)
    assert needs_memory_llm(config.methods, memory_cfg)
    spec = memory_llm_spec(memory_cfg)
    assert (spec.backend, spec.model, spec.chat_template_kwargs) == ("vllm", model, template_kwargs)
    assert memory_cfg.memory_batch_size is None and memory_cfg.batch_size_for(500) == 50
    # MC2 C.7: w = 3, top-k = 3, cosine over Qwen3-Embedding-0.6B (a local folder), read by every memory in use
    from metamod.memory.registry import build_memory_from_config, parse_memory_options

    for memory in ("mca", "bot"):
        options = parse_memory_options(memory, memory_cfg.options_for(memory))
        assert (options.embedder, options.embedder_model) == ("sentence-transformers", "/models/qwen3-embedding-0.6b")
    assert (memory_cfg.memory_options["window"], memory_cfg.memory_options["top_k"]) == (3, 3)
    if not Path("/models/qwen3-embedding-0.6b").is_dir():  # absent here: the error names the folder
        with pytest.raises(FileNotFoundError, match="/models/qwen3-embedding-0.6b.*never downloads"):
            build_memory_from_config(memory_cfg, name="mca", llm=object())


@pytest.mark.parametrize("name", ["mc2_sim", "mc2_smol"])
def test_mc2_cpu_configs_parse(name):
    from metamod.evaluate.memories import memories_in_use
    from metamod.memory import MemoryConfig
    from metamod.memory.registry import check_memory_options

    config, memory_cfg = parse_config(
        [EvalConfig, MemoryConfig], ["--config", str(ROOT / "configs" / "eval" / f"{name}.yaml")]
    )
    assert {"reasoner_only", "reasoner_updates", "mro", "mc2", "bot"} <= set(config.methods)
    check_memory_options(memory_cfg, memories_in_use(config.methods, memory_cfg))
    assert memory_cfg.memory == "none" and memory_cfg.memory_batch_size is None


def test_chat_template_kwargs_reach_the_backend_and_bad_keys_are_refused():
    from metamod.evaluate.build import resolve_models

    options = {"chat_template_kwargs": {"enable_thinking": False}}
    config = EvalConfig(
        methods=["single_cot"], debaters="vllm", debater_model="org/model", debater_backend_options=options
    )
    assert resolve_models(config)["agent"].chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(ConfigError, match=r"debater_backend_options: unknown key\(s\) \['chat_template_kwarg'\]"):
        EvalConfig(debater_backend_options={"chat_template_kwarg": {"enable_thinking": False}})


def test_resume_refuses_debates_from_other_debaters(tmp_path):
    _run(tmp_path, seeds=[0])
    (tmp_path / "out" / "samples.jsonl").unlink()
    with pytest.raises(ValueError, match="other debaters"):
        _run(tmp_path, seeds=[0], simulation={"agent_accuracy": [0.6, 0.6]})
    fresh = _run(tmp_path, seeds=[0], simulation={"agent_accuracy": [0.6, 0.6]}, resume=False)
    assert fresh["n_samples"]["arith"]["rows"] == 12


class _GuidingMemory:
    name = "fake"

    def guidance(self, request):
        from metamod.memory import Guidance

        return Guidance(text=f"remember {request.role}", item_ids=("x",))


class _EchoAgent:
    name = "echo"
    context_length = None

    def __init__(self):
        self.prompts = []

    def chat(self, conversations, sampling):
        self.prompts += [c[0]["content"] for c in conversations]
        return [
            Generation(text="<answer>7</answer>", prompt_tokens=3, completion_tokens=2)
            for _ in conversations
            for _ in range(sampling.n)
        ]

    def count_tokens(self, conversation):
        return 3


def test_single_agent_prompts_get_memory_guidance(arith_examples):
    agent = _EchoAgent()
    ctx = LayerContext(max_rounds=2, agent=agent, memory=_GuidingMemory(), sc_samples=3)
    outcomes = build_method("single_cot_sc", ctx).run(arith_examples[:2])
    assert all(p.startswith("Guidance from earlier problems") and "remember single" in p for p in agent.prompts)
    assert outcomes[0].answer == "7" and outcomes[0].completion_tokens == 6 and len(outcomes[0].answers) == 3


def test_memory_is_observed_and_saved_per_batch(tmp_path):
    from metamod.memory import MemoryConfig

    config = EvalConfig(
        methods=["majority_vote", "consensus"],
        limit=8,
        max_rounds=3,
        seeds=[0],
        plots=False,
        output_dir=str(tmp_path / "mem"),
        reference_method="consensus",
    )
    doc = evaluate(config, MemoryConfig(memory="behaviour_bank", memory_batch_size=4))
    assert doc["n_samples"]["arith"]["rows"] == 8
    saved = json.loads((tmp_path / "mem" / "memory-seed0" / "arith" / "manifest.json").read_text())
    assert saved["memory"] == "behaviour_bank" and saved["version"] == 2
    assert saved["batch_index"] == 2  # end_batch() after each of the two batches of 4
    assert saved["state"]["entries"]  # it observed finished debates and distilled behaviours from them
    rows = [json.loads(line) for line in (tmp_path / "mem" / "samples.jsonl").read_text().splitlines()]
    assert [r["memory_batch"] for r in rows] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(isinstance(r["methods"]["consensus"]["memory_items"], list) for r in rows)
    assert len(doc["results"]["arith"]["consensus"]["accuracy_by_batch"]) == 2


def test_max_rounds_is_declared_once_for_rollout_and_eval():
    import dataclasses

    from metamod.rollout.run import RolloutConfig

    fields = [{f.name: f for f in dataclasses.fields(cls)}["max_rounds"] for cls in (RolloutConfig, EvalConfig)]
    assert fields[0].default == fields[1].default == 5 and fields[0].metadata == fields[1].metadata
    for cls in (RolloutConfig, EvalConfig):
        with pytest.raises(ConfigError, match="max_rounds must be >= 1, got 0"):
            cls(max_rounds=0)
