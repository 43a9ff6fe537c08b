"""What the two DSL interpreters share: the one error class and the step budget.

Both interpreters run program text written by a model inside the host process, so every failure they anticipate
(bad syntax, a type error, a value out of range, a budget exceeded) is a :class:`DSLError` with a one-line message;
anything else escaping them is a bug.

>>> budget = StepBudget(3)
>>> budget.spend(2); budget.used
2
>>> budget.spend(2)
Traceback (most recent call last):
...
metamod.tasks.dsl.base.DSLError: step budget exceeded: the program needs more than 3 steps
>>> one_line("bad\\n token")
'bad token'
"""

from __future__ import annotations

import re

__all__ = ["DSLError", "StepBudget", "one_line", "DEFAULT_MAX_STEPS"]

#: Steps one run may take unless the caller gives another budget (a step is one element or character processed).
DEFAULT_MAX_STEPS = 100_000

_SPACE_RE = re.compile(r"\s+")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` with every run of whitespace collapsed to one space, cut to ``limit`` characters.

    Args:
        text: Any message text.
        limit: Longest result; longer text ends with ``...``.

    Returns:
        The single-line text.

    >>> one_line("a   b", limit=2)
    'a ...'
    """
    text = _SPACE_RE.sub(" ", text).strip()
    return text if len(text) <= limit else text[:limit] + " ..."


class DSLError(ValueError):
    """A DSL program that cannot be parsed or run; the message is one line naming the bad token, value or limit.

    Derives from :class:`ValueError` so callers that catch ``ValueError`` keep working.

    >>> str(DSLError("unknown function 'FOO'\\nat line 2"))
    "unknown function 'FOO' at line 2"
    """

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class StepBudget:
    """A countdown of interpreter steps; :meth:`spend` raises :class:`DSLError` once the budget is used up.

    Args:
        max_steps: Steps allowed (>= 1).

    >>> StepBudget(10).spend(10)
    >>> StepBudget(0)
    Traceback (most recent call last):
    ...
    metamod.tasks.dsl.base.DSLError: max_steps must be >= 1, got 0
    """

    __slots__ = ("max_steps", "used")

    def __init__(self, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise DSLError(f"max_steps must be >= 1, got {max_steps!r}")
        self.max_steps = max_steps
        self.used = 0

    def spend(self, steps: int = 1) -> None:
        """Count ``steps`` more steps (at least one is always counted).

        Args:
            steps: Steps the next operation takes (e.g. the length of the list it walks).
        """
        self.used += max(1, steps)
        if self.used > self.max_steps:
            raise DSLError(f"step budget exceeded: the program needs more than {self.max_steps} steps")
