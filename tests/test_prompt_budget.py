"""The prompt budget (metamod.llm.budget): one cut order for every prompt, failures recorded, never a crash."""

from __future__ import annotations

import json

import pytest

from metamod.evaluate.config import EvalConfig
from metamod.evaluate.harness import evaluate
from metamod.llm.base import Generation, SamplingConfig
from metamod.llm.budget import TOO_LONG, BudgetedGenerator, estimate_tokens
from metamod.memory.base import render_guidance, with_guidance


class Recorder:
    """A backend that records what it was sent and answers with the last message's first word."""

    name, context_length = "recorder", None

    def __init__(self):
        self.sent: list[list[dict]] = []

    def chat(self, conversations, sampling):
        self.sent += conversations
        return [Generation(str(c[-1]["content"]).split()[0], 1, 1) for c in conversations for _ in range(sampling.n)]


GUIDANCE = "\n".join(f"- tip-{i}: {'advice ' * 6}" for i in range(6))
QUESTION = "What is 12 + 30? Answer with <answer>N</answer>."


def _guided() -> list[dict]:
    return [{"role": "user", "content": with_guidance(QUESTION, render_guidance(GUIDANCE))}]


def test_guidance_items_go_first_last_item_first_and_the_question_stays():
    full = estimate_tokens(_guided())
    backend = Recorder()
    gen = BudgetedGenerator(backend, context_length=full - 20 + 8, token_estimate=True)
    out = gen.chat([_guided()], SamplingConfig(max_tokens=8))
    sent = str(backend.sent[0][0]["content"])
    assert out[0].finish_reason is None and QUESTION in sent
    assert "tip-0" in sent and "tip-5" not in sent, "the last (least relevant / oldest) item goes first"
    (event,) = gen.take_events()
    assert event.kind == "cut" and event.guidance_items >= 1 and event.turns == 0
    assert estimate_tokens(backend.sent[0]) <= full - 20


def test_history_goes_after_guidance_oldest_exchange_first_and_ends_are_kept():
    conversation = [
        {"role": "system", "content": "You solve problems."},
        {"role": "user", "content": with_guidance(QUESTION, render_guidance(GUIDANCE))},
        {"role": "assistant", "content": "first try " * 40},
        {"role": "user", "content": "Wrong, again."},
        {"role": "assistant", "content": "second try"},
        {"role": "user", "content": "Check once more."},
    ]
    question_only = estimate_tokens([conversation[0], {"role": "user", "content": QUESTION}, *conversation[4:]])
    backend = Recorder()
    gen = BudgetedGenerator(backend, context_length=question_only + 8, token_estimate=True)
    gen.chat([conversation], SamplingConfig(max_tokens=8))
    sent = backend.sent[0]
    assert [m["content"] for m in sent] == ["You solve problems.", QUESTION, "second try", "Check once more."]
    (event,) = gen.take_events()
    assert event.kind == "cut" and event.turns == 2 and event.guidance_items == 6  # the last item leaves with the frame


def test_a_prompt_that_cannot_fit_is_not_sent_and_answered_empty_in_place():
    backend = Recorder()
    gen = BudgetedGenerator(backend, context_length=30, token_estimate=True)
    short = [{"role": "user", "content": "2+2?"}]
    too_long = [{"role": "user", "content": QUESTION * 10}]
    out = gen.chat([short, too_long, short], SamplingConfig(max_tokens=4, n=2))
    assert [g.finish_reason for g in out] == [None, None, TOO_LONG, TOO_LONG, None, None]
    assert [g.text for g in out][2:4] == ["", ""] and len(backend.sent) == 2
    assert gen.totals == {"cut": 0, "too_long": 1}


def test_unknown_context_checks_nothing():
    backend = Recorder()
    gen = BudgetedGenerator(backend)
    gen.chat([[{"role": "user", "content": "x " * 10_000}]], SamplingConfig(max_tokens=4))
    assert len(backend.sent) == 1 and gen.take_events() == []


@pytest.mark.parametrize("context", [48])
def test_eval_grades_a_question_whose_prompt_cannot_fit_wrong_and_counts_it(tmp_path, tiny_model_dir, context):
    """A run whose prompts exceed the context completes: each such question is a recorded failure per method."""
    config = EvalConfig(
        methods=["single_cot", "majority_vote"],
        limit=3,
        max_rounds=2,
        debaters="hf",
        debater_model=str(tiny_model_dir),
        debater_backend_options={"device": "cpu", "max_model_len": context},
        max_tokens=8,
        output_dir=str(tmp_path / "eval"),
        plots=False,
    )
    document = evaluate(config)
    for method in ("single_cot", "majority_vote"):
        metrics = document["results"]["arith"][method]
        assert metrics["prompt_too_long_questions"] == 3 and metrics["accuracy"] == 0.0
    rows = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert all(r["methods"]["single_cot"]["prompts_too_long"] >= 1 for r in rows)
    assert all(r["methods"]["majority_vote"]["prompts_too_long"] >= 2 for r in rows)  # both agents, round 0
