"""The Buffer-of-Thought memory (fast tier): a scripted fake memory LLM and the rule writer, no real model."""

from __future__ import annotations

import json
import re

import pytest

from metamod.llm.base import Generation
from metamod.memory.base import Guidance, GuidanceRequest, Memory, Observation
from metamod.memory.bot import (
    GENERIC_ID,
    BoTOptions,
    BufferOfThought,
    fallback_distilled,
    parse_distilled,
    parse_template,
    rule_distilled,
    trajectory,
)
from metamod.memory.registry import parse_memory_options
from metamod.tasks.base import Example

PENS = "A shop packs 12 pens in each box. Mia buys 3 boxes of pens. How many pens does Mia have?"
PENS2 = "A shop packs 12 pens in each box. Mia buys 5 boxes of pens. How many pens does Mia have?"
TRAIN = "A train travels at 60 km per hour for 2 hours. How far does the train go?"
CAPITAL = "Which city is the capital of France?"
GARBLED = "Nine friends share 27 stickers equally. How many stickers does each friend get?"

#: What the scripted memory LLM answers, by the first pattern found in the prompt: (distillation, template).
SCRIPT = {
    r"\b5 boxes": (
        "Key facts: 12 pens in each box; 5 boxes\nGoal: the total number of items packed in equal groups\n"
        "Constraints: none",
        "Name: equal-groups-total\nDescription: counting the total number of items packed in equal groups of a size\n"
        "Steps:\n1. Find the group size.\n2. Multiply it by the number of groups.",
    ),
    r"\bpens\b": (
        "Key facts: 12 pens per box; 3 boxes bought\nGoal: the number of pens Mia has\nConstraints: none",
        "Name: groups-times-size\nDescription: counting the total number of items packed in equal groups\n"
        "Steps:\n1. Find how many items one group holds.\n2. Multiply by the number of groups.",
    ),
    r"\btrain\b": (
        "**Key facts:** 60 km per hour\n- 2 hours\nGoal: the distance travelled\nConstraints: in km",
        "Name: distance-from-speed\nDescription: finding the distance travelled from a constant speed and a time\n"
        "Steps:\n- Read off the speed and the time.\n- Multiply speed by time.\n- Check the units.",
    ),
    r"\bcapital\b": ("Goal: name the capital city\nKey facts: the country is France", "no template here, sorry"),
    r"\bstickers\b": (
        "I would simply divide and get 3.",
        "Name: share-equally\nDescription: dividing a total evenly\n",
    ),
}


class FakeLLM:
    """A scripted Generator: replies from :data:`SCRIPT` and records every batched call."""

    name = "fake-memory-llm"
    context_length = None

    def __init__(self) -> None:
        self.calls: list[list[list[dict]]] = []

    def chat(self, conversations, sampling):
        self.calls.append(conversations)
        out = []
        for conv in conversations:
            content = conv[-1]["content"]
            manager = "Worked solution:" in content
            key = next(k for k in SCRIPT if re.search(k, content, re.I))
            out.append(Generation(text=SCRIPT[key][1 if manager else 0]))
        return out

    def count_tokens(self, conversation) -> int:
        return 0

    def contents(self) -> list[str]:
        return [m["content"] for call in self.calls for conv in call for m in conv]


class NoGoldExample(Example):
    """An example whose gold cannot be read: any access fails the test."""

    def __getattribute__(self, name):
        if name == "gold":
            raise AssertionError("the bot memory read example.gold")
        return super().__getattribute__(name)


def ex(id_: str, question: str, gold: str = "0", kind: str = "math") -> Example:
    return Example(id=id_, question=question, gold=gold, kind=kind)


def single(text: str, answer: str | None) -> dict:
    return {"id": "x", "rounds": [], "gold": "SECRET-GOLD", "single": {"text": text, "answer": answer}}


def outcome(correct: bool, answer: str | None) -> dict:
    return {"correct": correct, "final_answer": answer, "method": "single_cot"}


SOLVED = {
    "a": (PENS, single("12 * 3 = 36\nMia has 36 pens. <answer>36</answer>", "36"), outcome(True, "36")),
    "b": (PENS2, single("12 * 5 = 60\nSo 60 pens. <answer>60</answer>", "60"), outcome(True, "60")),
    "c": (TRAIN, single("60 * 2 = 120 km <answer>120</answer>", "120"), outcome(True, "120")),
    "d": (CAPITAL, single("It is Paris. <answer>Paris</answer>", "Paris"), outcome(False, "Paris")),
}


def llm_bot(**options) -> tuple[BufferOfThought, FakeLLM]:
    fake = FakeLLM()
    return BufferOfThought(BoTOptions(**options), llm=fake), fake


def run_batch(bot: BufferOfThought, ids: list[str], *, order: list[str] | None = None) -> dict[str, Guidance]:
    """One memory batch: guidance for every question, then observations (in ``order``) and end_batch."""
    examples = {i: ex(i, SOLVED[i][0], gold=SOLVED[i][2]["final_answer"] or "0") for i in ids}
    bot.begin_batch(list(examples.values()))
    shown = {i: bot.guidance(GuidanceRequest(e, "single")) for i, e in examples.items()}
    for i in order or ids:
        _, trace, out = SOLVED[i]
        bot.observe(Observation(examples[i], trace, out, served=bot.served_ids(i)))
    bot.end_batch()
    return shown


# ---------------------------------------------------------------- distiller
def test_parse_distilled_reads_labelled_lines_bullets_and_markdown():
    assert parse_distilled(SCRIPT[r"\btrain\b"][0]) == {
        "facts": ["60 km per hour", "2 hours"],
        "goal": "the distance travelled",
        "constraints": ["in km"],
    }
    assert parse_distilled(SCRIPT[r"\bcapital\b"][0])["facts"] == ["the country is France"]
    assert parse_distilled("Key facts: 3 apples\nConstraints: none") is None  # no goal
    assert fallback_distilled(PENS)["goal"] == PENS  # three short sentences fit


def test_unparsable_distillation_falls_back_and_is_counted():
    bot, _ = llm_bot()
    q = ex("g", GARBLED)
    text = bot.guidance(GuidanceRequest(q, "reasoner")).text
    assert "Goal: Nine friends share 27 stickers equally." in text
    assert bot.stats()["distill_fallbacks"] == 1 and bot.distilled["g"]["fallback"] is True


def test_rule_distiller_is_deterministic_and_kind_aware():
    d = rule_distilled("Is 91 a prime number, given it is at least 2?", "yesno")
    assert d == {
        "facts": ["91", "2"],
        "goal": "Is 91 a prime number, given it is at least 2?",
        "constraints": ["at least", "answer yes or no"],
    }
    mc = rule_distilled("Which is heavier?\n(A) 1 kg of iron\n(B) 2 kg of feathers", "mc")
    assert (
        mc["goal"] == "Which is heavier?" and mc["facts"] == [] and "answer with one option letter" in mc["constraints"]
    )


# ---------------------------------------------------------------- retrieval and instantiation
def test_retrieval_uses_a_template_above_the_threshold_and_the_generic_one_below():
    bot = BufferOfThought(BoTOptions(writer="rule"))
    first = run_batch(bot, ["a"])["a"]
    assert first.item_ids == (GENERIC_ID,) and "generic-step-by-step" in first.text
    bot.begin_batch([ex("b", PENS2), ex("c", TRAIN)])
    near = bot.guidance(GuidanceRequest(ex("b", PENS2), "single"))
    far = bot.guidance(GuidanceRequest(ex("c", TRAIN), "debater", agent=1, step=0))
    assert near.item_ids == ("T1",) and bot.distilled["b"]["score"] >= 0.35
    assert far.item_ids == (GENERIC_ID,) and bot.distilled["c"]["score"] < 0.35
    assert "Key facts: 12 pens; 5 boxes" in near.text and "N * N = N" in near.text
    assert PENS2 not in near.text  # the caller adds the question itself
    assert bot.served_ids("b") == ["T1"] and bot.templates[0].uses == 1
    assert bot.stats()["retrieved_template"] == 1 and bot.stats()["retrieved_generic"] == 2


def test_only_solver_roles_get_guidance():
    bot = BufferOfThought(BoTOptions(writer="rule"))
    q = ex("a", PENS)
    for role in ("single", "reasoner", "debater"):
        assert bot.guidance(GuidanceRequest(q, role)).item_ids == (GENERIC_ID,)
    for role in ("monitor", "controller", "moderator", "judge"):
        assert bot.guidance(GuidanceRequest(q, role)) == Guidance()
    assert isinstance(bot, Memory)


def test_threshold_extremes_switch_between_generic_and_stored():
    always = BufferOfThought(BoTOptions(writer="rule", retrieval_threshold=-1.0))
    never = BufferOfThought(BoTOptions(writer="rule", retrieval_threshold=1.0))
    for bot in (always, never):
        run_batch(bot, ["a"])
    q = ex("c", TRAIN)
    assert always.guidance(GuidanceRequest(q, "single")).item_ids == ("T1",)
    assert never.guidance(GuidanceRequest(q, "single")).item_ids == (GENERIC_ID,)


# ---------------------------------------------------------------- buffer manager
def test_novelty_gating_merges_near_duplicates_and_adds_novel_templates():
    bot, _ = llm_bot()
    run_batch(bot, ["a"])
    assert [t.id for t in bot.templates] == ["T1"] and bot.templates[0].name == "groups-times-size"
    run_batch(bot, ["b", "c"])  # b: the same template again (merged); c: a new family (added)
    assert [(t.id, t.name, t.support) for t in bot.templates] == [
        ("T1", "groups-times-size", 2),  # b's "equal-groups-total" is a near-duplicate: merged
        ("T2", "distance-from-speed", 1),
    ]
    assert bot.templates[1].steps == ["Read off the speed and the time.", "Multiply speed by time.", "Check the units."]
    stats = bot.stats()
    assert (stats["templates_added"], stats["templates_merged"], stats["templates"]) == (2, 1, 2)


def test_unparsable_templates_are_skipped_and_counted():
    bot, _ = llm_bot(learn_from="answered")
    run_batch(bot, ["d"])  # the scripted manager reply for it has no Name/Description/Steps
    assert bot.templates == [] and bot.stats()["templates_skipped"] == 1
    assert parse_template(SCRIPT[r"\bstickers\b"][1]) is None  # no steps


def test_default_learns_from_every_answered_question_without_gold():
    """MC² B.2 builds a template from the solved trajectory: no correctness filter, so no gold signal is read."""
    assert BoTOptions().learn_from == "answered"
    assert BufferOfThought.gold_use(BoTOptions()) is None
    assert "graded correct" in BufferOfThought.gold_use(BoTOptions(learn_from="correct"))
    bot, fake = llm_bot()
    examples = {i: ex(i, SOLVED[i][0]).without_gold() for i in "ad"}
    bot.begin_batch(list(examples.values()))
    for i, e in examples.items():  # as the harness observes for a memory not defined to use gold
        _, trace, out = SOLVED[i]
        bot.observe(Observation(e, trace, {**out, "correct": None}))
    bot.end_batch()
    assert [len(call) for call in fake.calls] == [2, 2] and bot.stats()["learned_from"] == 2


def test_one_batched_distiller_call_and_one_batched_manager_call_per_batch():
    bot, fake = llm_bot(learn_from="correct")
    run_batch(bot, ["a", "b", "c", "d"])
    assert [len(call) for call in fake.calls] == [4, 3]  # distil all 4; learn from the 3 correct ones
    assert all("Do not solve the problem" in conv[0]["content"] for conv in fake.calls[0])
    assert all("Worked solution:" in conv[0]["content"] for conv in fake.calls[1])
    assert bot.stats()["distill_calls"] == 1 and bot.stats()["manager_calls"] == 1
    run_batch(bot, ["d"])  # nothing correct to learn from: no manager call at all
    assert [len(call) for call in fake.calls] == [4, 3, 1]


@pytest.mark.parametrize(("learn_from", "expected"), [("correct", ["a"]), ("answered", ["a", "d"])])
def test_learn_from_filters_the_questions_the_manager_sees(learn_from, expected):
    bot, fake = llm_bot(learn_from=learn_from)
    run_batch(bot, ["a", "d"])
    manager = [conv[0]["content"] for conv in fake.calls[1]]
    assert [("pens" in m, "capital" in m) for m in manager] == [(i == "a", i == "d") for i in expected]
    unanswered, fake2 = llm_bot(learn_from="answered")
    e = ex("a", PENS)
    unanswered.guidance(GuidanceRequest(e, "single"))
    unanswered.observe(Observation(e, single("no idea", None), outcome(False, None)))
    unanswered.end_batch()
    assert len(fake2.calls) == 1 and unanswered.stats()["not_learned"] == 1


def test_rule_writer_builds_a_template_from_the_trajectory_structure():
    bot = BufferOfThought(BoTOptions(writer="rule"))
    run_batch(bot, ["a", "c"])
    by_name = {t.name: t for t in bot.templates}
    assert sorted(by_name) == ["math-how-far-train-go", "math-how-many-pens-mia"]
    assert "Set up and evaluate a step of the form N * N = N km." in by_name["math-how-far-train-go"].steps
    assert all("36" not in json.dumps(t.__dict__) for t in bot.templates)


def test_buffer_is_capped_evicting_the_least_used_oldest_template():
    bot, _ = llm_bot(max_templates=1)
    run_batch(bot, ["a"])
    run_batch(bot, ["c"])  # c retrieved the generic template, so T1 (never used, older) makes room for T2
    assert [t.id for t in bot.templates] == ["T2"] and bot.stats()["templates_evicted"] == 1


# ---------------------------------------------------------------- gold and answers never reach the LLM
def test_no_gold_is_read_before_answering():
    for bot in (BufferOfThought(BoTOptions(writer="rule")), llm_bot()[0]):
        probe = NoGoldExample(id="p", question=PENS2, gold="60", kind="math")
        bot.begin_batch([probe])
        texts = {role: bot.guidance(GuidanceRequest(probe, role)) for role in ("single", "reasoner", "monitor")}
        other = type(bot)(bot.options, llm=bot.llm)
        assert {r: other.guidance(GuidanceRequest(ex("p", PENS2, gold="61"), r)) for r in texts} == texts


def test_gold_and_final_answer_never_appear_in_a_conversation():
    bot, fake = llm_bot()
    mro = {
        "loop": "mro",
        "gold": "SECRET-GOLD",
        "history": [
            {"reasoner": {"text": "12 * 2 = 24 <answer>24</answer>", "answer": "24"}, "controller": {"answer": None}},
            {"reasoner": {"text": "12 * 3 = 36, so 36 pens.", "answer": "36"}, "controller": {"answer": "36"}},
        ],
    }
    debate = {
        "gold": "SECRET-GOLD",
        "rounds": [
            {"round": 0, "eta": 1, "responses": [{"agent": 0, "text": "120 km", "answer": "120"}]},
            {"round": 1, "eta": 1, "responses": [{"agent": 0, "text": "It is 120.", "answer": "120"}]},
        ],
    }
    a, c = ex("a", PENS, gold="36"), ex("c", TRAIN, gold="120")
    bot.begin_batch([a, c])
    bot.observe(Observation(a, mro, outcome(True, "36")))
    bot.observe(Observation(c, debate, outcome(True, "120")))
    bot.end_batch()
    assert len(fake.calls) == 2
    for content in fake.contents():
        for secret in ("SECRET-GOLD", "36", "24", "120"):
            assert secret not in content
    assert any("12 * 3 = [answer], so [answer] pens." in content for content in fake.contents())


def test_trajectory_reads_single_mro_and_debate_traces():
    assert trajectory({"single": {"texts": ["first", "last"], "final_answer": "7"}}, "7") == ("single", "last", ["7"])
    mro = {"history": [{"reasoner": {"text": "try", "answer": "1"}}, {"reasoner": {"text": "fixed", "answer": "2"}}]}
    assert trajectory(mro, "2") == ("mro", "fixed", ["1", "2"])
    rounds = [
        {"responses": [{"agent": 1, "text": "B says 5", "answer": "5"}, {"agent": 0, "text": "A: 4", "answer": "4"}]}
    ]
    assert trajectory({"rounds": rounds}, "5") == ("debate", "B says 5", ["4", "5"])
    assert trajectory({"rounds": rounds}, None)[1] == "A: 4"


# ---------------------------------------------------------------- batch-synchronous, deterministic, resumable
def test_guidance_changes_only_after_end_batch_and_observe_order_does_not_matter():
    states = []
    for order in (["a", "b", "c"], ["c", "a", "b"]):
        bot, fake = llm_bot()
        e = ex("a", PENS)
        bot.begin_batch([e, ex("b", PENS2), ex("c", TRAIN)])
        before = bot.guidance(GuidanceRequest(e, "single"))
        for i in order:
            bot.observe(Observation(ex(i, SOLVED[i][0]), SOLVED[i][1], SOLVED[i][2]))
            assert bot.guidance(GuidanceRequest(e, "single")) == before
            assert bot.templates == []
        bot.end_batch()
        states.append((json.dumps(bot.state_dict(), sort_keys=True), fake.calls))
    assert states[0] == states[1]


def test_save_load_identity(tmp_path):
    live, _ = llm_bot()
    run_batch(live, ["a", "d"])
    live.save(tmp_path / "after-batch-0")
    loaded, _ = llm_bot()
    loaded.load(tmp_path / "after-batch-0")
    assert loaded.state_dict() == live.state_dict() and loaded.batch_index == 1
    shown = [run_batch(bot, ["b", "c"]) for bot in (live, loaded)]
    assert shown[0] == shown[1] and shown[0]["b"].item_ids == ("T1",)
    assert json.dumps(loaded.state_dict(), sort_keys=True) == json.dumps(live.state_dict(), sort_keys=True)
    # Mid-batch: distilled questions, served guidance and a queued observation survive the round trip.
    e = ex("m", PENS2)
    live.begin_batch([e])
    g = live.guidance(GuidanceRequest(e, "single"))
    live.observe(Observation(e, *SOLVED["b"][1:]))
    live.save(tmp_path / "mid")
    again, fake = llm_bot()
    again.load(tmp_path / "mid")
    assert again.guidance(GuidanceRequest(e, "single")) == g and fake.calls == []
    live.end_batch()
    again.end_batch()
    assert again.state_dict() == live.state_dict()
    manifest = json.loads((tmp_path / "mid" / "manifest.json").read_text())
    assert "SECRET-GOLD" not in json.dumps(manifest) and manifest["config"]["embedder"]["name"] == "hashing"


def test_rule_writer_runs_are_byte_identical(tmp_path):
    for k in (0, 1):
        bot = BufferOfThought(BoTOptions(writer="rule"), seed=3)
        run_batch(bot, ["a", "c"])
        run_batch(bot, ["b", "d"])
        bot.save(tmp_path / str(k))
    assert (tmp_path / "0" / "manifest.json").read_bytes() == (tmp_path / "1" / "manifest.json").read_bytes()


def test_malformed_state_is_refused():
    bot = BufferOfThought(BoTOptions(writer="rule"))
    with pytest.raises(ValueError, match="unknown templates"):
        bot.load_state_dict({"templates": [], "distilled": {"q": {"template": "T9"}}})
    with pytest.raises(ValueError, match="below next_uid"):
        bot.load_state_dict({"templates": [{"id": "T1", "name": "x", "description": "y", "steps": ["z"]}]})


# ---------------------------------------------------------------- options and construction
def test_options_errors_name_the_field():
    with pytest.raises(ValueError, match="'bot'.*valid: embedder, embedder_model, learn_from"):
        parse_memory_options("bot", {"top_k": 3})
    assert parse_memory_options("bot", {"writer": "rule"}).writer == "rule"
    with pytest.raises(ValueError, match="learn_from must be one of"):
        parse_memory_options("bot", {"learn_from": "wrong"})
    for bad in ({"writer": "human"}, {"max_templates": 0}, {"retrieval_threshold": 2.0}, {"novelty_threshold": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            BoTOptions(**bad)


def test_llm_writer_needs_a_memory_llm():
    with pytest.raises(ValueError, match=r"^memory 'bot' with writer=llm needs a memory LLM \(memory_model\)"):
        BufferOfThought()
    assert BufferOfThought.wants_llm(BoTOptions()) and not BufferOfThought.wants_llm(BoTOptions(writer="rule"))
    bot = BufferOfThought(BoTOptions(writer="rule"), seed=5)
    assert bot.llm_sampling.temperature == 0.0 and bot.llm_sampling.seed == 5 and bot.llm_sampling.max_tokens == 256
    assert bot.config_dict()["writer"] == "rule" and bot.name == "bot"
