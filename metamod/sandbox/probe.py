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
from metamod.sandbox.limits import FALLBACK_ENV

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
