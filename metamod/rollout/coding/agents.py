"""Agents for the code-reasoning methods: the problem statement as a prompt, and one ``chat`` for LLM or simulated.

Every code method (``marco`` and its ablations, ``cot``, ``chain_of_code``, ``rhda``) talks to its model through
:class:`CodeAgent`: ``agent.chat(conversations, turns)`` sends a whole batch in one call. With an LLM (the eval
harness's debater model) the conversations go to the generator; in the simulated world
(:mod:`metamod.rollout.coding.simulated`) the turns say what shape of answer is wanted and the simulated coder writes
one. A :class:`CodeTurn` names the question, the agent, the iteration and the ``stage`` of the call (``propose``,
``revise``, ``summarise``, ``hypothesis``, ``translate``, ``program``, ``emulate``...).

:func:`problem_prompt` renders the structured problem (``example.meta["code"]``, see docs/tasks.md) with the
``code_problem_<subtask>`` templates, so the wording is data and a prompts file can replace it.

>>> from metamod.tasks.base import Example
>>> ex = Example(id="d1", question="...", gold="4", kind="code_output",
...              meta={"code": {"subtask": "deduction", "entry": "f", "function": "def f(x):\\n    return x + 1",
...                             "input": "3", "output": None, "visible": [], "language": "python"}})
>>> print(problem_prompt(ex).splitlines()[-3])
Call: f(3)
>>> answer_format(ex).startswith("End with the answer alone")
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from metamod.llm.base import Conversation, Generation
from metamod.memory.base import Guidance, ask_guidance
from metamod.prompts import render
from metamod.rollout.coding.turn import CodeTurn, code_meta, subtask_of
from metamod.rollout.roles import LLMRole
from metamod.tasks.base import Example


def _pairs_text(meta: Mapping[str, Any]) -> str:
    entry = meta.get("entry") or "f"
    return "\n".join(render("code_pair", entry=entry, input=i, output=o) for i, o in meta.get("visible") or [])


def _language_note(meta: Mapping[str, Any]) -> str:
    entry = meta.get("entry") or "f"
    language = meta.get("language") or "python"
    if language == "python":
        return render("code_language_python", entry=entry) + "\n"
    from metamod.tasks.dsl import DSLS

    return render("code_language_dsl", entry=entry, grammar=DSLS[language].describe()) + "\n"


def problem_prompt(example: Example) -> str:
    """The problem statement shown to a code agent, from the ``code_problem_<subtask>`` template."""
    meta = code_meta(example)
    subtask = meta["subtask"]
    entry = meta.get("entry") or "f"
    if subtask == "induction":
        return render(
            "code_problem_induction", entry=entry, pairs=_pairs_text(meta), language_note=_language_note(meta)
        )
    fields = {"function": meta.get("function") or "", "entry": entry}
    if subtask == "deduction":
        return render("code_problem_deduction", input=meta.get("input") or "", **fields)
    return render("code_problem_abduction", output=meta.get("output") or "", **fields)


def answer_format(example: Example) -> str:
    """How the agent is asked to write its answer: a literal in ``<answer>`` tags, or a fenced function."""
    return render("marco_answer_code" if subtask_of(example) == "induction" else "marco_answer_value")


def feedback_text(feedback: Any, mode: str = "binary", max_failures: int | None = None) -> str:
    """The interpreter's verdict as the model reads it (the ``marco_feedback_*`` templates: every code method).

    Args:
        feedback: a :class:`metamod.tasks.code.grading.Feedback` (``passed``, ``n_passed``, ``n_total``,
            ``failures``, ``error``).
        mode: ``binary`` (passed or not) or ``rich`` (the failed checks and the error as well).
        max_failures: ``rich``: the most failed checks listed (None: all).

    Returns:
        The feedback text.

    >>> from types import SimpleNamespace
    >>> fb = SimpleNamespace(passed=False, n_passed=1, n_total=2, failures=["f(2) returned 3, expected 4"], error=None)
    >>> print(feedback_text(fb, "rich"))
    The interpreter ran your proposal: 1 of 2 checks passed.
    - f(2) returned 3, expected 4
    """
    if feedback.passed:
        return render("marco_feedback_pass")
    if mode == "binary":
        return render("marco_feedback_fail")
    lines = [f"- {failure}" for failure in list(feedback.failures or [])[:max_failures]]
    if feedback.error and not any(feedback.error in line for line in lines):
        lines.append(f"- Error: {feedback.error}")
    return render(
        "marco_feedback_detail", passed=feedback.n_passed, total=feedback.n_total, failures="\n".join(lines)
    ).rstrip()


class CodeAgent:
    """One batched ``chat`` for a code method: an LLM role (:class:`~metamod.rollout.roles.LLMRole`), or the simulated
    coder.

    Args:
        generator: a :class:`metamod.llm.base.Generator` (``None`` in the simulated world).
        sampling: its decoding settings.
        simulated: the simulated coder (:class:`metamod.rollout.coding.simulated.SimulatedCoder`) when there is no
            generator.
        memory, method: the memory the agent asks (role ``single``, or ``debater`` for MARCO's agents) and the
            method asking.
    """

    def __init__(
        self,
        generator: Any = None,
        sampling: Any = None,
        simulated: Any = None,
        *,
        memory: Any = None,
        method: str | None = None,
        role: str = "single",
    ) -> None:
        if (generator is None) == (simulated is None):
            raise ValueError("CodeAgent needs exactly one of an LLM generator or a simulated coder")
        self.simulated = simulated
        self.llm = (
            None
            if generator is None
            else LLMRole(generator, sampling, role=role, memory=memory, method=method, who="agent")
        )
        self.memory, self.method, self.role = memory, method, role

    @property
    def is_simulated(self) -> bool:
        return self.simulated is not None

    @classmethod
    def from_context(cls, context: Any, method: str, *, role: str = "single") -> CodeAgent:
        """The agent a method of the eval harness uses (the debater model, or the simulated coder)."""
        from metamod.config import ConfigError

        if context.agent is not None:
            sampling = dataclasses.replace(context.agent_sampling, n=1, seed=context.seed)
            return cls(context.agent, sampling, memory=context.memory, method=method, role=role)
        settings = context.code_simulation
        if settings is None:
            raise ConfigError(
                f"method {method!r} needs an agent: an LLM generator (debater_model) or the simulated world "
                "(debaters: simulated)"
            )
        from metamod.rollout.coding.simulated import SimulatedCoder

        return cls(simulated=SimulatedCoder(settings), memory=context.memory, method=method, role=role)

    def ask(self, example: Example, *, step: int | None = None, agent: int | None = None) -> Guidance:
        """The memory's guidance for this agent on ``example`` (the simulated coder asks too, so the path is logged)."""
        return ask_guidance(self.memory, example, self.role, agent=agent, step=step, method=self.method)

    def chat(
        self, conversations: Sequence[Conversation], turns: Sequence[CodeTurn], *, max_tokens: int | None = None
    ) -> list[Generation]:
        """One batched call: one generation per conversation (``turns[i]`` describes ``conversations[i]``)."""
        if len(conversations) != len(turns):
            raise ValueError(f"chat: {len(conversations)} conversations but {len(turns)} turns")
        if not conversations:
            return []
        if self.simulated is not None:
            return list(self.simulated.respond(list(turns)))
        overrides = {} if max_tokens is None else {"max_tokens": max_tokens}
        return self.llm.chat([list(c) for c in conversations], **overrides)


def check_proposals(
    examples: Sequence[Example],
    answers: Sequence[str | None],
    *,
    deduction_check: str = "format",
    workers: int | None = None,
) -> list[Any]:
    """The interpreter's check of each proposal against what its problem shows, in parallel over the CPU cores.

    One :func:`metamod.tasks.code.grading.visible_feedback` per ``(example, answer)`` (a sandboxed process for
    code); threads only launch and wait for the sandboxes, so a batch uses every core.

    Returns:
        One ``Feedback`` per proposal, in order.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    from metamod.tasks.code.grading import visible_feedback

    if len(examples) != len(answers):
        raise ValueError(f"check_proposals: {len(examples)} examples but {len(answers)} answers")

    def one(i: int) -> Any:
        return visible_feedback(examples[i], answers[i], deduction_check=deduction_check)

    if len(examples) <= 1:
        return [one(i) for i in range(len(examples))]
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(one, range(len(examples))))
