"""The limits and isolation options of one sandboxed execution (:class:`SandboxLimits`).

Every field carries its help text; :func:`make_limits` builds limits from keyword overrides (what ``run_python`` and
``run_function`` accept) and names the valid fields when one is misspelt.

>>> make_limits(timeout_s=2).timeout_s
2.0
>>> make_limits(timeout_s=2).cpu_seconds()  # cpu_s unset: the wall clock + 1 s bounds CPU time too
3
>>> make_limits(memory_mb=8)
Traceback (most recent call last):
...
metamod.errors.ConfigError: memory_mb must be >= 32 (the interpreter alone needs ~20 MB of address space), got 8
>>> make_limits(timeout=1)
Traceback (most recent call last):
...
metamod.errors.ConfigError: unknown sandbox option 'timeout'; valid options: allow_network_fallback, call_timeout_s, cpu_s, hide_host_files, landlock, max_disk_mb, max_file_mb, max_open_files, max_output_bytes, max_processes, max_repr_chars, max_result_bytes, max_value_chars, memory_mb, private_mounts, read_paths, sandbox_uid, seccomp, timeout_s, work_parent
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from metamod.errors import ConfigError

FALLBACK_ENV = "METAMOD_SANDBOX_ALLOW_FALLBACK"


def fallback_allowed() -> bool:
    """Whether ``$METAMOD_SANDBOX_ALLOW_FALLBACK`` allows running without namespaces (``1`` / ``true`` / ``yes``)."""
    return os.environ.get(FALLBACK_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed process and the isolation it must have (see the module docstring)."""

    timeout_s: float = field(
        default=5.0, metadata={"help": "Wall-clock limit; the whole process group is killed when it is reached."}
    )
    memory_mb: int = field(default=512, metadata={"help": "Address-space limit (RLIMIT_AS) of each process, in MB."})
    cpu_s: float | None = field(
        default=None,
        metadata={"help": "CPU-time limit (RLIMIT_CPU, whole seconds, rounded up); None: ceil(timeout_s) + 1."},
    )
    max_processes: int = field(
        default=16,
        metadata={
            "help": "Processes + threads the code may have at once, its main process included (RLIMIT_NPROC in the "
            "sandbox's own user namespace; without namespaces the audit hook refuses fork instead)."
        },
    )
    max_file_mb: int = field(default=16, metadata={"help": "Largest file the code may write (RLIMIT_FSIZE), in MB."})
    max_disk_mb: int = field(
        default=64,
        metadata={
            "help": "Everything the code may write, in MB: the work dir is a tmpfs of this size in the sandbox's own "
            "mount namespace, the only writable place (a full disk is killed_reason 'disk'; counts towards RAM). "
            "Where no mount namespace can be made, isolation['disk'] says there is no total cap."
        },
    )
    max_open_files: int = field(default=256, metadata={"help": "Open file descriptors per process (RLIMIT_NOFILE)."})
    max_output_bytes: int = field(
        default=65536,
        metadata={
            "help": "Cap on stdout and on stderr (each). Output beyond it kills the process: killed_reason "
            "'output', the kept text ends with a truncation marker."
        },
    )
    max_result_bytes: int = field(
        default=8 << 20, metadata={"help": "Cap on the result records run_function's calls send back (bytes)."}
    )
    max_repr_chars: int = field(default=500, metadata={"help": "run_function: value_repr is cut to this length."})
    max_value_chars: int = field(
        default=1 << 20,
        metadata={"help": "run_function: a return value whose encoding is longer is not compared (passed=False)."},
    )
    call_timeout_s: float | None = field(
        default=None,
        metadata={"help": "run_function: limit per call (SIGALRM in the child); None: only the wall clock."},
    )
    allow_network_fallback: bool = field(
        default_factory=fallback_allowed,
        metadata={
            "help": "Run even where no network namespace can be made (unprivileged user namespaces disabled): "
            "sockets are then refused by seccomp and the audit hook only, and isolation['network'] says so. "
            "Default: whether $METAMOD_SANDBOX_ALLOW_FALLBACK is 1 (how the commands get it)."
        },
    )
    hide_host_files: bool = field(
        default=True,
        metadata={
            "help": "Reads allowed only from the Python install, system libraries, a few devices, read_paths and "
            "the work dir (Landlock, else the audit hook). False: the code may read any file its uid may (on a root "
            "host: what uid 65534 may read; a 0700 folder such as /root stays closed)."
        },
    )
    read_paths: tuple[str, ...] = field(
        default=(), metadata={"help": "Extra paths the code may read (e.g. a data folder) when hide_host_files."}
    )
    landlock: bool = field(
        default=True,
        metadata={
            "help": "Use Landlock where the kernel has it. False: the audit hook alone guards the files (weaker; "
            "for testing that fallback)."
        },
    )
    seccomp: bool = field(
        default=True,
        metadata={
            "help": "Install a seccomp filter (x86_64) that refuses socket(), io_uring, ptrace, namespace and mount "
            "calls, bpf, ... in the kernel, whatever the Python code does. False: for testing the fallback."
        },
    )
    private_mounts: bool = field(
        default=True,
        metadata={
            "help": "Give the sandbox its own mount namespace: the work dir a tmpfs of max_disk_mb, a root host's "
            "Python install bound in so that no uid 0 remains. False: no disk quota, and a root host keeps "
            "effective uid 0 without capabilities (what runs where no mount namespace can be made; for testing "
            "that fallback)."
        },
    )
    sandbox_uid: int | None = field(
        default=65534,
        metadata={
            "help": "When the host runs as root: the real, effective and saved uid (and gid) of the sandbox, so no "
            "uid 0 remains (root is exempt from RLIMIT_NPROC); a Python install it could not read (under /root) "
            "is bound read-only into its private mount namespace. Where no mount namespace can be made, only the "
            "real uid changes (set*uid stays refused by seccomp). None: stay root."
        },
    )
    work_parent: str | None = field(
        default=None,
        metadata={"help": "Folder in which the throwaway work dirs are made (None: the system temp dir)."},
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout_s", float(self.timeout_s))
        object.__setattr__(self, "read_paths", tuple(self.read_paths))
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.memory_mb < 32:
            raise ConfigError(
                f"memory_mb must be >= 32 (the interpreter alone needs ~20 MB of address space), got {self.memory_mb}"
            )
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ConfigError(f"cpu_s must be > 0 seconds or None, got {self.cpu_s}")
        if self.call_timeout_s is not None and not self.call_timeout_s > 0:
            raise ConfigError(f"call_timeout_s must be > 0 seconds or None, got {self.call_timeout_s}")
        for name in (
            "max_processes",
            "max_file_mb",
            "max_disk_mb",
            "max_open_files",
            "max_output_bytes",
            "max_result_bytes",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_open_files < 16:
            raise ConfigError(f"max_open_files must be >= 16 (the interpreter needs a few), got {self.max_open_files}")
        if self.max_repr_chars < 16 or self.max_value_chars < 16:
            raise ConfigError(
                f"max_repr_chars and max_value_chars must be >= 16, got {self.max_repr_chars}, {self.max_value_chars}"
            )

    def cpu_seconds(self) -> int:
        """The RLIMIT_CPU soft limit in whole seconds."""
        return math.ceil(self.cpu_s) if self.cpu_s is not None else math.ceil(self.timeout_s) + 1


OPTION_NAMES = tuple(sorted(f.name for f in fields(SandboxLimits)))


def make_limits(limits: SandboxLimits | None = None, **overrides: Any) -> SandboxLimits:
    """``limits`` (default: :class:`SandboxLimits()`) with ``overrides`` applied; unknown names are a ConfigError.

    Args:
        limits: the starting limits.
        **overrides: field values to change, e.g. ``timeout_s=2``.

    Returns:
        A checked, frozen :class:`SandboxLimits`.

    >>> make_limits(make_limits(memory_mb=256), timeout_s=1).memory_mb
    256
    """
    for name in overrides:
        if name not in OPTION_NAMES:
            raise ConfigError(f"unknown sandbox option {name!r}; valid options: {', '.join(OPTION_NAMES)}")
    base = limits if limits is not None else SandboxLimits()
    return replace(base, **overrides) if overrides else base
