"""``memory: marco``: the knowledge bank, the condenser schedule (T_c), guidance, persistence (fast tier)."""

from __future__ import annotations

import pytest

from metamod.llm.base import Generation
from metamod.memory import build_memory
from metamod.memory.base import GuidanceRequest, Observation
from metamod.memory.marco import MarcoMemory, MarcoOptions, clean_takeaway, parse_guidelines, rule_condense
from metamod.tasks.base import Example


class ScriptedCondenser:
    """A memory LLM that records its prompts and replies with fixed guideline lines."""

    def __init__(self, reply: str = "- Check the types of the arguments first.\n- Trace loops one step at a time."):
        self.reply, self.prompts = reply, []

    def chat(self, conversations, sampling):
        self.prompts += [c[-1]["content"] for c in conversations]
        return [Generation(text=self.reply) for _ in conversations]


def problem(i: int) -> Example:
    return Example(id=f"p{i}", question=f"problem {i}", gold="SECRET", kind="math")


def solve(memory, i: int, *texts: str) -> None:
    trace = {"id": f"p{i}", "takeaways": [{"agent": j, "text": t} for j, t in enumerate(texts)]}
    memory.observe(Observation(problem(i), trace, {"correct": False, "final_answer": None, "method": "marco"}))


def guidance(memory, i: int = 99, agent: int = 0):
    return memory.guidance(GuidanceRequest(problem(i), "debater", agent=agent, step=0, method="marco"))


def test_condenser_schedule_every_tc_problems_and_replacement():
    llm = ScriptedCondenser()
    mem = MarcoMemory(MarcoOptions(condense_every=4, max_knowledge=5), llm=llm)
    for batch in range(3):  # memory batches of 2 problems: condensation after batches 1 and 3 (problems 4 and 8)
        for k in range(2):
            solve(mem, batch * 2 + k, f"lesson {batch}-{k} about loops", f"lesson {batch}-{k} about types")
        mem.end_batch()
        if batch == 0:
            assert mem.counters["condensations"] == 0 and len(mem.bank) == 4 and guidance(mem).text == ""
        if batch == 1:
            assert mem.counters["condensations"] == 1 and mem.bank == [] and mem.scopes["-"]["problems_since"] == 0
            assert guidance(mem).text.splitlines() == [
                "- Check the types of the arguments first.",
                "- Trace loops one step at a time.",
            ]
            assert guidance(mem).item_ids == ("K9", "K10")
    # the first condensation saw all 8 takeaways; the bank was replaced
    assert len(llm.prompts) == 1 and llm.prompts[0].count("\n- lesson") == 8 and "at most 5" in llm.prompts[0]
    assert len(mem.bank) == 4 and mem.counters["condensations"] == 1  # batch 3 pending: 2 problems since
    solve(mem, 7, "one more")
    solve(mem, 8, "and another")
    mem.end_batch()
    assert mem.counters["condensations"] == 2
    # the second condensation reads the previous knowledge plus the new bank entries
    assert "- Check the types of the arguments first." in llm.prompts[1] and "- and another" in llm.prompts[1]
    assert [c["inputs"] for c in mem.condensations] == [8, 2 + 6]


def test_guidance_is_batch_synchronous_and_same_for_every_agent():
    mem = MarcoMemory(MarcoOptions(condense=False))
    solve(mem, 0, "Check empty inputs before indexing.")
    assert guidance(mem).text == ""  # not before end_batch
    mem.end_batch()
    assert guidance(mem, agent=0) == guidance(mem, agent=1)
    assert guidance(mem).text == "- Check empty inputs before indexing." and guidance(mem).item_ids == ("R1",)


def test_no_condenser_serves_the_raw_bank_capped_most_recent():
    mem = MarcoMemory(MarcoOptions(condense=False, max_served=2))
    for i in range(3):
        solve(mem, i, f"lesson number {i}")
    mem.end_batch()
    assert guidance(mem).text.splitlines() == ["- lesson number 2", "- lesson number 1"]  # newest first
    assert mem.counters["condensations"] == 0


def test_serve_pending_shows_entries_waiting_for_condensation():
    mem = MarcoMemory(MarcoOptions(condenser="rule", condense_every=10, serve_pending=True))
    solve(mem, 0, "Trace every loop iteration.")
    mem.end_batch()
    assert guidance(mem).text == "- Trace every loop iteration."


def test_unusable_condenser_reply_falls_back_to_rule_and_is_counted():
    mem = MarcoMemory(MarcoOptions(condense_every=1), llm=ScriptedCondenser(reply="I cannot help with that."))
    solve(mem, 0, "Check types first.", "check types first!")
    mem.end_batch()
    assert mem.counters["condense_fallbacks"] == 1 and mem.condensations[0]["fallback"] is True
    assert guidance(mem).text == "- check types first!"


def test_llm_condenser_needs_an_llm_but_rule_does_not():
    with pytest.raises(ValueError, match="needs a memory LLM"):
        MarcoMemory(MarcoOptions())
    assert MarcoMemory(MarcoOptions(condenser="rule")).llm is None
    assert MarcoMemory(MarcoOptions(condense=False)).llm is None
    with pytest.raises(ValueError, match="condenser must be one of"):
        MarcoOptions(condenser="magic")
    with pytest.raises(ValueError, match="condense_every must be >= 1"):
        MarcoOptions(condense_every=0)


def test_empty_takeaways_are_counted_and_traces_without_takeaways_add_nothing():
    mem = MarcoMemory(MarcoOptions(condense=False))
    solve(mem, 0, "   ", "")
    mem.observe(Observation(problem(1), {"id": "p1"}, {"correct": True, "final_answer": "1", "method": "cot"}))
    mem.end_batch()
    assert mem.bank == [] and mem.counters["takeaways_empty"] == 2


def test_save_load_round_trip(tmp_path):
    mem = MarcoMemory(MarcoOptions(condenser="rule", condense_every=2))
    solve(mem, 0, "Check types first.")
    solve(mem, 1, "Trace loops step by step.")
    mem.end_batch()
    solve(mem, 2, "Pending lesson.")
    folder = mem.save(tmp_path / "mem")
    again = MarcoMemory(MarcoOptions(condenser="rule", condense_every=2))
    again.load(folder)
    assert guidance(again) == guidance(mem)
    again.end_batch()
    assert again.bank[0]["text"] == "Pending lesson." and again.state_dict()["next_id"] == mem.next_id + 1


def test_scope_dataset_keeps_banks_apart_and_run_shares_one():
    def coded(i: int, dataset: str) -> Example:
        return Example(id=f"{dataset}{i}", question="?", gold="1", kind="math",
                       meta={"code": {"dataset": dataset, "subtask": "induction"}})  # fmt: skip

    for scope, shared in (("dataset", False), ("run", True)):
        mem = MarcoMemory(MarcoOptions(condense=False, scope=scope))
        trace = {"id": "a0", "takeaways": [{"agent": 0, "text": "A lesson from dataset a."}]}
        mem.observe(Observation(coded(0, "a"), trace, {"correct": True, "final_answer": "1", "method": "marco"}))
        mem.end_batch()
        other = mem.guidance(GuidanceRequest(coded(1, "b"), "debater", agent=0)).text
        same = mem.guidance(GuidanceRequest(coded(1, "a"), "debater", agent=0)).text
        assert same == "- A lesson from dataset a." and (other == same) is shared


def test_registry_builds_marco_with_options():
    mem = build_memory("marco", condenser="rule", condense_every=3)
    assert isinstance(mem, MarcoMemory) and mem.options.condense_every == 3


@pytest.mark.parametrize(
    "text, expected",
    [("Lesson: Check edge cases.", "Check edge cases."), ("1. Use types.", "Use types."), ("\n\n", "")],
)
def test_clean_takeaway(text, expected):
    assert clean_takeaway(text) == expected


def test_parse_guidelines_and_rule_condense():
    assert parse_guidelines("- a\n- Check b things.\n* Check b things!\n- Third item here.", 5) == [
        "Check b things.",
        "Third item here.",
    ]
    assert rule_condense(["a b c", "a b c d", "x y z"], 1) == ["a b c d"]


def test_marco_paper_raw_bank_fits_its_prompt_budget_at_any_bank_size():
    """marco_paper.yaml's MARCO v2 (no condenser) after a whole dataset's takeaways: the guidance a code agent gets
    stays inside max_model_len - max_tokens with room for the problem (issue: an uncapped bank overflowed 8192)."""
    from pathlib import Path

    import yaml

    from metamod.llm.budget import estimate_tokens
    from metamod.memory.base import render_guidance

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs/eval/marco_paper.yaml").read_text())
    options = {k: v for k, v in config["memory_options"].items() if k not in ("condenser",)}
    mem = MarcoMemory(MarcoOptions(**{**options, "condense": False, "condenser": "rule"}))
    for i in range(500):  # ~ the largest dataset's problems x 2 agents, every takeaway at the 300-character limit
        solve(mem, i, f"Takeaway {i}: " + "check the loop bounds and the empty input first " * 8)
    mem.end_batch()
    block = render_guidance(guidance(mem).text)
    budget = config["debater_backend_options"]["max_model_len"] - config["max_tokens"]
    assert estimate_tokens([{"role": "user", "content": block}]) <= budget // 2, "leave half for problem + history"
