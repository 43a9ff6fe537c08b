"""The sandboxed Python interpreter behind every execution of model-written code.

Each execution is a FRESH interpreter (``python -I -S -B``, never a fork of the host) in its own session, with an
empty environment and a throwaway work dir (removed afterwards, even on timeout). Inside, before the code runs, a
small launcher (:mod:`metamod.sandbox.child.launch`) makes the work dir a size-capped tmpfs in a private mount namespace
(the disk quota), enters new user + network + PID namespaces (no network at all; every process the code starts
dies with it), makes uid 65534 its real, effective and saved uid when the host is root, drops capabilities, sets
``no_new_privs`` and a seccomp filter (``socket()``, io_uring, ptrace, mounts, set*uid, ... refused in the kernel),
applies Landlock (writes only in the work dir, reads only from the Python install and system libraries, no exec)
and the rlimits (address space, CPU, processes, file size, open files, no core dumps); the code then runs in a
separate worker process with an audit hook that refuses sockets, ctypes, ``os.system`` / ``subprocess`` / ``exec``
and file changes outside the work dir, while the launcher alone holds the host's result pipe and accepts one
answer per call it asked for (docs/contracts.md, "Sandbox"). The host kills the whole process group at the
wall-clock limit or when stdout / stderr exceed their cap. Where the kernel lacks a piece, the report says so (``SandboxResult.isolation``); without network
namespaces it refuses to run unless ``allow_network_fallback=True``.

Public API (the contract every task and method uses):

- :func:`run_python` (code, stdin, limits) -> :class:`SandboxResult`
- :func:`run_function` (code, entry, inputs, expected) -> :class:`FunctionRun` of :class:`CallResult`
- :func:`run_many` (jobs, workers) -> results in order, in parallel over the cores
- :class:`SandboxLimits` (every limit and isolation option, with help text), :func:`capabilities`,
  :class:`SandboxUnavailableError`, :func:`preflight` (the start-of-run check of the commands)

>>> r = run_python("print(sum(range(10)))")
>>> r.ok, r.stdout, r.killed_reason
(True, '45\\n', None)
>>> run_function("def f(a, b):\\n    return a + b", "f", ["1, 2", "'x', 'y'"], expected=["3", "'xy'"]).all_passed
True
"""

from metamod.sandbox.functions import decode_value, run_function
from metamod.sandbox.limits import SandboxLimits, make_limits
from metamod.sandbox.pool import run_many
from metamod.sandbox.probe import Capabilities, SandboxUnavailableError, capabilities
from metamod.sandbox.readiness import preflight
from metamod.sandbox.results import CallResult, FunctionRun, SandboxResult
from metamod.sandbox.runner import run_python

__all__ = [
    "CallResult",
    "Capabilities",
    "FunctionRun",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "capabilities",
    "decode_value",
    "make_limits",
    "preflight",
    "run_function",
    "run_many",
    "run_python",
]
