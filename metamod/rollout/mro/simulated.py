"""Simulated MRO roles: a seeded model of the Reasoner / Monitor / Controller loop, so MRO runs and measures on a CPU.

Every knob is a :class:`MROSimulationConfig` field (docs/mro.md gives the calibration):

* **Reasoner, first attempt.** Right with probability ``sigmoid(logit(reasoner_accuracy) - reasoner_level_slope *
  (level - 1) + reasoner_question_sd * z_q)`` (``z_q ~ N(0, 1)`` per question). A wrong answer is a plausible one
  (the task's distractors, :func:`metamod.rollout.simulation.wrong_answers`) with a visibly slipped last step.
* **Reasoner after a Restart.** A wrong previous attempt becomes right with probability ``restart_fix`` (lower on
  harder levels: divided by ``1 + 0.25 * (level - 1)``); a right one stays right with probability ``restart_keep``.
* **Monitor.** Flags a wrong candidate with probability ``monitor_detect`` (true positive) and a right one with
  ``monitor_false_alarm``; when it flags a real error it names the slipped step with probability
  ``monitor_locate``.
* **Controller.** On a flagged candidate: Patch with probability ``controller_patch``, else Restart. A patch of a
  wrong candidate is right with probability ``patch_fix``; a patch of a right one stays right with
  ``1 - patch_break``. On an unflagged candidate: Accept, except Restart with probability ``controller_doubt``.
* **Malformed output.** Each role's output is garbled with probability ``mro_garble_prob`` (a Reasoner without an
  answer, a Monitor without a verdict, a Controller without an action word), exercising the documented parse
  fallbacks of :mod:`metamod.rollout.mro.parse`.

The roles write their outputs in the same tagged format the LLM roles are asked for, and the engine parses them
with the same parsers. Randomness is seeded by ``(mro_sim_seed, question id, role, iteration)`` only, so traces do
not depend on batching, chunking or sharding. Traces from these roles are labelled ``simulated``.

>>> from metamod.tasks.base import Example
>>> from metamod.rollout.mro.roles import ReasonerRequest
>>> ex = Example(id="q1", question="What is 3 * 4 + 5?", gold="17", kind="math",
...              meta={"level": 1, "steps": ["3 * 4 = 12", "12 + 5 = 17"], "distractors": ["19", "12"]})
>>> roles = simulated_roles(MROSimulationConfig(mro_sim_seed=0))
>>> text = roles.reasoner.propose([ReasonerRequest(ex, 1)])[0].text
>>> text == roles.reasoner.propose([ReasonerRequest(ex, 1)])[0].text
True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from metamod.llm.base import Generation
from metamod.rollout.mro.parse import parse_controller
from metamod.rollout.mro.roles import ControllerRequest, ControllerTurn, MonitorRequest, ReasonerRequest
from metamod.rollout.simulation import (
    check_probability,
    correct_answer,
    garbled,
    is_right,
    level_of,
    question_accuracy,
    seeded_rng,
    slip,
    words,
    wrong_answer,
)
from metamod.tasks.base import Example

SIM_MRO_MODEL = "simulated-mro-v1"


@dataclass
class MROSimulationConfig:
    """Parameters of the simulated MRO roles (defaults calibrated in docs/mro.md)."""

    mro_sim_seed: int = field(default=0, metadata={"help": "Seed of the simulated roles; same seed -> same traces."})
    reasoner_accuracy: float = field(
        default=0.7, metadata={"help": "First-attempt accuracy of the Reasoner at level 1 on an average question."}
    )
    reasoner_level_slope: float = field(
        default=0.5, metadata={"help": "Drop in the logit of the Reasoner's accuracy per difficulty level above 1."}
    )
    reasoner_question_sd: float = field(
        default=1.5, metadata={"help": "Std of a per-question difficulty (logit scale) shared by every attempt."}
    )
    restart_fix: float = field(
        default=0.45, metadata={"help": "P(right after a Restart | previous attempt wrong), at level 1."}
    )
    restart_keep: float = field(default=0.9, metadata={"help": "P(right after a Restart | previous attempt right)."})
    monitor_detect: float = field(default=0.7, metadata={"help": "P(Monitor flags an error | candidate wrong)."})
    monitor_false_alarm: float = field(
        default=0.15, metadata={"help": "P(Monitor flags an error | candidate right) (false positive rate)."}
    )
    monitor_locate: float = field(
        default=0.6, metadata={"help": "P(Monitor names the slipped step | it flags a wrong candidate)."}
    )
    controller_patch: float = field(default=0.35, metadata={"help": "P(Patch | flagged candidate); else Restart."})
    patch_fix: float = field(default=0.5, metadata={"help": "P(patched answer right | candidate wrong)."})
    patch_break: float = field(default=0.3, metadata={"help": "P(patched answer wrong | candidate right)."})
    controller_doubt: float = field(default=0.05, metadata={"help": "P(Restart | candidate not flagged); else Accept."})
    mro_garble_prob: float = field(
        default=0.03, metadata={"help": "P(a role's output is malformed), per role output (exercises parse fallbacks)."}
    )

    def __post_init__(self) -> None:
        for name in (
            "restart_fix",
            "restart_keep",
            "monitor_detect",
            "monitor_false_alarm",
            "monitor_locate",
            "controller_patch",
            "patch_fix",
            "patch_break",
            "controller_doubt",
            "mro_garble_prob",
        ):
            check_probability(name, getattr(self, name))
        if not 0.0 < self.reasoner_accuracy < 1.0:
            raise ValueError(f"reasoner_accuracy must be in (0, 1), got {self.reasoner_accuracy}")
        if self.reasoner_question_sd < 0 or self.reasoner_level_slope < 0:
            raise ValueError("reasoner_question_sd and reasoner_level_slope must be >= 0")


class _SimRole:
    backend = "sim"
    model = SIM_MRO_MODEL
    simulated = True
    role = "role"

    def __init__(self, config: MROSimulationConfig) -> None:
        self.config = config
        self.num_calls = 0

    def settings(self) -> dict[str, Any]:
        return {"simulation": asdict(self.config)}

    def _rng(self, example: Example, iteration: int, *extra: object):
        return seeded_rng(self.config.mro_sim_seed, example.id, self.role, iteration, *extra)

    def _right(self, request: MonitorRequest | ControllerRequest) -> bool:
        """Whether the audited candidate is right: as recorded, else the simulation's own rule (:func:`is_right`)."""
        if request.correct is not None:
            return request.correct
        return request.answer is not None and is_right(request.answer, request.example)

    def _wrong(self, rng, example: Example, avoid: str | None = None) -> str:
        return wrong_answer(rng, example, avoid=avoid)


class SimulatedReasoner(_SimRole):
    """Proposes a step-by-step solution (``meta["steps"]``) ending in ``<answer>..</answer>``."""

    role = "reasoner"

    def first_accuracy(self, example: Example) -> float:
        """P(the first attempt is right) for this question."""
        cfg = self.config
        level, slope, sd = level_of(example), cfg.reasoner_level_slope, cfg.reasoner_question_sd
        return question_accuracy(cfg.mro_sim_seed, example, cfg.reasoner_accuracy, level, slope, sd)

    def _p_right(self, request: ReasonerRequest) -> float:
        if request.iteration == 1 or request.previous_correct is None:
            return self.first_accuracy(request.example)
        if request.previous_correct:
            return self.config.restart_keep
        return self.config.restart_fix / (1 + 0.25 * (level_of(request.example) - 1))

    def propose(self, requests: list[ReasonerRequest]) -> list[Generation]:
        self.num_calls += 1
        out = []
        for request in requests:
            ex = request.example
            rng = self._rng(ex, request.iteration)
            right = rng.random() < self._p_right(request)
            solved = correct_answer(ex)
            answer = solved if right else self._wrong(rng, ex)
            steps = [str(s) for s in (ex.meta.get("steps") or [])]
            if not steps:  # no worked steps recorded: one line with the attempt's own answer (never the gold's)
                steps = [f"Working it through gives {answer}."]
            elif not right:
                steps = steps[:-1] + [slip(steps[-1], answer)]
            lines = ["Trying a different approach this time."] if request.feedback else []
            lines += [f"Step {k + 1}: {s}" for k, s in enumerate(steps)]
            if rng.random() < self.config.mro_garble_prob:
                text = garbled(lines, max(1, len(lines) - 1))
            else:
                text = "\n".join(lines) + f"\n<answer>{answer}</answer>"
            prompt = words(ex.prompt_text()) + 40 + words(request.previous or "") + words(request.feedback or "")
            out.append(Generation(text, prompt, words(text), "stop"))
        return out


class SimulatedMonitor(_SimRole):
    """Audits a candidate; knows (as the simulation does) whether it is right, and errs at the configured rates."""

    role = "monitor"

    def audit(self, requests: list[MonitorRequest]) -> list[Generation]:
        self.num_calls += 1
        out = []
        for request in requests:
            ex, cfg = request.example, self.config
            rng = self._rng(ex, request.iteration)
            right = self._right(request)
            flagged = rng.random() < (cfg.monitor_false_alarm if right else cfg.monitor_detect)
            steps = max(1, sum(1 for line in request.solution.splitlines() if line.startswith("Step ")))
            if rng.random() < cfg.mro_garble_prob:
                text = "I looked at the solution but could not finish checking every step."
            elif not flagged:
                text = "ERROR_FOUND: no\nERROR_STEP: NONE\nERROR: NONE\nEXPLANATION: Each step follows from the last."
            else:
                step = steps if (not right and rng.random() < cfg.monitor_locate) else rng.randint(1, steps)
                text = (
                    f"ERROR_FOUND: yes\nERROR_STEP: {step}\nERROR: the result of step {step} does not follow from "
                    f"the line before it.\nEXPLANATION: Recomputing step {step} gives a different value."
                )
            prompt = words(ex.prompt_text()) + words(request.solution) + 60
            out.append(Generation(text, prompt, words(text), "stop"))
        return out


class SimulatedController(_SimRole):
    """Accepts unflagged candidates, patches or restarts flagged ones (tagged-field output, parsed like an LLM's)."""

    role = "controller"

    def decide(self, requests: list[ControllerRequest]) -> list[ControllerTurn]:
        self.num_calls += 1
        out = []
        for request in requests:
            ex, cfg = request.example, self.config
            rng = self._rng(ex, request.iteration)
            flagged = bool(request.report and request.report.error_found)
            right = self._right(request)
            if rng.random() < cfg.mro_garble_prob:
                text = "Let me weigh the audit against the solution before deciding anything."
            elif flagged and rng.random() < cfg.controller_patch:
                fixed = (rng.random() < cfg.patch_fix) if not right else (rng.random() >= cfg.patch_break)
                answer = correct_answer(ex) if fixed else self._wrong(rng, ex, avoid=request.answer)
                text = (
                    "ACTION: PATCH\nJUSTIFICATION: The flagged step has a small slip that I can fix.\nSUGGESTIONS:\n"
                    f"CORRECTED_REASONING: Redoing the flagged step gives {answer}.\nFINAL_ANSWER: {answer}"
                )
            elif flagged or rng.random() < cfg.controller_doubt:
                text = (
                    "ACTION: RESTART\nJUSTIFICATION: The audit casts doubt on the result.\nSUGGESTIONS: Redo the "
                    "calculation from the start and check each step before moving on.\nCORRECTED_REASONING:\n"
                    "FINAL_ANSWER:"
                )
            else:
                text = (
                    "ACTION: ACCEPT\nJUSTIFICATION: The audit found no error.\nSUGGESTIONS:\nCORRECTED_REASONING:\n"
                    f"FINAL_ANSWER: {request.answer or ''}"
                )
            prompt = words(ex.prompt_text()) + words(request.solution) + words(request.report_text) + 90
            generation = Generation(text, prompt, words(text), "stop")
            error_found = request.report.error_found if request.report else None
            out.append(ControllerTurn(generation, parse_controller(text, error_found=error_found)))
        return out


class SimulatedRoles(NamedTuple):
    """The three simulated roles sharing one config."""

    reasoner: SimulatedReasoner
    monitor: SimulatedMonitor
    controller: SimulatedController


def simulated_roles(config: MROSimulationConfig | None = None) -> SimulatedRoles:
    """Build the three simulated roles.

    >>> simulated_roles().controller.role
    'controller'
    """
    config = config or MROSimulationConfig()
    return SimulatedRoles(SimulatedReasoner(config), SimulatedMonitor(config), SimulatedController(config))


def expected_first_accuracy(examples: list[Example], config: MROSimulationConfig) -> float:
    """Mean P(first attempt right) over examples (for calibration checks).

    >>> ex = Example(id="a", question="?", gold="1", kind="math")
    >>> 0 < expected_first_accuracy([ex], MROSimulationConfig()) < 1
    True
    """
    reasoner = SimulatedReasoner(config)
    return math.fsum(reasoner.first_accuracy(ex) for ex in examples) / max(len(examples), 1)
