"""The MetaCognitive Accumulator (memory ``mca``): reflections, selection, lessons, window, composer, state (fast tier)."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

from metamod.llm.base import Generation
from metamod.memory.base import GuidanceRequest, Observation
from metamod.memory.mca import MCAOptions, MetaCognitiveAccumulator, guidance_relevance
from metamod.memory.mca.parse import parse_lessons, parse_rules
from metamod.memory.mca.reflect import Reflection, reflect, select
from metamod.memory.mca.writers import KnowledgeItem, Lesson
from metamod.rollout.mro.traces import example_mro_trace, validate_mro_trace
from metamod.tasks.base import Example
from tests._memory_data import CAPITAL, PENS, PENS2, TRAIN, TRAIN2, NoGoldExample

GOLD = "GOLD-XYZZY-77"


def ex(id_: str, question: str) -> NoGoldExample:
    return NoGoldExample(id=id_, question=question, gold=GOLD, kind="math")


def mro(steps: list[tuple], max_iterations: int = 3, example_id: str = "q", validate: bool = True) -> dict:
    """An MRO trace from ``(answer, error_found, action)`` per iteration (action 1/2/3), checked unless told not."""
    base = example_mro_trace(example_id)
    template = base["history"][0]
    history = []
    for i, (answer, flag, action) in enumerate(steps):
        h = copy.deepcopy(template)
        h["iteration"] = i + 1
        h["reasoner"]["answer"] = answer
        h["monitor"]["error_found"] = flag
        h["controller"].update(
            action=action,
            action_name={1: "accept", 2: "patch", 3: "restart"}[action],
            justification=f"decision {i + 1}",
            answer=None if action == 3 else answer,
            answer_correct=None if action == 3 else 0,
        )
        history.append(h)
    status = {1: "accepted", 2: "corrected", 3: "max_iterations"}[steps[-1][2]]
    base.update(history=history, num_iterations=len(steps), max_iterations=max_iterations, status=status)
    base["gold"] = GOLD
    return validate_mro_trace(base) if validate else base


FIRST_TRY = [("36", False, 1)]  # S+
EXHAUSTED = [("30", True, 3), ("31", True, 3), ("32", True, 3)]  # S-
RESTART_THEN_ACCEPT = [("30", True, 3), ("36", False, 1)]  # neither


def record(id_: str, trace: dict, correct: bool, final: str | None = "36", question: str = PENS) -> dict:
    return {
        "id": id_,
        "question": question,
        "trace": {k: v for k, v in trace.items() if k != "gold"},
        "outcome": {"correct": correct, "final_answer": final, "method": "mc2"},
    }


def observation(example: Example, trace: dict, correct: bool, final: str | None = "36") -> Observation:
    return Observation(example, trace, {"correct": correct, "final_answer": final, "method": "mc2"})


def rule_mca(**options) -> MetaCognitiveAccumulator:
    return MetaCognitiveAccumulator(MCAOptions(writer="rule", **options))


class FakeLLM:
    """Scripted memory LLM: ``replies[kind]`` is a list of texts (the last one repeats); records every call."""

    name = "fake-llm"
    context_length = None
    KINDS = {"notebook of lessons": "distill", "curate the standing rules": "consolidate", "prepare working": "compose"}

    def __init__(self, **replies):
        self.replies = {
            "distill": ["DO: Check each step before answering.\nAVOID: Guessing at units.\nTAGS: checking, units"],
            "consolidate": ["1. Check each step before answering.\n2. Do not guess at units."],
            "compose": [
                "<P_R>Check each step.</P_R>\n<P_M>Find the first wrong step.</P_M>\n<P_C>Accept clean runs.</P_C>"
            ],
            **replies,
        }
        self.calls: list[tuple[str, list]] = []
        self.used: dict[str, int] = {}

    def chat(self, conversations, sampling):
        first = conversations[0][0]["content"]
        kind = next(k for marker, k in self.KINDS.items() if marker in first)
        self.calls.append((kind, copy.deepcopy(conversations)))
        out = []
        for _ in conversations:
            script = self.replies[kind]
            i = self.used.get(kind, 0)
            self.used[kind] = i + 1
            out.append(Generation(text=script[min(i, len(script) - 1)]))
        return out

    def count_tokens(self, conversation):
        return len(conversation[0]["content"].split())

    def kinds(self) -> list[str]:
        return [k for k, _ in self.calls]

    def all_text(self) -> str:
        return "\n".join(m["content"] for _, convs in self.calls for conv in convs for m in conv)


def llm_mca(llm: FakeLLM, **options) -> MetaCognitiveAccumulator:
    return MetaCognitiveAccumulator(MCAOptions(**options), llm=llm)


def feed_batch(mem, items) -> None:
    """Observe ``(example, steps, correct)`` items and end the batch."""
    for example, steps, correct in items:
        mem.observe(observation(example, mro(steps, example_id=example.id), correct))
    mem.end_batch()


BATCH0 = [
    (ex("a", PENS), FIRST_TRY, True),
    (ex("b", TRAIN), EXHAUSTED, False),
    (ex("c", CAPITAL), RESTART_THEN_ACCEPT, True),
]


# ---------------------------------------------------------------- reflections (C.1)
def test_task_quality_branches():
    assert reflect(record("a", mro(FIRST_TRY), True)).task_quality == "A"
    assert reflect(record("b", mro(RESTART_THEN_ACCEPT), True)).task_quality == "B"
    assert reflect(record("c", mro(EXHAUSTED), False)).task_quality == "C"
    patched = reflect(record("d", mro([("1", True, 3), ("2", True, 2)]), True))
    assert (patched.task_quality, patched.status) == ("B", "corrected")


@pytest.mark.parametrize(
    "steps,n,expected",
    [
        ([("1", False, 1)], 3, "good"),  # accepted at once
        ([("1", True, 3), ("2", False, 2)], 3, "good"),  # corrected within two
        ([("1", True, 3), ("2", True, 3), ("3", False, 1)], 3, "ok"),  # accepted, but at the third
        ([("1", True, 3), ("2", True, 3), ("3", False, 3)], 3, "poor"),  # out of budget, m_yes 2 > 1.5
        ([("1", False, 3), ("2", True, 3), ("3", False, 3)], 3, "ok"),  # out of budget, m_yes 1 <= 1.5
    ],
)
def test_reasoner_quality(steps, n, expected):
    r = reflect(record("q", mro(steps, n), True))
    assert r.quality["reasoner"] == expected
    assert r.tags("reasoner")[-1] == f"R_{expected}"


@pytest.mark.parametrize(
    "steps,expected",
    [
        ([("1", False, 1)], "good"),  # accepted, last audit clean
        ([("1", None, 1)], "ok"),  # accepted, last audit without a verdict: neither clean nor a flag (C.1)
        ([("1", True, 3), ("2", None, 2)], "ok"),  # corrected, last audit without a verdict
        ([("1", True, 3), ("2", True, 2)], "poor"),  # corrected while the audit still flags an error
        ([("1", True, 3), ("2", False, 3), ("3", False, 3)], "ok"),  # not accepted
    ],
)
def test_monitor_quality(steps, expected):
    assert reflect(record("q", mro(steps), True)).quality["monitor"] == expected


@pytest.mark.parametrize(
    "steps,n,expected",
    [
        ([("1", True, 3), ("2", True, 3), ("3", False, 1)], 3, "good"),  # accepted within three
        ([("1", True, 3), ("2", True, 3), ("3", True, 3), ("4", False, 2)], 4, "ok"),  # converged at the fourth
        ([("1", True, 3), ("2", True, 3), ("3", True, 3)], 3, "poor"),  # out of budget, c_3 = 3 > 1.5
    ],
)
def test_controller_quality(steps, n, expected):
    r = reflect(record("q", mro(steps, n), True))
    assert r.quality["controller"] == expected
    assert r.c_3 == sum(a == 3 for _, _, a in steps) and r.m_yes == sum(f is True for _, f, _ in steps)


def test_reflection_fields_and_trajectories_are_gold_free():
    long_q = "x " * 300
    r = reflect(record("q", mro(EXHAUSTED), False, question=long_q))
    assert (r.iterations, r.max_iterations, r.status, r.outcome) == (3, 3, "max_iterations", "failure")
    assert r.trajectories["reasoner"] == ["30", "31", "32"]
    assert r.trajectories["monitor"][0] == [True, "1", "2 + 2 is 4"]
    assert r.trajectories["controller"][0] == [3, "decision 1"]
    assert len(r.brief) <= 200
    text = json.dumps(r.to_dict()) + "".join(r.summary(role) for role in r.roles)
    assert GOLD not in text and "answer_correct" not in text and "final_correct" not in text
    assert not re.search(r"\beta\b", text)


def test_non_mro_records_have_a_reasoner_stream_only():
    single = reflect(
        {
            "id": "s",
            "question": "?",
            "trace": {"id": "s", "rounds": [], "single": {"final_answer": "3"}},
            "outcome": {"correct": False, "final_answer": "3", "method": "cot"},
        }
    )
    assert (single.loop, single.iterations, single.status, single.roles) == ("single", 1, "accepted", ("reasoner",))
    assert single.trajectories["reasoner"] == ["3"] and single.actions == []
    debate = {
        "rounds": [
            {"round": t, "eta": 1, "responses": [{"agent": 1, "answer": b}, {"agent": 0, "answer": a}]}
            for t, (a, b) in enumerate([("7", "8"), ("7", "7")])
        ]
    }
    d = reflect({"id": "d", "question": "?", "trace": debate, "outcome": {"correct": True, "final_answer": None}})
    assert (d.loop, d.iterations, d.status, d.task_quality) == ("debate", 2, "max_iterations", "C")
    assert d.trajectories["reasoner"] == [["7", "8"], ["7", "7"]] and d.quality == {"reasoner": "ok"}


# ---------------------------------------------------------------- selection (Eq. 9)
def test_selection_uses_actions_and_the_trace_without_a_controller_never_the_outcome():
    refl = [
        reflect(record("c", mro(RESTART_THEN_ACCEPT), True)),
        reflect(record("b", mro(EXHAUSTED), True)),  # S- even though correct: the rule is about the actions
        reflect(record("a", mro(FIRST_TRY), False)),  # S+ even though wrong
        reflect(record("d", mro([("1", False, 2)]), True)),  # K=1 but patched: neither
        reflect(record("e", mro([("1", True, 3), ("2", True, 3)], 4, validate=False), False)),  # K<N
    ]
    for role in ("reasoner", "monitor", "controller"):
        plus, minus = select(refl, role)
        assert [r.id for r in plus] == ["a"] and [r.id for r in minus] == ["b"]
    # without Controller actions (Reasoner + Updates, single agents, debates) the trace's extremes select, gold-free:
    # an answer at once (task quality A) -> S+, no answer reached (C) -> S-; the outcome tag never decides
    single = [
        Reflection(i, None, "single", "?", outcome, 1, 1, status, quality, trajectories={"reasoner": ["1"]})
        for i, outcome, status, quality in [
            ("z", "failure", "accepted", "A"),
            ("y", "success", "max_iterations", "C"),
            ("x", "failure", "accepted", "A"),
            ("w", "success", "accepted", "B"),
        ]
    ]
    plus, minus = select(single, "reasoner", max_reflections=1)
    assert [r.id for r in plus] == ["x"] and [r.id for r in minus] == ["y"]
    flipped = [dataclasses.replace(r, outcome="success" if r.outcome == "failure" else "failure") for r in single]
    assert [[r.id for r in s] for s in select(flipped, "reasoner")] == [["x", "z"], ["y"]]
    assert select(single, "controller") == ([], [])


def test_selection_uses_the_default_budget_when_the_trace_lacks_one():
    trace = mro([("1", True, 3), ("2", True, 3)], max_iterations=2)
    del trace["max_iterations"]
    assert reflect(record("q", trace, False), default_max_iterations=3).max_iterations == 3
    assert select([reflect(record("q", trace, False), default_max_iterations=2)], "reasoner")[1]


# ---------------------------------------------------------------- parsing
def test_lesson_and_rule_parsers_are_lenient():
    drafts, how = parse_lessons("Sure!\n1. **Do**: plan first\n- avoid: skipping checks\n* TAGS: #Plan; checks\nDO:   ")
    assert how == "tagged" and [(d.kind, d.text) for d in drafts] == [
        ("do", "plan first"),
        ("avoid", "skipping checks"),
    ]
    assert drafts[0].tags == ["plan", "checks"]
    assert parse_lessons("<do>Plan.</do><avoid>Rush.</avoid>")[0][1].kind == "avoid"
    assert parse_lessons('[{"kind": "avoid", "text": "Rushing.", "tags": ["speed"]}]')[0][0].tags == ["speed"]
    assert parse_rules("- DO: check units\n- AVOID: rushing") == ["DO: check units", "AVOID: rushing"]
    assert parse_rules('["Check units.", "x"]') == ["Check units."]


# ---------------------------------------------------------------- lessons, knowledge, LLM calls
def test_one_batched_distiller_and_one_consolidator_call_per_batch():
    llm = FakeLLM()
    mem = llm_mca(llm)
    for e, _, _ in BATCH0:
        assert mem.guidance(GuidanceRequest(e, "reasoner")).text == ""
    assert llm.calls == []  # cold start: no composer call
    feed_batch(mem, BATCH0)
    assert llm.kinds() == ["distill", "consolidate"]
    assert [len(convs) for _, convs in llm.calls] == [3, 3]  # one conversation per role, in one call each
    assert sorted(x.id for x in mem.lessons)[:2] == ["L0.controller.1", "L0.controller.2"]
    lesson = next(x for x in mem.lessons if x.id == "L0.reasoner.1")
    assert (lesson.kind, lesson.tags, lesson.batch, lesson.sources) == ("do", ["checking", "units"], 0, ["a"])
    assert [k.text for k in mem.knowledge["monitor"]] == ["Check each step before answering.", "Do not guess at units."]
    stats = mem.stats()["batches"][0]
    assert stats["s_plus"] == {"reasoner": 1, "monitor": 1, "controller": 1}
    assert stats["s_minus"] == {"reasoner": 1, "monitor": 1, "controller": 1}
    assert (stats["distill_calls"], stats["consolidate_calls"], stats["distill_fallbacks"]) == (1, 1, 0)
    # the next batch: one composer call over its questions, nothing more
    batch1 = [ex("d", PENS2), ex("e", TRAIN2)]
    mem.begin_batch(batch1)
    assert llm.kinds()[-1] == "compose" and len(llm.calls[-1][1]) == 2
    g = mem.guidance(GuidanceRequest(batch1[0], "single"))
    assert g.text == "Check each step." and g.policy  # a composed prompt is the role's updated policy (Eq. 13)
    assert g.item_ids[-1] == "K0.reasoner" and all(i.startswith("L0.reasoner.") for i in g.item_ids[:-1])
    assert mem.guidance(GuidanceRequest(batch1[0], "moderator")).text == "Accept clean runs."
    assert len(llm.calls) == 3
    feed_batch(mem, [(batch1[0], FIRST_TRY, True), (batch1[1], FIRST_TRY, True)])
    assert llm.kinds() == ["distill", "consolidate", "compose", "distill", "consolidate"]


def test_gold_never_reaches_the_llm_and_eta_fields_are_not_shown():
    llm = FakeLLM()
    mem = llm_mca(llm)
    feed_batch(mem, BATCH0)
    mem.begin_batch([ex("d", PENS2)])
    for role in ("reasoner", "monitor", "controller"):
        mem.guidance(GuidanceRequest(ex("d", PENS2), role))
    feed_batch(mem, [(ex("d", PENS2), EXHAUSTED, False)])
    text = llm.all_text()
    assert llm.kinds().count("compose") == 1
    assert GOLD not in text and "answer_correct" not in text and "final_correct" not in text
    assert not re.search(r"\beta\b", text)
    assert GOLD not in json.dumps(mem.state_dict())


def _many(n: int) -> list:
    """``n`` first-try successes and ``n`` exhausted failures (2n questions, one batch)."""
    good = [(ex(f"p{i:02d}", f"{PENS} ({i})"), FIRST_TRY, True) for i in range(n)]
    bad = [(ex(f"m{i:02d}", f"{TRAIN} ({i})"), EXHAUSTED, False) for i in range(n)]
    return good + bad


def test_distiller_sees_every_selected_reflection_by_default():
    """Eq. 10 distils all of S+ and S-: 12 + 12 selected reflections all reach the distiller (the old default cut 8)."""
    assert MCAOptions().max_reflections is None
    llm = FakeLLM()
    mem = llm_mca(llm)
    feed_batch(mem, _many(12))
    stats = mem.stats()["batches"][0]
    assert stats["s_plus"]["reasoner"] == 12 and stats["s_minus"]["reasoner"] == 12
    prompt = llm.calls[0][1][0][0]["content"]
    assert prompt.count("Problem: ") == 24
    assert all(f"({i})" in prompt for i in range(12))


def test_max_reflections_caps_each_set_when_set():
    llm = FakeLLM()
    mem = llm_mca(llm, max_reflections=3)
    feed_batch(mem, _many(5))
    stats = mem.stats()["batches"][0]
    assert stats["s_plus"]["monitor"] == 3 and stats["s_minus"]["monitor"] == 3
    assert llm.calls[0][1][0][0]["content"].count("Problem: ") == 6
    assert MCAOptions.from_dict({"max_reflections": None}).max_reflections is None
    with pytest.raises(ValueError, match=r"max_reflections must be an integer >= 1 or null \(no cap\)"):
        MCAOptions(max_reflections=0)


def test_a_long_distiller_prompt_is_logged_never_cut(caplog, monkeypatch):
    import metamod.memory.mca.writers as writers

    llm = FakeLLM()
    mem = llm_mca(llm)
    with caplog.at_level("WARNING", logger="metamod.memory.mca.writers"):
        feed_batch(mem, _many(2))
    assert not [r for r in caplog.records if "distiller" in r.getMessage()]  # short prompts: silent
    monkeypatch.setattr(writers, "LONG_DISTILL_PROMPT_TOKENS", 50)
    caplog.clear()
    with caplog.at_level("WARNING", logger="metamod.memory.mca.writers"):
        feed_batch(mem, _many(6))
    long = [r.getMessage() for r in caplog.records if "prompt is long" in r.getMessage()]
    assert len(long) == 3 and "6 S+ and 6 S- reflections" in long[0] and "max_reflections" in long[0]
    assert llm.calls[-2][1][0][0]["content"].count("Problem: ") == 12  # logged, not shortened
    llm.context_length = 120
    caplog.clear()
    with caplog.at_level("WARNING", logger="metamod.memory.mca.writers"):
        feed_batch(mem, _many(6))
    assert any("does not fit the memory LLM's context of 120 tokens" in r.getMessage() for r in caplog.records)


def test_parse_fallbacks_are_counted_and_bad_consolidation_keeps_the_previous_rules():
    llm = FakeLLM(distill=['{"do": ["Plan first."], "tags": ["plan"]}', "no lessons here", "DO: x y"])
    mem = llm_mca(llm)
    feed_batch(mem, BATCH0)
    stats = mem.stats()["batches"][0]
    assert stats["distill_fallbacks"] == 2 and stats["lessons"] == {"controller": 1, "monitor": 0, "reasoner": 1}
    before, batches = copy.deepcopy(mem.knowledge), dict(mem.knowledge_batch)
    assert batches == {"reasoner": 0, "monitor": None, "controller": 0}  # the monitor had no lesson to consolidate
    llm.replies["consolidate"] = ["I would rather not."]
    llm.replies["distill"] = ["DO: Plan again."]
    mem.begin_batch([])
    feed_batch(mem, [(ex("d", PENS2), FIRST_TRY, True)])
    assert mem.knowledge == before and mem.knowledge_batch == batches
    assert mem.stats()["batches"][1]["consolidate_fallbacks"] == 3


def test_consolidate_false_leaves_knowledge_empty_and_compose_false_renders_lines():
    mem = rule_mca(consolidate=False, compose=False)
    feed_batch(mem, BATCH0)
    assert all(items == [] for items in mem.knowledge.values())
    g = mem.guidance(GuidanceRequest(ex("d", PENS2), "reasoner"))
    assert not g.policy  # lines of rules and lessons are extra guidance, not a policy
    assert all(line.startswith(("- DO: ", "- AVOID: ")) for line in g.text.splitlines())
    assert len(g.item_ids) == 2 and not any(i.startswith("K") for i in g.item_ids)
    assert mem.policy_update("d", "reasoner") is None  # nothing composed


def test_rule_consolidation_merges_duplicates_with_support():
    mem = rule_mca(window=2)
    for b in range(3):
        feed_batch(mem, [(ex(f"a{b}", PENS), FIRST_TRY, True), (ex(f"b{b}", TRAIN), EXHAUSTED, False)])
    k = mem.knowledge["reasoner"]
    assert len(k) == 2 and all(item.support == 3 for item in k) and {item.last_batch for item in k} == {2}
    assert sorted({x.batch for x in mem.lessons}) == [1, 2]  # older than the window: pruned


# ---------------------------------------------------------------- window and retrieval (C.7)
def _lesson(batch: int, n: int, text: str, role: str = "reasoner") -> dict:
    return {
        "id": f"L{batch}.{role}.{n}",
        "role": role,
        "kind": "do",
        "text": text,
        "tags": [],
        "batch": batch,
        "sources": [],
    }


def test_window_and_top_k_retrieval():
    mem = rule_mca(window=2, top_k=2, consolidate=False, compose=False)
    mem.batch_index = 4
    mem.load_state_dict(
        {
            "lessons": [
                _lesson(1, 1, "pens in each box: multiply boxes by pens"),  # best match, but outside the window
                _lesson(2, 1, "trains: distance is speed times hours"),
                _lesson(3, 1, "count pens per box times boxes"),
                _lesson(3, 2, "capital cities: recall the country"),
                _lesson(3, 1, "never shown", role="monitor"),
            ]
        }
    )
    got = [x.id for x in mem.retrieve(PENS2, "reasoner")]
    assert got == ["L3.reasoner.1", "L2.reasoner.1"]  # by similarity, not by recency; L1 is outside the window
    assert [x.id for x in mem.retrieve(TRAIN2, "reasoner")][0] == "L2.reasoner.1"
    assert [x.id for x in mem.retrieve(PENS2, "monitor")] == ["L3.monitor.1"]  # fewer than k
    mem.batch_index = 6
    assert mem.retrieve(PENS2, "reasoner") == []


def test_retrieval_ties_are_deterministic():
    mem = rule_mca(top_k=2, consolidate=False, compose=False)
    mem.batch_index = 2
    mem.load_state_dict(
        {"lessons": [_lesson(0, 1, "same text"), _lesson(1, 2, "same text"), _lesson(1, 1, "same text")]}
    )
    assert [x.id for x in mem.retrieve(PENS, "reasoner")] == ["L1.reasoner.1", "L1.reasoner.2"]


# ---------------------------------------------------------------- composer (C.3)
def test_composer_checks_regenerate_once_then_fall_back_per_role():
    long = " ".join(["word"] * 50)
    first = f"<P_R>{long}</P_R>\n<P_C>unclosed"  # reasoner over budget, monitor missing, controller unparsable
    second = "<P_R>Short now.</P_R>\n<P_M>Audit it.</P_M>\n<P_C></P_C>"  # controller still empty
    llm = FakeLLM(compose=[first, second])
    mem = llm_mca(llm, context_budget=20)
    feed_batch(mem, BATCH0)
    e = ex("d", PENS2)
    mem.begin_batch([e])
    assert llm.kinds()[2:] == ["compose", "compose"]
    retry = llm.calls[3][1][0]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"] and retry[1]["content"] == first
    assert "over budget" in retry[2]["content"] and "missing field <P_M>" in retry[2]["content"]
    r = mem.policy_update("d", "reasoner")
    assert r["used"] and r["ok"] and r["after"] == "Short now." and r["model"] == "fake-llm"
    assert r["before"].startswith("Work through the problem") and r["attempts"][0]["reason"].startswith("over budget")
    from metamod.rollout.mro.parse import role_policy

    assert r["before"] == " ".join(role_policy("reasoner").split())  # P_t: the prompt the composed one replaces
    assert [a["ok"] for a in r["attempts"]] == [False, True]
    m = mem.policy_update("d", "monitor")
    assert m["attempts"] == [{"ok": False, "reason": "missing field <P_M>"}, {"ok": True, "reason": None}]
    c = mem.policy_update("d", "judge")
    assert (c["used"], c["ok"], c["after"]) == (False, False, None)
    assert [a["reason"] for a in c["attempts"]] == ["unparsable: <P_C> is not closed", "unparsable: <P_C> is empty"]
    assert mem.guidance(GuidanceRequest(e, "controller")) == mem.guidance(GuidanceRequest(e, "judge"))
    assert mem.guidance(GuidanceRequest(e, "controller")).text == ""
    assert mem.guidance(GuidanceRequest(e, "monitor")).text == "Audit it."
    cur = mem.stats()["current"]
    assert (cur["compose_calls"], cur["compose_attempts"], cur["compose_regenerations"]) == (2, 2, 1)
    assert (cur["compose_parse_fallbacks"], cur["compose_fallbacks"], cur["compose_updates"]) == (4, 1, 2)


def test_composer_output_never_restates_the_question():
    llm = FakeLLM(compose=[f"<P_R>Problem: {PENS2} Multiply first.</P_R><P_M>a b</P_M><P_C>c d</P_C>"])
    mem = llm_mca(llm)
    feed_batch(mem, BATCH0)
    text = mem.guidance(GuidanceRequest(ex("d", PENS2), "reasoner")).text
    assert PENS2 not in text and text.endswith("Multiply first.")


def test_rule_composer_honours_the_budget_and_logs_one_attempt():
    mem = rule_mca(context_budget=12)
    feed_batch(mem, BATCH0)
    g = mem.guidance(GuidanceRequest(ex("d", PENS2), "reasoner"))
    assert 0 < len(g.text.split()) <= 12
    r = mem.policy_update("d", "reasoner")
    assert r["model"] == "rule" and r["attempts"] == [{"ok": True, "reason": None}] and r["after"] == g.text


def test_roles_option_limits_the_streams():
    mem = rule_mca(roles=["reasoner"])
    feed_batch(mem, BATCH0)
    assert {x.role for x in mem.lessons} == {"reasoner"}
    e = ex("d", PENS2)
    assert mem.guidance(GuidanceRequest(e, "debater", agent=0, step=1)).text
    assert mem.guidance(GuidanceRequest(e, "monitor")).text == ""
    assert mem.policy_update("d", "monitor") is None


# ---------------------------------------------------------------- protocol rules
def test_cold_start_gives_no_guidance_and_makes_no_call():
    llm = FakeLLM()
    mem = llm_mca(llm)
    mem.begin_batch([e for e, _, _ in BATCH0])
    assert all(mem.guidance(GuidanceRequest(e, r)).text == "" for e, _, _ in BATCH0 for r in ("single", "monitor"))
    assert llm.calls == [] and mem.policy_update("a", "reasoner") is None


def test_guidance_is_batch_synchronous_and_end_batch_is_order_free():
    one, two = rule_mca(), rule_mca()
    feed_batch(one, BATCH0)
    feed_batch(two, BATCH0)
    before = one.guidance(GuidanceRequest(ex("x", PENS2), "reasoner"))
    one.observe(observation(ex("x", PENS2), mro(FIRST_TRY, example_id="x"), True))
    one.observe(observation(ex("y", TRAIN2), mro(EXHAUSTED, example_id="y"), False))
    late = one.guidance(GuidanceRequest(ex("z", TRAIN2), "monitor"))  # asked after two observations
    assert late == two.guidance(GuidanceRequest(ex("z", TRAIN2), "monitor"))
    two.observe(observation(ex("y", TRAIN2), mro(EXHAUSTED, example_id="y"), False))
    two.observe(observation(ex("x", PENS2), mro(FIRST_TRY, example_id="x"), True))
    assert two.guidance(GuidanceRequest(ex("x", PENS2), "reasoner")) == before
    one.end_batch()
    two.end_batch()
    strip = lambda s: {**s, "guidance_log": None}  # noqa: E731  (which questions asked differs by design)
    assert strip(one.state_dict()) == strip(two.state_dict())


def test_same_question_with_another_gold_gets_the_same_guidance():
    mem = rule_mca()
    feed_batch(mem, BATCH0)
    a = mem.guidance(GuidanceRequest(ex("d", PENS2), "reasoner"))
    other = Example(id="d2", question=PENS2, gold="999", kind="math")
    assert mem.guidance(GuidanceRequest(other, "reasoner")).text == a.text


def test_save_load_identity(tmp_path):
    mem = rule_mca(window=2)
    feed_batch(mem, BATCH0)
    feed_batch(mem, [(ex("d", PENS2), EXHAUSTED, False), (ex("e", TRAIN2), FIRST_TRY, True)])
    e = ex("f", PENS)
    first = mem.guidance(GuidanceRequest(e, "reasoner"))  # mid-batch: composed prompts are part of the state
    mem.save(tmp_path / "m")
    fresh = rule_mca(window=2)
    fresh.load(tmp_path / "m")
    assert fresh.state_dict() == mem.state_dict() and fresh.batch_index == 2
    assert first.policy and fresh.guidance(GuidanceRequest(e, "reasoner")) == first  # the flag is saved too
    assert fresh.policy_update("f", "reasoner") == mem.policy_update("f", "reasoner")
    for role in ("monitor", "controller"):
        assert fresh.guidance(GuidanceRequest(ex("g", TRAIN), role)) == mem.guidance(
            GuidanceRequest(ex("g", TRAIN), role)
        )
    for m in (mem, fresh):
        feed_batch(m, [(e, FIRST_TRY, True)])
    assert fresh.state_dict() == mem.state_dict()
    assert fresh.guidance(GuidanceRequest(ex("h", CAPITAL), "judge")) == mem.guidance(
        GuidanceRequest(ex("h", CAPITAL), "judge")
    )
    assert fresh.config_dict() == mem.config_dict() and mem.config_dict()["embedder_spec"]["name"] == "hashing"


def test_guidance_log_and_relevance():
    mem = rule_mca()
    feed_batch(mem, BATCH0)
    for e in (ex("d", PENS2), ex("e", TRAIN2), ex("f", CAPITAL)):
        for role in ("reasoner", "single"):  # one stream: logged once
            mem.guidance(GuidanceRequest(e, role))
    mem.end_batch()
    log = mem.guidance_log
    assert [(x["batch"], x["id"], x["role"]) for x in log] == [
        (1, "d", "reasoner"),
        (1, "e", "reasoner"),
        (1, "f", "reasoner"),
    ]
    assert all(x["question"] not in x["guidance"] for x in log)
    rows = guidance_relevance(log, mem.embedder, seed=0)
    assert [(r["batch"], r["role"], r["n"]) for r in rows] == [(1, "reasoner", 3)]
    assert rows == guidance_relevance(log, mem.embedder, seed=0)


def test_stats_keys():
    mem = rule_mca()
    feed_batch(mem, BATCH0)
    stats = mem.stats()
    assert set(stats) == {"batches", "current", "totals"}
    assert {
        "s_plus",
        "s_minus",
        "lessons",
        "distill_fallbacks",
        "consolidate_fallbacks",
        "compose_attempts",
        "compose_regenerations",
        "compose_fallbacks",
        "compose_parse_fallbacks",
    } <= set(stats["batches"][0])
    assert stats["totals"]["lessons"] == stats["batches"][0]["lessons"]


# ---------------------------------------------------------------- options and construction
def test_writer_llm_without_llm_fails_clearly():
    with pytest.raises(ValueError, match=r"^memory 'mca' with writer=llm needs a memory LLM \(memory_model\); or set"):
        MetaCognitiveAccumulator()
    assert MetaCognitiveAccumulator.wants_llm(MCAOptions()) and not MetaCognitiveAccumulator.wants_llm(
        MCAOptions(writer="rule")
    )


@pytest.mark.parametrize(
    "options,message",
    [
        ({"windw": 2}, "'windw' is not an option of memory 'mca'"),
        ({"window": 0}, "window must be an integer >= 1"),
        ({"roles": ["critic"]}, r"roles: unknown stream\(s\) \['critic'\]"),
        ({"roles": "reasoner"}, "roles must be a non-empty list"),
        ({"writer": "gpt"}, "writer must be one of"),
        ({"consolidate": "yes"}, "consolidate must be true or false"),
        ({"embedder": "sentence-transformers"}, "embedder_model must name a local"),
    ],
)
def test_bad_options_fail_clearly(options, message):
    with pytest.raises(ValueError, match=message):
        MCAOptions.from_dict(options)


def test_registry_builds_and_validates_mca():
    from metamod.memory.registry import build_memory, needs_llm, parse_memory_options

    mem = build_memory("mca", writer="rule", window=2, seed=3)
    assert mem.name == "mca" and mem.options.window == 2 and mem.llm_sampling.seed == 3
    assert needs_llm("mca") and not needs_llm("mca", {"writer": "rule"})
    with pytest.raises(ValueError, match="'topk' is not an option of memory 'mca'"):
        parse_memory_options("mca", {"topk": 2})


def test_knowledge_and_lesson_types_round_trip():
    item = Lesson("L0.monitor.1", "monitor", "avoid", "Vague audits.", ["audit"], 0, ["a"])
    assert Lesson(**json.loads(json.dumps(item.__dict__))) == item and item.display() == "AVOID: Vague audits."
    assert KnowledgeItem("x y").support == 1
