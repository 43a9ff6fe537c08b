"""Instance-level reflections of the MetaCognitive Accumulator and the S+ / S- selection (MC² C.1, Eq. 8-9).

Everything here is deterministic and makes no model call. A *reflection* compresses one finished question (the
memory's queued record: ``id``, ``question``, ``trace``, ``outcome``) into a small structured summary:

- the iteration count ``K`` (``T`` in C.1) and budget ``N``, the terminal ``status``;
- ``outcome``: ``success`` / ``failure`` from ``outcome["correct"]``, used only as a tag (MC² C.1; the memory
  declares it, :meth:`~metamod.memory.mca.MetaCognitiveAccumulator.gold_use`), never to select S+ / S-;
- ``task_quality``: ``A`` (accepted or corrected in one iteration), ``B`` (accepted or corrected later), ``C``
  (otherwise); ``m_yes`` (Monitor flags) and ``c_3`` (Controller restarts);
- a quality rating per role (``good`` / ``ok`` / ``poor``) and the role's trajectory: the Reasoner's answer per
  iteration, the Monitor's ``(error_found, error_step, error)``, the Controller's ``(action, justification)``;
- a question brief (its first 200 characters).

No gold text is ever read: the trace's ``gold`` is dropped before a record is queued, and the per-iteration
``eta`` / ``answer_correct`` and the trace's ``final_correct`` are never looked at.

Traces without the three MRO roles (a debate trace with ``rounds``, or the harness's single-agent record
``{"id", "rounds": [], "single": {...}}``) get ``K`` = the number of rounds (1 for a single answer), status
``accepted`` when a final answer was parsed (else ``max_iterations``), only a Reasoner stream (the debaters or
the single agent), and no actions.

>>> from metamod.rollout.mro.traces import example_mro_trace
>>> record = {"id": "q1", "question": "What is 2 + 2?", "trace": example_mro_trace("q1"),
...           "outcome": {"correct": True, "final_answer": "4", "method": "mc2"}}
>>> r = reflect(record)
>>> r.iterations, r.task_quality, r.quality, r.m_yes, r.c_3
(2, 'B', {'reasoner': 'good', 'monitor': 'poor', 'controller': 'good'}, 2, 1)
>>> select([r], "controller")  # neither a first-try accept nor an exhausted run ending in a restart
([], [])
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: The three consolidation streams of the accumulator.
STREAMS: tuple[str, ...] = ("reasoner", "monitor", "controller")

#: Protocol role -> stream: solvers share the Reasoner stream, deciders the Controller stream.
ROLE_STREAM: dict[str, str] = {
    "reasoner": "reasoner",
    "single": "reasoner",
    "debater": "reasoner",
    "monitor": "monitor",
    "controller": "controller",
    "moderator": "controller",
    "judge": "controller",
}

#: Short prefixes of the role-quality tags (``R_good``, ``M_poor``, ``C_ok``), as in MC²'s logs.
ROLE_PREFIX: dict[str, str] = {"reasoner": "R", "monitor": "M", "controller": "C"}

ACCEPT, PATCH, RESTART = 1, 2, 3
ACTION_NAMES = {ACCEPT: "accept", PATCH: "patch", RESTART: "restart"}
CONVERGED = ("accepted", "corrected")

BRIEF_CHARS = 200
JUSTIFICATION_CHARS = 120
FIELD_CHARS = 80


@dataclass
class Reflection:
    """One finished question, reduced to the fields the accumulator uses (see the module docstring).

    Attributes:
        id: the example id.
        method: the method that produced the trace (``outcome["method"]``).
        loop: ``"mro"``, ``"debate"`` or ``"single"``.
        brief: the question's first characters.
        outcome: ``"success"`` or ``"failure"`` (a tag only).
        iterations: ``K`` (the number of iteration records or rounds).
        max_iterations: ``N``.
        status: ``accepted`` | ``corrected`` | ``max_iterations``.
        task_quality: ``A`` | ``B`` | ``C``.
        m_yes: how many iterations the Monitor flagged an error in.
        c_3: how many iterations the Controller restarted in.
        quality: per role present, ``good`` | ``ok`` | ``poor``.
        trajectories: per role present, one entry per iteration (JSON-safe lists).
        actions: the Controller's action codes per iteration (empty without a Controller).
    """

    id: str
    method: str | None
    loop: str
    brief: str
    outcome: str
    iterations: int
    max_iterations: int
    status: str
    task_quality: str
    m_yes: int = 0
    c_3: int = 0
    quality: dict[str, str] = field(default_factory=dict)
    trajectories: dict[str, list] = field(default_factory=dict)
    actions: list[int] = field(default_factory=list)

    @property
    def roles(self) -> tuple[str, ...]:
        """The streams this question has a trajectory for."""
        return tuple(r for r in STREAMS if r in self.trajectories)

    def tags(self, role: str) -> list[str]:
        """Outcome-aware tags for ``role``, e.g. ``['success', 'task_A', 'R_good']``."""
        return [self.outcome, f"task_{self.task_quality}", f"{ROLE_PREFIX[role]}_{self.quality.get(role, 'ok')}"]

    def answers(self) -> list[str]:
        """Every answer string this reflection shows (writers scrub them from lessons)."""
        out: list[str] = []
        for item in self.trajectories.get("reasoner", []):
            values = item if isinstance(item, list) else [item]
            out.extend(str(v) for v in values if v not in (None, ""))
        return sorted(set(out))

    def summary(self, role: str) -> str:
        """A short, gold-free account of the question for ``role`` (what the LLM distiller reads).

        >>> r = Reflection("q", "cot", "single", "2+2?", "success", 1, 1, "accepted", "A",
        ...                quality={"reasoner": "good"}, trajectories={"reasoner": ["4"]})
        >>> print(r.summary("reasoner"))
        Problem: 2+2?
        Result: success; task quality A; 1 of 1 iteration(s); status accepted; reasoner rated good
        Answers: 1) 4
        """
        head = (
            f"Problem: {self.brief}\nResult: {self.outcome}; task quality {self.task_quality}; "
            f"{self.iterations} of {self.max_iterations} iteration(s); status {self.status}; "
            f"{role} rated {self.quality.get(role, 'ok')}"
        )
        steps = self.trajectories.get(role, [])
        if role == "reasoner":
            label = "Answers"
            shown = [_answer_text(a) for a in steps]
        elif role == "monitor":
            label = "Audits"
            shown = [_audit_text(*a) for a in steps]
        else:
            label = "Decisions"
            shown = [f"{ACTION_NAMES.get(a, a)} ({j})" if j else str(ACTION_NAMES.get(a, a)) for a, j in steps]
        return f"{head}\n{label}: " + "; ".join(f"{i + 1}) {s}" for i, s in enumerate(shown))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _answer_text(answer: Any) -> str:
    if isinstance(answer, list):
        return ", ".join("none" if a is None else str(a) for a in answer)
    return "none" if answer is None else str(answer)


def _audit_text(found: Any, step: Any, error: Any) -> str:
    verdict = {True: "error found", False: "no error"}.get(found, "no verdict")
    parts = [verdict]
    if found and step:
        parts.append(f"step {step}")
    if found and error:
        parts.append(str(error))
    return ", ".join(parts)


def _clip(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    text = re.sub(r"\s+", " ", str(value)).strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def question_brief(question: str, limit: int = BRIEF_CHARS) -> str:
    """The question's first ``limit`` characters, whitespace collapsed.

    >>> question_brief("A  long\\nquestion", 8)
    'A long…'
    """
    return _clip(question or "", limit) or ""


def role_qualities(status: str, iterations: int, m_yes: int, c_3: int, last_flag: Any) -> dict[str, str]:
    """The C.1 rating rules for the three roles.

    Monitor: on a converged run (accepted or corrected) it is ``good`` only when its last audit says there is no
    error (``e_T = NO``) and ``poor`` when that audit still flags one (``e_T = YES``); any other last audit (no
    verdict parsed, ``None``) is ``ok``, as is every run that did not converge. A missing verdict is neither a
    clean audit nor a flag, so it earns neither rating.

    Args:
        status: the terminal status.
        iterations: ``T``.
        m_yes: Monitor flags.
        c_3: Controller restarts.
        last_flag: the Monitor's ``error_found`` in the last iteration (``True``, ``False`` or ``None``: no verdict).

    >>> role_qualities("max_iterations", 3, m_yes=2, c_3=3, last_flag=True)
    {'reasoner': 'poor', 'monitor': 'ok', 'controller': 'poor'}
    >>> role_qualities("accepted", 3, m_yes=2, c_3=2, last_flag=False)
    {'reasoner': 'ok', 'monitor': 'good', 'controller': 'good'}
    >>> role_qualities("accepted", 1, m_yes=0, c_3=0, last_flag=None)["monitor"]  # no verdict: neither good nor poor
    'ok'
    """
    converged = status in CONVERGED
    exhausted = status == "max_iterations"
    if converged and iterations <= 2:
        reasoner = "good"
    elif exhausted and m_yes > iterations / 2:
        reasoner = "poor"
    else:
        reasoner = "ok"
    if converged and last_flag is False:
        monitor = "good"
    elif converged and last_flag is True:
        monitor = "poor"
    else:
        monitor = "ok"
    if converged and iterations <= 3:
        controller = "good"
    elif exhausted and c_3 > iterations / 2:
        controller = "poor"
    else:
        controller = "ok"
    return {"reasoner": reasoner, "monitor": monitor, "controller": controller}


def task_quality(status: str, iterations: int) -> str:
    """``A`` / ``B`` / ``C`` (C.1).

    >>> task_quality("accepted", 1), task_quality("corrected", 2), task_quality("max_iterations", 3)
    ('A', 'B', 'C')
    """
    if status in CONVERGED:
        return "A" if iterations == 1 else "B"
    return "C"


def reflect(record: Mapping[str, Any], *, default_max_iterations: int = 3) -> Reflection:
    """The reflection of one queued record (``id``, ``question``, ``trace``, ``outcome``; see the module docstring).

    Args:
        record: a record as :meth:`metamod.memory.base.BaseMemory.record` queues it (no gold).
        default_max_iterations: ``N`` when an MRO trace lacks ``max_iterations``.

    Raises:
        ValueError: an MRO trace without iteration records.
    """
    trace = record.get("trace") or {}
    outcome = record.get("outcome") or {}
    common = {
        "id": str(record.get("id")),
        "method": None if outcome.get("method") is None else str(outcome.get("method")),
        "brief": question_brief(str(record.get("question") or "")),
        "outcome": "success" if outcome.get("correct") is True else "failure",
    }
    if trace.get("loop") == "mro":
        return _reflect_mro(trace, common, default_max_iterations)
    return _reflect_plain(trace, outcome, common)


def _reflect_mro(trace: Mapping[str, Any], common: dict, default_max_iterations: int) -> Reflection:
    history = [h for h in trace.get("history") or [] if isinstance(h, Mapping)]
    if not history:
        raise ValueError(f"MRO trace {common['id']!r} has no iteration records in 'history'")
    iterations = len(history)
    budget = trace.get("max_iterations")
    budget = int(budget) if isinstance(budget, int) and not isinstance(budget, bool) else default_max_iterations
    reasoner = [h.get("reasoner") or {} for h in history]
    monitor = [h.get("monitor") or {} for h in history]
    controller = [h.get("controller") or {} for h in history]
    actions = [int(c["action"]) for c in controller if isinstance(c.get("action"), int)]
    status = trace.get("status")
    if status not in (*CONVERGED, "max_iterations"):
        last = actions[-1] if actions else None
        status = {ACCEPT: "accepted", PATCH: "corrected"}.get(last, "max_iterations")
    m_yes = sum(m.get("error_found") is True for m in monitor)
    c_3 = sum(a == RESTART for a in actions)
    last_flag = monitor[-1].get("error_found")
    trajectories: dict[str, list] = {
        "reasoner": [_clip(r.get("answer"), FIELD_CHARS) for r in reasoner],
        "monitor": [
            [m.get("error_found"), _clip(m.get("error_step"), FIELD_CHARS), _clip(m.get("error"), FIELD_CHARS)]
            for m in monitor
        ],
    }
    if actions:
        trajectories["controller"] = [
            [int(c.get("action")), _clip(c.get("justification"), JUSTIFICATION_CHARS)]
            for c in controller
            if isinstance(c.get("action"), int)
        ]
    quality = role_qualities(status, iterations, m_yes, c_3, last_flag)
    return Reflection(
        **common,
        loop="mro",
        iterations=iterations,
        max_iterations=budget,
        status=status,
        task_quality=task_quality(status, iterations),
        m_yes=m_yes,
        c_3=c_3,
        quality={k: v for k, v in quality.items() if k in trajectories},
        trajectories=trajectories,
        actions=actions,
    )


def _reflect_plain(trace: Mapping[str, Any], outcome: Mapping[str, Any], common: dict) -> Reflection:
    rounds = trace.get("rounds") or []
    if rounds:
        loop = "debate"
        answers: list = []
        for rnd in rounds:
            responses = rnd.get("responses") if isinstance(rnd, Mapping) else None
            ordered = sorted(
                (r for r in responses or [] if isinstance(r, Mapping)), key=lambda r: int(r.get("agent", 0))
            )
            answers.append([_clip(r.get("answer"), FIELD_CHARS) for r in ordered])
    else:
        loop = "single"
        answers = [_clip(outcome.get("final_answer"), FIELD_CHARS)]
    iterations = len(answers)
    status = "accepted" if outcome.get("final_answer") is not None else "max_iterations"
    quality = role_qualities(status, iterations, 0, 0, None)
    return Reflection(
        **common,
        loop=loop,
        iterations=iterations,
        max_iterations=iterations,
        status=status,
        task_quality=task_quality(status, iterations),
        quality={"reasoner": quality["reasoner"]},
        trajectories={"reasoner": answers},
    )


def _order_key(r: Reflection) -> tuple:
    """(id, method, content): the content part only matters for the rare duplicate (id, method) pairs."""
    return (r.id, r.method or "", r.iterations, r.status, r.outcome, repr(sorted(r.trajectories.items())))


def select(
    reflections: Sequence[Reflection], role: str, *, max_reflections: int | None = None
) -> tuple[list[Reflection], list[Reflection]]:
    """``(S+, S-)`` for ``role`` (Eq. 9), each sorted by (id, method, content) and capped at ``max_reflections``.

    S+: the run took one iteration and the Controller accepted at once (``K == 1`` and ``a_1 == Accept``).
    S-: the run used the whole budget and still ended in a restart (``K == N`` and ``a_N == Restart``).

    Records without Controller actions (the Reasoner + Updates ablation, single-agent records, debate traces) have
    no action to select on. Eq. 9 selects without gold labels, so they are selected by the same two extremes read
    off their trace, never by the correctness tag: S+ is task quality ``A`` (an answer at once, in one iteration),
    S- is task quality ``C`` (no answer reached: the loop's counterpart of an exhausted budget). Runs in between
    (``B``: an answer after several rounds) are in neither set, as in Eq. 9. Only reflections with a trajectory for
    ``role`` take part.

    >>> ok = Reflection("a", None, "single", "?", "failure", 1, 1, "accepted", "A", trajectories={"reasoner": ["1"]})
    >>> stuck = Reflection("b", None, "single", "?", "success", 1, 1, "max_iterations", "C",
    ...                    trajectories={"reasoner": [None]})
    >>> later = Reflection("c", None, "debate", "?", "success", 3, 3, "accepted", "B", trajectories={"reasoner": []})
    >>> [[r.id for r in s] for s in select([stuck, ok, later], "reasoner")]  # the outcome tags play no part
    [['a'], ['b']]
    >>> select([stuck, ok], "monitor")
    ([], [])
    """
    plus: list[Reflection] = []
    minus: list[Reflection] = []
    for r in sorted(reflections, key=_order_key):
        if role not in r.trajectories:
            continue
        if r.actions:
            if r.iterations == 1 and r.actions[0] == ACCEPT:
                plus.append(r)
            elif r.iterations == r.max_iterations and r.actions[-1] == RESTART:
                minus.append(r)
        elif r.task_quality == "A":
            plus.append(r)
        elif r.task_quality == "C":
            minus.append(r)
    if max_reflections is not None:
        plus, minus = plus[:max_reflections], minus[:max_reflections]
    return plus, minus
