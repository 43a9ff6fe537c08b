"""The memory plug-in point: protocol, behaviour bank, registry, config (fast tier)."""

from __future__ import annotations

import json

import pytest

from metamod.llm.base import Generation
from metamod.memory import (
    MEMORIES,
    ROLES,
    BehaviourBank,
    Memory,
    MemoryConfig,
    NoMemory,
    build_memory,
    build_memory_from_config,
)
from metamod.memory.base import GuidanceRequest, Observation
from metamod.memory.distill import RuleDistiller, trace_facts
from metamod.tasks.base import Example
from tests._memory_data import CAPITAL, PENS, PENS2, TRAIN, TRAIN2, NoGoldExample

EMB = {"n_features": 512}


def G(memory, example, role, **kw) -> str:
    """The guidance text for one request (protocol v2)."""
    return memory.guidance(GuidanceRequest(example, role, **kw)).text


def O(memory, example, trace, out) -> None:  # noqa: E743
    memory.observe(Observation(example, trace, out))


def ex(id_: str, question: str, gold: str = "0", kind: str = "math", choices=None) -> Example:
    return Example(id=id_, question=question, gold=gold, kind=kind, choices=choices)


def debate(rounds: list[list[str | None]], etas: list[int]) -> dict:
    """A minimal debate trace per docs/contracts.md (only the fields memories read, plus a gold to ignore)."""
    return {
        "schema_version": 1,
        "gold": "SECRET-GOLD",
        "rounds": [
            {
                "round": t,
                "eta": eta,
                "responses": [{"agent": i, "answer": a, "text": f"... {a}"} for i, a in enumerate(row)],
            }
            for t, (row, eta) in enumerate(zip(rounds, etas, strict=True))
        ],
        "num_rounds": len(rounds),
        "stop_reason": "max_rounds",
    }


def outcome(correct: bool, final: str | None, method: str = "debate") -> dict:
    return {"correct": correct, "final_answer": final, "method": method}


AGREE = debate([["7", "7", "7"], ["7", "7", "7"]], [1, 1])  # stop-at-agreement / keep-agreed-answer
DRIFT = debate([["7", "7", "7"], ["7", "9", "9"], ["9", "9", "9"]], [1, 1, 0])  # stop-before-drift / resist-late-drift
SINGLE_BAD = {"answer": None, "text": "no tags"}  # answer-format / decision-format / recheck-steps


# ---------------------------------------------------------------- protocol
@pytest.mark.parametrize("memory", [NoMemory(), BehaviourBank(embedder_options=EMB)], ids=["none", "bank"])
def test_protocol_conformance(memory, tmp_path):
    assert isinstance(memory, Memory)
    e = ex("q1", PENS, gold="36")
    for role in ROLES:
        assert isinstance(G(memory, e, role), str)
    O(memory, e, AGREE, outcome(True, "36"))
    memory.end_batch()
    folder = memory.save(tmp_path / "sub" / "mem")
    data = json.loads((folder / "manifest.json").read_text())
    assert data["memory"] == memory.name and data["format"] == "metamod-memory" and data["version"] == 2
    memory.load(folder)
    assert not list(folder.glob("*.tmp")), "atomic write left a temporary file"


def test_no_memory_is_silent():
    mem = NoMemory()
    e = ex("q1", PENS)
    O(mem, e, AGREE, outcome(True, "36"))
    mem.end_batch()
    assert G(mem, e, "debater") == ""


def test_unknown_role_and_bad_outcome_fail_clearly():
    bank = BehaviourBank(embedder_options=EMB)
    e = ex("q1", PENS)
    with pytest.raises(ValueError, match="Unknown memory role 'critic'"):
        G(bank, e, "critic")
    with pytest.raises(TypeError, match="takes an Observation"):
        bank.observe(e)
    with pytest.raises(ValueError, match=r"missing \['method'\]"):
        O(bank, e, AGREE, {"correct": True, "final_answer": "7"})
    with pytest.raises(ValueError, match="must be a bool"):
        O(bank, e, AGREE, {"correct": 1, "final_answer": "7", "method": "x"})
    with pytest.raises(ValueError, match="'rounds' must be a list"):
        O(bank, e, {"rounds": "oops"}, outcome(True, "7"))
    with pytest.raises(ValueError, match="round 0 needs a non-empty 'responses'"):
        O(bank, e, {"rounds": [{"round": 0, "responses": []}]}, outcome(True, "7"))


# ---------------------------------------------------------------- gold never reaches guidance
class ScriptedTips:
    """A memory LLM for the memories that cannot run without one: one tip (or reflection) per prompt."""

    def chat(self, conversations, sampling):
        text = (
            "HELPFUL: none\nINSIGHT: Recheck each step once.\nADD check: Recheck each step once.\n"
            "- recheck-steps: Recheck each step once before answering."
        )
        return [Generation(text=text) for _ in conversations]


#: options that let each memory run with a scripted LLM and no fitted files
GOLD_TEST_OPTIONS = {
    "mca": {"writer": "rule"},
    "bot": {"writer": "rule"},
    "cheatsheet": {"cold_start": True, "online": True, "organiser": "flat", "embedder": "hashing"},
    "marco": {"condenser": "rule", "condense_every": 1},
}


@pytest.mark.parametrize("name", sorted(MEMORIES))
def test_guidance_never_reads_gold(name):
    llm = ScriptedTips() if name in ("dc", "ace", "cheatsheet") else None
    memory = build_memory(name, llm=llm, **GOLD_TEST_OPTIONS.get(name, {}))
    O(memory, ex("a", PENS, "36"), AGREE, outcome(True, "36"))
    O(memory, ex("b", TRAIN, "120"), DRIFT, outcome(False, "9"))
    memory.end_batch()
    probe = NoGoldExample(id="p", question=PENS2, gold="60", kind="math")
    texts = {role: G(memory, probe, role) for role in ROLES}
    if name == "behaviour_bank":
        assert texts["moderator"] and texts["debater"]
    # Same question, different gold: identical guidance.
    for role in ROLES:
        assert G(memory, ex("p", PENS2, gold="61"), role) == texts[role]


def test_stored_state_has_no_gold_text(tmp_path):
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS, gold="GOLD-XYZ"), AGREE, outcome(True, "36"))
    bank.end_batch()
    O(bank, ex("b", TRAIN, gold="GOLD-XYZ"), DRIFT, outcome(False, "9"))  # still pending when saved
    text = (bank.save(tmp_path / "m") / "manifest.json").read_text()
    assert "GOLD-XYZ" not in text and "SECRET-GOLD" not in text


# ---------------------------------------------------------------- retrieval
def test_retrieval_ranks_the_similar_question_first():
    bank = BehaviourBank(embedder_options=EMB, top_k=3, min_similarity=0.0)
    O(bank, ex("pens", PENS), AGREE, outcome(True, "36"))
    O(bank, ex("train", TRAIN), DRIFT, outcome(False, "9"))
    bank.end_batch()
    first = G(bank, ex("t2", TRAIN2), "moderator").splitlines()[0]
    assert first.startswith("- stop-before-drift:")
    first = G(bank, ex("p2", PENS2), "moderator").splitlines()[0]
    assert first.startswith("- stop-at-agreement:")
    # role filtering: debaters get the solver-side behaviour, never the moderator's
    deb = G(bank, ex("p2", PENS2), "debater")
    assert "keep-agreed-answer" in deb and "stop-at-agreement" not in deb


def test_similarity_threshold_and_top_k():
    bank = BehaviourBank(embedder_options=EMB, top_k=1, min_similarity=0.5)
    O(bank, ex("pens", PENS), AGREE, outcome(True, "36"))
    O(bank, ex("train", TRAIN), DRIFT, outcome(False, "9"))
    bank.end_batch()
    assert G(bank, ex("c", CAPITAL, kind="text"), "moderator") == ""
    assert len(G(bank, ex("p2", PENS2), "moderator").splitlines()) == 1  # top_k=1 line


def test_guidance_is_a_body_the_caller_wraps_once():
    from metamod.memory.base import render_guidance
    from metamod.prompts import get_template

    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("pens", PENS), AGREE, outcome(True, "36"))
    bank.end_batch()
    body = G(bank, ex("p2", PENS2), "debater")
    header = get_template("memory_guidance").split("{guidance}")[0]
    assert body.startswith("- ") and header.strip() not in body
    assert render_guidance(body) == header + body
    assert render_guidance("") == ""


# ---------------------------------------------------------------- dedup, cap, batches
def test_near_identical_behaviours_are_merged():
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    O(bank, ex("b", TRAIN), AGREE, outcome(True, "7"))
    # consensus in the second round instead of the first: the moderator text differs by one word
    O(bank, ex("c", CAPITAL, kind="text"), debate([["7", "8", "7"], ["7", "7", "7"]], [1, 1]), outcome(True, "7"))
    bank.end_batch()
    by_name = {e.name: e for e in bank.entries}
    assert sorted(by_name) == ["keep-agreed-answer", "let-splits-resolve", "stop-at-agreement"]
    assert by_name["stop-at-agreement"].support == 3
    assert sorted(by_name["stop-at-agreement"].keys) == sorted([PENS, TRAIN, CAPITAL])
    strict = BehaviourBank(embedder_options=EMB, dedup_threshold=1.0)
    O(strict, ex("a", PENS), AGREE, outcome(True, "7"))
    O(strict, ex("c", CAPITAL, kind="text"), debate([["7", "8", "7"], ["7", "7", "7"]], [1, 1]), outcome(True, "7"))
    strict.end_batch()
    assert [e.name for e in strict.entries].count("stop-at-agreement") == 2


def test_keys_per_entry_are_capped():
    bank = BehaviourBank(embedder_options=EMB, max_keys_per_entry=2)
    for i in range(4):
        O(bank, ex(f"q{i}", f"Question number {i} about pens?"), AGREE, outcome(True, "7"))
    bank.end_batch()
    assert all(len(e.keys) == 2 for e in bank.entries)
    assert bank.entries[0].keys == ["Question number 2 about pens?", "Question number 3 about pens?"]


def test_cap_fifo_and_usage():
    def fill(bank):
        O(bank, ex("a", PENS), AGREE, outcome(True, "7"))  # 2 entries (uids 0, 1)
        bank.end_batch()
        G(bank, ex("p2", PENS2), "moderator")  # uses: stop-at-agreement
        O(bank, ex("b", TRAIN), DRIFT, outcome(False, "9"))  # 2 more entries (uids 2, 3)
        bank.end_batch()
        return bank

    fifo = fill(BehaviourBank(embedder_options=EMB, max_entries=3, eviction="fifo"))
    assert [e.uid for e in fifo.entries] == [1, 2, 3]
    usage = fill(BehaviourBank(embedder_options=EMB, max_entries=3, eviction="usage"))
    assert [e.name for e in usage.entries][0] == "stop-at-agreement"
    assert "keep-agreed-answer" not in [e.name for e in usage.entries]
    assert len(usage.entries) == 3


def test_observations_reach_guidance_only_after_end_batch():
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    assert G(bank, ex("p2", PENS2), "moderator") == ""
    bank.end_batch()
    assert "stop-at-agreement" in G(bank, ex("p2", PENS2), "moderator")


def test_batch_result_is_independent_of_observation_order():
    items = [
        (ex("a", PENS), AGREE, outcome(True, "7")),
        (ex("b", TRAIN), DRIFT, outcome(False, "9")),
        (ex("c", CAPITAL, kind="text"), SINGLE_BAD, outcome(False, None, "cot")),
        (ex("d", PENS2), debate([["1", "2", "3"], ["1", "1", "3"]], [0, 0]), outcome(False, "1")),
    ]
    states = []
    for order in (items, items[::-1], items[1:] + items[:1]):
        bank = BehaviourBank(embedder_options=EMB, max_entries=5)
        for item in order:
            O(bank, *item)
        bank.end_batch()
        states.append(bank.state_dict())
    assert states[0] == states[1] == states[2]


# ---------------------------------------------------------------- persistence and determinism
def test_save_load_round_trip_including_pending(tmp_path):
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    bank.end_batch()
    before = G(bank, ex("p2", PENS2), "moderator")
    O(bank, ex("b", TRAIN), DRIFT, outcome(False, "9"))  # pending at save time
    path = bank.save(tmp_path / "bank")

    other = BehaviourBank(embedder_options=EMB)
    other.load(path)
    assert other.state_dict() == bank.state_dict()
    assert G(other, ex("p2", PENS2), "moderator") == before
    assert [e.uses for e in other.entries] == [e.uses for e in bank.entries], "a repeated request is not recounted"
    bank.end_batch()
    other.end_batch()
    assert other.state_dict() == bank.state_dict()


def _folder(tmp_path, name: str, manifest) -> object:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return folder


def test_load_errors(tmp_path):
    path = NoMemory().save(tmp_path / "none")
    with pytest.raises(ValueError, match="holds a 'none' memory"):
        BehaviourBank(embedder_options=EMB).load(path)
    with pytest.raises(FileNotFoundError, match="expected a folder with manifest.json"):
        NoMemory().load(tmp_path / "missing")
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="is a file, not a folder"):
        NoMemory().load(tmp_path / "old.json")
    with pytest.raises(ValueError, match="not valid JSON"):
        NoMemory().load(_folder(tmp_path, "bad", "{not json"))
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    bank.end_batch()
    G(bank, ex("p2", PENS2), "debater")
    data = json.loads((bank.save(tmp_path / "bank") / "manifest.json").read_text())
    data["served"] = [[["q", "debater", None, None, None], ["B99"], "- x"]]
    with pytest.raises(ValueError, match="unknown entry uid"):
        BehaviourBank(embedder_options=EMB).load(_folder(tmp_path, "stale", data))
    with pytest.raises(ValueError, match="not a metamod memory manifest"):
        NoMemory().load(_folder(tmp_path, "other", {"hello": 1}))
    data = json.loads((path / "manifest.json").read_text())
    data["version"] = 1
    with pytest.raises(ValueError, match="memory version 1; this metamod reads 2"):
        NoMemory().load(_folder(tmp_path, "v1", data))
    data["version"], data["arrays"] = 2, "arrays-0-x.npz"
    with pytest.raises(FileNotFoundError, match="names array file"):
        NoMemory().load(_folder(tmp_path, "noarrays", data))


def test_same_calls_give_identical_files(tmp_path):
    def run(path):
        bank = BehaviourBank(embedder_options=EMB)
        for batch in (
            [("a", PENS, AGREE, True, "7"), ("b", TRAIN, DRIFT, False, "9")],
            [("c", PENS2, AGREE, True, "7")],
        ):
            for id_, q, trace, ok, final in batch:
                G(bank, ex(id_, q), "debater")
                O(bank, ex(id_, q), trace, outcome(ok, final))
            bank.end_batch()
        return (bank.save(path) / "manifest.json").read_bytes()

    assert run(tmp_path / "1") == run(tmp_path / "2")


# ---------------------------------------------------------------- distillers
def test_rule_distiller_patterns():
    def names(trace, out):
        return [b[0] for b in RuleDistiller(max_behaviours=8).distil([trace_facts(trace, out)])[0]]

    assert names(DRIFT, outcome(False, "9")) == ["stop-before-drift", "resist-late-drift"]
    conform = debate([["5", "5", "5"]], [0])
    assert names(conform, outcome(False, "5")) == ["verify-before-stopping", "verify-independently"]
    lost = debate([["5", "6", "6"], ["6", "6", "5"]], [1, 1])
    assert names(lost, outcome(False, "6")) == ["weigh-minority-arguments", "consider-dissent"]
    nobody = debate([["5", "6", "7"]], [0])
    assert names(nobody, outcome(False, "6")) == ["slow-down"]
    minority = debate([["4", "5", "5"], ["4", "4", "5"]], [1, 1])
    assert names(minority, outcome(True, "4")) == ["back-the-derivation", "argue-with-steps"]
    assert trace_facts(minority, outcome(True, "4"))["right_at_start"] == [0]
    majority = debate([["4", "4", "5"], ["4", "4", "4"]], [1, 1])
    assert names(majority, outcome(True, "4")) == ["stop-at-agreement", "keep-agreed-answer", "let-splits-resolve"]
    assert names(SINGLE_BAD, outcome(False, None, "cot")) == ["answer-format", "decision-format", "recheck-steps"]
    assert names({"answer": "3"}, outcome(True, "3", "cot")) == ["direct-derivation"]
    # the evaluation harness's single-agent record shape
    harness_single = {"id": "q", "rounds": [], "single": {"final_answer": "3", "correct": False}}
    assert names(harness_single, outcome(False, "3", "single_cot")) == ["recheck-steps"]


class FakeGenerator:
    """Writes one behaviour per prompt, naming the first word after 'Question:'; records every call."""

    name = "fake"
    context_length = None

    def __init__(self):
        self.calls: list[list] = []

    def chat(self, conversations, sampling):
        self.calls.append(conversations)
        out = []
        for conv in conversations:
            content = conv[0]["content"]
            topic = content.split("Question:")[1].split()[1].lower()
            out.append(Generation(text=f"Sure.\n- {topic}-check: Re-derive 36 from scratch on {topic} questions.\n"))
        return out

    def count_tokens(self, conversation):
        return 0


def test_llm_distiller_is_batched_gold_free_and_scrubbed():
    gen = FakeGenerator()
    bank = BehaviourBank(embedder_options=EMB, distiller="llm", llm=gen)
    O(bank, ex("a", PENS, gold="GOLD-123"), debate([["36", "30", "36"]], [1]), outcome(True, "36"))
    O(bank, ex("b", TRAIN, gold="GOLD-123"), debate([["36", "36", "36"]], [0]), outcome(False, "36"))
    assert gen.calls == []
    bank.end_batch()
    assert len(gen.calls) == 1 and len(gen.calls[0]) == 2
    prompts = [conv[0]["content"] for conv in gen.calls[0]]
    assert all("GOLD-123" not in p and "SECRET-GOLD" not in p for p in prompts)
    assert "Outcome: the final answer was correct." in prompts[0]
    entries = {e.name: e for e in bank.entries}
    assert sorted(entries) == ["shop-check", "train-check"]
    assert entries["shop-check"].instruction == "Re-derive [answer] from scratch on shop questions."
    assert entries["shop-check"].roles == [] and entries["shop-check"].source == "llm"
    assert "train-check" in G(bank, ex("t2", TRAIN2), "single")


def test_llm_distiller_needs_a_generator():
    with pytest.raises(ValueError, match="needs a memory LLM"):
        BehaviourBank(distiller="llm")


# ---------------------------------------------------------------- registry and config
def test_registry_errors():
    with pytest.raises(KeyError, match="Valid names: ace, behaviour_bank, bot, cheatsheet, dc, marco, mca, none"):
        build_memory("mc2")
    with pytest.raises(ValueError, match="'top_k' is not an option of memory 'none'"):
        build_memory("none", top_k=3)
    with pytest.raises(ValueError, match="eviction must be one of"):
        build_memory("behaviour_bank", eviction="lru")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"memory": "mc2"}, "not a known memory"),
        ({"memory": "behaviour_bank", "memory_options": {"top_k": 0}}, "top_k must be >= 1"),
        ({"memory": "behaviour_bank", "memory_options": {"eviction": "lru"}}, "eviction must be one of"),
        ({"memory": "behaviour_bank", "memory_options": {"distiller": "gpt"}}, "distiller must be one of"),
        ({"memory": "behaviour_bank", "memory_options": {"embedder": "bert"}}, "embedder='bert'"),
        (
            {"memory": "behaviour_bank", "memory_options": {"embedder": "sentence-transformers"}},
            "needs embedder_model",
        ),
        ({"memory": "behaviour_bank", "memory_options": {"dedup_threshold": 0.0}}, "dedup_threshold"),
        ({"memory_batch_size": 0}, "memory_batch_size"),
        ({"memory_max_tokens": 0}, "memory_max_tokens"),
    ],
)
def test_memory_config_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MemoryConfig(**kwargs)


def test_memory_options_are_checked_against_the_memories_in_use():
    from metamod.memory.registry import check_memory_options

    cfg = MemoryConfig(memory="behaviour_bank", memory_options={"top_k": 2, "window": 2})  # window: mca's (mc2)
    check_memory_options(cfg, ["behaviour_bank", "mca"])
    with pytest.raises(ValueError, match="'window' is not an option of the memories in use"):
        check_memory_options(cfg, ["behaviour_bank"])
    with pytest.raises(ValueError, match="no memory is in use"):
        check_memory_options(MemoryConfig(memory_options={"top_k": 2}), [])
    with pytest.raises(ValueError, match="window must be"):
        MemoryConfig(memory="mca", memory_options={"window": 0})


def test_memory_config_fields_have_help():
    import dataclasses

    for f in dataclasses.fields(MemoryConfig):
        assert f.metadata.get("help"), f"MemoryConfig.{f.name} has no help"


def test_build_from_config_resumes_and_warm_starts(tmp_path):
    state = tmp_path / "state"
    cfg = MemoryConfig(memory="behaviour_bank", memory_options={"top_k": 2})
    bank = build_memory_from_config(cfg, state=state)
    assert isinstance(bank, BehaviourBank) and bank.options.top_k == 2 and not bank.entries
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    bank.end_batch()
    bank.save(state)
    resumed = build_memory_from_config(cfg, state=state)
    assert resumed.state_dict() == bank.state_dict() and resumed.batch_index == 1
    warm = build_memory_from_config(
        MemoryConfig(memory="behaviour_bank", memory_path=str(state)), state=tmp_path / "fresh"
    )
    assert warm.state_dict() == bank.state_dict()
    with pytest.raises(FileNotFoundError, match="memory_path .* has no manifest.json"):
        build_memory_from_config(MemoryConfig(memory="behaviour_bank", memory_path=str(tmp_path / "nope")))
    assert isinstance(build_memory_from_config(MemoryConfig()), NoMemory)


def test_parse_config_reads_memory_keys(tmp_path):
    from metamod.config import ConfigError, parse_config

    (cfg,) = parse_config(
        [MemoryConfig], ["--memory", "behaviour_bank", "--memory_options", '{"top_k": 5}', "--memory_seed", "3"]
    )
    assert cfg.memory == "behaviour_bank" and cfg.memory_options == {"top_k": 5} and cfg.memory_seed == 3
    assert build_memory_from_config(cfg).options.top_k == 5
    with pytest.raises(ConfigError, match="memory_top_k"):
        parse_config([MemoryConfig], ["--memory_top_k", "5"])


def test_served_ids_by_method_and_shared_requests():
    bank = BehaviourBank(embedder_options=EMB)
    O(bank, ex("a", PENS), AGREE, outcome(True, "7"))
    bank.end_batch()
    probe = ex("p2", PENS2)
    own = bank.guidance(GuidanceRequest(probe, "moderator", step=0, method="moderator"))
    shared = bank.guidance(GuidanceRequest(probe, "debater", agent=1, step=0))
    assert own.item_ids and shared.item_ids and set(own.item_ids).isdisjoint(shared.item_ids)
    assert bank.served_ids("p2", "moderator") == list(own.item_ids) + list(shared.item_ids)
    assert bank.served_ids("p2", "majority_vote") == list(shared.item_ids)  # debaters serve every method
    assert bank.served_ids("other") == []
    bank.end_batch()
    assert bank.served_ids("p2") == [], "the served cache is per batch"


def test_mc2_batch_size_rule():
    from metamod.memory import mc2_batch_size

    assert [mc2_batch_size(n) for n in (5, 100, 500, 800, 1319, 100000)] == [10, 10, 50, 80, 100, 100]
    assert MemoryConfig(memory_batch_size=7).batch_size_for(500) == 7
    assert MemoryConfig().batch_size_for(500) == 50
