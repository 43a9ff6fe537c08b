"""The sandbox's containment suite: each attack is contained AND reported, the host is unaffected, and nothing the
code started is left running or on disk afterwards.

Every run makes its work dir under the test's own ``work_parent`` folder, so "nothing left" is checked exactly:
the folder is empty after the run and no live process has it on its command line (the launcher's argv names its
job file there, and processes forked by the code inherit that argv). The file-guard tests run twice: with Landlock
(where the kernel has it) and with the audit hook alone (``landlock=False``), the fallback of kernels without it.
"""

from __future__ import annotations

import ast
import functools
import os
import signal
import time
from pathlib import Path

import pytest

from metamod.errors import ConfigError
from metamod.sandbox import (
    Capabilities,
    SandboxLimits,
    SandboxUnavailableError,
    capabilities,
    decode_value,
    make_limits,
    probe,
    run_function,
    run_many,
    run_python,
    runner,
)

CAPS = capabilities()
needs_namespaces = pytest.mark.skipif(not CAPS.namespaces, reason="no unprivileged user namespaces here")
FILE_GUARDS = [
    pytest.param(True, id="landlock", marks=pytest.mark.skipif(not CAPS.landlock_abi, reason="no Landlock")),
    pytest.param(False, id="audit-hook"),
]


def _leftovers(marker: str) -> list[str]:
    """Live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(f"{pid}: {cmdline[:120]!r}")
    return found


@pytest.fixture
def work_parent(tmp_path_factory):
    """A private folder for the runs' work dirs; after the test it must be empty and no process may mention it."""
    folder = tmp_path_factory.mktemp("sandbox_work")
    yield str(folder)
    deadline = time.monotonic() + 2.0
    while _leftovers(str(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _leftovers(str(folder)) == [], "processes of the sandbox survived the run"
    assert os.listdir(folder) == [], "a work dir was not removed"


@pytest.fixture
def open_path():
    """A world-writable folder outside pytest's private (0700) temp tree, so that the sandbox uid could reach and
    change its files if the Landlock / audit-hook guards did not refuse (the file permissions do not)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="metamod-test-open-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def run(work_parent):
    """``run_python`` with the work dirs under ``work_parent``."""
    return functools.partial(run_python, work_parent=work_parent)


@pytest.fixture
def call(work_parent):
    """``run_function`` with the work dirs under ``work_parent``."""
    return functools.partial(run_function, work_parent=work_parent)


# ------------------------------------------------------------------------------------------ normal runs


def test_normal_run_stdout_stderr_exit_code_stdin(run):
    r = run("import sys\nprint(input()[::-1])\nprint('to err', file=sys.stderr)\nsys.exit(4)", stdin="hello")
    assert (r.stdout, r.stderr, r.exit_code, r.ok) == ("olleh\n", "to err\n", 4, False)
    assert r.error == "exit code 4: to err" and r.killed_reason is None and not r.timed_out
    ok = run("print('é', sum(range(10)))")
    assert (ok.ok, ok.stdout, ok.error, ok.exit_code) == (True, "é 45\n", None, 0)
    assert ok.wall_s > 0 and ok.cpu_s > 0 and ok.max_rss_mb > 1
    assert run("import sys; sys.exit('bye')").stderr == "bye\n"


def test_uncaught_exception_is_reported_with_a_clean_traceback(run):
    r = run("def f():\n    return 1 / 0\nf()")
    assert not r.ok and r.exit_code == 1 and r.error == "ZeroDivisionError: division by zero"
    assert "main.py" in r.stderr and "return 1 / 0" in r.stderr and "child.py" not in r.stderr
    assert run("def f(:\n").error.startswith("SyntaxError")


def test_isolation_report_names_what_is_active(run):
    iso = run("pass").isolation
    assert {"process", "env", "workdir", "network", "pid", "files", "processes", "audit_hook"} <= set(iso)
    assert iso["network"] == ("namespace" if CAPS.namespaces else "none (audit hook only)")
    if CAPS.landlock_abi:
        assert iso["files"].startswith(f"landlock abi {CAPS.landlock_abi}")


def test_the_standard_library_still_works(run):
    code = "import json, re, collections, decimal, math, random, datetime, hashlib, itertools, tempfile\n"
    code += "print(json.dumps(sorted(collections.Counter('abca').items())), decimal.Decimal('1.1') + 1)\n"
    code += "with tempfile.TemporaryFile() as f:\n    f.write(b'ok')\n"
    code += "open('scratch.txt', 'w').write('mine'); print(open('scratch.txt').read())"
    r = run(code)
    assert r.ok, r.stderr
    assert r.stdout == '[["a", 2], ["b", 1], ["c", 1]] 2.1\nmine\n'


# ------------------------------------------------------------------------------------------ resources


def test_infinite_loop_is_killed_at_the_wall_clock(run):
    start = time.monotonic()
    r = run("while True:\n    pass", timeout_s=0.5)
    assert r.timed_out and r.killed_reason == "timeout" and not r.ok and r.exit_code == -signal.SIGKILL
    assert r.error == "timeout: exceeded 0.5 s wall clock"
    assert time.monotonic() - start < 3.0


def test_a_timeout_kills_everything_the_code_started(run):
    code = "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(60)\n"
    code += "time.sleep(60)"
    r = run(code, timeout_s=0.5)
    assert r.killed_reason == "timeout"  # the fixture checks that the setsid'd sleepers are gone too


@needs_namespaces
def test_fork_loop_hits_the_process_limit(run):
    code = "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(60)\n"
    code += "            os._exit(0)\n        n += 1\nexcept OSError as err:\n    print(n, type(err).__name__)"
    r = run(code, max_processes=8)
    assert r.ok, r.stderr
    n, err = r.stdout.split()
    assert err == "BlockingIOError" and 1 <= int(n) <= 8
    assert r.isolation["processes"] == "RLIMIT_NPROC 8"


@needs_namespaces
def test_fork_bomb_is_contained(run):
    r = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout_s=0.5)
    assert r.killed_reason == "timeout" and not r.ok


@needs_namespaces
def test_threads_count_towards_the_process_limit(run):
    code = "import threading, time\nfor _ in range(40):\n    threading.Thread(target=time.sleep, args=(2,)).start()"
    r = run(code, max_processes=8)
    assert not r.ok and "can't start new thread" in r.error


def test_huge_allocation_hits_the_memory_limit(run):
    r = run("x = bytearray(2 ** 31)\nprint('allocated')", memory_mb=256)
    assert (r.ok, r.killed_reason, r.error, r.stdout) == (False, "memory", "MemoryError", "")


def test_cpu_limit(run):
    r = run("while True:\n    pass", cpu_s=1, timeout_s=10)
    assert r.killed_reason == "cpu" and not r.timed_out and r.error == "cpu: exceeded 1 s of CPU time"


def test_huge_output_is_capped_and_the_process_killed(run):
    r = run("while True:\n    print('x' * 1000)", max_output_bytes=10_000)
    assert (r.ok, r.killed_reason, r.truncated) == (False, "output", True)
    assert r.stdout.endswith("\n[... output truncated at 10000 bytes]")
    assert len(r.stdout) < 10_100
    e = run("import sys\nsys.stderr.write('e' * 50_000)", max_output_bytes=1000)
    assert e.killed_reason == "output" and e.error == "output: more than 1000 bytes on stderr"


def test_file_size_limit(run):
    r = run("open('big', 'wb').write(b'x' * (3 << 20))", max_file_mb=1)
    assert (r.ok, r.killed_reason) == (False, "file_size") and "File too large" in r.error


def test_deep_recursion_is_contained(run):
    r = run("def f(n):\n    return f(n + 1)\nf(0)")
    assert not r.ok and r.error.startswith("RecursionError")
    # past the recursion limit C code overflows its stack: a crash, contained and reported
    deep = "import sys, json\nsys.setrecursionlimit(10 ** 6)\nx = []\nfor _ in range(300_000):\n    x = [x]\n"
    crash = run(deep + "json.dumps(x)", timeout_s=3)
    assert not crash.ok and crash.killed_reason is not None and crash.error


# ------------------------------------------------------------------------------------------ files, env, network


@pytest.mark.parametrize("landlock", FILE_GUARDS)
def test_writing_outside_the_work_dir_is_refused(run, open_path, landlock):
    target = open_path / "host_file.txt"
    target.write_text("original")
    target.chmod(0o666)
    for code in (
        f"open({str(target)!r}, 'w').write('pwned')",
        f"open({str(target)!r}, 'a').write('pwned')",
        f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_TRUNC)",
        f"open({str(open_path / 'new_file')!r}, 'x')",
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('pwned')",
    ):
        r = run(code, landlock=landlock)
        assert not r.ok and "PermissionError" in r.error, (code, r.stderr)
    assert target.read_text() == "original"
    assert sorted(p.name for p in open_path.iterdir()) == ["host_file.txt"]


@pytest.mark.parametrize("landlock", FILE_GUARDS)
def test_a_folder_fd_does_not_open_a_way_around_the_checks(run, open_path, landlock):
    target = open_path / "host_file.txt"
    target.write_text("original")
    target.chmod(0o666)
    code = f"import os\nfd = os.open({str(open_path)!r}, os.O_RDONLY)\n"
    code += "os.write(os.open('host_file.txt', os.O_WRONLY | os.O_TRUNC, dir_fd=fd), b'pwned')"
    r = run(code, landlock=landlock, hide_host_files=False)
    assert not r.ok and "PermissionError" in r.error, r.stderr
    assert target.read_text() == "original"


@pytest.mark.parametrize("landlock", FILE_GUARDS)
def test_deleting_or_moving_files_outside_the_work_dir_is_refused(run, open_path, landlock):
    target = open_path / "keep.txt"
    target.write_text("keep")
    target.chmod(0o666)
    for code in (
        f"import os\nos.remove({str(target)!r})",
        f"import os\nos.rename({str(target)!r}, 'stolen')",
        f"import shutil\nshutil.rmtree({str(open_path)!r})",
        f"import os\nos.chmod({str(target)!r}, 0)",
    ):
        r = run(code, landlock=landlock)
        assert not r.ok and "PermissionError" in r.error, (code, r.stderr)
    assert target.read_text() == "keep" and target.stat().st_mode & 0o777 != 0


@pytest.mark.parametrize("landlock", FILE_GUARDS)
def test_host_files_are_hidden(run, open_path, landlock):
    secret = open_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    r = run(f"print(open({str(secret)!r}).read())", landlock=landlock)
    assert not r.ok and "PermissionError" in r.error and "TOP-SECRET" not in r.stdout
    listing = run("import os\nprint(os.listdir('/'))", landlock=landlock)
    assert not listing.ok and "PermissionError" in listing.error
    visible = run(f"print(open({str(secret)!r}).read())", landlock=landlock, read_paths=(str(open_path),))
    assert visible.stdout == "TOP-SECRET\n", visible.stderr


def test_environment_secrets_do_not_reach_the_child(run, monkeypatch):
    monkeypatch.setenv("METAMOD_TEST_SECRET", "hunter2-secret")
    r = run("import os\nprint(sorted(os.environ))\nprint(os.environ.get('METAMOD_TEST_SECRET'))")
    assert r.ok and "hunter2" not in r.stdout
    assert r.stdout.splitlines()[1] == "None"
    assert set(ast.literal_eval(r.stdout.splitlines()[0])) <= {"PATH", "LANG", "HOME", "TMPDIR"}
    proc = run("print(open('/proc/self/environ').read())")
    assert "hunter2" not in proc.stdout  # hidden by Landlock (PermissionError) or empty of secrets
    parent = run("print(open('/proc/%d/environ' % __import__('os').getppid()).read())")
    assert "hunter2" not in parent.stdout


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.socket()",
        "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import _socket\n_socket.socket()",
    ],
)
def test_sockets_are_refused(run, code):
    r = run(code)
    assert not r.ok and "PermissionError: sandbox: socket." in r.error


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp table is x86_64 only")
def test_seccomp_refuses_socket_in_the_kernel(run):
    # the audit hook lets AF_UNIX sockets through under seccomp (socketpair, asyncio): socket() itself must fail
    r = run("import socket\nsocket.socket(socket.AF_UNIX)")
    assert not r.ok and r.error == "PermissionError: [Errno 1] Operation not permitted"
    assert r.isolation["syscalls"].startswith("seccomp")
    loop = run("import asyncio\nasyncio.run(asyncio.sleep(0))\nimport socket\na, b = socket.socketpair()\nprint(1)")
    assert loop.ok, loop.stderr


@needs_namespaces
def test_the_network_namespace_has_no_interfaces_up(run):
    r = run("print(open('/proc/net/dev').read())", hide_host_files=False)
    assert r.ok and "eth" not in r.stdout and r.isolation["network"] == "namespace"


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.system('id')",
        "import subprocess\nsubprocess.run(['id'])",
        "import os\nos.execv('/bin/sh', ['sh'])",
        "import os\nos.posix_spawn('/bin/sh', ['sh'], {})",
        "import pty\npty.spawn('/bin/sh')",
    ],
)
def test_running_programs_is_refused(run, code):
    r = run(code)
    assert not r.ok and "PermissionError: sandbox:" in r.error, r.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import ctypes\nctypes.CDLL(None).system(b'id')",
        "import ctypes\nctypes.CDLL('libc.so.6')",
        "import ctypes\nctypes.pythonapi.Py_GetVersion()",
        "import ctypes\nctypes.string_at(id(1), 8)",
        "import sys\ndel sys.modules['_ctypes']\nimport _ctypes",
        "import gc\ngc.get_objects()",
    ],
)
def test_ctypes_and_interpreter_internals_are_refused(run, code):
    r = run(code)
    assert not r.ok and "PermissionError: sandbox:" in r.error, r.stderr


def test_the_launchers_own_libc_handle_is_unusable(run):
    # the launcher's modules stay in sys.modules, its ctypes-based Libc among them; and the audit hook's frame in
    # a caught exception leads to the launcher's globals
    grab = "import sys\nLibc = sys.modules['metamod.sandbox.child.kernel'].Libc\n"
    walk = "try:\n    open('/etc/x', 'w')\nexcept PermissionError as err:\n    tb = err.__traceback__\n"
    walk += "    while tb.tb_next:\n        tb = tb.tb_next\n    g = tb.tb_frame.f_globals\n"
    walk += "    Libc = __import__(g['__name__'].replace('child.hook', 'child.kernel'), fromlist=['x']).Libc\n"
    for code in (grab, walk):
        r = run(code + "Libc().call('system', b'touch /tmp/metamod_sandbox_pwned')")
        assert not r.ok and "PermissionError: sandbox: ctypes." in r.error, r.stderr
    assert not os.path.exists("/tmp/metamod_sandbox_pwned")


def test_the_host_is_unaffected(run, work_parent):
    cwd, env, fds = os.getcwd(), dict(os.environ), sorted(os.listdir("/proc/self/fd"))
    handler = signal.getsignal(signal.SIGTERM)
    for code in ("import os\nos.kill(0, 9)", "import os\nos.kill(-1, 9)", "import os\nos.kill(os.getppid(), 9)"):
        run(code)
    run("while True:\n    pass", timeout_s=0.3)
    run("print('x' * 10 ** 6)")
    assert (os.getcwd(), dict(os.environ), signal.getsignal(signal.SIGTERM)) == (cwd, env, handler)
    assert sorted(os.listdir("/proc/self/fd")) == fds  # no pipe, pidfd or file left open


def test_the_work_dir_is_removed_even_when_the_code_locks_it(run, work_parent):
    code = "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)\n"
    assert run(code + "print(os.getcwd())").ok
    run(code + "while True:\n    pass", timeout_s=0.3)  # and on timeout; the fixture checks the folder is empty


# ------------------------------------------------------------------------------------------ platform fallback


def test_a_platform_without_namespaces_refuses_unless_fallback_is_allowed(run, monkeypatch):
    no_ns = Capabilities(namespaces=False, landlock_abi=CAPS.landlock_abi, detail="test: unshare refused")
    monkeypatch.setattr(probe, "capabilities", lambda: no_ns)
    with pytest.raises(SandboxUnavailableError, match="allow_network_fallback=True"):
        run("print(1)")
    r = run("print(1)", allow_network_fallback=True)
    assert r.ok and r.stdout == "1\n"
    assert r.isolation["network"] in ("none (seccomp + audit hook)", "none (audit hook only)")
    weakest = run("print(1)", allow_network_fallback=True, seccomp=False, landlock=False)
    assert weakest.isolation["network"] == "none (audit hook only)"
    assert weakest.isolation["files"] == "audit hook only (landlock off by option)"
    assert r.isolation["processes"] == "fork refused by the audit hook"
    for code in ("import os\nos.fork()", "import socket\nsocket.socket()", "import os\nos.kill(os.getppid(), 0)"):
        bad = run(code, allow_network_fallback=True, seccomp=False, landlock=False)
        assert not bad.ok and "PermissionError: sandbox:" in bad.error, code


def test_limits_are_checked():
    with pytest.raises(ConfigError, match="unknown sandbox option 'timeout'"):
        make_limits(timeout=1)
    with pytest.raises(ConfigError, match="timeout_s must be > 0"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ConfigError, match="max_processes must be >= 1"):
        SandboxLimits(max_processes=0)
    with pytest.raises(ConfigError, match="code must be a str"):
        run_python(b"print(1)")


# ------------------------------------------------------------------------------------------ run_function


def test_run_function_pass_fail_and_errors(call):
    code = "def f(xs, k):\n    return [x * k for x in xs]\n"
    run = call(
        code,
        "f",
        ["[1, 2], 3", "[], 0", "'ab', 2", "__import__('os').getcwd()", "1, 2, 3", "[1], None"],
        expected=["[3, 6]", "[]", "['abab']", "0", "0", "0"],
    )
    got = [(c.ok, c.passed, c.value_repr) for c in run.calls]
    assert got[:3] == [(True, True, "[3, 6]"), (True, True, "[]"), (True, False, "['aa', 'bb']")]
    assert run.calls[3].error.startswith("input is not a Python literal")
    assert run.calls[4].error == "TypeError: f() takes 2 positional arguments but 3 were given"
    assert run.calls[5].error == "TypeError: unsupported operand type(s) for *: 'int' and 'NoneType'"
    assert [c.passed for c in run.calls[3:]] == [False, False, False]
    assert run.result.ok and run.n_passed == 2 and not run.all_passed


def test_run_function_without_expected_and_with_no_arguments(call):
    run = call("import math\ndef f():\n    return math.pi\n", "f", ["", ""])
    assert [(c.ok, c.passed, c.value) for c in run.calls] == [(True, None, 3.141592653589793)] * 2


def test_run_function_values_round_trip_exactly(call):
    value = "(1, -2.5, 'é\\n\"\\\\', b'\\x00', {2: [None, True]}, {3}, frozenset({4}), 1j, ..., (), '\\ud800')"
    run = call(f"def f():\n    return {value}\n", "f", ["", ""], expected=[value.replace("frozenset({4})", "{4}"), "0"])
    c = run.calls[0]
    assert c.passed and c.value == (
        1,
        -2.5,
        'é\n"\\',
        b"\x00",
        {2: [None, True]},
        {3},
        frozenset({4}),
        1j,
        ...,
        (),
        "\ud800",
    )
    assert type(c.value[6]) is frozenset
    assert run.calls[1].passed is False
    assert decode_value({"dict": [[{"tuple": [1]}, {"set": []}]]}) == {(1,): set()}


def test_run_function_equality_follows_python(call):
    run = call(
        "def f(x):\n    return x\n", "f", ["1", "True", "[1.0]", "float('nan')"], expected=["1.0", "1", "[1]", "0"]
    )
    assert [c.passed for c in run.calls[:3]] == [True, True, True]
    assert run.calls[3].error.startswith("input is not a Python literal")


def test_run_function_cannot_fake_a_pass(call):
    always_equal = "class Eq:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
    run = call(always_equal + "def f():\n    return Eq()\n", "f", [""], expected=["42"])
    assert run.calls[0].ok and run.calls[0].passed is False
    assert run.calls[0].error.startswith("return value not comparable")
    forge = "import os\nfor fd in range(3, 40):\n    try:\n"
    forge += '        os.write(fd, b\'{"k":"call","i":0,"ok":true,"v":42,"err":null}\\n\')\n'
    forge += "    except OSError:\n        pass\ndef f():\n    return 0\n"
    forged = call(forge, "f", [""], expected=["42"])
    assert forged.calls[0].passed is False and forged.calls[0].value is None
    assert forged.calls[0].error.startswith("result records forged or duplicated: a record before the code had")
    assert forged.result.killed_reason == "tamper"


def test_run_function_never_shows_the_expected_outputs_to_the_code(call):
    spy = "import os\nseen = repr([open(n, 'rb').read() for n in os.listdir('.') if os.path.isfile(n)])\n"
    spy += "import sys\nseen += repr(sys.argv) + repr(vars(sys.modules['__main__']).keys())\n"
    spy += "def f():\n    return seen\n"
    run = call(spy, "f", [""], expected=["'SECRET-EXPECTED-OUTPUT'"])
    assert run.calls[0].ok and "SECRET-EXPECTED" not in run.calls[0].value


def test_run_function_wall_timeout_mid_calls(call):
    code = "import time\ndef f(s):\n    time.sleep(s)\n    return s\n"
    run = call(code, "f", ["0", "30", "0"], expected=["0", "30", "0"], timeout_s=0.5)
    assert [(c.ok, c.passed, c.error) for c in run.calls] == [
        (True, True, None),
        (False, False, "timeout"),
        (False, False, "timeout"),
    ]
    assert run.result.killed_reason == "timeout"


def test_run_function_per_call_timeout(call):
    code = "import time\ndef f(s):\n    time.sleep(s)\n    return s\n"
    run = call(code, "f", ["0", "30", "0"], call_timeout_s=0.2)
    assert [c.error for c in run.calls] == [None, "timeout: call exceeded 0.2 s", None]
    assert run.result.ok


def test_run_function_code_that_fails_before_the_calls(call):
    for code, error in (
        ("def f(:\n", "code failed before the calls: SyntaxError"),
        ("x = 1\n", "code failed before the calls: NameError: name 'f' is not defined by the code"),
        ("f = 3\n", "code failed before the calls: TypeError: 'f' is a int, not a function"),
        ("raise ValueError('boom')\n", "code failed before the calls: ValueError: boom"),
    ):
        run = call(code, "f", ["1", "2"], expected=["1", "2"])
        assert all(c.error.startswith(error) and c.passed is False for c in run.calls), (code, run.calls)


def test_run_function_process_dying_mid_calls(call):
    code = "import os\ndef f(x):\n    if x == 2:\n        os._exit(7)\n    return x\n"
    run = call(code, "f", ["1", "2", "3"], expected=["1", "2", "3"])
    assert run.calls[0].passed
    assert [c.error for c in run.calls[1:]] == ["process ended before this call: exit code 7"] * 2
    flood = call("def f(x):\n    print('y' * 100_000)\n", "f", ["1"], max_output_bytes=1000)
    assert flood.result.killed_reason == "output"
    # the call may have reported back before the host killed the flood (a race): either way it is accounted for
    assert flood.calls[0].error is None or flood.calls[0].error.startswith("process ended")


def test_run_function_checks_its_arguments():
    with pytest.raises(ConfigError, match="expected has 1 outputs for 2 inputs"):
        run_function("", "f", ["1", "2"], expected=["1"])
    with pytest.raises(ConfigError, match=r"expected\[0\] is not a Python literal"):
        run_function("", "f", ["1"], expected=["__import__('os')"])
    with pytest.raises(ConfigError, match="entry must be a function name"):
        run_function("", "f()", ["1"])
    with pytest.raises(ConfigError, match=r"inputs\[0\] must be a str"):
        run_function("", "f", [1])


# ------------------------------------------------------------------------------------------ run_many


def test_run_many_keeps_order_and_accepts_every_job_kind(work_parent):
    jobs = [(f"import time\ntime.sleep({0.2 - 0.04 * i})\nprint({i})", {"work_parent": work_parent}) for i in range(5)]
    jobs.append(functools.partial(run_function, "def f(x):\n    return -x", "f", ["5"], work_parent=work_parent))
    results = run_many(jobs, workers=3)
    assert [r.stdout for r in results[:5]] == [f"{i}\n" for i in range(5)]
    assert results[5].calls[0].value == -5
    with pytest.raises(ConfigError, match="workers must be an int >= 1"):
        run_many(["print(1)"], workers=0)
    with pytest.raises(ConfigError, match=r"jobs\[1\] must be a callable"):
        run_many(["print(1)", 42])


# ------------------------------------------------------------------------------------------ code that fights back

ON_X86 = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the seccomp table is x86_64 only")
HOST_UID = os.geteuid()


@needs_namespaces
@ON_X86
def test_no_uid_0_remains_and_the_set_id_family_is_refused(run):
    code = "import os\nprint(os.getresuid(), os.getresgid(), os.getgroups())\n"
    calls = [
        "os.setresuid(0, 0, 0)",
        "os.setuid(0)",
        "os.seteuid(0)",
        "os.setreuid(0, 0)",
        "os.setresgid(0, 0, 0)",
        "os.setgid(0)",
        "os.setregid(0, 0)",
        "os.setgroups([0])",
        "os.setresuid(os.getuid(), os.getuid(), os.getuid())",  # even a no-op change is refused
    ]
    for c in calls:
        code += f"try:\n    {c}\n    print('allowed', {c!r})\nexcept PermissionError:\n    pass\n"
    code += "print(os.getresuid())"
    r = run(code)
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert not [line for line in lines if line.startswith("allowed")], lines
    uid = 65534 if HOST_UID == 0 else HOST_UID
    assert lines[0] == f"({uid}, {uid}, {uid}) ({uid}, {uid}, {uid}) []" if HOST_UID == 0 else str(uid) in lines[0]
    assert lines[-1] == f"({uid}, {uid}, {uid})"
    assert "set*uid" in r.isolation["syscalls"]
    if HOST_UID == 0:
        assert r.isolation["user"] == "uid 65534 (real, effective and saved) in a user namespace"


@needs_namespaces
def test_the_process_limit_holds_whatever_the_code_calls_first(run):
    # S1: setresuid(0, 0, 0) made the real uid root again, which RLIMIT_NPROC exempts (40 forks instead of 15)
    fork_loop = "n = 0\ntry:\n    while n < 40:\n        if os.fork() == 0:\n            time.sleep(60)\n"
    fork_loop += "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)"
    for first in ("pass", "os.setresuid(0, 0, 0)", "os.setuid(0)", "os.setreuid(0, -1)"):
        code = f"import os, time\ntry:\n    {first}\nexcept OSError:\n    pass\n" + fork_loop
        r = run(code, max_processes=8)
        assert r.ok, r.stderr
        assert 1 <= int(r.stdout) <= 8, (first, r.stdout)
    threads = "import os, threading, time\ntry:\n    os.setresuid(0, 0, 0)\nexcept OSError:\n    pass\n"
    threads += "for _ in range(40):\n    threading.Thread(target=time.sleep, args=(2,)).start()"
    assert "can't start new thread" in (run(threads, max_processes=8).error or "")


@needs_namespaces
def test_the_work_dir_has_a_total_disk_quota(run):
    # S2: 200 files of 15 MB (3 GB) were written where only one 100 MB file was stopped
    many = "for i in range(200):\n    open(f'f{i}', 'wb').write(b'x' * (3 << 20))"
    r = run(many, max_disk_mb=16, max_file_mb=4, timeout_s=20)
    assert (r.ok, r.killed_reason) == (False, "disk") and "No space left on device" in r.error, r.stderr
    assert r.isolation["disk"] == "tmpfs work dir of 16 MB (the only writable place)"
    small = "for i in range(100_000):\n    open(f's{i}', 'wb').write(b'x')"
    s = run(small, max_disk_mb=4, timeout_s=20)  # one page per file, and at most 256 files per MB
    assert s.killed_reason == "disk", s.error
    tmp = run("import tempfile\nwith tempfile.TemporaryFile() as f:\n    f.write(b'x' * (6 << 20))", max_disk_mb=4)
    assert tmp.killed_reason == "disk"  # TMPDIR is the work dir: temporary files count too
    fits = run("open('a', 'wb').write(b'x' * (3 << 20))\nopen('b', 'wb').write(b'x' * (3 << 20))", max_disk_mb=8)
    assert fits.ok, fits.stderr


@needs_namespaces
def test_writes_outside_the_quota_are_impossible_even_where_the_host_could(run, open_path):
    open_dir = open_path / "world_writable"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    r = run(f"open({str(open_dir / 'x')!r}, 'wb').write(b'x')", landlock=False, hide_host_files=False)
    assert not r.ok and list(open_dir.iterdir()) == []


def test_the_result_channel_is_out_of_the_codes_reach(call):
    # S3: module-level code walked the frames to the launcher's job (nonce + pipe) and wrote its own records
    walk = "import sys\nfound = []\nf = sys._getframe()\nwhile f is not None:\n"
    walk += "    for name, v in list(f.f_locals.items()):\n"
    walk += "        if isinstance(v, dict) and ('nonce' in v or 'result_fd' in v):\n            found.append(name)\n"
    walk += "        if type(v).__name__ == 'Channel' and v.prefix or name in ('nonce', 'result_fd'):\n"
    walk += "            found.append(name)\n"
    walk += "    f = f.f_back\n"
    walk += "import os\nfds = []\nfor fd in range(3, 256):\n    try:\n        os.fstat(fd)\n"
    walk += "        fds.append(fd)\n    except OSError:\n        pass\n"
    walk += "def f():\n    return found, len(fds)\n"
    run = call(walk, "f", [""])
    assert run.calls[0].ok, run.calls[0].error
    found, n_fds = run.calls[0].value
    assert found == []
    assert n_fds == 2  # beyond stdin / stdout / stderr: the worker's two pipes to the launcher, nothing else


FORGE_ALL_FDS = "import os\ndef forge(i, v):\n    for fd in range(3, 40):\n        try:\n"
FORGE_ALL_FDS += '            os.write(fd, b\'{"k":"call","i":%d,"ok":true,"v":%d,"err":null}\\n\' % (i, v))\n'
FORGE_ALL_FDS += "        except OSError:\n            pass\n"


@pytest.mark.parametrize(
    "body, first_failed",
    [
        # answers every call before any is asked, then a function that always raises
        ("for i in range(3):\n    forge(i, 42)\ndef f(x):\n    raise ValueError('never returns')\n", 0),
        # answers its own call, then raises: the harness's own record is a second answer to call 0
        ("def f(x):\n    forge(x, 42)\n    raise ValueError('never returns')\n", 0),
        # answers the NEXT call in advance while call 1 runs
        ("def f(x):\n    if x == 1:\n        forge(2, 42)\n    return 42\n", 1),
        # a second answer after the last call
        ("def f(x):\n    if x == 2:\n        forge(2, 42)\n    return 42\n", 2),
    ],
    ids=["before-the-calls", "own-call-then-raise", "next-call-in-advance", "after-the-last-call"],
)
def test_forged_or_duplicated_records_fail_the_call(call, body, first_failed):
    run = call(FORGE_ALL_FDS + body, "f", ["0", "1", "2"], expected=["42", "42", "42"])
    assert [c.passed for c in run.calls] == [True] * first_failed + [False] * (3 - first_failed), run.calls
    assert all(c.error.startswith("result records forged or duplicated") for c in run.calls[first_failed:])
    assert run.result.killed_reason == "tamper" and not run.result.ok


def test_a_program_that_answers_its_own_call_and_dies_gets_only_that_answer(call):
    # the one thing the code can still do with the launcher's pipe is what a function can: answer the call asked
    code = FORGE_ALL_FDS + "def f(x):\n    forge(x, 42)\n    os._exit(0)\n"
    run = call(code, "f", ["0", "1"], expected=["42", "42"])
    assert [c.passed for c in run.calls] == [True, False]
    assert run.calls[1].error.startswith("process ended before this call")


def test_values_are_encoded_by_their_real_type(call):
    # S4: a list subclass whose __iter__ lies was graded on what it yielded but reported by its repr
    code = "class L(list):\n    def __iter__(self):\n        return iter([42])\n"
    code += "    def __repr__(self):\n        return '[42]'\n"
    code += "class D(dict):\n    def items(self):\n        return [(1, 42)]\n    def __iter__(self):\n        return iter([1])\n"
    code += "class T(tuple):\n    def __iter__(self):\n        return iter((42,))\n"
    code += "class S(str):\n    def __str__(self):\n        return '42'\n"
    code += "class I(int):\n    def __repr__(self):\n        return '42'\n"
    code += (
        "class Fake:\n    __class__ = property(lambda self: list)\n    def __iter__(self):\n        return iter([42])\n"
    )
    code += "def f(k):\n    return {'L': L([1, 2]), 'D': D({1: 2}), 'T': T((1, 2)), 'S': S('a'), 'I': I(7),"
    code += " 'Fake': Fake()}[k]\n"
    run = call(code, "f", ["'L'", "'D'", "'T'", "'S'", "'I'", "'Fake'"], expected=["[42]", "{1: 42}", "(42,)"] * 2)
    values = [c.value for c in run.calls]
    assert values[:5] == [[1, 2], {1: 2}, (1, 2), "a", 7]
    assert [c.value_repr for c in run.calls[:5]] == ["[1, 2]", "{1: 2}", "(1, 2)", "'a'", "7"]
    assert not any(c.passed for c in run.calls)
    assert run.calls[5].error.startswith("return value not comparable: a Fake is not a literal value")


def test_work_dirs_of_a_host_killed_with_sigkill_are_removed_by_the_next_one(work_parent):
    # S5: a host killed with kill -9 left its work dirs (with the model's code) in the temp dir
    import subprocess
    import sys

    host = "from metamod.sandbox import run_python\n"
    host += f"run_python('import time\\ntime.sleep(60)', timeout_s=120, work_parent={work_parent!r})\n"
    proc = subprocess.Popen([sys.executable, "-c", host])
    deadline = time.monotonic() + 30
    while not os.listdir(work_parent) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.kill()
    proc.wait()
    left = os.listdir(work_parent)
    assert len(left) == 1 and left[0].startswith(f"metamod-sandbox-{proc.pid}.")
    alive = Path(work_parent, f"metamod-sandbox-{os.getpid()}.{runner._start_time(os.getpid())}-mine")
    alive.mkdir()
    reused = Path(work_parent, f"metamod-sandbox-{os.getpid()}.1-reused")  # this pid, another start time
    reused.mkdir()
    removed = runner.remove_stale_workdirs(work_parent)
    assert sorted(removed) == sorted([os.path.join(work_parent, left[0]), str(reused)])
    assert os.listdir(work_parent) == [alive.name]
    alive.rmdir()


# ------------------------------------------------------------------------------------------ machines without namespaces


@pytest.fixture
def no_namespaces(monkeypatch):
    """Play a machine where unprivileged user namespaces are disabled (the preflight's cache emptied)."""
    from metamod.sandbox import probe as probe_module
    from metamod.sandbox import readiness as preflight_module

    no_ns = Capabilities(namespaces=False, landlock_abi=CAPS.landlock_abi, detail="test: unshare refused")
    monkeypatch.setattr(probe_module, "capabilities", lambda: no_ns)
    monkeypatch.setattr(preflight_module, "_PREFLIGHT", {})
    monkeypatch.delenv("METAMOD_SANDBOX_ALLOW_FALLBACK", raising=False)
    return monkeypatch


def test_a_code_task_is_refused_at_the_start_without_namespaces_unless_the_fallback_is_allowed(
    no_namespaces, tmp_path, caplog
):
    from metamod.cli import main as cli

    out = tmp_path / "eval"
    config = tmp_path / "code.yaml"
    config.write_text(
        "tasks: [synthetic_code@abduction]\n"
        "task_options: {synthetic_code@abduction: {task_subtask: abduction, task_num_examples: 2}}\n"
        "methods: [cot]\nseeds: [0]\ndebaters: simulated\n"
    )
    argv = ["eval", "--config", str(config), "--output_dir", str(out)]
    assert cli(argv) == 2
    assert not out.exists()  # refused before the folder, any model or any question
    with pytest.raises(SandboxUnavailableError, match="METAMOD_SANDBOX_ALLOW_FALLBACK=1"):
        from metamod.tasks.code.grading import preflight_code_tasks

        preflight_code_tasks({"synthetic_code@abduction": "code_input", "arith": "math"})
    no_namespaces.setenv("METAMOD_SANDBOX_ALLOW_FALLBACK", "1")
    assert make_limits().allow_network_fallback  # the commands' sandboxes get the fallback from the variable
    with caplog.at_level("WARNING"):
        preflight_code_tasks({"synthetic_code@abduction": "code_input"})
    assert "no process limit" in caplog.text
    assert cli(argv) == 0 and (out / "results.json").is_file()


def test_the_cli_message_names_the_task_and_the_way_out(no_namespaces, tmp_path, capsys):
    from metamod.cli import main as cli

    argv = ["rollout", "--tasks", "synthetic_code"]
    argv += ["--task_options", "{synthetic_code: {task_subtask: abduction, task_num_examples: 2}}"]
    argv += ["--output_dir", str(tmp_path / "r")]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "task 'synthetic_code' runs model-written code" in err[0], err
    assert "METAMOD_SANDBOX_ALLOW_FALLBACK=1" in err[0] and not (tmp_path / "r").exists()


@needs_namespaces
@ON_X86
def test_without_a_private_mount_namespace_the_process_limit_still_holds(run):
    """The fallback of a root host that cannot make a mount namespace (a container without CAP_SYS_ADMIN): no disk
    quota and effective uid 0 without capabilities, but the real uid is the sandbox's and set*uid stays refused."""
    code = "import os, time\ntry:\n    os.setresuid(0, 0, 0)\nexcept OSError as err:\n    print('refused', err.errno)\n"
    code += "n = 0\ntry:\n    while n < 40:\n        if os.fork() == 0:\n            time.sleep(60)\n"
    code += "            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n, os.getresuid()[0])"
    r = run(code, max_processes=8, private_mounts=False)
    assert r.ok, r.stderr
    refused, counted = r.stdout.splitlines()
    assert refused == "refused 1"
    n, real_uid = map(int, counted.split())
    assert 1 <= n <= 8 and real_uid == (65534 if HOST_UID == 0 else HOST_UID)
    assert r.isolation["disk"].startswith("no cap (no private mount namespace")
    if HOST_UID == 0:
        assert r.isolation["user"].startswith("real uid 65534, effective uid 0 without capabilities")
    writes = run("open('a', 'wb').write(b'x' * (3 << 20))", private_mounts=False, max_disk_mb=1)
    assert writes.ok  # no quota in this fallback: only max_file_mb caps a file
