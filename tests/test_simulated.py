"""Simulated debaters: determinism, independence from batching/sharding, and the shape of the dynamics."""

import collections

import pytest

from metamod.rollout.analysis import trace_dynamics
from metamod.rollout.debate import run_debates
from metamod.rollout.debaters import DebateRequest
from metamod.rollout.simulated import SimulatedDebaters, SimulationConfig
from metamod.rollout.simulation import correct_answer, wrong_answers
from metamod.tasks import load_task
from metamod.tasks.base import Example
from metamod.tasks.game24 import check_expression
from metamod.tasks.grading import extract_answer, is_equivalent


def _examples(n=60, seed=0):
    return list(load_task("arith", num_examples=n, seed=seed).examples())


def _run(examples, batch_questions=256, config=None, max_rounds=5):
    sim = SimulatedDebaters(config or SimulationConfig())
    return list(
        run_debates(examples, [sim, sim], max_rounds=max_rounds, batch_questions=batch_questions, progress=False)
    )


def test_same_seed_same_traces_and_batching_does_not_matter():
    examples = _examples(40)
    a = _run(examples, batch_questions=256)
    b = _run(examples, batch_questions=7)
    assert a == b
    c = _run(examples, config=SimulationConfig(sim_seed=1))
    assert [t["rounds"] for t in a] != [t["rounds"] for t in c]


def test_subset_gives_the_same_debates_as_the_full_run():
    examples = _examples(30)
    full = {t["id"]: t["rounds"] for t in _run(examples)}
    subset = _run(examples[1::3])
    assert all(full[t["id"]] == t["rounds"] for t in subset)


def test_text_is_realistic_and_parsable():
    traces = _run(_examples(30), max_rounds=2)
    trace = traces[0]
    assert trace["simulated"] is True and trace["agents"][0]["backend"] == "sim"
    r0 = trace["rounds"][0]["responses"][0]
    if r0["answer"] is not None:
        assert r0["text"].rstrip().endswith(f"<answer>{r0['answer']}</answer>")
    # a right answer shows the task's worked steps; a wrong one does not end with the right final step
    for t in traces:
        for r in t["rounds"][0]["responses"]:
            if r["answer"] is None:
                continue
            right = is_equivalent(r["answer"], t["gold"], "math")
            assert (t["meta"]["steps"][-1] in r["text"]) == right, r["text"]
    r1 = trace["rounds"][1]["responses"][0]["text"]
    assert "Agent 1" in r1  # debate rounds refer to the peer


def test_garbled_responses_have_no_answer():
    sim = SimulatedDebaters(SimulationConfig(garble_prob=1.0))
    ex = _examples(1)[0]
    out = sim.respond([DebateRequest(example=ex, agent=0, round=0)])
    assert extract_answer(out[0].text) is None


def test_wrong_answers_fallbacks():
    assert wrong_answers(Example(id="a", question="?", gold="12", kind="math")) == ["13", "11", "22", "14"]
    ex = _examples(1)[0]
    assert wrong_answers(ex) == ex.meta["distractors"]


def test_config_checks():
    with pytest.raises(ValueError, match="agent_accuracy\\[1\\] must be in \\(0, 1\\), got 1.5"):
        SimulationConfig(agent_accuracy=[0.5, 1.5])
    with pytest.raises(ValueError, match="conformity"):
        SimulationConfig(conformity=2.0)


def test_dynamics_have_the_paper_shape():
    """Calibration guard (400 questions): the moderator's problem must stay non-trivial (see docs/rollout.md)."""
    sim = SimulatedDebaters()
    traces = list(run_debates(_examples(400), [sim, sim], max_rounds=5, progress=False))
    d = trace_dynamics(traces)
    acc, eta, maj = d["agent_accuracy_by_round"], d["eta_rate_by_round"], d["majority_accuracy_by_round"]
    assert 0.65 <= acc[0] <= 0.85, acc  # single-agent round-0 accuracy
    assert 0.78 <= eta[0] <= 0.92, eta  # coverage at round 0
    assert max(maj[1:3]) > maj[0]  # a little debate helps ...
    assert maj[-1] < max(maj)  # ... but majority at T_max is not the best (over-deliberation)
    assert d["coverage"] - maj[-1] > 0.08  # room for a better decision layer
    assert d["present_then_lost"] > 0.02  # the correct answer is sometimes present early and lost later
    assert all(0.75 < p < 0.97 for p in d["consensus_precision_by_round"])  # consensus usually, not always, right
    by_level = collections.defaultdict(list)
    for t in traces:
        by_level[t["meta"]["level"]].append(t)
    assert (
        trace_dynamics(by_level[1])["agent_accuracy_by_round"][0]
        > trace_dynamics(by_level[5])["agent_accuracy_by_round"][0]
    )


# ------------------------------------------------------------------------------------------- confidence wording

_CONFIDENT = ("I checked each step again and it holds.", "Each line follows from the previous one.")
_HEDGED = ("I am fairly sure about this.", "This seems right to me.")


def _confident_rates(config, n=1500, agents=4):
    """Share of confident closing remarks among round-0 responses that have one, for right and wrong answers."""
    sim = SimulatedDebaters(config)
    requests = [DebateRequest(example=ex, agent=a, round=0) for ex in _examples(n) for a in range(agents)]
    counts = {True: [0, 0], False: [0, 0]}  # correct -> [confident, with a remark]
    for request, out in zip(requests, sim.respond(requests), strict=True):
        answer = extract_answer(out.text)
        confident, hedged = any(p in out.text for p in _CONFIDENT), any(p in out.text for p in _HEDGED)
        if answer is None or not (confident or hedged):
            continue
        assert not (confident and hedged), out.text
        tally = counts[is_equivalent(answer, request.example.gold, "math")]
        tally[0] += confident
        tally[1] += 1
    assert min(counts[True][1], counts[False][1]) > 800  # enough of each for the tolerances below
    return counts[True][0] / counts[True][1], counts[False][0] / counts[False][1]


def test_zero_confidence_correlation_makes_wording_uninformative():
    right, wrong = _confident_rates(SimulationConfig(confidence_correlation=0.0))
    # both ~0.5; with >800 remarks per group the standard error of the gap is < 0.03, so 0.1 is > 3 sigma
    assert abs(right - wrong) < 0.1, (right, wrong)
    assert 0.4 < wrong < 0.6 and 0.4 < right < 0.6, (right, wrong)


def test_default_confidence_is_a_noisy_hint():
    assert SimulationConfig().confidence_correlation == 0.3
    right, wrong = _confident_rates(SimulationConfig())
    # expected 0.65 vs 0.35: confident wording is likelier when right, but wrong answers sound sure often too
    assert right - wrong > 0.15, (right, wrong)
    assert wrong > 0.2 and right < 0.8, (right, wrong)


def test_perfect_and_negative_confidence_correlation():
    right, wrong = _confident_rates(SimulationConfig(confidence_correlation=1.0))
    assert (right, wrong) == (1.0, 0.0)
    right, wrong = _confident_rates(SimulationConfig(confidence_correlation=-1.0))
    assert (right, wrong) == (0.0, 1.0)


def test_confidence_correlation_changes_wording_only_and_stays_deterministic():
    examples = _examples(40)
    noisy = _run(examples, config=SimulationConfig(confidence_correlation=0.3))
    assert noisy == _run(examples, config=SimulationConfig(confidence_correlation=0.3))  # same seed, same traces
    tell = _run(examples, config=SimulationConfig(confidence_correlation=1.0))

    def answers(traces):
        return [[r["answer"] for rnd in t["rounds"] for r in rnd["responses"]] for t in traces]

    assert answers(noisy) == answers(tell)  # the debate itself is untouched
    assert [t["rounds"] for t in noisy] != [t["rounds"] for t in tell]  # only the wording moved


def test_confidence_correlation_is_checked():
    with pytest.raises(ValueError, match=r"confidence_correlation must be in \[-1, 1\].*got 1.5"):
        SimulationConfig(confidence_correlation=1.5)
    SimulationConfig(confidence_correlation=-1.0)


def test_game24_debaters_answer_with_valid_expressions_at_the_configured_rate():
    """game24's gold lists the numbers: a right simulated answer is the recorded solution, which the checker accepts."""
    examples = list(load_task("game24", num_examples=200, seed=0).examples())
    assert correct_answer(examples[0]) == examples[0].meta["solution"] != examples[0].gold
    sim = SimulatedDebaters(SimulationConfig(garble_prob=0.0))
    traces = list(run_debates(examples, [sim, sim], max_rounds=3, progress=False))
    for agent in (0, 1):
        answers = [(t["rounds"][0]["responses"][agent]["answer"], t["meta"]) for t in traces]
        valid = [check_expression(answer, meta["numbers"]) for answer, meta in answers]
        # right answers are the solution, wrong ones the task's near misses
        assert valid == [answer == meta["solution"] for answer, meta in answers]
        assert all(ok or answer in meta["distractors"] for ok, (answer, meta) in zip(valid, answers, strict=True))
        expected = sum(sim.accuracy(ex, agent) for ex in examples) / len(examples)
        assert abs(sum(valid) / len(valid) - expected) < 0.07
    # debate rounds recognise and adopt the right answer: accuracy rises over the rounds
    by_round = [
        sum(is_equivalent(r["answer"], t["gold"], "game24") for t in traces for r in t["rounds"][k]["responses"])
        for k in range(3)
    ]
    assert by_round[2] > by_round[0]
