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
