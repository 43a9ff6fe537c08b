"""The MRO engine: Reasoner -> Monitor -> Controller, up to N iterations, one batched call per role per iteration.

MC² section 2.1 / appendix A. Instances are processed in chunks of ``batch_questions``. At iteration ``k`` (1-based)
every active instance's Reasoner request goes out in ONE ``reasoner.propose`` call (one ``generator.chat`` call for
an LLM role), then every Monitor request in one ``monitor.audit`` call, then every Controller request in one
``controller.decide`` call. The candidate's answer is read with the shared grader's ``extract_answer`` and graded with
``is_equivalent`` (the iteration's ``eta``). The Controller's action ends the loop or restarts it:

* **Accept (1)**: the candidate's answer is final (status ``accepted``);
* **Patch (2)**: the Controller's corrected answer is final (status ``corrected``);
* **Restart (3)**: the next Reasoner call gets the problem and the feedback ``u`` only (MC² Eq. 4: the Controller's
  suggestions; for a PATCH without an answer, its unfinished correction; else the Monitor's error; see
  :func:`~metamod.rollout.mro.parse.restart_feedback`), not the rejected attempt (``retry_with_attempt=True``
  shows it too); at iteration N the budget is exhausted and the last candidate's answer is final (status
  ``max_iterations``).

Accept and Patch end the loop, so no Reasoner call ever follows them: a Patch works on the attempt, but it is the
Controller that sees the attempt (Eq. 6) and writes the corrected answer.

Finished traces (schema: :mod:`metamod.rollout.mro.traces`) are yielded chunk by chunk in input order, so they
stream to disk and memory stays flat.

>>> from metamod.tasks.base import Example
>>> from metamod.rollout.mro.simulated import simulated_roles
>>> ex = Example(id="q1", question="What is 2 + 2?", gold="4", kind="math", meta={"steps": ["2 + 2 = 4"]})
>>> stats = MROStats()
>>> trace = next(run_mro([ex], simulated_roles(), max_iterations=3, stats=stats, progress=False))
>>> trace["loop"], 1 <= trace["num_iterations"] <= 3, trace["status"] in ("accepted", "corrected", "max_iterations")
('mro', True, True)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from metamod.rollout.debate import DebateItem, as_item, chunked
from metamod.rollout.mro.parse import ACCEPT, ACTION_NAMES, PATCH, RESTART, parse_monitor, report_text, restart_feedback
from metamod.rollout.mro.roles import ControllerRequest, MonitorRequest, ReasonerRequest
from metamod.rollout.mro.traces import ROLES
from metamod.rollout.stats import EtaTally
from metamod.rollout.trace_schema import SCHEMA_VERSION
from metamod.tasks.grading import extract_answer, is_equivalent

logger = logging.getLogger(__name__)


@dataclass
class MRORoles:
    """The three roles of one MRO run (objects with ``propose`` / ``audit`` / ``decide``; see mro/roles.py)."""

    reasoner: Any
    monitor: Any
    controller: Any

    def describe(self) -> dict[str, dict[str, Any]]:
        """The ``roles`` block of a trace: backend, model and settings per role."""
        return {
            name: {"backend": str(role.backend), "model": str(role.model), "settings": dict(role.settings())}
            for name, role in zip(ROLES, (self.reasoner, self.monitor, self.controller), strict=True)
        }

    @property
    def simulated(self) -> bool:
        return any(getattr(r, "simulated", False) for r in (self.reasoner, self.monitor, self.controller))


@dataclass
class MROStats:
    """Counters filled in by :func:`run_mro` (pass one in to read them while or after streaming).

    Attributes:
        calls: batched calls per role.
        questions: instances finished.
        iterations: (instance, iteration) pairs run.
        tokens: per role ``{"prompt", "completion"}`` totals.
        eta: candidate correctness per iteration and coverage (:class:`~metamod.rollout.stats.EtaTally`; its
            "round" is the 0-based iteration).
        actions_by_iteration: per iteration (0-based), counts of ``accept`` / ``patch`` / ``restart``.
        statuses: finished instances per terminal status.
        parse: per role, outputs per parse code (``ok``, ``tagged``, ``keyword``, ``default``, ...).
        final_correct: instances whose final answer is correct.
        elapsed_s: wall time spent inside the engine.
    """

    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    questions: int = 0
    iterations: int = 0
    tokens: dict[str, dict[str, int]] = field(
        default_factory=lambda: {r: {"prompt": 0, "completion": 0} for r in ROLES}
    )
    eta: EtaTally = field(default_factory=EtaTally)
    actions_by_iteration: list[dict[str, int]] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    parse: dict[str, dict[str, int]] = field(default_factory=lambda: {r: {} for r in ROLES})
    final_correct: int = 0
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: totals, throughput, accuracy, candidate accuracy per iteration, action shares."""
        elapsed = max(self.elapsed_s, 1e-9)
        total_tokens = sum(t["prompt"] + t["completion"] for t in self.tokens.values())
        shares = []
        for counts in self.actions_by_iteration:
            n = sum(counts.values())
            shares.append({name: round(counts.get(name, 0) / n, 4) if n else None for name in ACTION_NAMES.values()})
        return {
            "questions": self.questions,
            "iterations": self.iterations,
            "mean_iterations": round(self.iterations / self.questions, 3) if self.questions else None,
            "accuracy": round(self.final_correct / self.questions, 4) if self.questions else None,
            "tokens_by_role": {r: dict(t) for r, t in self.tokens.items()},
            "tokens_per_instance": round(total_tokens / self.questions, 1) if self.questions else None,
            "calls_per_role": dict(self.calls),
            "elapsed_s": round(self.elapsed_s, 3),
            "instances_per_s": round(self.questions / elapsed, 3),
            "tokens_per_s": round(total_tokens / elapsed, 1),
            "candidate_accuracy_by_iteration": self.eta.eta_rate_by_round(),
            "coverage": self.eta.coverage(),
            "action_counts_by_iteration": [dict(c) for c in self.actions_by_iteration],
            "action_shares_by_iteration": shares,
            "statuses": dict(self.statuses),
            "parse": {r: dict(c) for r, c in self.parse.items()},
        }

    def _count(self, role: str, code: str) -> None:
        self.parse[role][code] = self.parse[role].get(code, 0) + 1

    def add_trace(self, trace: dict[str, Any]) -> None:
        """Count a finished MRO trace as the engine counted it while running it (everything but calls and time):
        what ``summary.json`` is rebuilt from, over the whole traces file, after a resumed run."""
        self.questions += 1
        self.final_correct += int(trace.get("final_correct") or 0)
        self.statuses[trace["status"]] = self.statuses.get(trace["status"], 0) + 1
        for role, counts in (trace.get("tokens") or {}).items():
            if role in self.tokens:
                self.tokens[role]["prompt"] += int(counts.get("prompt", 0))
                self.tokens[role]["completion"] += int(counts.get("completion", 0))
        for record in trace.get("history", []):
            k = int(record["iteration"])
            while len(self.actions_by_iteration) < k:
                self.actions_by_iteration.append(dict.fromkeys(ACTION_NAMES.values(), 0))
            for role in ROLES:
                self._count(role, str(record.get(role, {}).get("parse")))
            self.iterations += 1
            self.eta.add((trace["id"], trace.get("index")), k - 1, int(record["eta"]))
            action = record.get("controller", {}).get("action_name")
            self.actions_by_iteration[k - 1][action] = self.actions_by_iteration[k - 1].get(action, 0) + 1


def _new_trace(item: DebateItem, roles: dict, max_iterations: int, simulated: bool) -> dict:
    ex = item.example
    return {
        "schema_version": SCHEMA_VERSION,
        "loop": "mro",
        "id": ex.id,
        "index": item.index,
        "task": item.task,
        "question": ex.prompt_text(),
        "gold": ex.gold,
        "kind": ex.kind,
        "choices": list(ex.choices) if ex.choices else None,
        "meta": dict(ex.meta),
        "simulated": simulated,
        "roles": roles,
        "max_iterations": max_iterations,
        "num_iterations": 0,
        "status": None,
        "final_answer": None,
        "final_correct": 0,
        "tokens": {r: {"prompt": 0, "completion": 0} for r in ROLES},
        "history": [],
    }


def run_mro(
    examples: Iterable[Any],
    roles: MRORoles | Any,
    *,
    max_iterations: int = 3,
    batch_questions: int = 256,
    task: str | None = None,
    stats: MROStats | None = None,
    progress: bool = True,
    total: int | None = None,
    retry_with_attempt: bool = False,
) -> Iterator[dict]:
    """Run the MRO loop and yield one finished MRO trace per instance, in input order.

    Args:
        examples: ``Example`` objects (or :class:`~metamod.rollout.debate.DebateItem` with a stream index and task).
        roles: an :class:`MRORoles` (or any object with ``reasoner``, ``monitor``, ``controller``).
        max_iterations: N, the iteration budget (MC² uses 3; appendix D).
        batch_questions: instances per chunk (bounds memory; traces are yielded after each chunk).
        task: task name for plain ``Example`` items (default: ``example.meta["task"]`` or ``"unknown"``).
        stats: an :class:`MROStats` to fill in (one is created and logged otherwise).
        progress: show a tqdm bar.
        total: number of instances, for the progress bar.
        retry_with_attempt: also show the Reasoner its rejected attempt after a Restart (default ``False``: MC²
            Eq. 4, the retry sees the problem and the feedback only).

    Yields:
        MRO trace dicts (see :mod:`metamod.rollout.mro.traces`).

    Raises:
        ValueError: for ``max_iterations < 1`` or a role returning the wrong number of outputs.
    """
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    if batch_questions < 1:
        raise ValueError(f"batch_questions must be >= 1, got {batch_questions}")
    if not isinstance(roles, MRORoles):
        roles = MRORoles(roles.reasoner, roles.monitor, roles.controller)
    stats = stats if stats is not None else MROStats()
    described = roles.describe()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="q", desc="mro", dynamic_ncols=True)
    started = time.perf_counter()
    items = (as_item(obj, position, task) for position, obj in enumerate(examples))
    try:
        for chunk in chunked(items, batch_questions):
            yield from _run_chunk(chunk, roles, described, max_iterations, stats, retry_with_attempt)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        stats.elapsed_s += time.perf_counter() - started
        if bar is not None:
            bar.close()
        s = stats.summary()
        logger.info(
            "mro: %d instances, %d iterations, accuracy %s, %.2f instances/s; candidate accuracy by iteration %s",
            s["questions"],
            s["iterations"],
            s["accuracy"],
            s["instances_per_s"],
            s["candidate_accuracy_by_iteration"],
        )


def _checked(outputs: list, requests: list, role: str) -> list:
    if len(outputs) != len(requests):
        raise ValueError(f"the {role} returned {len(outputs)} outputs for {len(requests)} requests")
    return outputs


def _add_tokens(trace: dict, role: str, generation: Any) -> None:
    trace["tokens"][role]["prompt"] += int(generation.prompt_tokens)
    trace["tokens"][role]["completion"] += int(generation.completion_tokens)


def _run_chunk(
    chunk: list[DebateItem],
    roles: MRORoles,
    described: dict,
    budget: int,
    stats: MROStats,
    retry_with_attempt: bool = False,
) -> Iterator[dict]:
    traces = [_new_trace(item, described, budget, roles.simulated) for item in chunk]
    grade_cache: dict[tuple, bool] = {}

    def grade(answer: str | None, d: int) -> bool:
        ex = chunk[d].example
        key = (answer, ex.id)
        if key not in grade_cache:
            grade_cache[key] = answer is not None and is_equivalent(answer, ex.gold, ex.kind, ex.choices)
        return grade_cache[key]

    pending: dict[int, tuple[str, str, bool]] = {}  # d -> (previous solution, feedback, previous correct)
    active = list(range(len(chunk)))
    for k in range(1, budget + 1):
        if not active:
            break
        final = k == budget
        # ---- Reasoner: one batched call
        reasoner_requests = [
            ReasonerRequest(
                chunk[d].example,
                k,
                previous=pending[d][0] if d in pending and retry_with_attempt else None,
                feedback=pending[d][1] if d in pending else None,
                previous_correct=pending[d][2] if d in pending else None,
            )
            for d in active
        ]
        proposals = _checked(roles.reasoner.propose(reasoner_requests), reasoner_requests, "reasoner")
        stats.calls["reasoner"] += 1
        answers = {d: extract_answer(g.text) for d, g in zip(active, proposals, strict=True)}
        correct = {d: grade(answers[d], d) for d in active}
        # ---- Monitor: one batched call
        monitor_requests = [
            MonitorRequest(chunk[d].example, k, g.text, answers[d], correct=correct[d])
            for d, g in zip(active, proposals, strict=True)
        ]
        audits = _checked(roles.monitor.audit(monitor_requests), monitor_requests, "monitor")
        stats.calls["monitor"] += 1
        reports = [parse_monitor(g.text) for g in audits]
        # ---- Controller: one batched call
        controller_requests = [
            ControllerRequest(
                chunk[d].example,
                k,
                proposal.text,
                answers[d],
                report,
                report_text(report, audit.text),
                final=final,
                correct=correct[d],
            )
            for d, proposal, audit, report in zip(active, proposals, audits, reports, strict=True)
        ]
        turns = _checked(roles.controller.decide(controller_requests), controller_requests, "controller")
        stats.calls["controller"] += 1
        still = []
        for i, d in enumerate(active):
            trace, proposal, audit, report, turn = traces[d], proposals[i], audits[i], reports[i], turns[i]
            decision = turn.decision
            answer = decision.answer if decision.action == PATCH else answers[d] if decision.action == ACCEPT else None
            reasoner_parse = "ok" if answers[d] is not None else "no_answer"
            record = {
                "iteration": k,
                "eta": int(correct[d]),
                "reasoner": {
                    "text": proposal.text,
                    "answer": answers[d],
                    "feedback": pending[d][1] if d in pending else None,
                    "prompt_tokens": int(proposal.prompt_tokens),
                    "completion_tokens": int(proposal.completion_tokens),
                    "parse": reasoner_parse,
                    "policy_update": _policy_update(roles.reasoner, trace["id"]),
                },
                "monitor": {
                    **report.to_dict(),
                    "text": audit.text,
                    "prompt_tokens": int(audit.prompt_tokens),
                    "completion_tokens": int(audit.completion_tokens),
                    "policy_update": _policy_update(roles.monitor, trace["id"]),
                },
                "controller": {
                    "action": decision.action,
                    "action_name": decision.action_name,
                    "justification": decision.justification,
                    "suggestions": decision.suggestions,
                    "corrected_reasoning": decision.corrected_reasoning,
                    "answer": answer,
                    "answer_correct": None if decision.action == RESTART else int(grade(answer, d)),
                    "text": turn.generation.text,
                    "prompt_tokens": int(turn.generation.prompt_tokens),
                    "completion_tokens": int(turn.generation.completion_tokens),
                    "parse": decision.parse,
                    "policy_update": _policy_update(roles.controller, trace["id"]),
                },
            }
            trace["history"].append(record)
            trace["num_iterations"] = k
            for role, generation in (("reasoner", proposal), ("monitor", audit), ("controller", turn.generation)):
                _add_tokens(trace, role, generation)
            if decision.action in (ACCEPT, PATCH):
                trace["status"] = "accepted" if decision.action == ACCEPT else "corrected"
                trace["final_answer"] = answer
            elif final:
                trace["status"] = "max_iterations"
                trace["final_answer"] = answers[d]
            else:
                pending[d] = (proposal.text, restart_feedback(decision, report), correct[d])
                still.append(d)
                continue
            trace["final_correct"] = int(grade(trace["final_answer"], d))
        active = still
    for trace in traces:
        stats.add_trace(trace)  # the one way a trace is counted (a resumed file is counted the same)
    yield from traces


def _policy_update(role: Any, example_id: str) -> dict[str, Any] | None:
    """The role's memory prompt-update record for the trace (MC² C.3), ``None`` for roles without one."""
    lookup = getattr(role, "policy_update", None)
    return lookup(example_id) if lookup is not None else None
