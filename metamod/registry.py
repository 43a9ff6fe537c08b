"""One helper for every extension point: an explicit ``name -> object`` dict with a dotted-path fallback.

Each extension point (tasks, backends, rewards, decision layers, memories, ...) keeps its own plain dict; this
module only resolves names against it so that every unknown name fails the same way, with the valid names.

>>> REG = {"a": 1, "b": 2}
>>> resolve(REG, "b", what="thing")
2
>>> resolve(REG, "math:sqrt", what="thing")(16.0)
4.0
>>> resolve(REG, "c", what="thing")
Traceback (most recent call last):
...
KeyError: "Unknown thing 'c'. Valid names: a, b (or a dotted path 'package.module:attr')."
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def import_dotted(path: str) -> Any:
    """Import ``package.module:attr`` (or ``package.module.attr``) and return the attribute."""
    if ":" in path:
        module_name, attr = path.split(":", 1)
    else:
        module_name, _, attr = path.rpartition(".")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def resolve(registry: Mapping[str, T], name: str, *, what: str) -> T:
    """Return ``registry[name]``, or import ``name`` when it is a dotted path; otherwise fail with the valid names.

    Args:
        registry: the extension point's ``name -> object`` dict.
        name: a registered name, or ``package.module:attr`` for an object defined outside metamod.
        what: what the names denote (used in the error message), e.g. ``"task"``.

    Returns:
        The registered (or imported) object.
    """
    if name in registry:
        return registry[name]
    if "." in name or ":" in name:
        try:
            return import_dotted(name)
        except (ImportError, AttributeError, ValueError) as err:
            raise KeyError(f"Could not import {what} {name!r}: {err}") from err
    raise KeyError(f"Unknown {what} {name!r}. {valid_names_help(registry)}")


def valid_names_help(registry: Mapping[str, Any]) -> str:
    """The sentence listing valid names, generated from the registry so it cannot drift from the code."""
    return f"Valid names: {', '.join(sorted(registry))} (or a dotted path 'package.module:attr')."
