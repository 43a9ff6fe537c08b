"""The two domain-specific languages of the inductive code-reasoning datasets: RobustFill and DeepCoder.

``DSLS`` maps a language name to a :class:`DSL`, one object per language with the same seven members, so callers
never branch on the language:

* ``name``; ``parse(text) -> Program``; ``run(program | text, inputs: tuple) -> value``; ``to_text(program)``
  (round-trips through ``parse``); ``describe()`` (a grammar summary for prompts);
* ``sample_program(rng, level)`` (seeded, levels 1..5) and ``sample_inputs(rng, program, n)``.

Every anticipated failure (bad syntax, type error, missing value, step or size limit) is a :class:`DSLError` with
a one-line message. The interpreters never evaluate Python: they walk a parsed tree under a step budget.

>>> sorted(DSLS)
['deepcoder', 'robustfill']
>>> dsl = get_dsl("robustfill")
>>> dsl.run('Concat(GetToken(Word, -1), ConstStr("!"))', ("Hello big World",))
'World!'
>>> get_dsl("deepcoder").run("a <- [int]\\nb <- FILTER (>0) a", ([3, -1, 2],))
[3, 2]
>>> get_dsl("lisp")
Traceback (most recent call last):
...
metamod.tasks.dsl.base.DSLError: unknown DSL 'lisp'; expected one of deepcoder, robustfill
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metamod.tasks.dsl import deepcoder, robustfill, sampling
from metamod.tasks.dsl.base import DSLError

__all__ = ["DSL", "DSLS", "DSLError", "get_dsl", "deepcoder", "robustfill"]


@dataclass(frozen=True)
class DSL:
    """One language's entry points (see the module docstring)."""

    name: str
    parse: Callable[[str], Any]
    run: Callable[..., Any]
    to_text: Callable[[Any], str]
    sample_program: Callable[..., Any]
    sample_inputs: Callable[..., list[tuple[Any, ...]]]
    describe: Callable[[], str]


DSLS: dict[str, DSL] = {
    "robustfill": DSL(
        name=robustfill.name,
        parse=robustfill.parse,
        run=robustfill.run,
        to_text=robustfill.to_text,
        sample_program=sampling.robustfill_program,
        sample_inputs=sampling.robustfill_inputs,
        describe=robustfill.describe,
    ),
    "deepcoder": DSL(
        name=deepcoder.name,
        parse=deepcoder.parse,
        run=deepcoder.run,
        to_text=deepcoder.to_text,
        sample_program=sampling.deepcoder_program,
        sample_inputs=sampling.deepcoder_inputs,
        describe=deepcoder.describe,
    ),
}


def get_dsl(name: str) -> DSL:
    """The :class:`DSL` called ``name``.

    Args:
        name: ``"robustfill"`` or ``"deepcoder"``.

    Returns:
        Its entry points.

    Raises:
        DSLError: For an unknown name (the message lists the valid ones).
    """
    if name not in DSLS:
        raise DSLError(f"unknown DSL {name!r}; expected one of {', '.join(sorted(DSLS))}")
    return DSLS[name]
