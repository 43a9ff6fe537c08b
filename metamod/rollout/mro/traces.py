"""MRO traces: the schema of one Reasoner / Monitor / Controller run per line (MC² appendix C.6), and its checker.

An MRO trace is a JSON object with ``"loop": "mro"``; it lives in the same ``traces.jsonl`` files as debate traces
and goes through the same writer, reader, resume, sharding and merge (:mod:`metamod.rollout.traces` dispatches
its validation here). Fields (docs/contracts.md, "MRO traces"):

* the question block, like a debate trace: ``schema_version``, ``id``, ``index`` (optional), ``task``,
  ``question``, ``gold``, ``kind``, ``choices``, ``meta``, ``simulated``;
* ``roles``: ``{"reasoner" | "monitor" | "controller": {"backend", "model", "settings"}}``;
* ``max_iterations`` (N), ``num_iterations`` (K <= N), ``status`` (``accepted`` | ``corrected`` |
  ``max_iterations``), ``final_answer`` (str or null), ``final_correct`` (0/1);
* ``tokens``: per role ``{"prompt", "completion"}``;
* ``history``: K iteration records, oldest first, each with ``iteration`` (1-based), ``eta`` (1 when the
  Reasoner's candidate is correct under the shared grader: the MRO analogue of the debate's eta) and
  - ``reasoner``: ``text``, ``answer``, ``feedback`` (what it was asked to do differently, null at first),
    ``prompt_tokens``, ``completion_tokens``, ``parse``, ``policy_update`` (null, or the MC² prompt-update record);
  - ``monitor``: ``error_found`` (bool or null), ``error_step``, ``error``, ``explanation``, ``text``,
    ``prompt_tokens``, ``completion_tokens``, ``parse``, ``policy_update``;
  - ``controller``: ``action`` (1 Accept, 2 Patch, 3 Restart), ``action_name``, ``justification``,
    ``suggestions``, ``corrected_reasoning``, ``answer``, ``text``, ``prompt_tokens``, ``completion_tokens``,
    ``parse``, ``policy_update``, and ``answer_correct`` (0/1: the accepted or patched answer graded; null for
    Restart); an LLM Controller adds ``p_stop`` (its probability of ending the loop, null when unreadable) and the
    prompted one ``p_accept`` (P(ACCEPT) at its ``ACTION`` value), both optional.

>>> validate_mro_trace(example_mro_trace("q1"))["status"]
'corrected'
>>> bad = example_mro_trace("q1"); bad["history"][0]["controller"]["action"] = 4
>>> validate_mro_trace(bad, "t.jsonl:2")
Traceback (most recent call last):
...
metamod.rollout.trace_schema.TraceError: t.jsonl:2: field 'history[0].controller.action' must be 1, 2 or 3, got 4
"""

from __future__ import annotations

from typing import Any

from metamod.rollout.trace_schema import (
    QUESTION_FIELDS,
    SCHEMA_VERSION,
    TraceError,
    check_binary,
    check_field,
    check_record,
)

ROLES = ("reasoner", "monitor", "controller")
STATUSES = ("accepted", "corrected", "max_iterations")
_STR_OR_NONE = (str, type(None))


_MRO_FIELDS: dict[str, tuple[type, ...]] = {
    "loop": (str,),
    "roles": (dict,),
    "max_iterations": (int,),
    "num_iterations": (int,),
    "status": (str,),
    "final_answer": _STR_OR_NONE,
    "final_correct": (int,),
    "tokens": (dict,),
    "history": (list,),
}
_COMMON = {"text": (str,), "prompt_tokens": (int,), "completion_tokens": (int,), "parse": (str,)}
_ROLE_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "reasoner": {**_COMMON, "answer": _STR_OR_NONE, "feedback": _STR_OR_NONE},
    "monitor": {
        **_COMMON,
        "error_found": (bool, type(None)),
        "error_step": _STR_OR_NONE,
        "error": _STR_OR_NONE,
        "explanation": (str,),
    },
    "controller": {
        **_COMMON,
        "action": (int,),
        "action_name": (str,),
        "justification": (str,),
        "suggestions": _STR_OR_NONE,
        "corrected_reasoning": _STR_OR_NONE,
        "answer": _STR_OR_NONE,
        "answer_correct": (int, type(None)),
    },
}


def validate_mro_trace(trace: Any, where: str = "trace") -> dict:
    """Check one MRO trace against the schema above; returns it unchanged when valid.

    Raises:
        TraceError: naming the location and the bad field.
    """
    check_record(trace, {**QUESTION_FIELDS, **_MRO_FIELDS}, where)
    if trace["loop"] != "mro":
        raise TraceError(f"{where}: field 'loop' must be 'mro' for an MRO trace, got {trace['loop']!r}")
    if trace["status"] not in STATUSES:
        raise TraceError(f"{where}: field 'status' must be one of {STATUSES}, got {trace['status']!r}")
    check_binary(trace["final_correct"], "final_correct", where)
    for role in ROLES:
        spec = trace["roles"].get(role)
        if not isinstance(spec, dict):
            raise TraceError(f"{where}: field 'roles.{role}' must be an object with backend, model, settings")
        for name, types in (("backend", (str,)), ("model", (str,)), ("settings", (dict,))):
            check_field(spec, name, types, f"{where}: roles.{role}")
        tokens = trace["tokens"].get(role)
        if not isinstance(tokens, dict):
            raise TraceError(f"{where}: field 'tokens.{role}' must be an object with prompt and completion")
        for name in ("prompt", "completion"):
            check_field(tokens, name, (int,), f"{where}: tokens.{role}")
    history, budget = trace["history"], trace["max_iterations"]
    if budget < 1:
        raise TraceError(f"{where}: field 'max_iterations' must be >= 1, got {budget}")
    if len(history) != trace["num_iterations"] or not 1 <= len(history) <= budget:
        raise TraceError(
            f"{where}: field 'num_iterations' is {trace['num_iterations']} and 'history' has {len(history)} records; "
            f"expected equal and in 1..max_iterations ({budget})"
        )
    for k, record in enumerate(history):
        at = f"history[{k}]"
        if not isinstance(record, dict):
            raise TraceError(f"{where}: field {at!r} must be an object")
        if record.get("iteration") != k + 1:
            raise TraceError(f"{where}: field '{at}.iteration' must be {k + 1}, got {record.get('iteration')!r}")
        check_binary(record.get("eta"), f"{at}.eta", where)
        for role, fields in _ROLE_FIELDS.items():
            output = record.get(role)
            if not isinstance(output, dict):
                raise TraceError(f"{where}: field '{at}.{role}' must be an object")
            for name, types in fields.items():
                check_field(output, name, types, f"{where}: {at}.{role}")
        action = record["controller"]["action"]
        if action not in (1, 2, 3):
            raise TraceError(f"{where}: field '{at}.controller.action' must be 1, 2 or 3, got {action!r}")
        last = k == len(history) - 1
        if not last and action != 3:
            raise TraceError(
                f"{where}: field '{at}.controller.action' is {action} but the loop went on; only the last "
                "record may Accept (1) or Patch (2)"
            )
    ending = {1: "accepted", 2: "corrected", 3: "max_iterations"}[history[-1]["controller"]["action"]]
    if trace["status"] != ending:
        raise TraceError(f"{where}: field 'status' is {trace['status']!r} but the last action says {ending!r}")
    if ending == "max_iterations" and len(history) != budget:
        raise TraceError(f"{where}: status 'max_iterations' after {len(history)} of {budget} iterations")
    return trace


def example_mro_trace(example_id: str = "q1") -> dict:
    """A small valid two-iteration MRO trace (Restart, then Patch), for docs and tests.

    >>> [r["controller"]["action"] for r in example_mro_trace()["history"]]
    [3, 2]
    """

    def record(iteration: int, answer: str, eta: int, action: int, final: str | None) -> dict:
        names = {1: "accept", 2: "patch", 3: "restart"}
        return {
            "iteration": iteration,
            "eta": eta,
            "reasoner": {
                "text": f"Step 1: 2 + 2 = {answer}\n<answer>{answer}</answer>",
                "answer": answer,
                "feedback": None if iteration == 1 else "Recheck step 1.",
                "prompt_tokens": 20,
                "completion_tokens": 12,
                "parse": "ok",
                "policy_update": None,
            },
            "monitor": {
                "error_found": True,
                "error_step": "1",
                "error": "2 + 2 is 4",
                "explanation": "The sum is off.",
                "text": "ERROR_FOUND: yes\nERROR_STEP: 1\nERROR: 2 + 2 is 4\nEXPLANATION: The sum is off.",
                "prompt_tokens": 40,
                "completion_tokens": 20,
                "parse": "tagged",
                "policy_update": None,
            },
            "controller": {
                "action": action,
                "action_name": names[action],
                "justification": "The audit found a slip.",
                "suggestions": "Recheck step 1." if action == 3 else None,
                "corrected_reasoning": "2 + 2 = 4" if action == 2 else None,
                "answer": final,
                "answer_correct": None if final is None else int(final == "4"),
                "text": f"ACTION: {names[action].upper()}",
                "prompt_tokens": 60,
                "completion_tokens": 10,
                "parse": "tagged",
                "policy_update": None,
            },
        }

    history = [record(1, "5", 0, 3, None), record(2, "3", 0, 2, "4")]
    return {
        "schema_version": SCHEMA_VERSION,
        "loop": "mro",
        "id": example_id,
        "task": "arith",
        "question": "What is 2 + 2?",
        "gold": "4",
        "kind": "math",
        "choices": None,
        "meta": {},
        "simulated": True,
        "roles": {role: {"backend": "sim", "model": f"sim-{role}", "settings": {}} for role in ROLES},
        "max_iterations": 3,
        "num_iterations": 2,
        "status": "corrected",
        "final_answer": "4",
        "final_correct": 1,
        "tokens": {
            role: {
                "prompt": sum(r[role]["prompt_tokens"] for r in history),
                "completion": sum(r[role]["completion_tokens"] for r in history),
            }
            for role in ROLES
        },
        "history": history,
    }


def is_mro_trace(trace: Any) -> bool:
    """Whether a decoded trace is an MRO trace (else a debate trace).

    >>> is_mro_trace(example_mro_trace()), is_mro_trace({"rounds": []})
    (True, False)
    """
    return isinstance(trace, dict) and trace.get("loop") == "mro"
