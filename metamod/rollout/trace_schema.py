"""What every trace starts with, whatever loop wrote it: the schema version, the question block and the error a
trace off the schema raises. :mod:`metamod.rollout.traces` (debates, files) and :mod:`metamod.rollout.mro.traces`
(the MRO payload) both build on it.

>>> sorted(QUESTION_FIELDS)[:3]
['choices', 'gold', 'id']
"""

from __future__ import annotations

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
