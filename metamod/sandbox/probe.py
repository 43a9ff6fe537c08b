"""What isolation this platform allows, found once per host process by a throwaway probe child.

:func:`capabilities` runs ``python -I -S child.py --probe`` (which tries ``unshare`` of new user + network + PID
namespaces, as the sandbox uid when the host is root, and asks the kernel for its Landlock ABI) and caches the
answer. ``run_python`` refuses to run without network namespaces unless ``allow_network_fallback`` is set (or
``$METAMOD_SANDBOX_ALLOW_FALLBACK`` is 1, which sets its default); tests monkeypatch :func:`capabilities` to play a
platform without them. :func:`preflight` is what the commands call at the start of a run whose tasks run
model-written code: it refuses at once, before any model loads, where the sandbox cannot run.

>>> caps = Capabilities(namespaces=False, landlock_abi=0, detail="unshare: Operation not permitted")
>>> caps.network_mode(allow_fallback=True)
'fallback'
>>> caps.network_mode(allow_fallback=False)
Traceback (most recent call last):
...
metamod.sandbox.probe.SandboxUnavailableError: no network isolation on this platform: unprivileged user namespaces are unavailable (unshare: Operation not permitted); pass allow_network_fallback=True to run with sockets refused by seccomp and the audit hook only (commands: set METAMOD_SANDBOX_ALLOW_FALLBACK=1; docs/marco.md)
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from metamod.errors import ConfigError
from metamod.sandbox.launcher import command, write_launcher
from metamod.sandbox.limits import FALLBACK_ENV, fallback_allowed

logger = logging.getLogger(__name__)


class SandboxUnavailableError(ConfigError):
    """The platform cannot give the isolation asked for (and no fallback was allowed)."""


@dataclass(frozen=True)
class Capabilities:
    """What the probe found: ``namespaces`` (user + network + PID namespaces can be made), ``landlock_abi``
    (0: none) and ``detail`` (why not, when not)."""

    namespaces: bool
    landlock_abi: int
    detail: str = ""

    def network_mode(self, *, allow_fallback: bool) -> str:
        """``"namespace"``, or ``"fallback"`` when allowed; else raise :class:`SandboxUnavailableError`."""
        if self.namespaces:
            return "namespace"
        if allow_fallback:
            return "fallback"
        raise SandboxUnavailableError(
            "no network isolation on this platform: unprivileged user namespaces are unavailable"
            f"{f' ({self.detail})' if self.detail else ''}; pass allow_network_fallback=True to run with sockets "
            f"refused by seccomp and the audit hook only (commands: set {FALLBACK_ENV}=1; docs/marco.md)"
        )


@functools.lru_cache(maxsize=1)
def capabilities() -> Capabilities:
    """Probe the platform once (a ~30 ms child process) and cache the answer for this host process."""
    if not sys.platform.startswith("linux"):
        return Capabilities(False, 0, f"sandbox isolation needs Linux, this is {sys.platform}")
    try:
        with tempfile.TemporaryDirectory(prefix="metamod-sandbox-probe-") as folder:
            out = _run_probe(write_launcher(folder))
    except (OSError, subprocess.TimeoutExpired) as err:
        return Capabilities(False, 0, f"probe failed: {err}")
    found = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    try:
        abi = int(found.get("landlock", "0"))
    except ValueError:
        abi = 0
    detail = found.get("reason", "") or found.get("ffi", "")
    if out.returncode != 0:
        detail = f"probe exited with {out.returncode}: {out.stderr.strip()[-200:]}"
    return Capabilities(found.get("namespaces") == "1", abi, detail)


def _run_probe(launcher: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(launcher, "--probe"),
        capture_output=True,
        text=True,
        env={},
        timeout=30,
        close_fds=True,
        start_new_session=True,
    )


_PREFLIGHT: dict[bool, str] = {}


def preflight(why: str) -> str:
    """Check, once per process, that model-written code can run here: with namespaces, or in the fallback when
    ``$METAMOD_SANDBOX_ALLOW_FALLBACK`` allows it; then run one tiny program through the whole sandbox, so that a
    platform problem fails now, in one line, not hours into a run. Returns the ``network`` mode.

    Args:
        why: what needs the sandbox, for the message (e.g. ``"task 'cruxeval_o'"``).

    Raises:
        SandboxUnavailableError: no namespaces and no fallback allowed, or the test program did not run.
    """
    allow = fallback_allowed()
    if allow in _PREFLIGHT:
        return _PREFLIGHT[allow]
    try:
        mode = capabilities().network_mode(allow_fallback=allow)
    except SandboxUnavailableError as err:
        raise SandboxUnavailableError(
            f"{why} runs model-written code, which this machine cannot isolate: {err}"
        ) from None
    from metamod.sandbox.runner import run_python

    result = run_python("print(6 * 7)", allow_network_fallback=allow, timeout_s=30)
    if not result.ok or result.stdout != "42\n":
        raise SandboxUnavailableError(
            f"{why} runs model-written code, but a test program failed in the sandbox: {result.summary()} "
            f"(isolation: {result.isolation}); see docs/marco.md, 'Machines without user namespaces'"
        )
    if mode == "fallback":
        logger.warning(
            "sandbox: no user namespaces here; %s runs model-written code with sockets and fork refused by seccomp "
            "and the audit hook only, no process limit (%s=1)",
            why,
            FALLBACK_ENV,
        )
    _PREFLIGHT[allow] = mode
    return mode
