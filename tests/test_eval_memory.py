"""Memories inside ``metamod eval``: methods with their own memory, served ids, memory batches, crash-resume.

All in the simulated world (fast tier): simulated roles cannot read guidance, so these tests check mechanics only.
"""

from __future__ import annotations

import json

import pytest

from metamod.evaluate import memories as memories_module
from metamod.evaluate.config import EvalConfig
from metamod.evaluate.decision import LayerContext
from metamod.evaluate.harness import evaluate
from metamod.evaluate.inputs import load_inputs
from metamod.evaluate.methods import build_method
from metamod.llm.base import Generation
from metamod.memory import BehaviourBank, MemoryConfig
from metamod.memory.base import Observation

RULE = {"writer": "rule"}


def _config(tmp_path, name, methods, limit=20, **kw) -> EvalConfig:
    return EvalConfig(
        methods=methods,
        limit=limit,
        seeds=[0],
        plots=False,
        max_iterations=3,
        reference_method=methods[0],
        output_dir=str(tmp_path / name),
        **kw,
    )


def _rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _manifest(folder) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.fixture(scope="module")
def mc2_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mc2")
    methods = ["mro", "mc2", "mro_micro", "reasoner_updates", "bot", "single_cot"]
    doc = evaluate(_config(tmp, "run", methods), MemoryConfig(memory_options=RULE))
    return tmp / "run", doc


def test_methods_with_their_own_memory_save_folders_and_summaries(mc2_run):
    out, doc = mc2_run
    for method in ("mc2", "mro_micro", "reasoner_updates", "bot"):
        manifest = _manifest(out / f"memory-seed0-{method}" / "arith")
        assert manifest["version"] == 2 and manifest["batch_index"] == 2  # 20 questions -> 2 batches of 10
        assert manifest["extra"]["observed"] == {"arith": [0, 1]}
        assert (out / f"memory-seed0-{method}" / "arith" / "summary.json").is_file()
    assert not (out / "memory-seed0").exists(), "no shared memory was configured"
    mca = _manifest(out / "memory-seed0-mc2" / "arith")["state"]
    assert all(mca["knowledge"][r] for r in ("reasoner", "monitor", "controller"))
    micro = _manifest(out / "memory-seed0-mro_micro" / "arith")["state"]
    assert not any(micro["knowledge"].values()), "mro_micro consolidates nothing"
    updates = _manifest(out / "memory-seed0-reasoner_updates" / "arith")["state"]
    assert {lesson["role"] for lesson in updates["lessons"]} == {"reasoner"}
    log = (out / "memory-seed0-mc2" / "arith" / "guidance.jsonl").read_text().splitlines()
    assert log and all(json.loads(line)["question"] not in json.loads(line)["guidance"] for line in log)
    assert sorted(doc["memories"]) == [
        f"memory-seed0-{m}/arith" for m in ("bot", "mc2", "mro_micro", "reasoner_updates")
    ]
    assert doc["memories"]["memory-seed0-mc2/arith"]["guidance_relevance"], "appendix E relevance per batch"


def test_rows_log_memory_batches_and_served_ids(mc2_run):
    out, doc = mc2_run
    rows = _rows(out)
    assert [r["memory_batch"] for r in rows] == [0] * 10 + [1] * 10
    for r in rows:
        assert "memory_items" not in r["methods"]["mro"] and "memory_items" not in r["methods"]["single_cot"]
        items = r["methods"]["mc2"]["memory_items"]
        if r["memory_batch"] == 0:
            assert items == [], "cold start: batch 1 has no memory"
        else:
            assert any(i.startswith("L0.") for i in items) and any(i.startswith("K0.") for i in items)
            assert r["methods"]["bot"]["memory_items"] in (["generic"], *[[f"T{k}"] for k in range(1, 20)])
            update = r["methods"]["mc2"]["details"]["mro"]["policy_update"]
            assert update["reasoner"]["ok"] and update["reasoner"]["attempts"] == [None]
    # simulated roles ignore guidance: the memory rows answer exactly like their memory-free twins
    assert [r["methods"]["mc2"]["correct"] for r in rows] == [r["methods"]["mro"]["correct"] for r in rows]
    for method in ("mro", "mc2", "bot"):
        assert len(doc["results"]["arith"][method]["accuracy_by_batch"]) == 2
    assert doc["results"]["arith"]["mc2"]["memory_items_per_question"] > 0
    assert len(doc["results"]["arith"]["mc2"]["action_shares_by_batch"]) == 2


def test_crash_between_rows_and_memory_save_resumes_to_the_same_state(tmp_path, monkeypatch):
    methods = ["mro", "mc2"]
    whole = evaluate(_config(tmp_path, "whole", methods), MemoryConfig(memory_options=RULE))
    real = memories_module.SeedMemories.observe_and_save
    calls = {"n": 0}

    def crash_on_second(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("power cut after the rows of batch 1 were written")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(memories_module.SeedMemories, "observe_and_save", crash_on_second)
    with pytest.raises(RuntimeError, match="power cut"):
        evaluate(_config(tmp_path, "crashed", methods), MemoryConfig(memory_options=RULE))
    assert len(_rows(tmp_path / "crashed")) == 20, "batch 1's rows were written before the crash"
    assert _manifest(tmp_path / "crashed" / "memory-seed0-mc2" / "arith")["batch_index"] == 1
    monkeypatch.setattr(memories_module.SeedMemories, "observe_and_save", real)
    resumed = evaluate(_config(tmp_path, "crashed", methods), MemoryConfig(memory_options=RULE))
    a, b = (
        _manifest(tmp_path / "whole" / "memory-seed0-mc2" / "arith"),
        _manifest(tmp_path / "crashed" / "memory-seed0-mc2" / "arith"),
    )
    assert a["state"] == b["state"] and a["extra"] == b["extra"] and a["batch_index"] == b["batch_index"] == 2
    assert resumed["results"] == whole["results"]
    assert len(_rows(tmp_path / "crashed")) == 30, "batch 1 computed again (the later rows win)"


def test_warm_start_from_another_runs_memory(mc2_run, tmp_path):
    out, _ = mc2_run
    cfg = MemoryConfig(memory_options=RULE, memory_path=str(out / "memory-seed0-mc2" / "arith"))
    evaluate(_config(tmp_path, "warm", ["mro", "mc2"], limit=10), cfg)
    manifest = _manifest(tmp_path / "warm" / "memory-seed0-mc2" / "arith")
    assert manifest["batch_index"] == 3 and manifest["extra"]["observed"] == {"arith": [0]}
    first = _rows(tmp_path / "warm")[0]["methods"]["mc2"]["memory_items"]
    assert first, "a warm start serves the transferred memory from the first batch on"


def test_question_order_seed_shuffles_deterministically():
    base = [ex.id for ex in load_inputs(EvalConfig(methods=["mro"], limit=12))[0]["arith"]]
    one = [ex.id for ex in load_inputs(EvalConfig(methods=["mro"], limit=12, question_order_seed=1))[0]["arith"]]
    again = [ex.id for ex in load_inputs(EvalConfig(methods=["mro"], limit=12, question_order_seed=1))[0]["arith"]]
    assert one == again and one != base and sorted(one) == sorted(base)


def test_memory_options_of_no_memory_in_use_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'windw' is not an option of the memories in use"):
        evaluate(_config(tmp_path, "bad", ["mro", "mc2"]), MemoryConfig(memory_options={"windw": 3}))
    assert not (tmp_path / "bad").exists(), "refused before anything was written"


class _Recorder:
    """A moderator/judge generator that records prompts and stops at once."""

    name = "rec"
    context_length = None

    def __init__(self):
        self.prompts: list[str] = []

    def chat(self, conversations, sampling):
        self.prompts += [c[0]["content"] for c in conversations]
        return [Generation("STOP <answer>7</answer>", 3, 4) for _ in conversations]

    def count_tokens(self, conversation):
        return 0


def test_moderator_and_judge_ask_the_memory_and_ids_are_served_per_method():
    from metamod.tasks.base import Example

    bank = BehaviourBank(embedder_options={"n_features": 512})
    responses = [{"agent": i, "answer": "7", "text": "... <answer>7</answer>"} for i in range(3)]
    agree = {"rounds": [{"round": 0, "eta": 1, "responses": responses}]}
    question = "A shop packs 12 pens in each box. Mia buys 3 boxes. How many pens?"
    bank.observe(
        Observation(Example(id="a", question=question, gold="36", kind="math"), agree, _out(True, "7", "moderator"))
    )
    bank.end_batch()
    debate = {"id": "q", "question": question.replace("3 boxes", "4 boxes"), "kind": "math", "rounds": agree["rounds"]}
    rec = _Recorder()
    ctx = LayerContext(max_rounds=1, moderator=rec, judge=rec, memory=bank)
    build_method("moderator", ctx).decide(0, [debate])
    build_method("judge", ctx).decide(0, [debate])
    assert all(p.startswith("Guidance from earlier problems") for p in rec.prompts)
    assert bank.served_ids("q", "moderator") and bank.served_ids("q", "judge")
    assert bank.served_ids("q", "majority_vote") == [], "nothing was served to majority voting"


def _out(correct, final, method):
    return {"correct": correct, "final_answer": final, "method": method}


def test_methods_can_be_added_to_a_run_with_own_memories_and_changed_options_restart_them(tmp_path):
    methods = ["mro", "mc2"]
    evaluate(_config(tmp_path, "grow", methods), MemoryConfig(memory_options=RULE))
    before = _manifest(tmp_path / "grow" / "memory-seed0-mc2" / "arith")
    rows_before = len(_rows(tmp_path / "grow"))
    evaluate(_config(tmp_path, "grow", [*methods, "single_cot"]), MemoryConfig(memory_options=RULE))
    added = _rows(tmp_path / "grow")[rows_before:]
    assert len(added) == 20 and all(set(r["methods"]) == {"single_cot"} for r in added)
    assert _manifest(tmp_path / "grow" / "memory-seed0-mc2" / "arith") == before, "mc2's memory is untouched"
    # another mc2 setting: its cells are recomputed from a fresh memory, mro's are kept
    evaluate(_config(tmp_path, "grow", methods), MemoryConfig(memory_options={**RULE, "top_k": 1}))
    redone = _rows(tmp_path / "grow")[rows_before + 20 :]
    assert len(redone) == 20 and all(set(r["methods"]) == {"mc2"} for r in redone)
    after = _manifest(tmp_path / "grow" / "memory-seed0-mc2" / "arith")
    assert after["config"]["top_k"] == 1 and after["extra"]["observed"] == {"arith": [0, 1]}
    assert all(len([i for i in r["methods"]["mc2"]["memory_items"] if i.startswith("L")]) <= 3 for r in redone)


def test_memory_llm_tokens_are_counted_on_the_methods_it_serves(tiny_model_dir, tmp_path):
    """The MCA writing with a real (tiny, random) memory LLM: its replies fall back, its tokens are charged."""
    cfg = MemoryConfig(
        memory_backend="hf",
        memory_model=str(tiny_model_dir),
        memory_backend_options={"device": "cpu"},
        memory_max_tokens=8,
        memory_options={"compose": False, "max_reflections": 2},  # the tiny model has 2,048 tokens of context
    )
    doc = evaluate(_config(tmp_path, "llm", ["reasoner_only", "reasoner_updates"]), cfg)
    rows = _rows(tmp_path / "llm")
    assert all("memory_prompt" not in r["methods"]["reasoner_only"]["tokens"] for r in rows)
    first, second = rows[:10], rows[10:]
    assert sum(r["methods"]["reasoner_updates"]["tokens"]["memory_prompt"] for r in first) == 0, "cold start"
    spent = sum(r["methods"]["reasoner_updates"]["tokens"]["memory_completion"] for r in second)
    assert spent > 0, "batch 1 pays for the distillation after batch 0"
    stats = doc["memories"]["memory-seed0-reasoner_updates/arith"]["stats"]["totals"]
    assert stats["distill_calls"] == 2  # one batched call per batch
    res = doc["results"]["arith"]
    assert res["reasoner_updates"]["memory_completion_tokens_per_question"] == spent / 20
    assert res["reasoner_updates"]["tokens_per_question"] > res["reasoner_only"]["tokens_per_question"]


# ---------------------------------------------------------------- memory scope: cold per task, or carried (run)
TWO_TASKS = {"tasks": ["arith@easy", "arith@hard"], "task_options": {"arith@easy": {"task_levels": [1]},
             "arith@hard": {"task_levels": [4]}}}  # fmt: skip


def _first_batch_items(folder, task: str, method: str) -> list[list[str]]:
    rows = [r for r in _rows(folder) if r["task"] == task and r["memory_batch"] == 0]
    return [r["methods"][method]["memory_items"] for r in rows]


def test_every_memory_starts_cold_at_each_task_by_default(tmp_path):
    """MC² Alg. 1 runs each dataset from an empty memory: batch 0 of the second task is served nothing."""
    doc = evaluate(_config(tmp_path, "scoped", ["mro", "mc2"], **TWO_TASKS), MemoryConfig(memory_options=RULE))
    out = tmp_path / "scoped"
    for task in TWO_TASKS["tasks"]:
        assert _manifest(out / "memory-seed0-mc2" / task)["extra"]["observed"] == {task: [0, 1]}
        assert all(items == [] for items in _first_batch_items(out, task, "mc2")), f"{task} started warm"
    assert sorted(doc["memories"]) == [f"memory-seed0-mc2/{t}" for t in sorted(TWO_TASKS["tasks"])]
    assert not (out / "memory-seed0-mc2" / "manifest.json").exists()
    # resume: nothing left to do, identical results; an added task gets its own cold memory
    assert (
        evaluate(_config(tmp_path, "scoped", ["mro", "mc2"], **TWO_TASKS), MemoryConfig(memory_options=RULE))["results"]
        == doc["results"]
    )


def test_memory_scope_run_carries_one_memory_across_tasks(tmp_path):
    """Transfer (MC² appendix G) is explicit: memory_scope: run; the second task's first batch is guided."""
    config = MemoryConfig(memory_options=RULE, memory_scope="run")
    evaluate(_config(tmp_path, "carried", ["mro", "mc2"], **TWO_TASKS), config)
    out = tmp_path / "carried"
    assert _manifest(out / "memory-seed0-mc2")["extra"]["observed"] == {"arith@easy": [0, 1], "arith@hard": [0, 1]}
    assert all(items for items in _first_batch_items(out, "arith@hard", "mc2")), "the carried memory serves task 2"


def test_task_memory_options_override_per_task(tmp_path):
    config = MemoryConfig(memory_options={**RULE, "top_k": 3}, task_memory_options={"arith@hard": {"top_k": 1}})
    evaluate(_config(tmp_path, "per_task", ["mro", "mc2"], **TWO_TASKS), config)
    out = tmp_path / "per_task"
    assert _manifest(out / "memory-seed0-mc2" / "arith@easy")["config"]["top_k"] == 3
    assert _manifest(out / "memory-seed0-mc2" / "arith@hard")["config"]["top_k"] == 1
    with pytest.raises(ValueError, match=r"task_memory_options\['arith@hard'\]: 'topk' is not an option"):
        evaluate(
            _config(tmp_path, "bad", ["mro", "mc2"], **TWO_TASKS),
            MemoryConfig(memory_options=RULE, task_memory_options={"arith@hard": {"topk": 1}}),
        )


# ---------------------------------------------------------------- gold: only where the method is defined to use it
def test_memories_not_defined_to_use_gold_never_receive_it_and_users_are_marked(mc2_run):
    out, doc = mc2_run
    assert doc["gold_use"]["bot"] is None and doc["gold_use"]["mro"] is None
    assert "correctness flag" in doc["gold_use"]["mc2"] and doc["labels"]["mc2"].endswith("\u2020")
    assert not doc["labels"]["bot"].endswith("\u2020")
    table = (out / "table.md").read_text()
    assert "\u2020 Uses gold-derived signals" in table and f"| {doc['labels']['mc2']} |" in table
    # BoT (learn_from: answered, MC² B.2) observed without correctness: its queue and state hold no grading
    bot = _manifest(out / "memory-seed0-bot" / "arith")
    answered = sum(r["methods"]["bot"]["final_answer"] is not None for r in _rows(out))
    assert bot["state"]["counters"]["learned_from"] == answered and answered > 10
    assert '"correct": true' not in json.dumps(bot).lower()


class GoldSpy(BehaviourBank):
    """A shared memory that records what it observes; ``gold_use`` says whether it is defined to read gold."""

    seen: list = []  # noqa: RUF012 (the test reads what the harness passed)
    declares: str | None = None

    @classmethod
    def gold_use(cls, options):
        return cls.declares

    def observe(self, observation):
        GoldSpy.seen.append(observation)
        super().observe(observation)


@pytest.mark.parametrize("declares", [None, "reads correctness (test)"])
def test_the_harness_withholds_gold_from_a_memory_not_defined_to_use_it(tmp_path, declares):
    from metamod.tasks.base import GoldWithheldError

    GoldSpy.seen, GoldSpy.declares = [], declares
    config = MemoryConfig(memory=f"{__name__}:GoldSpy", memory_batch_size=2)
    doc = evaluate(_config(tmp_path, "spy", ["majority_vote"], limit=4, max_rounds=2), config)
    assert len(GoldSpy.seen) == 4
    for observation in GoldSpy.seen:
        if declares is None:
            assert observation.outcome["correct"] is None
            assert all("eta" not in rnd for rnd in observation.trace["rounds"]) and "gold" not in observation.trace
            with pytest.raises(GoldWithheldError):
                _ = observation.example.gold
        else:
            assert isinstance(observation.outcome["correct"], bool)
            assert observation.example.gold and all("eta" in rnd for rnd in observation.trace["rounds"])
    assert (doc["gold_use"]["majority_vote"] is None) == (declares is None)


def test_memory_writer_prompts_over_the_context_are_answered_empty_and_counted(tiny_model_dir, tmp_path):
    """A memory LLM whose prompts cannot fit its context: the run completes and summary.json counts them."""
    cfg = MemoryConfig(
        memory_backend="hf",
        memory_model=str(tiny_model_dir),
        memory_backend_options={"device": "cpu", "max_model_len": 96},
        memory_max_tokens=8,
        memory_options={"compose": False},
    )
    doc = evaluate(_config(tmp_path, "small", ["reasoner_only", "reasoner_updates"]), cfg)
    summary = doc["memories"]["memory-seed0-reasoner_updates/arith"]
    assert summary["prompts_too_long"] >= 1 and summary["batches"] == 2


def test_a_run_scoped_memory_refuses_a_changed_task_list_a_task_scoped_one_adds_it(tmp_path):
    from metamod.config import SettingsMismatchError

    one = {"tasks": ["arith@easy"], "task_options": {"arith@easy": TWO_TASKS["task_options"]["arith@easy"]}}
    evaluate(_config(tmp_path, "t", ["mro", "mc2"], limit=4, **one), MemoryConfig(memory_options=RULE))
    doc = evaluate(_config(tmp_path, "t", ["mro", "mc2"], limit=4, **TWO_TASKS), MemoryConfig(memory_options=RULE))
    assert set(doc["results"]) == set(TWO_TASKS["tasks"]), "memory_scope task: an added task is computed"
    run = MemoryConfig(memory_options=RULE, memory_scope="run")
    evaluate(_config(tmp_path, "r", ["mro", "mc2"], limit=4, **one), run)
    with pytest.raises(SettingsMismatchError, match="tasks"):
        evaluate(_config(tmp_path, "r", ["mro", "mc2"], limit=4, **TWO_TASKS), run)
