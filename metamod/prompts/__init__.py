"""Prompts are data: every template lives in ``templates.yaml`` and is used by name.

>>> "question" in template_fields("single_cot")
True
>>> render("agent_response", index=1, response="4")
'Agent 1: 4'
>>> try:
...     render("nope")
... except KeyError as err:
...     print("Valid names" in str(err))
True
"""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path

import yaml

from metamod.registry import valid_names_help

_TEMPLATES_FILE = Path(__file__).with_name("templates.yaml")


@cache
def templates() -> dict[str, str]:
    """All templates by name (loaded once from ``templates.yaml``)."""
    data = yaml.safe_load(_TEMPLATES_FILE.read_text())
    return {str(k): str(v) for k, v in data.items()}


def get_template(name: str) -> str:
    table = templates()
    if name not in table:
        raise KeyError(f"Unknown prompt template {name!r}. {valid_names_help(table)}")
    return table[name]


def template_fields(name: str) -> set[str]:
    """The placeholder names a template expects."""
    return {f for _, f, _, _ in string.Formatter().parse(get_template(name)) if f}


def render(name: str, **values: object) -> str:
    """Fill template ``name``; a missing placeholder fails with the template's expected fields."""
    template = get_template(name)
    missing = template_fields(name) - set(values)
    if missing:
        raise KeyError(f"Prompt template {name!r} needs {sorted(missing)}; got {sorted(values)}")
    return template.format(**values)


def format_responses(responses: list[str]) -> str:
    """Number a list of agent responses (``Agent 1: ...``), one block per agent.

    >>> print(format_responses(["x", "y"]))
    Agent 1: x
    <BLANKLINE>
    Agent 2: y
    """
    return "\n\n".join(render("agent_response", index=i + 1, response=r.strip()) for i, r in enumerate(responses))
