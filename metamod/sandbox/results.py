"""What a sandboxed execution returns: :class:`SandboxResult`, and for ``run_function`` :class:`CallResult` /
:class:`FunctionRun`.

>>> r = SandboxResult(ok=False, stdout="", stderr="", exit_code=-9, timed_out=True, killed_reason="timeout",
...                   wall_s=1.0, cpu_s=0.9, max_rss_mb=9.5, error="timeout: exceeded 1.0 s wall clock")
>>> r.summary()
'killed (timeout): timeout: exceeded 1.0 s wall clock'
>>> run = FunctionRun(result=r, calls=[CallResult(ok=True, value_repr="3", passed=True, error=None),
...                                    CallResult(ok=False, value_repr=None, passed=False, error="timeout")])
>>> run.n_passed, run.all_passed
(1, False)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SandboxResult:
    """The outcome of one sandboxed process.

    ``ok`` is True iff the process exited with status 0 and was not killed. ``stdout`` / ``stderr`` are decoded as
    UTF-8 (bad bytes replaced) and cut at ``max_output_bytes`` each; ``truncated`` says whether either was cut.
    ``exit_code`` is the exit status, or ``-signal`` when a signal ended the process. ``killed_reason`` is None, or
    ``"timeout"`` (wall clock), ``"cpu"`` (RLIMIT_CPU), ``"memory"`` (MemoryError under RLIMIT_AS),
    ``"file_size"`` (RLIMIT_FSIZE), ``"disk"`` (the work dir's tmpfs is full: ``max_disk_mb``), ``"output"``
    (output cap), ``"tamper"`` (the code wrote result records itself: see :mod:`metamod.sandbox.child.launch`) or
    ``"signal:<NAME>"`` (any other fatal signal, e.g. a C stack overflow). ``error`` is a short one-line reason whenever ``ok`` is False (the exception's
    ``"Type: message"`` for an uncaught exception). ``cpu_s`` and ``max_rss_mb`` come from ``wait4`` (the process
    and the children it waited for). ``isolation`` says which protections were active, e.g.
    ``{"network": "namespace", "files": "landlock abi 7 (...)", ...}``.
    """

    ok: bool
    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    killed_reason: str | None
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    isolation: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    truncated: bool = False

    def summary(self) -> str:
        """One line: ``ok``, or how the run failed."""
        if self.ok:
            return "ok"
        if self.killed_reason:
            return f"killed ({self.killed_reason}): {self.error}"
        return f"failed: {self.error}"


@dataclass
class CallResult:
    """One call of ``run_function``: ``ok`` (returned without raising), ``value_repr`` (the return value's repr, cut
    to ``max_repr_chars``), ``passed`` (the value == the expected literal; None when no expected outputs were
    given) and ``error`` (a short ``"TypeError: ..."``, ``"timeout"``, ... or None)."""

    ok: bool
    value_repr: str | None
    passed: bool | None
    error: str | None
    value: Any = field(default=None, repr=False)


@dataclass
class FunctionRun:
    """``run_function``'s outcome: ``result`` (the SandboxResult of the one process that ran every call) and
    ``calls`` (one CallResult per input, in input order)."""

    result: SandboxResult
    calls: list[CallResult]

    @property
    def n_passed(self) -> int:
        """Calls whose value matched the expected output."""
        return sum(1 for c in self.calls if c.passed)

    @property
    def all_passed(self) -> bool:
        """True iff every call passed (False when there are no calls or no expected outputs)."""
        return bool(self.calls) and all(c.passed for c in self.calls)
