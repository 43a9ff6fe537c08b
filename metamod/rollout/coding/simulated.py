"""The simulated coder: a seeded model of an LLM solving code-reasoning problems, for CPU runs of the code methods.

Every knob is a :class:`CodeSimulationConfig` field (``code_simulation`` in an eval config). The coder reads the
gold (it is a simulation), so what it shows is the *mechanics* of the methods, not a capability; everything it
produces is labelled ``simulated``.

* **First proposal.** Right with probability ``sigmoid(logit(accuracy) - level_slope * (level - 1) + question_sd *
  z_q + knowledge_bonus * min(guidance_items, knowledge_cap) / knowledge_cap)``; ``z_q ~ N(0, 1)`` is shared by all
  agents on a question (hard problems are hard for everyone). ``guidance_items`` counts the memory lines in the
  prompt (:class:`~metamod.rollout.coding.turn.CodeTurn`), so a memory's effect is an *assumption* of this
  model, set by ``knowledge_bonus`` (0: guidance changes nothing).
* **After failing feedback.** A wrong proposal becomes right with probability ``retry_fix`` (+ ``peer_bonus`` when
  the prompt carries peers' lessons: cross-referencing), divided by ``1 + 0.25 * (level - 1)``.
* **Wrong answers** are plausible: a deduction output or abduction input perturbed by one step (an integer off by
  one, a list missing its last element, a string with a changed character); an induction function that is a lookup
  table of the visible pairs (passes what it sees, fails the hidden pairs) with probability ``overfit_prob``, else
  one returning the first visible output for every input.
* **Malformed output.** With probability ``garble_prob`` a response has no answer at all.
* **Other stages.** ``summarise`` writes a one-sentence lesson from a small bank of generic lessons per sub-task;
  ``hypothesis`` writes a rule in words; ``emulate`` answers like ``propose``; ``program`` (Chain-of-Code) writes
  the same proposal as a Python program that assigns ``answer`` (induction: defines the function), and with
  probability :data:`PROGRAM_HELPER_PROB` adds a call to an undefined "semantic" helper, so that running it fails
  and the method's emulation path is exercised.

Randomness is seeded by ``(code_sim_seed, question id, agent, iteration, stage)`` only, so results do not depend on
batching.

>>> from metamod.tasks.base import Example
>>> from metamod.rollout.coding.turn import CodeTurn
>>> ex = Example(id="d1", question="...", gold="4", kind="code_output",
...              meta={"code": {"subtask": "deduction", "entry": "f", "function": "def f(x):\\n    return x + 1",
...                             "input": "3", "output": None, "visible": [], "language": "python", "level": 1}})
>>> coder = SimulatedCoder(CodeSimulationConfig(accuracy=0.999, garble_prob=0.0))
>>> coder.respond([CodeTurn(ex)])[0].text.endswith("<answer>4</answer>")
True
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from metamod.llm.base import Generation
from metamod.rollout.coding.turn import CodeTurn, code_meta
from metamod.rollout.simulation import check_nonnegative, check_probability, question_accuracy, seeded_rng, words
from metamod.tasks.base import Example

SIM_CODER_MODEL = "simulated-coder-v1"
#: P(a simulated ``program`` calls an undefined helper, so that running it raises NameError)
PROGRAM_HELPER_PROB = 0.25

_LESSONS: dict[str, tuple[str, ...]] = {
    "deduction": (
        "Trace every loop iteration on paper and write down the variables after each one.",
        "Check whether the function changes its argument in place before it returns it.",
        "Watch the difference between integer division and true division on negative numbers.",
        "Remember that string methods return new strings and do not change the original.",
    ),
    "abduction": (
        "Start from the returned value and undo the function's steps in reverse order.",
        "Look for a branch of the function that returns the target value directly.",
        "Check the types the function expects before proposing an argument.",
        "Verify the proposed argument by running the function on it mentally once more.",
    ),
    "induction": (
        "Compare input and output lengths first: they show whether elements are added, removed or kept.",
        "Check whether the rule depends on the position of an element or on its value.",
        "Test the candidate rule on every example, including the edge cases such as empty lists.",
        "Look for letter-case and sign differences between examples before generalising.",
    ),
}


@dataclass
class CodeSimulationConfig:
    """Parameters of the simulated coder (``code_simulation`` in an eval config; docs/marco.md)."""

    code_sim_seed: int = field(default=0, metadata={"help": "Seed of the simulated coder; same seed -> same runs."})
    accuracy: float = field(
        default=0.55, metadata={"help": "First-proposal accuracy at difficulty level 1 on an average problem."}
    )
    level_slope: float = field(
        default=0.5, metadata={"help": "Drop in the logit of the first-proposal accuracy per level above 1."}
    )
    question_sd: float = field(
        default=1.0, metadata={"help": "Spread of problem difficulty (logit scale), shared by all agents."}
    )
    retry_fix: float = field(
        default=0.3, metadata={"help": "P(a wrong proposal becomes right after failing feedback), level 1."}
    )
    peer_bonus: float = field(
        default=0.1,
        metadata={"help": "Added to retry_fix when the prompt carries peers' lessons (cross-referencing)."},
    )
    knowledge_bonus: float = field(
        default=0.5,
        metadata={
            "help": "Logit bonus of a prompt carrying knowledge_cap or more memory lines (scaled down linearly "
            "below); 0: guidance changes nothing. An assumption of the simulation, not a measurement."
        },
    )
    knowledge_cap: int = field(default=6, metadata={"help": "Memory lines at which knowledge_bonus is full."})
    overfit_prob: float = field(
        default=0.5,
        metadata={"help": "Induction: P(a wrong function is a lookup table of the visible pairs)."},
    )
    garble_prob: float = field(default=0.03, metadata={"help": "P(a response carries no answer)."})

    def __post_init__(self) -> None:
        if not 0.0 < self.accuracy < 1.0:  # a logit is taken
            raise ValueError(f"accuracy must be a probability in (0, 1), got {self.accuracy}")
        for name in ("retry_fix", "peer_bonus", "overfit_prob", "garble_prob"):
            check_probability(name, getattr(self, name))
        for name in ("level_slope", "question_sd"):
            check_nonnegative(name, getattr(self, name))
        if self.knowledge_cap < 1:
            raise ValueError(f"knowledge_cap must be >= 1, got {self.knowledge_cap}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def perturb_literal(text: str, rng: Any) -> str:
    """A plausible wrong value near the literal ``text`` (one step off), as a literal.

    >>> import random
    >>> perturb_literal("5", random.Random(0)) in ("4", "6")
    True
    >>> perturb_literal("[1, 2, 3]", random.Random(0))
    '[1, 2]'
    """
    value = _literal(text)
    if isinstance(value, bool):
        return repr(not value)
    if isinstance(value, int):
        return repr(value + rng.choice((-1, 1)))
    if isinstance(value, float):
        return repr(value + 1.0)
    if isinstance(value, str):
        if not value:
            return repr("a")
        i = rng.randrange(len(value))
        swapped = value[i].swapcase() if value[i].swapcase() != value[i] else ("x" if value[i] != "x" else "y")
        return repr(value[:i] + swapped + value[i + 1 :])
    if isinstance(value, list):
        return repr(value[:-1] if value else [0])
    if isinstance(value, tuple):
        if len(value) > 1:  # an argument tuple: perturb its first element
            return ", ".join([perturb_literal(repr(value[0]), rng), *(repr(v) for v in value[1:])])
        return repr(value[:-1] if value else (0,))
    if isinstance(value, dict):
        return repr({**value, "_": 0})
    return "None"


def _gold_json(example: Example) -> Mapping[str, Any]:
    try:
        data = json.loads(example.gold)
    except (TypeError, ValueError) as err:
        raise ValueError(f"example {example.id!r}: a {example.kind} gold must be a JSON object ({err})") from err
    if not isinstance(data, Mapping):
        raise ValueError(f"example {example.id!r}: a {example.kind} gold must be a JSON object")
    return data


def _lookup_function(entry: str, pairs: Sequence[Sequence[str]], fallback: str) -> str:
    lines = [f"def {entry}(*args):", "    table = {"]
    for inp, out in pairs:
        lines.append(f"        ({inp},): {out},")
    lines += ["    }", f"    return table.get(args, {fallback})"]
    return "\n".join(lines)


def _constant_function(entry: str, value: str) -> str:
    return f"def {entry}(*args):\n    return {value}"


class SimulatedCoder:
    """Seeded simulated coder answering :class:`~metamod.rollout.coding.turn.CodeTurn` requests."""

    def __init__(self, config: CodeSimulationConfig | None = None) -> None:
        self.config = config or CodeSimulationConfig()

    def _rng(self, turn: CodeTurn, *extra: object) -> Any:
        return seeded_rng(self.config.code_sim_seed, turn.example.id, turn.agent, turn.iteration, turn.stage, *extra)

    def p_right(self, turn: CodeTurn) -> float:
        """The probability that this turn's proposal is right (see the module docstring)."""
        cfg = self.config
        level = int(code_meta(turn.example).get("level") or 1)
        knowledge = cfg.knowledge_bonus * min(turn.guidance_items, cfg.knowledge_cap) / cfg.knowledge_cap
        first = question_accuracy(
            cfg.code_sim_seed, turn.example, cfg.accuracy, level, cfg.level_slope, cfg.question_sd, knowledge
        )
        if turn.iteration <= 1 or not turn.failed_before:
            return first
        fix = min(1.0, cfg.retry_fix + (cfg.peer_bonus if turn.peer_lessons else 0.0)) / (1 + 0.25 * (level - 1))
        return fix

    def _answer(self, turn: CodeTurn, right: bool) -> str:
        ex, rng = turn.example, self._rng(turn, "answer")
        meta = code_meta(ex)
        subtask, entry = meta["subtask"], meta.get("entry") or "f"
        if subtask == "deduction":
            value = ex.gold if right else perturb_literal(ex.gold, rng)
            return f"Tracing the call line by line gives the result.\n<answer>{value}</answer>"
        if subtask == "abduction":
            reference = str(_gold_json(ex).get("input"))
            value = reference if right else perturb_literal(reference, rng)
            return f"Working backwards from the returned value.\n<answer>{value}</answer>"
        gold = _gold_json(ex)
        visible = meta.get("visible") or []
        fallback = visible[0][1] if visible else "None"
        if right and gold.get("reference"):
            code = str(gold["reference"])
        elif visible and rng.random() < self.config.overfit_prob:
            code = _lookup_function(entry, visible, fallback)
        else:
            code = _constant_function(entry, fallback)
        return f"The examples suggest this rule.\n```python\n{code}\n```"

    def _program(self, turn: CodeTurn, proposal: str, *, helper: bool) -> str:
        """``proposal`` (a ``propose``-shaped text) rewritten as a Chain-of-Code program."""
        meta = code_meta(turn.example)
        subtask, entry = meta["subtask"], meta.get("entry") or "f"
        if subtask == "induction":
            code = proposal.split("```python\n", 1)[1].rsplit("\n```", 1)[0]
            lines = [code, ""] + ([f"assert looks_consistent({entry})"] if helper else [])
        else:
            value = proposal.split("<answer>", 1)[1].rsplit("</answer>", 1)[0]
            if subtask == "deduction":
                lines = ["# follow the call one statement at a time", f"result = {value}"]
            else:
                lines = ["# undo the function's steps from the returned value", f"result = ({value},)"]
            lines += (["checked = looks_consistent(result)"] if helper else []) + ["answer = result"]
        body = "\n".join(lines).rstrip()
        return f"I will reason about it in code.\n```python\n{body}\n```"

    def _one(self, turn: CodeTurn) -> Generation:
        rng = self._rng(turn)
        subtask = code_meta(turn.example)["subtask"]
        if turn.stage == "summarise":
            lessons = _LESSONS[subtask]
            text = lessons[rng.randrange(len(lessons))]
        elif turn.stage == "hypothesis":
            text = "Hypothesis: the output is built from the input by one simple rule applied element by element."
        elif rng.random() < self.config.garble_prob:
            text = "Let me think about this step by step. First I look at"
        else:
            text = self._answer(turn, rng.random() < self.p_right(turn))
            if turn.stage == "program":
                text = self._program(turn, text, helper=rng.random() < PROGRAM_HELPER_PROB)
        return Generation(text=text, prompt_tokens=64, completion_tokens=words(text), finish_reason="stop")

    def respond(self, turns: Sequence[CodeTurn]) -> list[Generation]:
        """One simulated response per turn (deterministic per turn)."""
        return [self._one(turn) for turn in turns]
