"""What one call of a code method is (:class:`CodeTurn`) and how a code-reasoning question is read
(:func:`code_meta`): shared by the agents (:mod:`metamod.rollout.coding.agents`) and the simulated coder
(:mod:`metamod.rollout.coding.simulated`), which therefore do not import each other.

>>> from metamod.tasks.base import Example
>>> CodeTurn(Example(id="q", question="?", gold="1", kind="code_output"), stage="revise").iteration
1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metamod.tasks.base import Example

#: sub-tasks of code reasoning and the answer kind of each
SUBTASK_KINDS: dict[str, str] = {"deduction": "code_output", "abduction": "code_input", "induction": "code_function"}
#: how the interpreter's verdict is shown: the verdict only, or also the failed checks and the error
FEEDBACK_MODES: tuple[str, ...] = ("binary", "rich")
#: what a deduction proposal is checked against: its value parsing, or the real output (leaks the answer)
DEDUCTION_CHECKS: tuple[str, ...] = ("format", "oracle")
#: call stages a code method may ask for (the simulated coder answers each in the right shape)
STAGES: tuple[str, ...] = ("propose", "revise", "summarise", "hypothesis", "translate", "program", "emulate", "cot")


@dataclass(frozen=True)
class CodeTurn:
    """One call of a code method for one question and agent.

    Attributes:
        example: the question.
        agent: the agent's index (0 for single-agent methods).
        iteration: 1-based proposal-feedback iteration.
        stage: one of :data:`STAGES`.
        peer_lessons: how many peers' lessons the prompt carries (cross-referencing; the simulated coder reads it).
        guidance_items: how many memory items the prompt carries (the simulated coder reads it).
        failed_before: whether this agent's previous proposal failed the interpreter's check.
    """

    example: Example
    agent: int = 0
    iteration: int = 1
    stage: str = "propose"
    peer_lessons: int = 0
    guidance_items: int = 0
    failed_before: bool = False

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"CodeTurn stage {self.stage!r} is not one of {STAGES}")


def code_meta(example: Example) -> Mapping[str, Any]:
    """``example.meta["code"]``, or a one-line error naming the example when it is not a code-reasoning item."""
    meta = example.meta.get("code") if isinstance(example.meta, Mapping) else None
    if not isinstance(meta, Mapping) or meta.get("subtask") not in SUBTASK_KINDS:
        raise ValueError(
            f"example {example.id!r} is not a code-reasoning item (kind {example.kind!r}): the code methods need "
            "meta['code'] with a subtask of deduction, abduction or induction (tasks cruxeval_o, list_function, "
            "synthetic_code, ...; docs/tasks.md)"
        )
    return meta


def subtask_of(example: Example) -> str:
    return str(code_meta(example)["subtask"])
