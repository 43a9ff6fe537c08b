"""ACE memory (generator / reflector / curator over a bullet playbook), fast tier: a scripted fake memory LLM."""

from __future__ import annotations

import json
import re

import pytest

from metamod.llm.base import Generation
from metamod.memory.ace import ACEMemory, ACEOptions, Bullet, parse_operations, parse_reflection
from metamod.memory.base import Guidance, GuidanceRequest, Memory, Observation
from metamod.memory.registry import build_memory, needs_llm, parse_memory_options
from metamod.tasks.base import Example
from tests._memory_data import CAPITAL, PENS, PENS2, TRAIN, TRAIN2, NoGoldExample

QID = {PENS: "pens", PENS2: "pens2", TRAIN: "train", TRAIN2: "train2", CAPITAL: "capital"}
SOLUTIONS = {
    PENS: "12 * 3 = 36, so Mia has 36 pens. <answer>36</answer>",
    PENS2: "12 * 5 = 60 pens. <answer>60</answer>",
    TRAIN: "Distance = 60 * 2 = 120 km. <answer>120</answer>",
    TRAIN2: "80 * 3 = 240 km. <answer>240</answer>",
    CAPITAL: "The capital is Paris. <answer>Paris</answer>",
}
GROUPS = "Multiply the size of one group by the number of groups."
SPEED = "Distance equals speed multiplied by the travel time."


class FakeLLM:
    """A scripted Generator: ``reflect[word]`` / ``curate[word]`` by the first key found in the prompt's problem."""

    name = "fake-memory-llm"
    context_length = None

    def __init__(self, reflect: dict[str, str] | None = None, curate: dict[str, str] | None = None) -> None:
        self.reflect = reflect or {"": "HELPFUL: none\nHARMFUL: none\nINSIGHT: Set up the quantities before computing."}
        self.curate = curate or {
            "pens": f"ADD strategy: {GROUPS}",
            "train": f"ADD formula: {SPEED}",
            "": "NONE",
        }
        self.calls: list[list[list[dict]]] = []

    def chat(self, conversations, sampling):
        self.calls.append(conversations)
        out = []
        for conv in conversations:
            content = conv[-1]["content"]
            problem = content.split("\nProblem:\n", 1)[1].split("\n", 1)[0].lower()
            table = self.reflect if "INSIGHT:" in content else self.curate
            out.append(Generation(text=next(v for k, v in table.items() if k in problem)))
        return out

    def stages(self) -> list[str]:
        return ["reflect" if "INSIGHT:" in call[0][0]["content"] else "curate" for call in self.calls]

    def contents(self) -> list[str]:
        return [m["content"] for call in self.calls for conv in call for m in conv]


def ex(id_: str, question: str, gold: str = "GOLD-XYZ") -> Example:
    return Example(id=id_, question=question, gold=gold, kind="math")


def observation(example: Example, *, correct: bool = True, served=()) -> Observation:
    trace = {"id": example.id, "rounds": [], "gold": "SECRET-GOLD", "single": {"texts": [SOLUTIONS[example.question]]}}
    return Observation(example, trace, {"correct": correct, "final_answer": "7", "method": "cot"}, served=served)


def make(fake: FakeLLM | None = None, **options) -> tuple[ACEMemory, FakeLLM]:
    fake = fake or FakeLLM()
    return ACEMemory(ACEOptions(**options), llm=fake), fake


def run_batch(ace: ACEMemory, questions: list[str], *, correct: bool = True) -> dict[str, Guidance]:
    examples = [ex(QID[q], q) for q in questions]
    ace.begin_batch(examples)
    shown = {e.question: ace.guidance(GuidanceRequest(e, "single")) for e in examples}
    for e in examples:
        ace.observe(observation(e, correct=correct, served=ace.served_ids(e.id)))
    ace.end_batch()
    return shown


def counts(ace: ACEMemory) -> list[tuple[str, int, int]]:
    return [(b.id, b.helpful, b.harmful) for b in ace.bullets]


# ---------------------------------------------------------------- parsers
def test_parse_reflection_reads_tags_ignores_unserved_ids_and_conflicts():
    served = ["A1", "A2", "b00007"]
    reply = "- **HELPFUL**: A1, [b00007], A42\nHARMFUL: A2 and A1\nKey insight: Check the units at every step."
    assert parse_reflection(reply, served) == {
        "helpful": ["b00007"],
        "harmful": ["A2"],
        "insight": "Check the units at every step.",
    }
    per_id = "[A1] helpful\nA2 = harmful\nA9: harmful\nINSIGHT: Too short"
    assert parse_reflection(per_id, served) == {"helpful": ["A1"], "harmful": ["A2"], "insight": ""}
    for garbage in ("", "HELPFUL", "The tips were great!!", "INSIGHT:", "\x00\x01 ::: ---"):
        assert parse_reflection(garbage, served) == {"helpful": [], "harmful": [], "insight": ""}


def test_parse_operations_reads_add_lines_and_skips_garbage():
    reply = f"Here you go:\n1. ADD strategy: {GROUPS}\n* add: Check: Compare the result with a rough estimate.\nformula: {SPEED}"
    assert parse_operations(reply) == [
        ("strategy", GROUPS),
        ("check", "Compare the result with a rough estimate."),
        ("formula", SPEED),
    ]
    for garbage in (
        "NONE",
        "",
        "ADD",
        "ADD: nothing",
        "REVISE strategy: Some revised text here.",
        "Lesson: this was hard to do",
    ):
        assert parse_operations(garbage) == [], garbage


# ---------------------------------------------------------------- update rules
def test_bullets_are_added_from_the_curator_with_ids_sections_and_batches():
    ace, fake = make()
    run_batch(ace, [PENS, TRAIN])
    assert [(b.id, b.section, b.text, b.created_batch, b.question) for b in ace.bullets] == [
        ("A1", "strategy", GROUPS, 0, PENS),
        ("A2", "formula", SPEED, 0, TRAIN),
    ]
    assert fake.stages() == ["reflect", "curate"] and [len(c) for c in fake.calls] == [2, 2]  # batched per stage


def test_reflection_tags_update_the_served_bullets_counters():
    reflect = {
        "5 boxes": "HELPFUL: A1\nHARMFUL: A2, A99\nINSIGHT: Equal groups multiply, they never add up.",
        "": "HELPFUL: none\nHARMFUL: none\nINSIGHT: Set up the quantities before computing.",
    }
    curate = {"5 boxes": "NONE", "pens": f"ADD strategy: {GROUPS}", "train": f"ADD formula: {SPEED}"}
    ace, fake = make(FakeLLM(reflect=reflect, curate=curate), top_k=2)
    run_batch(ace, [PENS, TRAIN])
    shown = run_batch(ace, [PENS2])
    assert shown[PENS2].item_ids == ("A1", "A2")
    prompt = fake.calls[2][0][0]["content"]
    assert f"[A1] strategy: {GROUPS}" in prompt and f"[A2] formula: {SPEED}" in prompt
    assert counts(ace) == [("A1", 1, 0), ("A2", 0, 1)]
    assert ace.stats()["tagged_helpful"] == 1 and ace.stats()["tagged_harmful"] == 1


def test_a_duplicate_bullet_bumps_the_existing_helpful_count_instead_of_adding():
    ace, _ = make()
    run_batch(ace, [PENS])
    run_batch(ace, [PENS2])  # the curator proposes the same text again
    assert counts(ace) == [("A1", 1, 0)] and ace.stats()["bullets_deduplicated"] == 1
    loose, _ = make(dedup_threshold=1.0)
    run_batch(loose, [PENS])
    loose.bullets[0].text = GROUPS.replace("one group", "a group")  # near, not identical
    loose._reindex()
    run_batch(loose, [PENS2])
    assert [b.id for b in loose.bullets] == ["A1", "A2"]


def test_bullets_whose_harm_exceeds_the_threshold_are_pruned():
    reflect = {
        "5 boxes": "HARMFUL: A1\nINSIGHT: Count the groups before multiplying anything.",
        "": FakeLLM().reflect[""],
    }
    curate = {"3 boxes": f"ADD strategy: {GROUPS}", "": "NONE"}
    ace, _ = make(FakeLLM(reflect=reflect, curate=curate), prune_threshold=1)
    run_batch(ace, [PENS])
    run_batch(ace, [PENS2])
    assert counts(ace) == [("A1", 0, 1)]  # 1 - 0 = 1 is not above the threshold
    run_batch(ace, [PENS2])
    assert ace.bullets == [] and ace.stats()["bullets_pruned"] == 1


def test_the_curator_makes_at_most_max_new_operations_per_sample():
    tips = [
        GROUPS,
        SPEED,
        "Give each unknown its own letter.",
        "Draw the setup and label it.",
        "Estimate first, then compute.",
    ]
    curate = {"pens": "\n".join(f"ADD s{i}: {tip}" for i, tip in enumerate(tips)), "": "NONE"}
    ace, _ = make(FakeLLM(curate=curate), max_new=2)
    run_batch(ace, [PENS])
    assert [b.section for b in ace.bullets] == ["s0", "s1"] and ace.stats()["operations_rejected"] == 3


def test_guidance_is_top_k_by_similarity_with_ties_by_helpful_minus_harmful():
    ace, _ = make(top_k=2)
    same = {"section": "tip", "text": "Work out the number of groups first.", "question": PENS}
    ace.load_state_dict(
        {
            "bullets": [
                {"id": "A1", **same, "helpful": 1, "harmful": 3},
                {"id": "A2", **same, "helpful": 2, "harmful": 0},
                {"id": "A3", "section": "formula", "text": SPEED, "question": TRAIN, "helpful": 9},
            ],
            "next_uid": 4,
        }
    )
    g = ace.guidance(GuidanceRequest(ex("n", PENS2), "single"))
    assert g.item_ids == ("A2", "A1") and g.text.splitlines()[0] == "- tip: Work out the number of groups first."
    assert ace.guidance(GuidanceRequest(ex("t", TRAIN2), "judge")).item_ids[0] == "A3"


def test_garbage_replies_change_nothing_and_the_memory_keeps_working():
    ace, fake = make(FakeLLM(reflect={"": "lol"}, curate={"": "???"}))
    run_batch(ace, [PENS, CAPITAL])
    assert ace.bullets == [] and ace.stats()["reflections_empty"] == 2
    assert fake.stages() == ["reflect"]  # no insight: no curator call at all
    fake.reflect = FakeLLM().reflect
    fake.curate = {"": f"ADD strategy: {GROUPS}"}
    run_batch(ace, [PENS])
    assert [b.text for b in ace.bullets] == [GROUPS]


def test_the_format_example_echoed_back_is_not_stored():
    echo_reflect = (
        "HELPFUL: none\nHARMFUL: none\nINSIGHT: Recheck each condition of the problem once the result is found."
    )
    echo_curate = "ADD mistake: Keep the sign of a term when moving it to the other side of an equation."
    ace, fake = make(FakeLLM(reflect={"train": echo_reflect, "": FakeLLM().reflect[""]}, curate={"": echo_curate}))
    run_batch(ace, [PENS, TRAIN])
    assert ace.bullets == [] and ace.stats()["reflections_empty"] == 1 and len(fake.calls[1]) == 1


# ---------------------------------------------------------------- corpus warm start
def test_corpus_warm_start_uses_the_behaviours_as_bullets(tmp_path):
    rows = [
        {"id": "b1", "name": "equal-groups", "description": GROUPS, "domain": "arith", "question": PENS},
        {"id": "b2", "name": "speed-time", "description": SPEED, "domain": "physics", "question": TRAIN},
        {"id": "b3", "name": "name-unknowns", "description": "Give each unknown a letter.", "domain": "arith"},
    ]
    (tmp_path / "behaviours.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ace, _ = make(corpus=str(tmp_path), max_entries=2, top_k=1)
    assert [(b.id, b.section, b.source) for b in ace.bullets] == [
        ("b1", "equal-groups", "corpus"),
        ("b2", "speed-time", "corpus"),
    ]
    g = ace.guidance(GuidanceRequest(ex("n", PENS2), "single"))
    assert g == Guidance(f"- equal-groups: {GROUPS}", ("b1",))
    cold, _ = make()
    assert cold.bullets == [] and cold.guidance(GuidanceRequest(ex("n", PENS2), "single")) == Guidance()


# ---------------------------------------------------------------- protocol rules
def test_guidance_changes_only_after_end_batch_and_observe_order_does_not_matter():
    states = []
    for order in ([0, 1, 2], [2, 1, 0]):
        ace, fake = make()
        run_batch(ace, [PENS, TRAIN])
        batch = [ex("a", PENS2), ex("b", TRAIN2), ex("c", CAPITAL)]
        ace.begin_batch(batch)
        before = [ace.guidance(GuidanceRequest(e, "single")) for e in batch]
        for i in order:
            ace.observe(observation(batch[i], served=ace.served_ids(batch[i].id)))
            assert [ace.guidance(GuidanceRequest(e, "single")) for e in batch] == before
            assert len(ace.bullets) == 2 and counts(ace) == [("A1", 0, 0), ("A2", 0, 0)]
        ace.end_batch()
        states.append((json.dumps(ace.state_dict(), sort_keys=True), fake.contents()))
    assert states[0] == states[1]


def test_no_gold_is_read_and_none_reaches_a_prompt():
    ace, fake = make()
    run_batch(ace, [PENS, TRAIN])
    probe = NoGoldExample(id="p", question=PENS2, gold="60", kind="math")
    ace.begin_batch([probe])
    g = ace.guidance(GuidanceRequest(probe, "single"))
    other, _ = make()
    other.load_state_dict(ace.state_dict())
    assert other.guidance(GuidanceRequest(ex("p", PENS2, gold="61"), "single")) == g
    assert not any(s in c for c in fake.contents() for s in ("SECRET-GOLD", "GOLD-XYZ"))


def test_save_load_identity(tmp_path):
    live, _ = make()
    run_batch(live, [PENS, TRAIN])
    live.save(tmp_path / "after")
    loaded, _ = make()
    loaded.load(tmp_path / "after")
    assert loaded.state_dict() == live.state_dict() and loaded.batch_index == 1
    assert run_batch(live, [PENS2, TRAIN2]) == run_batch(loaded, [PENS2, TRAIN2])
    assert json.dumps(loaded.state_dict(), sort_keys=True) == json.dumps(live.state_dict(), sort_keys=True)
    e = ex("m", CAPITAL)
    g = live.guidance(GuidanceRequest(e, "single"))
    live.observe(observation(e, served=live.served_ids("m")))
    live.save(tmp_path / "mid")
    again, fake = make()
    again.load(tmp_path / "mid")
    assert again.guidance(GuidanceRequest(e, "single")) == g and fake.calls == []
    live.end_batch()
    again.end_batch()
    assert again.state_dict() == live.state_dict()
    with pytest.raises(ValueError, match="bullet ids must be unique"):
        again.load_state_dict({"bullets": [asdict_bullet("A1"), asdict_bullet("A1")], "next_uid": 5})
    with pytest.raises(ValueError, match="below next_uid"):
        again.load_state_dict({"bullets": [asdict_bullet("A7")], "next_uid": 5})


def asdict_bullet(id_: str) -> dict:
    return Bullet(id=id_, section="s", text="Some tip text here.").__dict__


def test_prompts_never_carry_the_outcome_unless_use_correctness():
    runs = {}
    for correct in (True, False):
        ace, fake = make()
        run_batch(ace, [PENS, TRAIN], correct=correct)
        run_batch(ace, [PENS2, TRAIN2], correct=correct)
        runs[correct] = fake.contents()
    assert runs[True] == runs[False] and runs[True]
    assert not any(re.search(r"\b(correct|wrong)\b", c) for c in runs[True])
    told, fake = make(use_correctness=True)
    run_batch(told, [PENS], correct=False)
    reflector = fake.calls[0][0][0]["content"]
    assert "The final answer of this solution was wrong." in reflector


# ---------------------------------------------------------------- construction and options
def test_missing_memory_llm_is_a_one_line_error_naming_memory_model():
    for build in (lambda: ACEMemory(), lambda: build_memory("ace")):
        with pytest.raises(ValueError, match=r"^memory 'ace' needs a memory LLM: set memory_model") as err:
            build()
        assert "\n" not in str(err.value)
    assert needs_llm("ace")
    ace = build_memory("ace", llm=FakeLLM(), top_k=3)
    assert isinstance(ace, Memory) and ace.name == "ace" and ace.options.top_k == 3


def test_options_errors_name_the_field():
    with pytest.raises(
        ValueError, match="'curator' is not an option of memory 'ace'; valid: cold_start, corpus, curator_max_tokens"
    ):
        parse_memory_options("ace", {"curator": "cumulative"})
    for bad, match in (
        ({"max_new": 0}, "max_new must be an integer >= 1"),
        ({"top_k": None}, "top_k must be an integer >= 1"),
        ({"dedup_threshold": 0.0}, "dedup_threshold must be in"),
        ({"prune_threshold": -1}, "prune_threshold must be an integer >= 0"),
        ({"embedder": "sentence-transformers"}, "needs embedder_model"),
    ):
        with pytest.raises(ValueError, match=match):
            ACEOptions(**bad)
