"""The start-of-run check of the commands whose tasks run model-written code (:func:`preflight`).

It refuses at once, before any model loads or any file is written, where the sandbox cannot run: no user
namespaces and no ``$METAMOD_SANDBOX_ALLOW_FALLBACK``, or a sandbox that does not start (docs/marco.md, "Machines
without user namespaces").
"""

from __future__ import annotations

import logging

from metamod.sandbox import probe
from metamod.sandbox.limits import FALLBACK_ENV, fallback_allowed
from metamod.sandbox.probe import SandboxUnavailableError
from metamod.sandbox.runner import run_python

logger = logging.getLogger(__name__)


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
        mode = probe.capabilities().network_mode(allow_fallback=allow)
    except SandboxUnavailableError as err:
        raise SandboxUnavailableError(
            f"{why} runs model-written code, which this machine cannot isolate: {err}"
        ) from None
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
