"""Moderator protocol parser and rewards: every format case, each eta, final rounds, both completion shapes."""

import pickle

import pytest

from metamod.rewards import (
    REWARDS,
    Decision,
    answer_reward,
    control_reward,
    format_reward,
    format_strict_reward,
    get_format_reward,
    get_reward_funcs,
    parse_decision,
)
from metamod.rewards.moderator import completion_text

# text -> (action, answer, valid, reason)
CASES = {
    "CONTINUE": ("CONTINUE", None, True, "ok"),
    "  CONTINUE \n": ("CONTINUE", None, True, "ok"),
    "CONTINUE.": ("CONTINUE", None, False, "continue_with_text"),
    "CONTINUE the debate": ("CONTINUE", None, False, "continue_with_text"),
    "CONTINUE <answer>3</answer>": ("CONTINUE", None, False, "continue_with_text"),
    "CONTINUED": (None, None, False, "unknown_action"),
    "continue": (None, None, False, "unknown_action"),
    "STOP <answer>42</answer>": ("STOP", "42", True, "ok"),
    "STOP<answer>42</answer>": ("STOP", "42", True, "ok"),
    "\nSTOP\n<answer> B. friendship </answer>\n": ("STOP", "B. friendship", True, "ok"),
    "STOP <answer>line one\nline two</answer>": ("STOP", "line one\nline two", True, "ok"),
    "STOP": ("STOP", None, False, "no_answer_span"),
    "STOP \n ": ("STOP", None, False, "no_answer_span"),
    "STOP the answer is 4": ("STOP", None, False, "stop_with_text"),
    "STOP < < < <": ("STOP", None, False, "stop_with_text"),
    "STOP <answer></answer>": ("STOP", None, False, "empty_answer"),
    "STOP <answer>   </answer>": ("STOP", None, False, "empty_answer"),
    "STOP <answer>4": ("STOP", None, False, "unclosed_tag"),
    "STOP 4</answer>": ("STOP", None, False, "unclosed_tag"),
    "STOP <answer><answer>4</answer>": ("STOP", None, False, "unclosed_tag"),
    "STOP <answer>4</answer> since both agree": ("STOP", "4", False, "text_after_answer"),
    "STOP <answer>4</answer></answer>": ("STOP", "4", False, "text_after_answer"),
    "STOP because: <answer>4</answer>": ("STOP", "4", False, "text_before_answer"),
    "STOP <answer>4</answer><answer>5</answer>": ("STOP", "4", False, "multiple_answer_spans"),
    "STOP <answer></answer><answer>5</answer>": ("STOP", "5", False, "multiple_answer_spans"),
    "STOPPED <answer>4</answer>": (None, None, False, "unknown_action"),
    "stop <answer>4</answer>": (None, None, False, "unknown_action"),
    "STOP <ANSWER>4</ANSWER>": ("STOP", None, False, "stop_with_text"),
    "I think STOP <answer>4</answer>": (None, None, False, "unknown_action"),
    "<answer>4</answer>": (None, None, False, "unknown_action"),
    "": (None, None, False, "empty"),
    "   \n ": (None, None, False, "empty"),
}

# text -> format reward on a normal row
PARTIAL = {"no_answer_span", "stop_with_text", "unclosed_tag", "empty_answer"}
FORMAT = {text: (1.0 if v[2] else 0.5 if v[3] in PARTIAL else 0.0) for text, v in CASES.items()}
FORMAT_STRICT = {text: (1.0 if v[2] else 0.5 if v[3] == "no_answer_span" else 0.0) for text, v in CASES.items()}


@pytest.mark.parametrize("text", list(CASES))
def test_parse_decision_cases(text):
    action, answer, valid, reason = CASES[text]
    decision = parse_decision(text)
    assert decision == Decision(action, answer, valid, reason)
    assert decision.partial == (reason in PARTIAL)
    assert decision.bare_stop == (reason == "no_answer_span")


def test_parse_decision_none_and_frozen():
    assert parse_decision(None) == Decision(None, None, False, "empty")
    with pytest.raises(AttributeError):
        parse_decision("CONTINUE").action = "STOP"


def conv(text):
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("shape", ["plain", "conversational"])
def test_format_reward_all_cases(shape):
    texts = list(CASES)
    completions = texts if shape == "plain" else [conv(t) for t in texts]
    assert format_reward(completions) == [FORMAT[t] for t in texts]
    assert format_reward(completions, is_final_round=[False] * len(texts)) == [FORMAT[t] for t in texts]
    assert format_strict_reward(completions) == [FORMAT_STRICT[t] for t in texts]


def test_format_reward_final_round_rejects_continue():
    completions = ["CONTINUE", "STOP <answer>4</answer>", "STOP", "CONTINUE"]
    assert format_reward(completions, is_final_round=[True, True, True, False]) == [0.0, 1.0, 0.5, 1.0]


def test_format_reward_ignores_trl_extras():
    out = format_reward(
        ["CONTINUE"], prompts=[[{"role": "user", "content": "q"}]], completion_ids=[[1, 2]], eta=[1], log_extra=None
    )
    assert out == [1.0]


@pytest.mark.parametrize("eta", [0, 1])
@pytest.mark.parametrize("shape", ["plain", "conversational"])
def test_control_reward_each_eta(eta, shape):
    texts = ["STOP <answer>4</answer>", "STOP", "STOP <answer>4</answer> extra", "CONTINUE", "CONTINUE.", "no", ""]
    completions = texts if shape == "plain" else [conv(t) for t in texts]
    got = control_reward(completions, eta=[eta] * len(texts))
    stop_value, continue_value = (1.0, 0.0) if eta == 1 else (0.0, 1.0)
    assert got == [stop_value, stop_value, stop_value, continue_value, continue_value, 0.0, 0.0]


def test_control_reward_final_round_is_none():
    got = control_reward(
        ["STOP <answer>1</answer>", "CONTINUE", "CONTINUE"], eta=[1, 0, 0], is_final_round=[True, True, False]
    )
    assert got == [None, None, 1.0]


def test_control_reward_length_mismatch():
    with pytest.raises(ValueError, match="2 completions but 1 eta"):
        control_reward(["STOP", "CONTINUE"], eta=[1])


def test_completion_text_shapes():
    assert completion_text(None) == ""
    assert completion_text({"role": "assistant", "content": "STOP"}) == "STOP"
    assert (
        completion_text(
            [{"role": "assistant", "content": [{"type": "text", "text": "CONT"}, {"type": "text", "text": "INUE"}]}]
        )
        == "CONTINUE"
    )
    assert (
        completion_text([{"role": "user", "content": "x"}, {"role": "assistant", "content": "CONTINUE"}]) == "CONTINUE"
    )
    assert completion_text([]) == ""


def test_answer_reward():
    completions = [
        "STOP <answer>42</answer>",
        "STOP <answer>41</answer>",
        "STOP",
        "CONTINUE",
        "CONTINUE",
        "garbage",
        conv("STOP <answer>42</answer> trailing"),
    ]
    n = len(completions)
    got = answer_reward(
        completions, gold=["42"] * n, kind=["math"] * n, is_final_round=[False, False, False, False, True, False, False]
    )
    assert got == [1.0, 0.0, 0.0, None, 0.0, 0.0, 1.0]


def test_get_format_reward():
    reward = get_format_reward(0.0)
    assert reward.__name__ == "format_reward"
    assert reward(["STOP", "CONTINUE"]) == [0.0, 1.0]
    with pytest.raises(ValueError, match="partial_credit"):
        get_format_reward(2.0)


@pytest.mark.parametrize("reward", [*REWARDS.values(), get_format_reward(0.25)])
def test_rewards_pickle_round_trip(reward):
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == reward.__name__
    kwargs = {"eta": [1, 0], "gold": ["4", "4"], "kind": ["math", "math"], "future_correct": [[0], [1]],
              "outcome_estimator": ["next_majority"] * 2}  # fmt: skip
    completions = ["STOP <answer>4</answer>", "CONTINUE"]
    assert clone(completions, **kwargs) == reward(completions, **kwargs)


def test_registry_names():
    funcs, weights = get_reward_funcs(["format", "control", "answer"])
    assert [f.__name__ for f in funcs] == ["format_reward", "control_reward", "answer_reward"]
    assert weights == [1.0, 1.0, 1.0]
    funcs, weights = get_reward_funcs(" format , control ", [0.5, 2])
    assert weights == [0.5, 2.0]
    funcs, _ = get_reward_funcs(["metamod.rewards.moderator:control_reward"])
    assert funcs == [control_reward]


def test_registry_errors():
    with pytest.raises(KeyError, match="Valid names: answer, control, format"):
        get_reward_funcs(["fromat"])
    with pytest.raises(ValueError, match="reward_weights has 1 values"):
        get_reward_funcs(["format", "control"], [1.0])
    with pytest.raises(ValueError, match="empty"):
        get_reward_funcs([])
    with pytest.raises(ValueError, match="more than once"):
        get_reward_funcs(["format", "format"])


# ---------------------------------------------------------------------------------------------- P(STOP)


def test_decision_probability_sums_prefixes_of_each_word_at_the_first_non_space_token():
    import math

    from metamod.rewards.moderator import CONTINUE, decision_probability

    top = {
        " S": math.log(0.1),  # a prefix of STOP after the space
        "STOP": math.log(0.2),
        "STOP<": math.log(0.1),  # the whole word, then a non-word character
        "STOPPED": math.log(0.3),  # not the keyword
        "stop": math.log(0.05),  # keywords are case-sensitive
        "C": math.log(0.1),
        "CONTINUE": math.log(0.1),
    }
    tokens = ["\n", "  ", "STOP", "<answer>"]
    tops = [{"\n": -0.01}, {"  ": -0.01}, top, {}]
    assert decision_probability(tokens, tops) == pytest.approx(0.4 / 0.6)
    assert decision_probability(tokens, tops, keyword=CONTINUE) == pytest.approx(0.2 / 0.6)
    # the decision position is the FIRST non-whitespace token, not the first with a decision word in its top-k
    assert decision_probability(["I", "STOP"], [{"I": -0.1}, top]) is None
    assert decision_probability(["  "], [{"  ": -0.1}]) is None  # no decision word at all
    assert decision_probability(["STOP"], [{"STOP": 0.0}]) == 1.0
    assert decision_probability([], []) is None and decision_probability(["STOP"], None) is None
    with pytest.raises(ValueError, match="keyword"):
        decision_probability(tokens, tops, keyword="stop")
