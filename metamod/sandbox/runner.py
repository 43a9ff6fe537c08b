"""Host side of one sandboxed execution: make the work dir, start the launcher, watch it, collect, clean up.

:func:`run_python` runs a whole program; :func:`execute` is the engine it shares with ``run_function``. The child is
``python -I -S -B .launcher.pyc <job>`` (the precompiled launcher) (a fresh interpreter, never a fork of this process's state), started with
``close_fds``, ``start_new_session`` (so its whole process group can be killed), an environment of four variables
and the throwaway work dir as its current directory; the launcher then isolates itself (see
:mod:`metamod.sandbox.child.launch`). One ``epoll`` loop reads stdout, stderr and the result pipe with caps and waits on a
pidfd for the exit, so a timeout or an output flood is noticed at once; afterwards the process group is killed
(nothing the code started survives), the child is reaped with ``wait4`` (CPU time, peak RSS) and the work dir is
removed, whatever happened. A host killed with SIGKILL cannot remove its work dirs: their names carry the host's
pid and start time, and the first run of the next host process in the same folder removes those of dead hosts
(:func:`remove_stale_workdirs`).

>>> r = run_python("print(input().upper())", stdin="hi")  # doctest: +SKIP
>>> r.ok, r.stdout, r.isolation["network"]  # doctest: +SKIP
(True, 'HI\\n', 'namespace')
"""

from __future__ import annotations

import json
import logging
import marshal
import os
import secrets
import select
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from typing import Any

from metamod.errors import ConfigError
from metamod.sandbox import probe
from metamod.sandbox.launcher import command, write_launcher
from metamod.sandbox.limits import SandboxLimits, make_limits
from metamod.sandbox.results import SandboxResult

logger = logging.getLogger(__name__)

DRAIN_GRACE_S = 1.0  # after the exit (or a kill): how long to wait for the pipes' last bytes
KILL_WAIT_S = 5.0  # after a kill: how long to wait for the exit before giving up on the pidfd
PID1_WAIT_S = 1.0  # after a kill: how long to wait for the PID namespace's init (the code's process) to be gone
HOST_ISOLATION = {
    "process": "fresh interpreter (python -I -S -B) in its own session",
    "env": "empty (PATH, LANG, HOME, TMPDIR only)",
    "workdir": "temporary, removed afterwards",
}


def run_python(code: str, *, stdin: str | None = None, limits: SandboxLimits | None = None, **overrides: Any):
    """Run ``code`` as a program in a fresh sandboxed interpreter.

    Args:
        code: Python source, run as ``main.py`` of the work dir (``__name__ == "__main__"``).
        stdin: text given on standard input (None: ``/dev/null``).
        limits: the :class:`SandboxLimits` (default: ``SandboxLimits()``).
        **overrides: fields of SandboxLimits to change, e.g. ``timeout_s=2, memory_mb=256``.

    Returns:
        A :class:`SandboxResult`.

    Raises:
        SandboxUnavailableError: no network namespace can be made here and ``allow_network_fallback`` is False.

    >>> r = run_python("import sys; print(6 * 7); sys.exit(3)")
    >>> r.stdout, r.exit_code, r.ok, r.error
    ('42\\n', 3, False, 'exit code 3')
    >>> run_python("1 / 0").error
    'ZeroDivisionError: division by zero'
    """
    result, _ = execute("python", code, make_limits(limits, **overrides), stdin=stdin)
    return result


def execute(
    mode: str, code: str, limits: SandboxLimits, *, stdin: str | None = None, extra: dict[str, Any] | None = None
) -> tuple[SandboxResult, list[dict[str, Any]]]:
    """Run the launcher in ``mode`` ("python" or "function") and return the result and its result records (the
    JSON lines that carried this run's nonce, in order; the ``setup`` record already folded into ``isolation``)."""
    if not isinstance(code, str):
        raise ConfigError(f"code must be a str of Python source, got {type(code).__name__}")
    if stdin is not None and not isinstance(stdin, str):
        raise ConfigError(f"stdin must be a str or None, got {type(stdin).__name__}")
    network = probe.capabilities().network_mode(allow_fallback=limits.allow_network_fallback)
    remove_stale_workdirs(limits.work_parent)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix=_workdir_prefix(), dir=limits.work_parent))
    read_fd = write_fd = None
    stdin_file = None
    proc = None
    try:
        nonce = secrets.token_hex(16)
        read_fd, write_fd = os.pipe()
        job = {
            "mode": mode,
            "code": code,
            "workdir": workdir,
            "network": network,
            "nonce": nonce,
            "result_fd": write_fd,
            "max_result_bytes": limits.max_result_bytes,
            "max_disk_mb": limits.max_disk_mb,
            "private_mounts": limits.private_mounts,
            "memory_mb": limits.memory_mb,
            "cpu_s": limits.cpu_seconds(),
            "max_processes": limits.max_processes,
            "max_file_mb": limits.max_file_mb,
            "max_open_files": limits.max_open_files,
            "hide_host_files": limits.hide_host_files,
            "landlock": limits.landlock,
            "seccomp": limits.seccomp,
            "read_paths": [os.fspath(p) for p in limits.read_paths],
            "sandbox_uid": limits.sandbox_uid,
            "call_timeout_s": limits.call_timeout_s,
            "max_repr_chars": limits.max_repr_chars,
            "max_value_chars": limits.max_value_chars,
            **(extra or {}),
        }
        launcher, job_path = write_launcher(workdir), os.path.join(workdir, ".job")
        with open(job_path, "wb") as f:
            f.write(marshal.dumps(job))
        if stdin is not None:
            stdin_path = os.path.join(workdir, ".stdin")
            with open(stdin_path, "wb") as f:
                f.write(stdin.encode("utf-8", "surrogatepass"))
            stdin_file = open(stdin_path, "rb")  # noqa: SIM115 (closed in finally)
            os.unlink(stdin_path)
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        start = time.perf_counter()
        proc = subprocess.Popen(
            command(launcher, job_path),
            stdin=stdin_file if stdin_file is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
            close_fds=True,
            start_new_session=True,
            env=env,
            cwd=workdir,
        )
        os.close(write_fd)
        write_fd = None
        outputs, host_kill = _watch(proc, read_fd, limits, start)
        _kill_group(proc.pid)  # anything the code left in its process group (its zombie leader keeps the id)
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        result, records = _assemble(proc.returncode, outputs, host_kill, usage, wall_s, limits, nonce)
        pid1 = next((r.get("pid") for r in records if r.get("k") == "pid1"), None)
        if isinstance(pid1, int) and (host_kill is not None or proc.returncode < 0):
            _await_exit(pid1, PID1_WAIT_S)  # its death takes every process of the namespace with it
        return result, [r for r in records if r.get("k") != "pid1"]
    finally:
        if proc is not None:
            if proc.returncode is None:  # an exception in the host: never leave the child running
                _kill_group(proc.pid)
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        for fd in (read_fd, write_fd):
            if fd is not None:
                os.close(fd)
        if stdin_file is not None:
            stdin_file.close()
        _remove_tree(workdir)


def _watch(proc: subprocess.Popen, read_fd: int, limits: SandboxLimits, start: float):
    """Read the three pipes (capped) until the process has exited and the pipes are drained; kill it on timeout or
    overflow. Returns ``({fd: (bytes, overflowed)}, why_the_host_killed_it or None)``."""
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limits.max_output_bytes, err_fd: limits.max_output_bytes, read_fd: limits.max_result_bytes}
    bufs = {fd: bytearray() for fd in caps}
    overflow = dict.fromkeys(caps, False)
    host_kill = None
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel / not Linux): poll the exit every 10 ms
        pidfd = None
    sel = selectors.DefaultSelector()
    try:
        for fd in caps:
            sel.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        deadline = start + limits.timeout_s
        exited = False
        while True:
            now = time.perf_counter()
            if exited and (len(sel.get_map()) == 0 or now >= deadline):
                break
            if not exited and now >= deadline:
                if host_kill is None:  # the wall clock
                    host_kill = "timeout"
                    _kill(proc.pid)
                    deadline = now + KILL_WAIT_S
                else:  # killed but no exit seen: stop watching (wait4 below still reaps it)
                    break
            wait = deadline - now if pidfd is not None else min(deadline - now, 0.01)
            for key, _ in sel.select(max(wait, 0.0)):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(pidfd)
                    exited, deadline = True, time.perf_counter() + DRAIN_GRACE_S
                    _kill_group(proc.pid)  # stragglers could hold the pipes open
                    continue
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    continue
                room = caps[fd] - len(bufs[fd])
                bufs[fd] += data[:room]
                if len(data) > room and not overflow[fd]:
                    overflow[fd] = True
                    if host_kill is None and not exited:
                        host_kill = "output"
                        _kill(proc.pid)
                        deadline = time.perf_counter() + KILL_WAIT_S
            if pidfd is None and not exited and _has_exited(proc.pid):
                exited, deadline = True, time.perf_counter() + DRAIN_GRACE_S
                _kill_group(proc.pid)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return {fd: (bytes(bufs[fd]), overflow[fd]) for fd in caps}, host_kill


def _assemble(exit_code, outputs, host_kill, usage, wall_s, limits: SandboxLimits, nonce: str):
    out_fd, err_fd, res_fd = outputs  # insertion order: stdout, stderr, results
    (out, out_over), (err, err_over), (res, res_over) = outputs[out_fd], outputs[err_fd], outputs[res_fd]
    records = _records(res, nonce)
    if records and records[0].get("k") == "refused":
        raise probe.SandboxUnavailableError(f"{records[0].get('err')}; pass allow_network_fallback=True to run anyway")
    setup = next((r for r in records if r.get("k") == "setup"), None)
    if isinstance(setup, dict) and isinstance(setup.get("iso"), dict):
        isolation = {**HOST_ISOLATION, **{str(k): str(v) for k, v in setup["iso"].items()}, "audit_hook": "on"}
    else:
        isolation = {**HOST_ISOLATION, "setup": "not reported (the launcher failed before isolating)"}
    records = [r for r in records if r is not setup]
    cpu_s = usage.ru_utime + usage.ru_stime
    reason, error = host_kill, None
    end = next((r for r in records if r.get("k") in ("exit", "load", "tamper")), None)
    if host_kill == "timeout":
        error = f"timeout: exceeded {limits.timeout_s:g} s wall clock"
    elif host_kill == "output":
        which = "stdout" if out_over else "stderr" if err_over else "the result pipe"
        cap = limits.max_result_bytes if which == "the result pipe" else limits.max_output_bytes
        error = f"output: more than {cap} bytes on {which}"
    elif exit_code is not None and exit_code < 0:
        sig = -exit_code
        name = _signal_name(sig)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_seconds() - 0.05):
            reason, error = "cpu", f"cpu: exceeded {limits.cpu_seconds()} s of CPU time"
        else:
            reason, error = f"signal:{name}", f"killed by {name}"
    elif end is not None and exit_code != 0:
        error = str(end.get("err"))[:300]
        if end.get("k") == "tamper":
            reason = "tamper"
        elif end.get("reason") in ("memory", "file_size", "disk"):
            reason = end["reason"]
    elif exit_code != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err.strip() else []
        error = f"exit code {exit_code}" + (f": {last[0][:200]}" if last else "")
    if res_over and reason is None:
        reason, error = "output", f"output: more than {limits.max_result_bytes} bytes on the result pipe"
    result = SandboxResult(
        ok=exit_code == 0 and reason is None,
        stdout=_text(out, out_over, limits.max_output_bytes),
        stderr=_text(err, err_over, limits.max_output_bytes),
        exit_code=exit_code,
        timed_out=host_kill == "timeout",
        killed_reason=reason,
        wall_s=wall_s,
        cpu_s=cpu_s,
        max_rss_mb=usage.ru_maxrss / 1024.0,
        isolation=isolation,
        error=error,
        truncated=out_over or err_over,
    )
    return result, records


def _records(data: bytes, nonce: str) -> list[dict[str, Any]]:
    """The JSON records on the lines of ``data`` that start with ``nonce``; anything else is ignored."""
    prefix = (nonce + " ").encode()
    records = []
    for line in data.split(b"\n"):
        if not line.startswith(prefix):
            continue
        try:
            record = json.loads(line[len(prefix) :])
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _text(data: bytes, overflowed: bool, cap: int) -> str:
    text = data.decode("utf-8", "replace")
    return text + f"\n[... output truncated at {cap} bytes]" if overflowed else text


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def _kill(pid: int) -> None:
    """SIGKILL the process and its process group (the code may have left the group with setsid)."""
    _kill_group(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _await_exit(pid: int, timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) until process ``pid``, not a child of ours, has exited; never signals it."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # gone already (or no pidfd here)
        return
    try:
        select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)


def _has_exited(pid: int) -> bool:
    """Whether ``pid`` has exited (without reaping it)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _workdir_prefix() -> str:
    """``metamod-sandbox-<pid>.<start time>-``: enough to tell, later, whether the host that made a dir is alive."""
    return f"metamod-sandbox-{os.getpid()}.{_start_time(os.getpid())}-"


def _start_time(pid: int) -> str | None:
    """Process ``pid``'s start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


_SWEPT: set[str] = set()


def remove_stale_workdirs(parent: str | None) -> list[str]:
    """Remove the work dirs in ``parent`` (None: the system temp dir) left by host processes that no longer run
    (killed with SIGKILL mid-run: nothing else could clean up); once per folder per host process. A dir is stale
    when no live process has the pid and start time in its name. Returns the removed paths.

    >>> remove_stale_workdirs(tempfile.mkdtemp())
    []
    """
    folder = os.path.realpath(parent or tempfile.gettempdir())
    if folder in _SWEPT:
        return []
    _SWEPT.add(folder)
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith("metamod-sandbox-") or "." not in name.split("-")[2]:
            continue
        pid, _, start = name.split("-")[2].partition(".")
        if not pid.isdigit() or _start_time(int(pid)) == start:
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            _remove_tree(path)
            removed.append(path)
    if removed:
        logger.info("removed %d sandbox work dir(s) of dead host processes in %s", len(removed), folder)
    return removed


def _remove_tree(path: str) -> None:
    """Remove the work dir, even where the code took the permissions away from parts of it."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    for root, dirs, _ in os.walk(path):  # top-down: give every folder back its owner's rights, then retry
        for name in dirs:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                try:
                    os.chmod(full, stat.S_IRWXU)
                except OSError:
                    pass
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as err:  # logged, never raised: the run's result matters more than its litter
        logger.warning("could not remove the sandbox work dir %s: %s", path, err)
