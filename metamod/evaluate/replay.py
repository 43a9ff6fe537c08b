"""Run a decision layer over debates: replayed over shared full-length transcripts, or live as the engine's hook.

**Replay.** Debaters never see the decision layer, so one full-length (``T_max``) debate per question serves every
debate method: a layer is shown the prefix ``rounds[0..t]`` after each round ``t`` (all still-active questions in
one batch) until it stops. The method is charged the debater tokens of rounds ``0..stop`` only, plus its own.

**Live.** The layer is the ``stop_hook`` of :func:`metamod.rollout.debate.run_debates`: debates really end when it
says stop. :func:`run_live` exists to check that replay gives exactly the live results (see docs/evaluation.md
for when that holds).

>>> from metamod.evaluate.decision import LayerContext
>>> from metamod.evaluate.methods import build_method
>>> from metamod.rollout.traces import example_trace
>>> out = replay(build_method("majority_vote", LayerContext(max_rounds=1)), [example_trace("q", answers=("4", "4"))])
>>> out[0]["final_answer"], out[0]["rounds"], out[0]["tokens"]["debater_completion"]
('4', 1, 6)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .decision import StepDecision

logger = logging.getLogger(__name__)


def prefix(trace: dict[str, Any], round_index: int) -> dict[str, Any]:
    """The trace as it looked right after round ``round_index`` (a shallow copy; rounds ``0..round_index``)."""
    view = dict(trace)
    view["rounds"] = trace["rounds"][: round_index + 1]
    view["num_rounds"] = round_index + 1
    return view


def debater_tokens(trace: dict[str, Any], last_round: int) -> tuple[int, int]:
    """``(prompt, completion)`` debater tokens of rounds ``0..last_round``."""
    prompt = completion = 0
    for rnd in trace["rounds"][: last_round + 1]:
        for resp in rnd["responses"]:
            prompt += int(resp.get("prompt_tokens", 0))
            completion += int(resp.get("completion_tokens", 0))
    return prompt, completion


def outcome_record(trace: dict[str, Any], decisions: Sequence[StepDecision]) -> dict[str, Any]:
    """One method's record for one debate: final answer, stop round, per-round decisions, tokens, answers seen.

    Args:
        trace: the debate's trace (at least ``len(decisions)`` rounds).
        decisions: the layer's decision after each round ``0..stop``; the last one has ``stop=True``.

    Returns:
        A JSON-ready dict (``correct``/``covered`` are added by the harness, which grades).
    """
    stop = len(decisions) - 1
    d_prompt, d_completion = debater_tokens(trace, stop)
    return {
        "final_answer": decisions[-1].answer,
        "stop_round": stop,
        "rounds": stop + 1,
        "decisions": [{"round": t, **d.to_dict()} for t, d in enumerate(decisions)],
        "valid": [d.valid for d in decisions if d.valid is not None],
        "seen_answers": [r.get("answer") for rnd in trace["rounds"][: stop + 1] for r in rnd["responses"]]
        + [a for d in decisions for a in d.answers],  # answers a layer drew itself (a gate's samples)
        "tokens": {
            "debater_prompt": d_prompt,
            "debater_completion": d_completion,
            "moderator_prompt": sum(d.prompt_tokens for d in decisions),
            "moderator_completion": sum(d.completion_tokens for d in decisions),
        },
    }


def _check_decisions(layer: Any, round_index: int, decisions: list[StepDecision], expected: int) -> None:
    if len(decisions) != expected:
        raise RuntimeError(f"method {layer.name!r} returned {len(decisions)} decisions for {expected} debates")
    if round_index >= layer.last_round and not all(d.stop for d in decisions):
        raise RuntimeError(f"method {layer.name!r} did not stop every debate at its last round {round_index}")


def replay(layer: Any, traces: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replay a debate decision layer over full-length transcripts, batching all active debates per round.

    Args:
        layer: a :class:`metamod.evaluate.decision.DecisionLayer`.
        traces: complete debates with at least ``layer.last_round + 1`` rounds each.

    Returns:
        One :func:`outcome_record` per trace, in order.

    Raises:
        ValueError: a trace is shorter than the layer's budget (e.g. reused traces from a shorter run).
    """
    needed = layer.last_round + 1
    for trace in traces:
        if len(trace["rounds"]) < needed:
            raise ValueError(
                f"trace {trace['id']!r} has {len(trace['rounds'])} round(s) but method {layer.name!r} needs {needed}: "
                "replay needs full-length debates (rerun the rollout with max_rounds >= the evaluation's max_rounds)"
            )
    history: list[list[StepDecision]] = [[] for _ in traces]
    active = list(range(len(traces)))
    for t in range(needed):
        if not active:
            break
        decisions = layer.decide(t, [prefix(traces[i], t) for i in active])
        _check_decisions(layer, t, decisions, len(active))
        still = []
        for i, decision in zip(active, decisions, strict=True):
            history[i].append(decision)
            if not decision.stop:
                still.append(i)
        active = still
    return [outcome_record(trace, steps) for trace, steps in zip(traces, history, strict=True)]


class LiveHook:
    """A decision layer as :func:`run_debates`' ``stop_hook``; records every decision by question id."""

    def __init__(self, layer: Any):
        self.layer = layer
        self.history: dict[str, list[StepDecision]] = {}

    def __call__(self, round_index: int, debates: list[dict[str, Any]]) -> list[bool]:
        if round_index > self.layer.last_round:
            raise RuntimeError(f"debate ran past round {self.layer.last_round} of method {self.layer.name!r}")
        decisions = self.layer.decide(round_index, debates)
        _check_decisions(self.layer, round_index, decisions, len(debates))
        for debate, decision in zip(debates, decisions, strict=True):
            self.history.setdefault(str(debate["id"]), []).append(decision)
        return [d.stop for d in decisions]


def run_live(
    layer: Any, examples: Sequence[Any], debaters: Any, *, max_rounds: int, **debate_options: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run a method's own debates with the layer as the engine's stop hook.

    Args:
        layer: a debate decision layer.
        examples: the questions.
        debaters: what :func:`metamod.rollout.debate.run_debates` takes as ``debaters``.
        max_rounds: the debate budget ``T_max``.
        **debate_options: passed through to ``run_debates``.

    Returns:
        ``(records, traces)``: one :func:`outcome_record` per example (in order) and the live traces.
    """
    from metamod.rollout.debate import run_debates

    hook = LiveHook(layer)
    budget = min(max_rounds, layer.last_round + 1)
    traces = list(run_debates(list(examples), debaters, max_rounds=budget, stop_hook=hook, **debate_options))
    by_id = {str(t["id"]): t for t in traces}
    records = []
    for example in examples:
        trace = by_id[str(example.id)]
        steps = hook.history.get(str(example.id), [])
        if not steps or not steps[-1].stop:
            # the engine may end at its budget without asking the hook about the last round: ask now
            final = layer.decide(len(trace["rounds"]) - 1, [trace])
            _check_decisions(layer, layer.last_round, final, 1)
            steps = [*steps, *final]
        records.append(outcome_record(trace, steps))
    return records, [by_id[str(ex.id)] for ex in examples]
