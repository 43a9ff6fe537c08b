"""Debate dynamics measured from traces: what makes the moderator's problem hard (or easy).

Used to calibrate the simulated debaters against the paper's numbers and to describe any rollout (real or
simulated): per-round agent accuracy and ``eta``, coverage, how often agents agree and how often that agreement is
right, simple decision rules (majority at round t, stop at first consensus) and how often a correct answer that
was present is lost by the end. Votes are :func:`metamod.tasks.voting.majority_answer` (``tie_break="first"``:
ties go to the lowest-index agent); eta and coverage come from :class:`metamod.rollout.stats.EtaTally`;
correctness uses ``is_equivalent``.

>>> from metamod.rollout.traces import example_trace
>>> d = trace_dynamics([example_trace("a", answers=("4", "4")), example_trace("b", answers=("5", "5"))])
>>> d["agent_accuracy_by_round"], d["consensus_rate_by_round"], d["consensus_precision_by_round"]
([0.5], [1.0], [0.5])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from metamod.rollout.stats import EtaTally
from metamod.tasks.grading import is_equivalent, normalize_answer
from metamod.tasks.voting import majority_answer


def trace_dynamics(traces: Iterable[dict]) -> dict[str, Any]:
    """Summarise the debate dynamics of a set of traces.

    Args:
        traces: trace dicts (schema version 1), ideally all run to the same number of rounds.

    Returns:
        A dict of rates (rounded to 4 digits): ``agent_accuracy_by_round``, ``eta_rate_by_round``, ``coverage``
        (eta=1 at some round), ``majority_accuracy_by_round`` (ties: lowest-index agent), ``consensus_rate_by_round``
        and ``consensus_precision_by_round`` (all agents give the same parsable answer / and it is right),
        ``consensus_stop_accuracy`` (stop at the first consensus, else majority at the last round),
        ``present_then_lost`` (eta=1 at some round but eta=0 at the last), ``misaggregation_last_round``
        (eta=1 at some round but the last-round majority is wrong), ``oracle_best_round_majority`` (majority at
        the best single round, chosen in hindsight) and ``questions``.
    """
    n = 0
    correct, responses, majority, consensus, consensus_right = (Counter() for _ in range(5))
    eta = EtaTally()
    lost = misagg = consensus_stop = 0
    for index, trace in enumerate(traces):
        n += 1
        eta.add_trace(trace, key=index)
        gold, kind, choices = trace["gold"], trace["kind"], trace.get("choices")

        def right(answer: str | None) -> bool:
            return answer is not None and is_equivalent(answer, gold, kind, choices)  # noqa: B023

        stopped_answer: str | None = None
        stopped = False
        for rnd in trace["rounds"]:
            t = rnd["round"]
            answers = [r["answer"] for r in rnd["responses"]]
            correct[t] += sum(right(a) for a in answers)
            responses[t] += len(answers)
            majority[t] += right(majority_answer(answers, kind=kind, choices=choices, tie_break="first"))
            keys = {normalize_answer(a, kind, choices) if a is not None else None for a in answers}
            if len(keys) == 1 and None not in keys:
                consensus[t] += 1
                consensus_right[t] += right(answers[0])
                if not stopped:
                    stopped, stopped_answer = True, answers[0]
        last = trace["rounds"][-1]
        last_answers = [r["answer"] for r in last["responses"]]
        last_majority = majority_answer(last_answers, kind=kind, choices=choices, tie_break="first")
        if not stopped:
            stopped_answer = last_majority
        consensus_stop += right(stopped_answer)
        ever = any(r["eta"] for r in trace["rounds"])
        lost += ever and not last["eta"]
        misagg += ever and not right(last_majority)

    def rate(a: float, b: float) -> float | None:
        return round(a / b, 4) if b else None

    active = eta.rows_by_round
    rounds = sorted(active)
    majority_rates = [rate(majority[t], active[t]) for t in rounds]
    return {
        "questions": n,
        "agent_accuracy_by_round": [rate(correct[t], responses[t]) for t in rounds],
        "eta_rate_by_round": eta.eta_rate_by_round(),
        "coverage": eta.coverage(),
        "majority_accuracy_by_round": majority_rates,
        "consensus_rate_by_round": [rate(consensus[t], active[t]) for t in rounds],
        "consensus_precision_by_round": [rate(consensus_right[t], consensus[t]) for t in rounds],
        "consensus_stop_accuracy": rate(consensus_stop, n),
        "present_then_lost": rate(lost, n),
        "misaggregation_last_round": rate(misagg, n),
        "oracle_best_round_majority": max((r for r in majority_rates if r is not None), default=None),
    }
