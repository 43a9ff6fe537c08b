"""Dynamic Cheatsheet memory (DC-Cu and DC-RS), fast tier: a scripted fake memory LLM, no real model."""

from __future__ import annotations

import json
import re

import pytest

from metamod.llm.base import Generation
from metamod.memory.base import Guidance, GuidanceRequest, Memory, Observation
from metamod.memory.curation import load_corpus, parse_entries, select_corpus
from metamod.memory.dc import DCOptions, DynamicCheatsheet
from metamod.memory.registry import build_memory, needs_llm, parse_memory_options
from metamod.tasks.base import Example
from tests._memory_data import CAPITAL, PENS, PENS2, TRAIN, TRAIN2, NoGoldExample

SOLUTIONS = {
    PENS: "12 * 3 = 36, so Mia has 36 pens. <answer>36</answer>",
    PENS2: "12 * 5 = 60 pens. <answer>60</answer>",
    TRAIN: "Distance = 60 * 2 = 120 km. <answer>120</answer>",
    TRAIN2: "80 * 3 = 240 km. <answer>240</answer>",
    CAPITAL: "The capital is Paris. <answer>Paris</answer>",
}
QID = {PENS: "pens", PENS2: "pens2", TRAIN: "train", TRAIN2: "train2", CAPITAL: "capital"}
#: curator replies, keyed by a word of the curated problem
CURATE = {
    "5 boxes": "REVISE count-groups: Multiply the size of one group by how many groups there are.\n"
    "REVISE no-such-entry: This target does not exist at all.",
    "pens": "count-groups: Multiply the group size by the number of groups.",
    "80 km": "1. speed-time: Distance is speed times time, keep the units.\n2. **check-units**: Convert hours "
    "before multiplying anything.\n- unit-sanity: Compare the size of the result with the inputs.\n"
    "fourth-tip: This one is over the limit of new tips.\nfifth-tip: So is this one, it is dropped too.",
    "train": "speed-time: Distance is speed times time, keep the units.",
    "capital": "The capital is Paris, I am sure: no tips to add here\nNONE\nanswer: Paris is correct.",
}


class FakeLLM:
    """A scripted Generator: curator replies from :data:`CURATE`, syntheses from ``synthesis``; records calls."""

    name = "fake-memory-llm"
    context_length = None

    def __init__(self, synthesis: str = "groups-rule: Multiply items per group by the number of groups.") -> None:
        self.calls: list[list[list[dict]]] = []
        self.synthesis = synthesis

    def chat(self, conversations, sampling):
        self.calls.append(conversations)
        out = []
        for conv in conversations:
            content = conv[-1]["content"]
            if "New problem:" in content:
                out.append(Generation(text=self.synthesis))
                continue
            problem = content.split("\nProblem:\n", 1)[1].split("\n", 1)[0]
            out.append(Generation(text=next(v for k, v in CURATE.items() if k in problem)))
        return out

    def contents(self) -> list[str]:
        return [m["content"] for call in self.calls for conv in call for m in conv]


def ex(id_: str, question: str, gold: str = "GOLD-XYZ") -> Example:
    return Example(id=id_, question=question, gold=gold, kind="math")


def observation(example: Example, *, correct: bool = True, served=()) -> Observation:
    trace = {
        "id": example.id,
        "rounds": [],
        "gold": "SECRET-GOLD",
        "single": {"texts": ["draft", SOLUTIONS[example.question]]},
    }
    return Observation(example, trace, {"correct": correct, "final_answer": "7", "method": "cot"}, served=served)


def make(**options) -> tuple[DynamicCheatsheet, FakeLLM]:
    fake = FakeLLM()
    return DynamicCheatsheet(DCOptions(**options), llm=fake), fake


def run_batch(dc: DynamicCheatsheet, questions: list[str], *, correct: bool = True) -> dict[str, Guidance]:
    """One memory batch: guidance for every question, then the observations (with served ids) and end_batch."""
    examples = [ex(QID[q], q) for q in questions]
    dc.begin_batch(examples)
    shown = {e.question: dc.guidance(GuidanceRequest(e, "single")) for e in examples}
    for e in examples:
        dc.observe(observation(e, correct=correct, served=dc.served_ids(e.id)))
    dc.end_batch()
    return shown


def write_corpus(folder, rows) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "behaviours.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


CORPUS = [
    {"id": "b00001", "name": "check-units", "description": "Convert every quantity to one unit first.",
     "domain": "physics", "question": TRAIN, "correct": True},
    {"id": "b00002", "name": "equal-groups", "description": "Multiply the group size by the number of groups.",
     "domain": "arith", "question": PENS, "correct": True},
    {"id": "b00003", "name": "name-the-unknown", "description": "Give the unknown a letter before writing equations.",
     "domain": "arith", "question": "Solve 2x + 3 = 9.", "correct": None},
    {"id": "b00004", "name": "draw-it", "description": "Sketch the motion and label each known distance.",
     "domain": "physics", "question": TRAIN2, "correct": False},
]  # fmt: skip


# ---------------------------------------------------------------- parser
def test_parse_entries_reads_tips_and_revisions_and_skips_garbage():
    assert parse_entries(CURATE["80 km"])[:2] == [
        ("add", "speed-time", "Distance is speed times time, keep the units."),
        ("add", "check-units", "Convert hours before multiplying anything."),
    ]
    assert parse_entries("* REVISE: Check Units: Convert hours and minutes first, always.") == [
        ("revise", "check-units", "Convert hours and minutes first, always.")
    ]
    for garbage in (
        CURATE["capital"],
        "",
        "   \n\n",
        "::::",
        "Problem: Mia buys pens and boxes of pens",
        "a very long name that is really a whole sentence: with a description of words",
        "x" * 5000,
    ):
        assert parse_entries(garbage) == [], garbage


# ---------------------------------------------------------------- DC-Cu update rules
def test_cumulative_adds_at_most_max_new_entries_per_sample():
    dc, _ = make()
    run_batch(dc, [TRAIN2])
    assert [e.name for e in dc.entries] == ["speed-time", "check-units", "unit-sanity"]
    assert [e.id for e in dc.entries] == ["C1", "C2", "C3"]
    assert dc.entries[0].question == TRAIN2 and dc.entries[0].source == "llm"
    assert dc.stats()["entries_added"] == 3 and dc.stats()["edits_rejected"] == 2


def test_cumulative_applies_a_revision_and_rejects_an_unknown_target():
    dc, _ = make()
    run_batch(dc, [PENS])
    assert [(e.id, e.description) for e in dc.entries] == [("C1", "Multiply the group size by the number of groups.")]
    run_batch(dc, [PENS2])
    assert [(e.id, e.name, e.description, e.revisions) for e in dc.entries] == [
        ("C1", "count-groups", "Multiply the size of one group by how many groups there are.", 1)
    ]
    assert dc.stats()["entries_revised"] == 1 and dc.stats()["edits_rejected"] == 1


def test_a_duplicate_name_and_an_echoed_entry_are_not_added():
    dc, _ = make()
    run_batch(dc, [TRAIN])
    run_batch(dc, [TRAIN])  # the same reply again: its entry is already in the cheatsheet (and in the prompt)
    assert [e.name for e in dc.entries] == ["speed-time"] and dc.stats()["edits_rejected"] == 1


def test_garbage_replies_change_nothing_and_the_memory_keeps_working():
    dc, fake = make()
    run_batch(dc, [CAPITAL])
    assert dc.entries == [] and dc.stats()["replies_empty"] == 1
    run_batch(dc, [PENS])
    assert [e.name for e in dc.entries] == ["count-groups"] and len(fake.calls) == 2


def test_sequential_curation_is_one_call_per_sample_and_cumulative():
    dc, fake = make()
    run_batch(dc, [TRAIN, PENS])
    assert [len(call) for call in fake.calls] == [1, 1]
    first, second = (call[0][0]["content"] for call in fake.calls)
    # records are curated in canonical order; the later prompt shows the entry the earlier one added
    added_first = dc.entries[0]
    assert f"- {added_first.name}: {added_first.description}" in second
    assert "Current cheatsheet:\n(empty)" in first


def test_batched_curation_is_one_call_from_the_batch_start_cheatsheet():
    dc, fake = make(curation="batched")
    run_batch(dc, [TRAIN, PENS])
    assert [len(call) for call in fake.calls] == [2]
    assert all("Current cheatsheet:\n(empty)" in conv[0]["content"] for conv in fake.calls[0])
    assert sorted(e.name for e in dc.entries) == ["count-groups", "speed-time"]


def test_cap_evicts_the_least_recently_used_entry():
    dc, _ = make(max_entries=4, top_k=1)
    run_batch(dc, [PENS, TRAIN])  # canonical order (by id): pens -> count-groups C1, train -> speed-time C2
    assert [(e.id, e.name) for e in dc.entries] == [("C1", "count-groups"), ("C2", "speed-time")]
    shown = run_batch(dc, [TRAIN2])  # served speed-time; the curator adds three new entries
    assert shown[TRAIN2].item_ids == ("C2",)
    assert [e.id for e in dc.entries] == ["C2", "C3", "C4", "C5"]  # C1 was never served: it goes
    assert dc.entries[0].uses == 1 and dc.entries[0].last_batch == 1 and dc.stats()["entries_evicted"] == 1


def test_eviction_order_on_a_hand_built_cheatsheet():
    dc, _ = make(max_entries=3)
    dc.load_state_dict(
        {
            "entries": [
                {"id": "C1", "name": "old-unused", "description": "A tip nobody was shown lately.", "last_batch": 0},
                {"id": "C2", "name": "old-used", "description": "A tip that was shown a lot.", "last_batch": 0, "uses": 5},
                {"id": "C3", "name": "recent", "description": "A tip from the last batch.", "last_batch": 1,
                 "created_batch": 1},
            ],
            "next_uid": 4,
        }
    )  # fmt: skip
    dc.batch_index = 2
    dc._apply({"question": PENS}, [("add", "fresh-tip", "Brand new tip written just now.")], "")
    assert [e.name for e in dc.entries] == ["old-used", "recent", "fresh-tip"]  # same last use: fewer uses go first
    assert dc.entries[-1].id == "C4" and dc.entries[-1].created_batch == 2


def test_guidance_is_top_k_most_relevant_or_the_whole_cheatsheet_within_budget():
    dc, _ = make(top_k=1)
    run_batch(dc, [PENS, TRAIN])
    g = dc.guidance(GuidanceRequest(ex("n", TRAIN2), "single"))
    assert g.text == "- speed-time: Distance is speed times time, keep the units." and len(g.item_ids) == 1
    whole = DynamicCheatsheet(DCOptions(top_k=None), llm=FakeLLM())
    whole.load_state_dict(dc.state_dict())
    text = whole.guidance(GuidanceRequest(ex("n", PENS2), "reasoner")).text
    assert text.splitlines()[0].startswith("- count-groups:") and len(text.splitlines()) == 2
    tight = DynamicCheatsheet(DCOptions(top_k=None, max_chars=20), llm=FakeLLM())
    tight.load_state_dict(dc.state_dict())
    assert len(tight.guidance(GuidanceRequest(ex("n", PENS2), "single")).text.splitlines()) == 1


# ---------------------------------------------------------------- DC-RS
def test_retrieval_synthesis_retrieves_the_similar_pair_in_one_call_per_batch_without_gold():
    dc, fake = make(curator="retrieval_synthesis", top_k=1)
    run_batch(dc, [PENS, TRAIN])
    assert fake.calls == []  # nothing stored yet: no synthesis, no call
    assert [(p.id, p.question, p.solution) for p in dc.pairs] == [
        ("P1", PENS, SOLUTIONS[PENS]),
        ("P2", TRAIN, SOLUTIONS[TRAIN]),
    ]
    pens_id = "P1"
    probes = [NoGoldExample(id="p", question=PENS2, gold="60", kind="math"),
              NoGoldExample(id="t", question=TRAIN2, gold="240", kind="math")]  # fmt: skip
    dc.begin_batch(probes)
    assert [len(call) for call in fake.calls] == [2]
    pens_prompt = next(c[0]["content"] for c in fake.calls[0] if PENS2 in c[0]["content"])
    assert SOLUTIONS[PENS] in pens_prompt and SOLUTIONS[TRAIN] not in pens_prompt
    g = dc.guidance(GuidanceRequest(probes[0], "single"))
    assert g == Guidance("- groups-rule: Multiply items per group by the number of groups.", (pens_id,))
    assert dc.guidance(GuidanceRequest(probes[1], "debater", agent=0, step=1)).item_ids == ("P2",)
    assert len(fake.calls) == 1  # guidance is served from the batch's synthesis


def test_retrieval_synthesis_falls_back_to_the_retrieved_corpus_behaviours(tmp_path):
    write_corpus(tmp_path / "mine", CORPUS)
    fake = FakeLLM(synthesis="I cannot help with that.")
    dc = DynamicCheatsheet(DCOptions(curator="retrieval_synthesis", top_k=1, corpus=str(tmp_path / "mine")), llm=fake)
    g = dc.guidance(GuidanceRequest(ex("n", PENS2), "single"))
    assert g == Guidance("- equal-groups: Multiply the group size by the number of groups.", ("b00002",))
    assert dc.stats()["synthesis_fallbacks"] == 1 and len(fake.calls) == 1


def test_retrieval_synthesis_stores_pairs_up_to_the_cap():
    dc, _ = make(curator="retrieval_synthesis", max_entries=2)
    run_batch(dc, [PENS, TRAIN])
    run_batch(dc, [CAPITAL])
    assert len(dc.pairs) == 2 and dc.pairs[-1].question == CAPITAL and dc.stats()["pairs_evicted"] == 1


# ---------------------------------------------------------------- corpus warm start
def test_corpus_warm_start_takes_max_entries_round_robin_over_domains(tmp_path):
    write_corpus(tmp_path / "mine", CORPUS)
    dc = DynamicCheatsheet(DCOptions(corpus=str(tmp_path / "mine"), max_entries=3, top_k=1), llm=FakeLLM())
    assert [e.id for e in dc.entries] == ["b00001", "b00002", "b00004"]
    assert all(e.source == "corpus" for e in dc.entries)
    g = dc.guidance(GuidanceRequest(ex("n", PENS2), "single"))
    assert g.item_ids == ("b00002",)
    assert [r["id"] for r in select_corpus(load_corpus(tmp_path / "mine" / "behaviours.jsonl"), 10)] == [
        "b00001", "b00002", "b00004", "b00003"
    ]  # fmt: skip


def test_static_dc_cu_serves_the_warm_start_cheatsheet_and_never_curates(tmp_path):
    """Table 1's static DC-Cu: the same warm-start cheatsheet and retrieval as the online row, no curator, no LLM."""
    write_corpus(tmp_path / "mine", CORPUS)
    static = DynamicCheatsheet(DCOptions(corpus=str(tmp_path / "mine"), top_k=2, online=False))  # no llm needed
    online, _ = make(corpus=str(tmp_path / "mine"), top_k=2)
    assert not DynamicCheatsheet.wants_llm(static.options) and not needs_llm("dc", {"online": False})
    first = run_batch(static, [PENS, TRAIN])
    assert first == {q: online.guidance(GuidanceRequest(ex(QID[q], q), "single")) for q in (PENS, TRAIN)}
    entries = [(e.id, e.description) for e in static.entries]
    assert run_batch(static, [PENS2, TRAIN2, PENS]) and [(e.id, e.description) for e in static.entries] == entries
    assert static.stats()["curator_calls"] == 0 and static.stats()["entries"] == len(CORPUS)
    with pytest.raises(ValueError, match="static DC-RS .* is the metacognitive_reuse row"):
        DCOptions(curator="retrieval_synthesis", online=False)
    with pytest.raises(ValueError, match="cold_start needs online: true"):
        DCOptions(cold_start=True, online=False)


def test_bad_corpus_paths_and_rows_fail_with_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no behaviours.jsonl"):
        DynamicCheatsheet(DCOptions(corpus=str(tmp_path / "nowhere")), llm=FakeLLM())
    write_corpus(tmp_path / "bad", [CORPUS[0], {"id": "b9", "name": "", "description": "x", "domain": "m"}, CORPUS[1]])
    with pytest.raises(ValueError, match=r"behaviours.jsonl:2: behaviour field 'name' must be a non-empty string"):
        load_corpus(tmp_path / "bad")
    write_corpus(tmp_path / "short", [{"id": "b9", "name": "n", "description": "x"}])  # the one reader's rules
    with pytest.raises(ValueError, match=r"behaviours.jsonl:1: behaviour row is missing \['domain'\]"):
        load_corpus(tmp_path / "short")


# ---------------------------------------------------------------- protocol rules
@pytest.mark.parametrize("curator", ["cumulative", "retrieval_synthesis"])
def test_guidance_changes_only_after_end_batch_and_observe_order_does_not_matter(curator):
    states = []
    for order in ([0, 1, 2], [2, 0, 1]):
        dc, fake = make(curator=curator)
        run_batch(dc, [PENS, TRAIN])
        batch = [ex("a", PENS2), ex("b", TRAIN2), ex("c", CAPITAL)]
        dc.begin_batch(batch)
        before = [dc.guidance(GuidanceRequest(e, "single")) for e in batch]
        snapshot = json.dumps(dc.state_dict(), sort_keys=True)
        for i in order:
            dc.observe(observation(batch[i], served=dc.served_ids(batch[i].id)))
            assert [dc.guidance(GuidanceRequest(e, "single")) for e in batch] == before
            assert json.dumps(dc.state_dict(), sort_keys=True) == snapshot
        dc.end_batch()
        states.append((json.dumps(dc.state_dict(), sort_keys=True), fake.contents()))
    assert states[0] == states[1]


@pytest.mark.parametrize("curator", ["cumulative", "retrieval_synthesis"])
def test_save_load_identity(tmp_path, curator):
    live, _ = make(curator=curator)
    run_batch(live, [PENS, TRAIN])
    live.save(tmp_path / "after")
    loaded, _ = make(curator=curator)
    loaded.load(tmp_path / "after")
    assert loaded.state_dict() == live.state_dict() and loaded.batch_index == 1
    assert run_batch(live, [PENS2, TRAIN2]) == run_batch(loaded, [PENS2, TRAIN2])
    assert json.dumps(loaded.state_dict(), sort_keys=True) == json.dumps(live.state_dict(), sort_keys=True)
    # mid-batch: the prepared synthesis, served guidance and a queued observation survive without a new call
    e = ex("m", CAPITAL)
    live.begin_batch([e])
    g = live.guidance(GuidanceRequest(e, "single"))
    live.observe(observation(e))
    live.save(tmp_path / "mid")
    again, fake = make(curator=curator)
    again.load(tmp_path / "mid")
    assert again.guidance(GuidanceRequest(e, "single")) == g and fake.calls == []
    live.end_batch()
    again.end_batch()
    assert again.state_dict() == live.state_dict()
    assert "SECRET-GOLD" not in (tmp_path / "mid" / "manifest.json").read_text()


@pytest.mark.parametrize("curator", ["cumulative", "retrieval_synthesis"])
def test_prompts_never_carry_the_outcome_unless_use_correctness(curator):
    runs = {}
    for correct in (True, False):
        dc, fake = make(curator=curator)
        run_batch(dc, [PENS, TRAIN], correct=correct)
        run_batch(dc, [PENS2, TRAIN2], correct=correct)
        runs[correct] = fake.contents()
    assert runs[True] == runs[False] and runs[True]
    assert not any(re.search(r"\b(correct|wrong)\b", c) for c in runs[True])
    assert not any(s in c for c in runs[True] for s in ("SECRET-GOLD", "GOLD-XYZ"))
    told, fake = make(curator=curator, use_correctness=True)
    run_batch(told, [PENS, TRAIN], correct=False)
    run_batch(told, [PENS2, TRAIN2], correct=False)
    assert any("The final answer of this solution was wrong." in c for c in fake.contents())


# ---------------------------------------------------------------- construction and options
def test_missing_memory_llm_is_a_one_line_error_naming_memory_model():
    for build in (lambda: DynamicCheatsheet(), lambda: build_memory("dc", curator="retrieval_synthesis")):
        with pytest.raises(ValueError, match=r"^memory 'dc' needs a memory LLM: set memory_model") as err:
            build()
        assert "\n" not in str(err.value)
    assert needs_llm("dc") and DynamicCheatsheet.wants_llm(DCOptions())
    dc = build_memory("dc", llm=FakeLLM(), top_k=2)
    assert isinstance(dc, Memory) and dc.name == "dc" and dc.options.top_k == 2


def test_options_errors_name_the_field():
    with pytest.raises(ValueError, match="'topk' is not an option of memory 'dc'; valid: cold_start, corpus, curation"):
        parse_memory_options("dc", {"topk": 3})
    for bad, match in (
        ({"curator": "rs"}, "curator must be one of"),
        ({"curation": "parallel"}, "curation must be one of"),
        ({"max_new": 0}, "max_new must be an integer >= 1"),
        ({"max_entries": True}, "max_entries must be an integer"),
        ({"top_k": None, "curator": "retrieval_synthesis"}, "top_k: null"),
        ({"embedder": "bert"}, "embedder='bert' is not known"),
    ):
        with pytest.raises(ValueError, match=match):
            DCOptions(**bad)
    assert DCOptions(top_k=None).top_k is None
