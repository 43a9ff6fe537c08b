"""The sandboxed Python interpreter behind every execution of model-written code.

Each execution is a FRESH interpreter (``python -I -S -B``, never a fork of the host) in its own session, with an
empty environment and a throwaway work dir (removed afterwards, even on timeout). Inside, before the code runs, a
small launcher (:mod:`metamod.sandbox.child`) enters new user + network + PID namespaces (no network at all; every
process the code starts dies with it), makes uid 65534 its real uid when the host is root, drops capabilities,
sets ``no_new_privs`` and a seccomp filter (``socket()``, io_uring, ptrace, mounts, ... refused in the kernel),
applies Landlock (writes only in the work dir, reads only from the Python install and system libraries, no exec)
and the rlimits (address space, CPU, processes, file size, open files, no core dumps), and installs an audit hook
that refuses sockets, ctypes, ``os.system`` / ``subprocess`` / ``exec`` and file changes outside the work dir. The host kills the whole process group at the wall-clock limit or when stdout / stderr
exceed their cap. Where the kernel lacks a piece, the report says so (``SandboxResult.isolation``); without network
namespaces it refuses to run unless ``allow_network_fallback=True``.

Public API (the contract every task and method uses):

- :func:`run_python` (code, stdin, limits) -> :class:`SandboxResult`
- :func:`run_function` (code, entry, inputs, expected) -> :class:`FunctionRun` of :class:`CallResult`
- :func:`run_many` (jobs, workers) -> results in order, in parallel over the cores
- :class:`SandboxLimits` (every limit and isolation option, with help text), :func:`capabilities`,
  :class:`SandboxUnavailableError`

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
    "run_function",
    "run_many",
    "run_python",
]
