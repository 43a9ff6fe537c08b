"""The one trace schema: what every trace starts with, whatever loop wrote it (the schema version and the question
block), the field checks every loop's payload is validated with, and the error a trace off the schema raises.
:mod:`metamod.rollout.traces` (the debate payload, files) and :mod:`metamod.rollout.mro.traces` (the MRO payload)
both build on it.

>>> sorted(QUESTION_FIELDS)[:3]
['choices', 'gold', 'id']
>>> check_record({"schema_version": 1, "id": "q"}, {"schema_version": (int,), "id": (str,)}, "t.jsonl:1")["id"]
'q'
>>> check_record({"schema_version": 1, "id": 7}, {"id": (str,)}, "t.jsonl:2")
Traceback (most recent call last):
...
metamod.rollout.trace_schema.TraceError: t.jsonl:2: field 'id' must be str, got int 7
"""

from __future__ import annotations

from typing import Any

from metamod.errors import MetamodError

SCHEMA_VERSION = 1

#: the question block every trace starts with, debate or MRO (field -> accepted python types)
QUESTION_FIELDS: dict[str, tuple[type, ...]] = {
    "schema_version": (int,),
    "id": (str,),
    "task": (str,),
    "question": (str,),
    "gold": (str,),
    "kind": (str,),
    "choices": (list, type(None)),
    "meta": (dict,),
    "simulated": (bool,),
}


class TraceError(MetamodError, ValueError):
    """A trace file or trace object that does not follow the schema (the message names file:line and field).

    A :class:`~metamod.errors.MetamodError`: the CLI reports it as one line (exit 2).
    """


def check_field(obj: dict, name: str, types: tuple[type, ...], where: str) -> None:
    """Fail unless ``obj[name]`` exists and is one of ``types`` (``bool`` is not an ``int`` here, nor the reverse)."""
    if name not in obj:
        raise TraceError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise TraceError(f"{where}: field {name!r} must be {names}, got {type(value).__name__} {value!r:.60}")


def check_binary(value: Any, name: str, where: str) -> None:
    """Fail unless ``value`` is the integer 0 or 1 (a label such as ``eta``)."""
    if value not in (0, 1) or isinstance(value, bool):
        raise TraceError(f"{where}: field {name!r} must be 0 or 1, got {value!r}")


def check_record(trace: Any, fields: dict[str, tuple[type, ...]], where: str) -> dict:
    """The checks every trace gets: a JSON object with ``fields`` (the question block and the loop's top-level
    fields), this schema version, and an integer ``index`` when it has one. Returns ``trace``."""
    if not isinstance(trace, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(trace).__name__}")
    for name, types in fields.items():
        check_field(trace, name, types, where)
    if trace["schema_version"] != SCHEMA_VERSION:
        raise TraceError(
            f"{where}: field 'schema_version' is {trace['schema_version']}, this metamod reads version {SCHEMA_VERSION}"
        )
    if "index" in trace and (not isinstance(trace["index"], int) or isinstance(trace["index"], bool)):
        raise TraceError(f"{where}: optional field 'index' must be int, got {trace['index']!r}")
    return trace
