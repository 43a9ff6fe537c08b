"""Simulated debaters: a seeded stochastic model of debate dynamics, so every stage runs and measures on a CPU.

The model (every knob is a :class:`SimulationConfig` field; docs/rollout.md gives the calibration):

* **Round 0 (independent solving).** Agent ``i`` is right with probability
  ``sigmoid(logit(agent_accuracy[i]) - level_slope * (level - 1) + question_sd * z_q)``, where ``z_q ~ N(0, 1)``
  is shared by all agents on a question (hard questions are hard for everyone, which keeps coverage below the
  independent-agents value). A wrong answer is a plausible one: the task's first distractor with probability
  ``distractor_concentration`` (so agents often make the SAME mistake), else another distractor.
* **Rounds t >= 1 (debate).** Reading its own and its peers' previous answers, an agent, in this order, may
  DRIFT to a plausible wrong answer with probability ``min(drift_max, drift_per_round * t) * (1 + level_drift *
  (level - 1))`` (over-deliberation: more rounds, more drift); else CONFORM to a peer answer ``b`` with probability
  ``(1 - stubbornness[i]) * (1 - (1 - conformity) ** k_b)`` (``k_b`` peers agree on ``b``; correct answers are
  ``truth_bonus`` times as persuasive; wrong ones are adopted too, which makes shared wrong consensus); else, when
  wrong, SELF-CORRECT with probability ``self_correct`` (+ ``peer_correct_bonus`` when a peer has the right
  answer), lower on harder levels; else keep its answer.
* **Text.** A step-by-step solution from ``meta["steps"]``; a wrong answer shows a slipped final step (the
  arithmetic on that line is visibly off with probability ``slip_visible``); debate rounds refer to the peers;
  ``<answer>...</answer>`` at the end. With probability ``garble_prob`` a response is cut off before its answer
  (no parsable answer); the agent then re-solves from scratch at the next round.
* **Right answers.** A right answer is :func:`correct_answer`: the gold, or the task's recorded ``meta["solution"]``
  where the gold is not itself an answer (game24, whose gold lists the puzzle's numbers).
* **Confidence wording.** The closing remark is confident ("Each line follows from the previous one.") or hedged
  ("This seems right to me.") with ``P(confident | correct) = (1 + confidence_correlation) / 2`` and
  ``P(confident | wrong) = (1 - confidence_correlation) / 2``, so style is only a noisy hint of correctness:
  ``0`` makes it uninformative, ``1`` a perfect tell (the old behaviour), negative values make wrong answers the
  confident ones. Either kind of remark is left out a third of the time.

Randomness is drawn from a generator seeded by ``(seed, question id, agent, round)`` only (the confident-or-hedged
choice from its own stream seeded the same way), so traces do not depend on batching, chunking or sharding.
Traces from these debaters are labelled ``simulated``.

>>> from metamod.tasks.base import Example
>>> from metamod.rollout.debaters import DebateRequest
>>> ex = Example(id="q1", question="What is 3 * 4 + 5?", gold="17", kind="math",
...              meta={"level": 1, "steps": ["3 * 4 = 12", "12 + 5 = 17"], "distractors": ["19", "12"]})
>>> sim = SimulatedDebaters(SimulationConfig(sim_seed=0))
>>> out = sim.respond([DebateRequest(example=ex, agent=0, round=0)])
>>> out[0].text.rstrip().endswith("</answer>") or out[0].text.endswith("...")
True
>>> out[0].text == sim.respond([DebateRequest(example=ex, agent=0, round=0)])[0].text
True
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from metamod.llm.base import Generation
from metamod.prompts import render
from metamod.rollout.debaters import DebateRequest, DebaterGeneration
from metamod.rollout.simulation import (
    check_nonnegative,
    check_probability,
    correct_answer,
    garbled,
    is_right,
    level_of,
    normalized,
    question_accuracy,
    seeded_rng,
    slip,
    words,
    wrong_answer,
)
from metamod.tasks.base import Example
from metamod.tasks.grading import extract_answer

SIM_MODEL = "simulated-debater-v1"


@dataclass
class SimulationConfig:
    """Parameters of the simulated debaters (defaults are calibrated; see docs/rollout.md)."""

    sim_seed: int = field(default=0, metadata={"help": "Seed of the simulation; same seed -> identical traces."})
    agent_accuracy: list[float] = field(
        default_factory=lambda: [0.98, 0.965],
        metadata={
            "help": "Per-agent round-0 accuracy at difficulty level 1 for an average question (agent i uses "
            "entry i modulo the list length)."
        },
    )
    stubbornness: list[float] = field(
        default_factory=lambda: [0.55, 0.3],
        metadata={"help": "Per-agent resistance to peer pressure in [0, 1] (1 = never conforms)."},
    )
    level_slope: float = field(
        default=0.5, metadata={"help": "Drop in the logit of accuracy per difficulty level above 1."}
    )
    question_sd: float = field(
        default=3.2,
        metadata={
            "help": "Std of a per-question difficulty shared by all agents (logit scale); larger means more "
            "correlated mistakes and lower coverage."
        },
    )
    distractor_concentration: float = field(
        default=0.7,
        metadata={
            "help": "Probability that a wrong answer is the task's first (most plausible) distractor; else "
            "another distractor. High values make agents agree on the same wrong answer."
        },
    )
    conformity: float = field(
        default=0.4,
        metadata={
            "help": "Per agreeing peer, the chance of adopting that peer's answer (before "
            "stubbornness); applies to wrong answers too."
        },
    )
    truth_bonus: float = field(
        default=3.0, metadata={"help": "How much more persuasive a correct peer answer is than a wrong one (>= 0)."}
    )
    self_correct: float = field(
        default=0.12, metadata={"help": "Chance per round that a wrong agent finds its own mistake (at level 1)."}
    )
    peer_correct_bonus: float = field(
        default=0.15, metadata={"help": "Extra self-correction chance when a peer holds the right answer."}
    )
    drift_per_round: float = field(
        default=0.015,
        metadata={"help": "Drift (switching to a plausible wrong answer) grows by this much per debate round."},
    )
    drift_max: float = field(default=0.2, metadata={"help": "Cap on the per-round drift probability."})
    level_drift: float = field(
        default=0.15, metadata={"help": "Relative increase of drift per difficulty level above 1."}
    )
    slip_visible: float = field(
        default=0.8,
        metadata={"help": "Probability that a wrong solution shows its slipped step (checkable arithmetic)."},
    )
    garble_prob: float = field(
        default=0.015, metadata={"help": "Probability that a response is cut off before its answer (unparsable)."}
    )
    confidence_correlation: float = field(
        default=0.3,
        metadata={
            "help": "How much confident wording tells of correctness, in [-1, 1]: P(confident | correct) = (1 + c) / 2 "
            "and P(confident | wrong) = (1 - c) / 2, so c is the difference between the two. 0 = style carries no "
            "signal, 1 = only correct answers sound confident (a perfect tell)."
        },
    )

    def __post_init__(self) -> None:
        if not self.agent_accuracy or not self.stubbornness:
            raise ValueError("agent_accuracy and stubbornness need at least one value each (one per agent, cycled)")
        for i, acc in enumerate(self.agent_accuracy):
            if not 0.0 < acc < 1.0:
                raise ValueError(f"agent_accuracy[{i}] must be in (0, 1), got {acc}")
        for i, s in enumerate(self.stubbornness):
            check_probability(f"stubbornness[{i}]", s)
        for name in (
            "distractor_concentration",
            "conformity",
            "self_correct",
            "peer_correct_bonus",
            "drift_per_round",
            "drift_max",
            "slip_visible",
            "garble_prob",
        ):
            check_probability(name, getattr(self, name))
        for name in ("level_slope", "question_sd", "truth_bonus", "level_drift"):
            check_nonnegative(name, getattr(self, name))
        if not -1.0 <= self.confidence_correlation <= 1.0:
            raise ValueError(
                f"confidence_correlation must be in [-1, 1] (the gap P(confident | correct) - P(confident | wrong)), "
                f"got {self.confidence_correlation}; use 0 for uninformative wording or 1 for a perfect tell"
            )


_OPENINGS = (
    "Let me work through this step by step.",
    "I'll solve this carefully.",
    "Step by step:",
    "Let me break the problem down.",
)
# Closing remarks. Both tuples have the same length, so picking one draws the turn's main stream exactly as
# before confidence became noisy: answers, slips and garbling are unchanged by ``confidence_correlation``.
_CONFIDENT = ("I checked each step again and it holds.", "Each line follows from the previous one.", "")
_HEDGES = ("I am fairly sure about this.", "This seems right to me.", "")


class SimulatedDebaters:
    """A debater group whose agents follow the stochastic model in the module docstring.

    Args:
        config: the simulation parameters.
        tokenizer: optional tokenizer with ``encode``; otherwise tokens are whitespace-separated words.

    Attributes:
        num_calls: number of ``respond`` calls (rounds served).
    """

    backend = "sim"
    model = SIM_MODEL
    simulated = True

    def __init__(self, config: SimulationConfig | None = None, *, tokenizer: Any = None) -> None:
        self.config = config or SimulationConfig()
        self.tokenizer = tokenizer
        self.num_calls = 0
        self._prompt_base = {
            "initial": self._count(render("debater_initial", question="", confidence="")),
            "round": self._count(render("debater_round", question="", confidence="", peer_responses="")),
        }

    # ------------------------------------------------------------------ bookkeeping

    def _count(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer.encode(text))
        return words(text)

    def agent_settings(self, agent: int) -> dict[str, Any]:
        cfg = self.config
        return {
            "accuracy": cfg.agent_accuracy[agent % len(cfg.agent_accuracy)],
            "stubbornness": cfg.stubbornness[agent % len(cfg.stubbornness)],
            "sim_seed": cfg.sim_seed,
            "simulation": {k: v for k, v in asdict(cfg).items() if k not in ("agent_accuracy", "stubbornness")},
        }

    def _prompt_tokens(self, request: DebateRequest) -> int:
        question = self._count(request.example.prompt_text())
        total = self._prompt_base["initial"] + question
        if request.round > 0:
            total += self._count(request.own_previous or "") + self._prompt_base["round"] + question
            total += sum(self._count(p) + 2 for p in request.peer_previous)
        return total

    # ------------------------------------------------------------------ the model

    def accuracy(self, example: Example, agent: int) -> float:
        """Round-0 probability that ``agent`` answers ``example`` correctly."""
        cfg = self.config
        accuracy = cfg.agent_accuracy[agent % len(cfg.agent_accuracy)]
        return question_accuracy(cfg.sim_seed, example, accuracy, level_of(example), cfg.level_slope, cfg.question_sd)

    def _wrong(self, rng: random.Random, example: Example, avoid: str | None = None) -> str:
        return wrong_answer(rng, example, avoid=avoid, concentration=self.config.distractor_concentration)

    def _solve(self, rng: random.Random, example: Example, agent: int) -> str:
        return correct_answer(example) if rng.random() < self.accuracy(example, agent) else self._wrong(rng, example)

    def _decide(self, rng: random.Random, request: DebateRequest) -> tuple[str, str]:
        """(answer, move) for one turn; move is one of solve/keep/drift/conform/correct."""
        ex, cfg = request.example, self.config
        if request.round == 0:
            return self._solve(rng, ex, request.agent), "solve"
        key = lambda a: normalized(a, ex.kind, ex.choices)  # noqa: E731
        own = extract_answer(request.own_previous)
        peers = [extract_answer(p) for p in request.peer_previous]
        level = level_of(ex)
        if own is None or key(own) is None:
            current, move = self._solve(rng, ex, request.agent), "solve"
        else:
            current, move = own, "keep"
        drift = min(cfg.drift_max, cfg.drift_per_round * request.round) * (1 + cfg.level_drift * (level - 1))
        if rng.random() < min(drift, 1.0):
            return self._wrong(rng, ex, avoid=current), "drift"
        stubborn = cfg.stubbornness[request.agent % len(cfg.stubbornness)]
        votes: dict[str, list[str]] = {}
        for p in peers:
            pk = key(p) if p is not None else None
            if pk is not None and pk != key(current):
                votes.setdefault(pk, []).append(p)
        for pk in sorted(votes, key=lambda k: (-len(votes[k]), k)):
            p_conform = (1 - stubborn) * (1 - (1 - cfg.conformity) ** len(votes[pk]))
            if is_right(votes[pk][0], ex):
                p_conform *= cfg.truth_bonus
            if rng.random() < min(p_conform, 0.97):
                return votes[pk][0], "conform"
        if not is_right(current, ex):
            peer_right = any(is_right(answers[0], ex) for answers in votes.values())
            p_fix = cfg.self_correct + (cfg.peer_correct_bonus if peer_right else 0.0)
            p_fix *= 1 / (1 + 0.25 * (level - 1))
            if rng.random() < p_fix:
                return correct_answer(ex), "correct"
        return current, move

    # ------------------------------------------------------------------ text

    def _solution(self, rng: random.Random, example: Example, answer: str, correct: bool) -> list[str]:
        steps = [str(s) for s in (example.meta.get("steps") or [])]
        if correct:
            return steps or [f"Working it through, I get {answer}."]
        if rng.random() < self.config.slip_visible:
            # the task's own record of how this wrong answer arises (wrong operation, slip, skipped event)
            distractors = [str(d) for d in (example.meta.get("distractors") or [])]
            wrong_steps = example.meta.get("distractor_steps") or []
            if answer in distractors and distractors.index(answer) < len(wrong_steps):
                lines = [str(s) for s in wrong_steps[distractors.index(answer)]]
                if len(lines) >= len(steps) - 1 and lines:
                    return lines
                return steps[: max(0, len(steps) - 1)] + lines
            if steps:
                return steps[:-1] + [slip(steps[-1], answer)]
        return steps[: len(steps) // 2] + [f"Putting the rest together, that comes to {answer}."]

    def _confident(self, request: DebateRequest, correct: bool) -> bool:
        """Whether this turn's closing remark sounds confident (noisy in correctness; own seeded stream)."""
        cfg = self.config
        p_confident = (1 + (cfg.confidence_correlation if correct else -cfg.confidence_correlation)) / 2
        stream = seeded_rng(cfg.sim_seed, request.example.id, request.agent, request.round, "confidence")
        return stream.random() < p_confident

    def _render(self, rng: random.Random, request: DebateRequest, answer: str, move: str) -> str:
        ex = request.example
        correct = is_right(answer, ex)
        lines: list[str] = []
        if request.round > 0:
            peer_answers = [extract_answer(p) for p in request.peer_previous]
            refs = [
                f"Agent {j + 1} answered {a}" if a else f"Agent {j + 1} gave no clear answer"
                for j, a in enumerate(peer_answers)
            ]
            lines.append("; ".join(refs) + ".")
            agree = [
                j + 1
                for j, a in enumerate(peer_answers)
                if a is not None and normalized(a, ex.kind, ex.choices) == normalized(answer, ex.kind, ex.choices)
            ]
            if move == "conform":
                lines.append(f"Agent {agree[0] if agree else 1}'s reasoning convinces me, so I revise my answer.")
            elif move == "correct":
                lines.append("Re-checking my previous work, I found a mistake in my last step.")
            elif move == "drift":
                lines.append("Thinking about it more, I suspect an earlier step was wrong, so let me redo it.")
            elif agree:
                lines.append(f"I agree with Agent {agree[0]} and keep my answer.")
            else:
                lines.append("I re-checked my previous solution and I stand by it.")
        else:
            lines.append(rng.choice(_OPENINGS))
        steps = self._solution(rng, ex, answer, correct)
        lines += [f"{k + 1}. {s}" for k, s in enumerate(steps)]
        tail = rng.choice(_CONFIDENT if self._confident(request, correct) else _HEDGES)
        if tail:
            lines.append(tail)
        if rng.random() < self.config.garble_prob:
            cut = max(1, len(lines) - 1 - rng.randrange(0, 2))
            return garbled(lines, cut)
        lines.append(f"<answer>{answer}</answer>")
        return "\n".join(lines)

    def respond(self, requests: list[DebateRequest]) -> list[Generation]:
        """Answer every request (deterministically, given the seed and the request's content)."""
        self.num_calls += 1
        out: list[Generation] = []
        for request in requests:
            rng = seeded_rng(self.config.sim_seed, request.example.id, request.agent, request.round)
            answer, move = self._decide(rng, request)
            text = self._render(rng, request, answer, move)
            out.append(
                DebaterGeneration(
                    text=text,
                    prompt_tokens=self._prompt_tokens(request),
                    completion_tokens=self._count(text),
                    finish_reason="stop",
                    trimmed=False,
                )
            )
        return out
