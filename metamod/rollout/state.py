"""The moderator's view of a debate round: ONE function builds it, for training data and for inference alike.

The moderator state ``s_t`` is the question plus every debater's response at round ``t`` (never the gold answer).
At the last round (``final=True``) the forced-answer variant asks for ``STOP`` + ``<answer>`` only.

>>> msgs = moderator_messages("What is 2+2?", ["I think <answer>4</answer>", "<answer>5</answer>"], final=False)
>>> msgs[0]["role"], "Agent 2: <answer>5</answer>" in msgs[0]["content"], "CONTINUE" in msgs[0]["content"]
('user', True, True)
"""

from __future__ import annotations

from metamod.prompts import format_responses, render


def moderator_messages(question: str, responses: list[str], *, final: bool) -> list[dict[str, str]]:
    """Conversational prompt for the moderator at one round.

    Args:
        question: the question as shown to the debaters (multiple-choice options included).
        responses: each debater's full response at this round, in agent order.
        final: ``True`` at the last allowed round: the forced-answer prompt (STOP + answer).

    Returns:
        A one-message conversation ``[{"role": "user", "content": ...}]``.
    """
    template = "moderator_forced" if final else "moderator_decide"
    return [{"role": "user", "content": render(template, question=question, responses=format_responses(responses))}]


def controller_messages(question: str, solution: str, report: str, *, final: bool) -> list[dict[str, str]]:
    """The trained moderator's prompt as the MRO Controller: ONE function for training rows and inference.

    The state is the question, the Reasoner's current solution and the Monitor's report (never the gold answer).
    The output protocol is the moderator's: ``STOP <answer>..</answer>`` accepts (or, with another answer,
    patches), ``CONTINUE`` restarts. At the last iteration (``final=True``) the forced variant asks for the answer.

    >>> msgs = controller_messages("2+2?", "Step 1: 2+2=4 <answer>4</answer>", "ERROR_FOUND: no", final=False)
    >>> "CONTINUE" in msgs[0]["content"], "ERROR_FOUND: no" in msgs[0]["content"]
    (True, True)
    """
    template = "mro_controller_forced" if final else "mro_controller_decide"
    content = render(template, question=question, solution=solution.strip(), report=report.strip() or "(no report)")
    return [{"role": "user", "content": content}]
