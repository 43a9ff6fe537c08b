"""``run_function``: call one function of model-written code on many inputs, in ONE fresh sandboxed process.

The code is exec'd once, then ``entry(*args)`` is called for each input, where an input is an argument list as
Python literal source, CRUXEval style: ``"[1, 2], 3"`` means ``entry([1, 2], 3)``. The child parses it with a
``literal_eval`` of ``"(" + source + ",)"`` (a non-literal input is that call's error, e.g. ``"__import__('os')"``),
catches each call's exception, and sends every return value back over the result pipe in an exact tagged JSON form
(:func:`decode_value`). The HOST then decodes the value and compares it with ``ast.literal_eval(expected)`` using
``==``: the same comparison as doing it in the child, but the expected outputs (hidden tests) never enter the
sandbox, so the code can neither read them nor fake a pass (an object whose ``__eq__`` always says True does not
survive the encoding). Nothing is ever ``eval``'d on the host.

>>> run = run_function("def f(xs, k):\\n    return [x * k for x in xs]", "f", ["[1, 2], 3", "[], 0", "'ab', 2"],
...                    expected=["[3, 6]", "[]", "['abab']"])
>>> [(c.value_repr, c.passed) for c in run.calls]
[('[3, 6]', True), ('[]', True), ("['aa', 'bb']", False)]
>>> [c.error for c in run_function("def f(x):\\n    return 1 / x", "f", ["0", "os.sep"]).calls]
['ZeroDivisionError: division by zero', 'input is not a Python literal: ValueError: malformed node or string: Attribute is not a literal']
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from metamod.errors import ConfigError
from metamod.sandbox.limits import SandboxLimits, make_limits
from metamod.sandbox.results import CallResult, FunctionRun
from metamod.sandbox.runner import execute

_NOT_COMPARABLE = object()


def run_function(
    code: str,
    entry: str,
    inputs: Sequence[str],
    *,
    expected: Sequence[str] | None = None,
    limits: SandboxLimits | None = None,
    **overrides: Any,
) -> FunctionRun:
    """Exec ``code`` once in a fresh sandbox, then call ``entry`` on each input.

    Args:
        code: Python source defining ``entry``.
        entry: the name of the function to call.
        inputs: one argument-list literal per call (``"[1, 2], 3"``; ``""`` calls it with no arguments).
        expected: one output literal per input (None: only run, ``passed`` stays None).
        limits: the :class:`SandboxLimits` (``timeout_s`` bounds the whole process, ``call_timeout_s`` each call).
        **overrides: fields of SandboxLimits to change, e.g. ``timeout_s=2, call_timeout_s=0.5``.

    Returns:
        A :class:`FunctionRun`. A call the process never finished (wall-clock timeout, crash, output cap) has
        ``ok=False`` and ``error`` = ``"timeout"`` (or the process's reason); when the code itself fails before
        the calls (a SyntaxError, ``entry`` undefined), every call carries that error.

    >>> run = run_function("import time\\ndef f(s):\\n    time.sleep(s)\\n    return s", "f", ["0", "10", "0"],
    ...                    timeout_s=1)
    >>> [(c.ok, c.error) for c in run.calls], run.result.killed_reason
    ([(True, None), (False, 'timeout'), (False, 'timeout')], 'timeout')
    """
    if not isinstance(entry, str) or not entry.isidentifier():
        raise ConfigError(f"entry must be a function name (an identifier), got {entry!r}")
    inputs = list(inputs)
    for i, source in enumerate(inputs):
        if not isinstance(source, str):
            raise ConfigError(f"inputs[{i}] must be a str of argument literals, got {type(source).__name__}")
    wanted = None if expected is None else _parse_expected(expected, len(inputs))
    limits = make_limits(limits, **overrides)
    result, records = execute("function", code, limits, extra={"entry": entry, "inputs": inputs})
    found: dict[int, dict[str, Any]] = {}
    load_error = tampered = None
    for record in records:
        kind = record.get("k")
        if kind == "load" and load_error is None and not found:
            load_error = f"code failed before the calls: {record.get('err')}"
        elif kind == "call" and isinstance(record.get("i"), int) and 0 <= record["i"] < len(inputs):
            found.setdefault(record["i"], record)
        elif kind == "tamper" and tampered is None:  # this call and the later ones fail (see sandbox.child.launch)
            first = record.get("i") if isinstance(record.get("i"), int) else 0
            found = {i: r for i, r in found.items() if i < first}
            tampered = str(record.get("err"))[:300]
    if tampered is not None:
        missing = tampered
    elif load_error is None:
        missing = "timeout" if result.timed_out else f"process ended before this call: {result.error}"
    else:
        missing = load_error
    compare = wanted is not None
    calls = [_call(found.get(i), wanted[i] if compare else None, compare, missing, limits) for i in range(len(inputs))]
    return FunctionRun(result=result, calls=calls)


def decode_value(tagged: Any) -> Any:
    """The value a child encoded: JSON natives, lists, and one-key tag objects for the other literal types.

    >>> decode_value({"tuple": [1, {"set": ["a"]}, {"dict": [[{"tuple": []}, {"bytes": "6869"}]]}]})
    (1, {'a'}, {(): b'hi'})
    >>> decode_value({"complex": [0.0, 1.5]}), decode_value(float("nan")) != decode_value(float("nan"))
    (1.5j, True)
    """
    if isinstance(tagged, list):
        return [decode_value(v) for v in tagged]
    if not isinstance(tagged, dict):
        return tagged
    if len(tagged) != 1:
        raise ValueError(f"a tagged value has exactly one key, got {sorted(tagged)}")
    ((tag, body),) = tagged.items()
    if tag == "tuple":
        return tuple(decode_value(v) for v in body)
    if tag == "set":
        return {decode_value(v) for v in body}
    if tag == "frozenset":
        return frozenset(decode_value(v) for v in body)
    if tag == "dict":
        return {decode_value(k): decode_value(v) for k, v in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "bytearray":
        return bytearray.fromhex(body)
    if tag == "complex":
        return complex(body[0], body[1])
    if tag == "ellipsis":
        return ...
    raise ValueError(f"unknown value tag {tag!r}")


def _parse_expected(expected: Sequence[str], n: int) -> list[Any]:
    expected = list(expected)
    if len(expected) != n:
        raise ConfigError(f"expected has {len(expected)} outputs for {n} inputs; give one output literal per input")
    values = []
    for i, source in enumerate(expected):
        try:
            values.append(ast.literal_eval(source))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as err:
            raise ConfigError(
                f"expected[{i}] is not a Python literal ({type(err).__name__}): {str(source)[:80]!r}"
            ) from None
    return values


def _call(record: dict[str, Any] | None, wanted: Any, compare: bool, missing: str, limits: SandboxLimits) -> CallResult:
    if record is None:
        return CallResult(ok=False, value_repr=None, passed=False if compare else None, error=missing)
    ok = record.get("ok") is True
    error = record.get("err")
    error = str(error)[:300] if error is not None else None
    value_repr = record.get("repr") if ok else None
    value_repr = str(value_repr)[: limits.max_repr_chars] if value_repr is not None else None
    value = _NOT_COMPARABLE
    if ok and "v" in record:
        try:
            value = decode_value(record["v"])
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):  # a malformed (forged) record
            value = _NOT_COMPARABLE
    if value is not _NOT_COMPARABLE:  # what was graded, not what the object's own __repr__ claims
        value_repr = _cut(_repr(value), limits.max_repr_chars)
    passed = None
    if compare:
        passed = ok and value is not _NOT_COMPARABLE and _equal(value, wanted)
        if ok and value is _NOT_COMPARABLE and error is None:
            error = f"return value not comparable: {str(record.get('why', 'malformed record'))[:200]}"
    return CallResult(
        ok=ok,
        value_repr=value_repr,
        passed=passed,
        error=error,
        value=None if value is _NOT_COMPARABLE else value,
    )


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except (RecursionError, MemoryError, ValueError):  # e.g. an int past the str-conversion limit
        return f"<{type(value).__name__}>"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _equal(value: Any, wanted: Any) -> bool:
    try:
        return bool(value == wanted)
    except (RecursionError, MemoryError):
        return False
