"""Meta-reasoning baselines (metamod/evaluate/baselines): ToT, Meta-Prompting, the meta-reasoner and TTPI.

A scripted fake generator records every batched call (its conversations and sampling) and answers by the kind of
prompt it sees; then each baseline runs once end to end on the session's tiny model.
"""

from __future__ import annotations

import copy
import json
import re

import pytest

from metamod.errors import ConfigError
from metamod.evaluate.baselines import (
    DEFAULT_TRIGGERS,
    STRATEGIES,
    lowest_perplexity,
    parse_meta_reply,
    parse_score,
    parse_strategy,
)
from metamod.evaluate.decision import LayerContext
from metamod.evaluate.methods import build_method, method_spec
from metamod.llm.base import Generation, SamplingConfig
from metamod.prompts import get_template, render
from metamod.tasks.base import Example

META_REASONING = ["meta_prompting", "meta_reasoner", "tot", "ttpi"]
QUESTIONS = [Example(id=f"q{i}", question=f"What is {i} + {i}?", gold=str(2 * i), kind="math") for i in range(1, 4)]
PROMPT_TOKENS, COMPLETION_TOKENS = 11, 3


def _head(name: str) -> str:
    """The fixed opening of a template (its text before the first placeholder, first line): a prompt's kind."""
    return get_template(name, shipped=True).split("{")[0].splitlines()[0][:40]


KINDS = [
    "tot_step",
    "tot_next_step",
    "tot_finish",
    "tot_evaluate",
    "meta_prompting_meta",
    "meta_reasoner_select",
    "meta_reasoner_analogical",
    "meta_reasoner_spp",
    "meta_reasoner_step_back",
    "ttpi_solve",
    "single_cot",
    "single_reflection_critique",
    "single_reflection_revise",
]


def kind_of(conversation: list[dict[str, str]]) -> str:
    last, first = conversation[-1]["content"], conversation[0]["content"]
    if first.startswith("You are Expert"):
        return "expert"
    if conversation[-1]["role"] == "user" and len(conversation) > 1:
        for name in ("ttpi_final", "meta_prompting_error", "single_reflection_critique", "single_reflection_revise"):
            if last.startswith(_head(name)):
                return name
        if last.startswith(_head("ttpi_continue")):
            return "ttpi_continue"
        if len(conversation) > 2 and "replied:" in last:
            return "meta_prompting_expert_reply"
    for name in KINDS:
        if _head(name) in first:
            return name
    raise AssertionError(f"unknown prompt: {first[:80]!r}")


class FakeAgent:
    """Scripted generator: ``respond(conversation, sample, sampling) -> str | Generation``; records every call."""

    name = "fake-backend"
    context_length = None

    def __init__(self, respond, *, logprobs: bool = True):
        self.respond = respond
        self.logprobs = logprobs
        self.calls: list[tuple[list, SamplingConfig]] = []
        self.prompt_tokens = self.completion_tokens = 0

    def chat(self, conversations, sampling):
        self.calls.append((copy.deepcopy(conversations), sampling))
        out = []
        for conv in conversations:
            for j in range(sampling.n):
                g = self.respond(conv, j, sampling)
                if isinstance(g, str):
                    logprobs = [-0.5] * COMPLETION_TOKENS if (sampling.logprobs and self.logprobs) else None
                    g = Generation(g, PROMPT_TOKENS, COMPLETION_TOKENS, "stop", logprobs)
                self.prompt_tokens += g.prompt_tokens
                self.completion_tokens += g.completion_tokens
                out.append(g)
        return out

    def count_tokens(self, conversation):
        return PROMPT_TOKENS

    def shape(self) -> list[tuple[int, int]]:
        """``(conversations, n)`` of each call, in order."""
        return [(len(convs), s.n) for convs, s in self.calls]

    def kinds(self) -> list[set[str]]:
        return [{kind_of(c) for c in convs} for convs, _ in self.calls]


def _ctx(agent, **kwargs) -> LayerContext:
    return LayerContext(max_rounds=1, agent=agent, seed=3, **kwargs)


def _assert_tokens_add_up(agent: FakeAgent, outcomes) -> None:
    assert sum(o.prompt_tokens for o in outcomes) == agent.prompt_tokens > 0
    assert sum(o.completion_tokens for o in outcomes) == agent.completion_tokens > 0


def _question_of(conversation) -> str:
    return re.findall(r"What is \d+ \+ \d+\?", "\n".join(m["content"] for m in conversation))[0]


# ---------------------------------------------------------------------------------------------- shared rules


def test_registry_and_common_contract():
    for name in META_REASONING:
        spec = method_spec(name)
        assert spec.name == name and spec.loop == "single" and spec.label and not spec.replays_debates
        assert spec.runner.startswith("metamod.evaluate.baselines.")


@pytest.mark.parametrize("method", META_REASONING)
def test_simulated_world_is_a_config_error(method):
    with pytest.raises(ConfigError, match=f"method '{method}' needs an LLM agent"):
        build_method(method, LayerContext(max_rounds=1, simulated_agent=object()))


@pytest.mark.parametrize("method", META_REASONING)
def test_unknown_option_names_the_method_the_keys_and_the_valid_ones(method):
    ctx = _ctx(FakeAgent(lambda c, j, s: "x"), method_options={method: {"bogus": 1, "also_bad": 2}})
    with pytest.raises(ConfigError) as err:
        build_method(method, ctx)
    message = str(err.value)
    assert f"method_options[{method!r}]" in message and "['also_bad', 'bogus']" in message
    assert "valid settings: [" in message and "\n" not in message


@pytest.mark.parametrize(
    ("method", "options", "match"),
    [
        ("tot", {"candidates": 0}, "candidates must be >= 1"),
        ("meta_prompting", {"max_rounds": 0}, "max_rounds must be >= 1"),
        ("ttpi", {"triggers": {}}, "triggers must be a non-empty mapping"),
        ("meta_reasoner", {"select_max_tokens": 0}, "select_max_tokens must be >= 1"),
    ],
)
def test_bad_option_values_are_config_errors(method, options, match):
    with pytest.raises(ConfigError, match=match):
        build_method(method, _ctx(FakeAgent(lambda c, j, s: "x"), method_options={method: options}))


# ---------------------------------------------------------------------------------------------- ToT


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("<score>7</score>", 7.0),
        ("Looks fine. <score>9/10</score>", 9.0),
        ("<score>3</score> on second thought <score>4</score>", 4.0),
        ("<score>likely</score>", 5.0),
        ("Score: 6", 6.0),
        ("Rating = 2.5", 2.5),
        ("sure", 10.0),
        ("this is impossible", 1.0),
        ("<score>11</score>", None),
        ("<score>none</score>", None),
        ("unlikely", None),
        ("The steps add 3 and 4 to get 7.", None),
        ("", None),
    ],
)
def test_parse_score(text, score):
    assert parse_score(text) == score


def test_tot_paper_settings_batching_and_tokens():
    agent = FakeAgent(lambda c, j, s: "<score>5</score>" if kind_of(c) == "tot_evaluate" else f"step {j}")
    outcomes = build_method("tot", _ctx(agent)).run(QUESTIONS[:2])
    # generate (2 roots x n=5), score 10, expand the 2 kept per question (4 x n=5), score 20
    assert agent.shape() == [(2, 5), (10, 1), (4, 5), (20, 1)]
    assert agent.kinds() == [{"tot_step"}, {"tot_evaluate"}, {"tot_finish"}, {"tot_evaluate"}]
    assert [s.max_tokens for _, s in agent.calls] == [512, 128, 512, 128]
    assert all(s.seed == 3 for _, s in agent.calls)
    _assert_tokens_add_up(agent, outcomes)
    for o in outcomes:
        assert [lv["kept"] for lv in o.details["levels"]][0] == [0, 1]  # all tied: the earlier thoughts
        assert len(o.details["levels"][1]["scores"]) == 10 and o.details["levels"][1]["parents"] == [0] * 5 + [1] * 5
        assert o.answer is None and o.details["best"] is None  # no leaf states an answer
        assert len(o.texts) == 5 + 5 + 10 + 10 and len(o.answers) == 15
        assert o.prompt_tokens == 30 * PROMPT_TOKENS


def test_tot_ranks_by_self_evaluation_and_parse_fallback():
    level1 = {0: "<score>3</score>", 1: "<score>9</score>", 2: "no idea", 3: "<score>9</score>", 4: "Score: 7"}

    def respond(conv, j, sampling):
        kind, text = kind_of(conv), conv[-1]["content"]
        if kind == "tot_step":
            return f"thought-{j}"
        if kind == "tot_finish":
            parent = re.search(r"thought-(\d)", text).group(1)
            return f"so <answer>{parent}{j}</answer>"
        if "so <answer>" not in text:
            return level1[int(re.search(r"thought-(\d)", text).group(1))]
        return "<score>8</score>" if "<answer>34</answer>" in text or "<answer>12</answer>" in text else "junk"

    agent = FakeAgent(respond)
    [out] = build_method("tot", _ctx(agent)).run(QUESTIONS[:1])
    first, second = out.details["levels"]
    assert first["scores"] == [3.0, 9.0, 0.0, 9.0, 7.0] and first["kept"] == [1, 3]  # tie 1/3: the earlier first
    finish_prompts = [c[0]["content"] for c in agent.calls[2][0]]
    assert ["thought-1" in p for p in finish_prompts] == [True, False] and "thought-3" in finish_prompts[1]
    assert second["parents"] == [0] * 5 + [1] * 5
    # leaves "12" (parent 1, sample 2) and "34" tie at 8: the one found first wins
    assert out.answer == "12" and out.details["best"] == {"level": 2, "index": 2, "score": 8.0}
    assert out.details["unparsed_scores"] == 1 + 8
    assert {"12", "34", "10"} <= set(out.answers)


def test_tot_terminal_thought_is_a_leaf_not_expanded():
    def respond(conv, j, sampling):
        kind = kind_of(conv)
        if kind == "tot_step":
            return "<answer>2</answer>" if j == 0 else f"thought-{j}"
        if kind == "tot_finish":
            return "<answer>5</answer>"
        return "<score>9</score>" if "<answer>2</answer>" in conv[0]["content"] else "<score>4</score>"

    agent = FakeAgent(respond)
    [out] = build_method("tot", _ctx(agent)).run(QUESTIONS[:1])
    assert out.details["levels"][0]["kept"] == [0, 1] and out.details["levels"][0]["terminal"] == [0]
    assert agent.shape() == [(1, 5), (5, 1), (1, 5), (5, 1)]  # only the non-terminal kept node is expanded
    assert out.answer == "2" and out.details["best"]["level"] == 1


def test_tot_depth_option_and_memory_guidance():
    class Memory:
        def guidance(self, request):
            from metamod.memory import Guidance

            return Guidance(text="REMEMBER-THIS")

    agent = FakeAgent(lambda c, j, s: "<score>5</score>" if kind_of(c) == "tot_evaluate" else f"step {j}")
    ctx = _ctx(agent, memory=Memory(), method_options={"tot": {"candidates": 3, "keep": 1, "depth": 3}})
    build_method("tot", ctx).run(QUESTIONS[:2])
    assert agent.shape() == [(2, 3), (6, 1), (2, 3), (6, 1), (2, 3), (6, 1)]
    assert agent.kinds()[2] == {"tot_next_step"} and agent.kinds()[4] == {"tot_finish"}
    assert all(c[0]["content"].startswith("Guidance from earlier") for c in agent.calls[0][0])


# ---------------------------------------------------------------------------------------------- Meta-Prompting


def test_parse_meta_reply_rules():
    call = parse_meta_reply('Let me ask.\nExpert Number Theorist: """Is 7 prime? Answer in <answer></answer>."""')
    assert (call.kind, call.expert, call.instruction) == (
        "expert",
        "Expert Number Theorist",
        "Is 7 prime? Answer in <answer></answer>.",
    )
    two = parse_meta_reply('Expert A: """first""" then Expert B: """second"""')
    assert (two.expert, two.instruction) == ("Expert A", "first")  # one expert per round
    assert parse_meta_reply('Done: <answer>7</answer>. Expert A: """check"""').kind == "final"
    assert parse_meta_reply("The answer is 7").kind == "error"  # only <answer> tags are the marker


def test_meta_prompting_fresh_eyes_and_history():
    def respond(conv, j, sampling):
        kind = kind_of(conv)
        if kind == "expert":
            return "It comes to <answer>4</answer>"
        if kind == "meta_prompting_meta":
            return f'I will delegate.\nExpert Arithmetician: """Add the two numbers of SECRET-{_question_of(conv)[8:9]}."""'
        return "The expert is right: <answer>4</answer>"

    agent = FakeAgent(respond)
    outcomes = build_method("meta_prompting", _ctx(agent)).run(QUESTIONS[:2])
    assert agent.shape() == [(2, 1), (2, 1), (2, 1)]  # meta, experts, meta
    assert agent.kinds() == [{"meta_prompting_meta"}, {"expert"}, {"meta_prompting_expert_reply"}]
    for i, conv in enumerate(agent.calls[1][0]):
        assert conv == [
            {
                "role": "user",
                "content": render(
                    "meta_prompting_expert",
                    expert="Expert Arithmetician",
                    instruction=f"Add the two numbers of SECRET-{i + 1}.",
                ),
            }
        ]
        assert "What is" not in conv[0]["content"] and "delegate" not in conv[0]["content"]
    history = agent.calls[2][0][0]
    assert [m["role"] for m in history] == ["user", "assistant", "user"] and "It comes to" in history[2]["content"]
    for o in outcomes:
        assert o.answer == "4" and o.details == {
            "rounds": 2,
            "experts": ["Expert Arithmetician"],
            "errors": 0,
            "stop": "final",
        }
    _assert_tokens_add_up(agent, outcomes)
    assert outcomes[0].prompt_tokens == 3 * PROMPT_TOKENS


def test_meta_prompting_error_messages_and_budget():
    def respond(conv, j, sampling):
        kind = kind_of(conv)
        q = _question_of(conv) if kind != "expert" else ""
        if kind == "expert":
            return "I get <answer>12</answer>"
        if "1 + 1" in q:
            return "<answer>2</answer>"  # done at once
        if "2 + 2" in q and len(conv) == 1:
            return 'Expert Checker: """What is 6 + 6?"""'
        return "Hmm, let me think more."  # neither an expert call nor an answer

    agent = FakeAgent(respond)
    outcomes = build_method("meta_prompting", _ctx(agent, method_options={"meta_prompting": {"max_rounds": 3}})).run(
        QUESTIONS
    )
    # round 1: 3 meta calls, 1 expert; rounds 2-3: the two unfinished questions only
    assert agent.shape() == [(3, 1), (1, 1), (2, 1), (2, 1)]
    last = {_question_of(c): c for c in agent.calls[-1][0]}
    assert [m["role"] for m in last["What is 3 + 3?"]] == ["user", "assistant", "user", "assistant", "user"]
    assert last["What is 3 + 3?"][-1]["content"] == render("meta_prompting_error")
    one, two, three = outcomes
    assert one.answer == "2" and one.details["stop"] == "final" and one.details["rounds"] == 1
    assert two.answer == "12" and two.details == {
        "rounds": 3,
        "experts": ["Expert Checker"],
        "errors": 2,
        "stop": "budget",
    }
    assert three.answer is None and three.details == {"rounds": 3, "experts": [], "errors": 3, "stop": "budget"}
    _assert_tokens_add_up(agent, outcomes)


def test_meta_prompting_stops_when_the_history_outgrows_the_context():
    agent = FakeAgent(lambda c, j, s: "thinking")
    agent.context_length = PROMPT_TOKENS + 512  # room for exactly one call of max_tokens=512
    agent.count_tokens = lambda conv: PROMPT_TOKENS * len(conv)
    [out] = build_method("meta_prompting", _ctx(agent)).run(QUESTIONS[:1])
    assert agent.shape() == [(1, 1)] and out.details["stop"] == "context" and out.answer is None


# ---------------------------------------------------------------------------------------------- meta-reasoner


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("<strategy>cot_sc</strategy>", "cot_sc"),
        ("I pick <strategy>Tree-of-Thoughts</strategy>.", "tot"),
        ("<strategy>Solo Performance Prompting</strategy>", "spp"),
        ("analogical", "analogical"),
        ("Self-Refine\nIt lets the model fix its draft.", "self_refine"),
        ("<strategy>step back</strategy>", "step_back"),
        ("Chain of Thought", "cot"),
        ("<strategy>magic</strategy>", None),
        ("Either tot or cot_sc would work here.", None),
        ("", None),
    ],
)
def test_parse_strategy(text, key):
    assert parse_strategy(text) == key


def _reasoner_agent(choices: dict[str, str]) -> FakeAgent:
    """Selection: the scripted choice per question; strategy prompts: an answer; ToT scores: 5."""

    def respond(conv, j, sampling):
        kind = kind_of(conv)
        if kind == "meta_reasoner_select":
            return choices[_question_of(conv)]
        if kind == "tot_evaluate":
            return "<score>5</score>"
        if kind == "tot_step":
            return f"thought {j}"
        if kind == "single_reflection_critique":
            return "Looks right."
        return f"{kind} says <answer>{j + 7}</answer>"

    return FakeAgent(respond)


STRATEGY_CALLS = {  # the calls after the selection call: (conversations, n) and prompt kinds
    "cot": ([(1, 1)], [{"single_cot"}]),
    "analogical": ([(1, 1)], [{"meta_reasoner_analogical"}]),
    "spp": ([(1, 1)], [{"meta_reasoner_spp"}]),
    "step_back": ([(1, 1)], [{"meta_reasoner_step_back"}]),
    "cot_sc": ([(1, 4)], [{"single_cot"}]),
    "self_refine": (
        [(1, 1)] * 3,
        [{"single_cot"}, {"single_reflection_critique"}, {"single_reflection_revise"}],
    ),
    "tot": ([(1, 5), (5, 1), (2, 5), (10, 1)], [{"tot_step"}, {"tot_evaluate"}, {"tot_finish"}, {"tot_evaluate"}]),
}


@pytest.mark.parametrize("key", sorted(STRATEGIES))
def test_meta_reasoner_dispatches_each_strategy(key):
    assert set(STRATEGY_CALLS) == set(STRATEGIES) and len(STRATEGIES) == 7
    agent = _reasoner_agent({"What is 1 + 1?": f"<strategy>{key}</strategy>"})
    [out] = build_method("meta_reasoner", _ctx(agent, sc_samples=4)).run(QUESTIONS[:1])
    shapes, kinds = STRATEGY_CALLS[key]
    assert agent.shape() == [(1, 1), *shapes] and agent.kinds() == [{"meta_reasoner_select"}, *kinds]
    assert agent.calls[0][1].max_tokens == 64
    assert out.details["strategy"] == key and out.details["strategy_parsed"] is True
    if key in ("cot", "analogical", "spp", "step_back", "self_refine"):
        assert out.answer == "7" and "strategy_details" not in out.details
    if key == "cot_sc":
        assert out.answers == ["7", "8", "9", "10"] and out.answer in {"7", "8", "9", "10"}
    if key == "tot":
        assert out.answer == "7" and len(out.details["strategy_details"]["levels"]) == 2
    _assert_tokens_add_up(agent, [out])


def test_meta_reasoner_batches_groups_and_falls_back_to_cot():
    choices = {
        "What is 1 + 1?": "<strategy>analogical</strategy>",
        "What is 2 + 2?": "I would rather not say.",  # unparsable: cot
        "What is 3 + 3?": "<strategy>cot_sc</strategy>",
    }
    agent = _reasoner_agent(choices)
    outcomes = build_method("meta_reasoner", _ctx(agent, sc_samples=2)).run(QUESTIONS)
    # selection over all 3; the two single-prompt strategies share ONE call; CoT-SC runs once on its question
    assert agent.shape() == [(3, 1), (2, 1), (1, 2)]
    assert agent.kinds() == [{"meta_reasoner_select"}, {"meta_reasoner_analogical", "single_cot"}, {"single_cot"}]
    assert [o.details["strategy"] for o in outcomes] == ["analogical", "cot", "cot_sc"]
    assert [o.details["strategy_parsed"] for o in outcomes] == [True, False, True]
    assert [o.texts[0] for o in outcomes] == list(choices.values())  # the choice is recorded, not an answer
    _assert_tokens_add_up(agent, outcomes)


def test_meta_reasoner_tot_uses_the_tot_settings():
    agent = _reasoner_agent({"What is 1 + 1?": "<strategy>tot</strategy>"})
    ctx = _ctx(agent, method_options={"tot": {"candidates": 2, "keep": 1}})
    build_method("meta_reasoner", ctx).run(QUESTIONS[:1])
    assert agent.shape() == [(1, 1), (1, 2), (2, 1), (1, 2), (2, 1)]


# ---------------------------------------------------------------------------------------------- TTPI

PPL_BY_TRIGGER = {"progress": -1.0, "summarise": -0.2, "verify": -0.7, "conclude": -0.2}  # summarise ties conclude


def _ttpi_agent(answer_at_stage: int | None, *, logprobs: bool = True) -> FakeAgent:
    phrases = {render("ttpi_continue", trigger=p): name for name, p in DEFAULT_TRIGGERS.items()}

    def respond(conv, j, sampling):
        if len(conv) == 1:
            return "Stage one."
        if kind_of(conv) == "ttpi_final":
            return "Fine: <answer>99</answer>"
        trigger = phrases[conv[-1]["content"]]
        stage = conv[1]["content"].count("\n\n") + 2
        text = f"{trigger} step {stage}" + (" <answer>6</answer>" if stage == answer_at_stage else "")
        lp = [PPL_BY_TRIGGER[trigger]] * (1 + len(trigger)) if logprobs else None
        return Generation(text, PROMPT_TOKENS, COMPLETION_TOKENS, "stop", lp)

    return FakeAgent(respond, logprobs=logprobs)


def test_ttpi_keeps_the_lowest_perplexity_branch_in_one_call_per_stage():
    agent = _ttpi_agent(answer_at_stage=3)
    outcomes = build_method("ttpi", _ctx(agent)).run(QUESTIONS[:2])
    assert agent.shape() == [(2, 1), (8, 1), (8, 1)]  # stage 1, then 2 questions x 4 triggers per stage
    first, *branching = [s for _, s in agent.calls]
    assert first.logprobs is False and first.stop == ["\n\n"] and first.max_tokens == 128
    assert all(s.logprobs and s.stop == ["\n\n"] and s.max_tokens == 128 for s in branching)
    # the next stage continues the kept branch: summarise (lowest PPL, the earlier of the tie with conclude)
    history = agent.calls[2][0][0]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["content"] == "Stage one.\n\nTo sum up what we have so far, summarise step 2"
    for o in outcomes:
        assert [s["chosen"] for s in o.details["stages"]] == ["summarise", "summarise"]
        assert o.details["stages"][0]["perplexity"]["progress"] == pytest.approx(2.718281828)
        assert o.answer == "6" and o.details["forced_final"] is False and len(o.texts) == 1 + 4 + 4
    _assert_tokens_add_up(agent, outcomes)


def test_ttpi_budget_then_final_answer_once():
    agent = _ttpi_agent(answer_at_stage=None)
    outcomes = build_method(
        "ttpi", _ctx(agent, method_options={"ttpi": {"max_stages": 3, "stage_max_tokens": 16}})
    ).run(QUESTIONS[:2])
    assert agent.shape() == [(2, 1), (8, 1), (8, 1), (2, 1)]
    assert agent.kinds()[-1] == {"ttpi_final"} and agent.calls[-1][1].logprobs is False
    assert all(o.answer == "99" and o.details["forced_final"] for o in outcomes)
    _assert_tokens_add_up(agent, outcomes)


def test_ttpi_without_logprobs_is_a_one_line_error_naming_the_backend():
    agent = _ttpi_agent(answer_at_stage=None, logprobs=False)
    with pytest.raises(ConfigError, match=r"'ttpi' needs per-token log-probs, but backend 'fake-backend'") as err:
        build_method("ttpi", _ctx(agent)).run(QUESTIONS[:1])
    assert "\n" not in str(err.value)


def test_lowest_perplexity_ignores_empty_branches():
    empty, some = Generation("", token_logprobs=[]), Generation("x", token_logprobs=[-3.0])
    assert lowest_perplexity([empty, some])[0] == 1 and lowest_perplexity([empty, empty])[0] == 0


def test_ttpi_custom_triggers():
    agent = FakeAgent(lambda c, j, s: "<answer>1</answer>" if len(c) > 1 else "start")
    ctx = _ctx(agent, method_options={"ttpi": {"triggers": {"a": "Alpha", "b": "Beta"}}})
    [out] = build_method("ttpi", ctx).run(QUESTIONS[:1])
    assert agent.shape() == [(1, 1), (2, 1)] and out.answer == "1" and out.details["stages"][0]["chosen"] == "a"


# ---------------------------------------------------------------------------------------------- tiny model


@pytest.fixture(scope="module")
def tiny_agent(tiny_model_dir):
    from metamod.llm.hf import HFGenerator

    return HFGenerator(str(tiny_model_dir), device="cpu", batch_size=16)


TINY_OPTIONS = {
    "tot": {"eval_max_tokens": 8},
    "meta_prompting": {"max_rounds": 2},
    "meta_reasoner": {"select_max_tokens": 8},
    "ttpi": {"max_stages": 2, "stage_max_tokens": 8},
}


@pytest.mark.parametrize("method", META_REASONING)
def test_each_baseline_runs_on_the_tiny_model(method, tiny_agent):
    if method == "ttpi":
        probe = tiny_agent.chat([[{"role": "user", "content": "Hi"}]], SamplingConfig(max_tokens=2, logprobs=True))
        if probe[0].token_logprobs is None:
            pytest.skip("the hf backend does not return token_logprobs yet (TTPI needs them)")
    ctx = LayerContext(
        max_rounds=1,
        agent=tiny_agent,
        agent_sampling=SamplingConfig(temperature=0.7, max_tokens=8),
        sc_samples=2,
        method_options={method: TINY_OPTIONS[method]},
    )
    outcomes = build_method(method, ctx).run(QUESTIONS[:2])
    assert len(outcomes) == 2
    for o in outcomes:
        assert o.prompt_tokens > 0 and o.completion_tokens > 0 and o.texts and o.details
        assert o.answer is None or isinstance(o.answer, str)
        json.dumps(o.details, allow_nan=False)  # JSON-ready for the samples row
