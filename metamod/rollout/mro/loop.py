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

:class:`MROLoop` runs on the loop engine (:mod:`metamod.rollout.engine`), its iterations being the engine's steps:
finished traces (schema: :mod:`metamod.rollout.mro.traces`) are yielded chunk by chunk in input order, so they
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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from metamod.rollout.engine import Grader, LoopItem, LoopStats, new_trace, run_loop
from metamod.rollout.mro.parse import ACCEPT, ACTION_NAMES, PATCH, RESTART, parse_monitor, report_text, restart_feedback
from metamod.rollout.mro.roles import ControllerRequest, MonitorRequest, ReasonerRequest
from metamod.rollout.mro.traces import ROLES
from metamod.tasks.grading import extract_answer


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
class MROStats(LoopStats):
    """Counters filled in by :func:`run_mro` (pass one in to read them while or after streaming); the shared ones
    (calls per role, questions: instances, eta: candidate correctness by 0-based iteration, statuses: terminal
    statuses, elapsed_s) are :class:`~metamod.rollout.engine.LoopStats`'.

    Attributes:
        iterations: (instance, iteration) pairs run.
        tokens: per role ``{"prompt", "completion"}`` totals.
        actions_by_iteration: per iteration (0-based), counts of ``accept`` / ``patch`` / ``restart``.
        parse: per role, outputs per parse code (``ok``, ``tagged``, ``keyword``, ``default``, ...).
        final_correct: instances whose final answer is correct.
    """

    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROLES, 0))
    iterations: int = 0
    tokens: dict[str, dict[str, int]] = field(
        default_factory=lambda: {r: {"prompt": 0, "completion": 0} for r in ROLES}
    )
    actions_by_iteration: list[dict[str, int]] = field(default_factory=list)
    parse: dict[str, dict[str, int]] = field(default_factory=lambda: {r: {} for r in ROLES})
    final_correct: int = 0

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: totals, throughput, accuracy, candidate accuracy per iteration, action shares."""
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
            "instances_per_s": self.per_s(self.questions, 3),
            "tokens_per_s": self.per_s(total_tokens, 1),
            "candidate_accuracy_by_iteration": self.eta.eta_rate_by_round(),
            "coverage": self.eta.coverage(),
            "action_counts_by_iteration": [dict(c) for c in self.actions_by_iteration],
            "action_shares_by_iteration": shares,
            "statuses": dict(self.statuses),
            "parse": {r: dict(c) for r, c in self.parse.items()},
        }

    def log_line(self) -> str:
        s = self.summary()
        return (
            f"mro: {s['questions']} instances, {s['iterations']} iterations, accuracy {s['accuracy']}, "
            f"{s['instances_per_s']:.2f} instances/s; candidate accuracy by iteration "
            f"{s['candidate_accuracy_by_iteration']}"
        )

    def add_trace(self, trace: dict[str, Any], grade: Grader | None = None) -> None:
        """Count a finished MRO trace (it carries its grades: ``grade`` is not used)."""
        super().add_trace(trace)
        self.final_correct += int(trace.get("final_correct") or 0)
        for role, counts in (trace.get("tokens") or {}).items():
            if role in self.tokens:
                self.tokens[role]["prompt"] += int(counts.get("prompt", 0))
                self.tokens[role]["completion"] += int(counts.get("completion", 0))
        for record in trace.get("history", []):
            k = int(record["iteration"])
            while len(self.actions_by_iteration) < k:
                self.actions_by_iteration.append(dict.fromkeys(ACTION_NAMES.values(), 0))
            for role in ROLES:
                code = str(record.get(role, {}).get("parse"))
                self.parse[role][code] = self.parse[role].get(code, 0) + 1
            self.iterations += 1
            self.eta.add((trace["id"], trace.get("index")), k - 1, int(record["eta"]))
            action = record.get("controller", {}).get("action_name")
            self.actions_by_iteration[k - 1][action] = self.actions_by_iteration[k - 1].get(action, 0) + 1


class MROLoop:
    """MRO iterations (1-based) as engine steps (see the module docstring; :func:`run_mro` documents the arguments)."""

    name = "mro"

    def __init__(self, roles: MRORoles | Any, *, max_iterations: int, stats: MROStats, retry_with_attempt: bool):
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
        self.roles = roles if isinstance(roles, MRORoles) else MRORoles(roles.reasoner, roles.monitor, roles.controller)
        self.described, self.simulated = self.roles.describe(), self.roles.simulated
        self.budget, self.steps, self.stats, self.tokens = max_iterations, range(1, max_iterations + 1), stats, 0
        self.retry_with_attempt = retry_with_attempt

    def start(self, chunk: list[LoopItem], grade: Grader) -> None:
        self.chunk, self.grader = chunk, grade
        self.traces = [
            {
                **new_trace(item, self.simulated, {"loop": "mro"}),
                "roles": self.described,
                "max_iterations": self.budget,
                "num_iterations": 0,
                "status": None,
                "final_answer": None,
                "final_correct": 0,
                "tokens": {r: {"prompt": 0, "completion": 0} for r in ROLES},
                "history": [],
            }
            for item in chunk
        ]
        self.pending: dict[int, tuple[str, str, bool]] = {}  # d -> (previous solution, feedback, previous correct)

    def grade(self, answer: str | None, d: int) -> bool:
        ex = self.chunk[d].example
        return self.grader(answer, ex.gold, ex.kind, ex.choices, key=(answer, ex.id))

    def step(self, k: int, active: list[int]) -> list[int]:
        chunk, roles, pending, final = self.chunk, self.roles, self.pending, k == self.budget
        # ---- Reasoner: one batched call
        reasoner_requests = [
            ReasonerRequest(
                chunk[d].example,
                k,
                previous=pending[d][0] if d in pending and self.retry_with_attempt else None,
                feedback=pending[d][1] if d in pending else None,
                previous_correct=pending[d][2] if d in pending else None,
            )
            for d in active
        ]
        proposals = self.stats.call("reasoner", roles.reasoner.propose, reasoner_requests)
        answers = {d: extract_answer(g.text) for d, g in zip(active, proposals, strict=True)}
        correct = {d: self.grade(answers[d], d) for d in active}
        # ---- Monitor: one batched call
        monitor_requests = [
            MonitorRequest(chunk[d].example, k, g.text, answers[d], correct=correct[d])
            for d, g in zip(active, proposals, strict=True)
        ]
        audits = self.stats.call("monitor", roles.monitor.audit, monitor_requests)
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
        turns = self.stats.call("controller", roles.controller.decide, controller_requests)
        still = []
        for i, d in enumerate(active):
            trace, proposal, audit, report, turn = self.traces[d], proposals[i], audits[i], reports[i], turns[i]
            decision = turn.decision
            answer = decision.answer if decision.action == PATCH else answers[d] if decision.action == ACCEPT else None
            record = {
                "iteration": k,
                "eta": int(correct[d]),
                "reasoner": {
                    "text": proposal.text,
                    "answer": answers[d],
                    "feedback": pending[d][1] if d in pending else None,
                    "prompt_tokens": int(proposal.prompt_tokens),
                    "completion_tokens": int(proposal.completion_tokens),
                    "parse": "ok" if answers[d] is not None else "no_answer",
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
                    "answer_correct": None if decision.action == RESTART else int(self.grade(answer, d)),
                    "text": turn.generation.text,
                    "prompt_tokens": int(turn.generation.prompt_tokens),
                    "completion_tokens": int(turn.generation.completion_tokens),
                    "parse": decision.parse,
                    "policy_update": _policy_update(roles.controller, trace["id"]),
                    **({"p_stop": turn.p_stop} if getattr(turn, "reads_p_stop", False) else {}),
                    **({"p_accept": turn.p_accept} if getattr(turn, "reads_p_accept", False) else {}),
                },
            }
            trace["history"].append(record)
            trace["num_iterations"] = k
            for role, generation in (("reasoner", proposal), ("monitor", audit), ("controller", turn.generation)):
                trace["tokens"][role]["prompt"] += int(generation.prompt_tokens)
                trace["tokens"][role]["completion"] += int(generation.completion_tokens)
                self.tokens += int(generation.prompt_tokens) + int(generation.completion_tokens)
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
            trace["final_correct"] = int(self.grade(trace["final_answer"], d))
        return still

    def finish(self) -> list[dict]:
        return self.traces


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
        examples, batch_questions, task, total, progress: as in :func:`~metamod.rollout.engine.run_loop`.
        roles: an :class:`MRORoles` (or any object with ``reasoner``, ``monitor``, ``controller``).
        max_iterations: N, the iteration budget (MC² uses 3; appendix D).
        stats: an :class:`MROStats` to fill in (one is created otherwise; it is logged at the end).
        retry_with_attempt: also show the Reasoner its rejected attempt after a Restart (default ``False``: MC²
            Eq. 4, the retry sees the problem and the feedback only).

    Yields:
        MRO trace dicts (see :mod:`metamod.rollout.mro.traces`).

    Raises:
        ValueError: for ``max_iterations < 1`` or a role returning the wrong number of outputs.
    """
    loop = MROLoop(
        roles, max_iterations=max_iterations, stats=stats or MROStats(), retry_with_attempt=retry_with_attempt
    )
    yield from run_loop(examples, loop, batch_questions=batch_questions, task=task, progress=progress, total=total)


def _policy_update(role: Any, example_id: str) -> dict[str, Any] | None:
    """The role's memory prompt-update record for the trace (MC² C.3), ``None`` for roles without one."""
    lookup = getattr(role, "policy_update", None)
    return lookup(example_id) if lookup is not None else None
