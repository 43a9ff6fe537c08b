"""The server launcher without llama.cpp: a child under the watchdog ends with its parent (even ``kill -9``) or when
its pipe closes; a child that dies before answering is a one-line error with its log. Runs everywhere (the child
is Python's own ``http.server``); tests/test_llamacpp_server.py repeats the checks on llama.cpp's server."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from metamod.errors import ConfigError
from metamod.llm.llamacpp.server import RunningServer, ServerConfig, ServerError, spawn_watched, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def gone(pid: int) -> bool:
    """No such process, or a zombie waiting to be reaped by its new parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not gone(pid):
        time.sleep(0.05)
    return gone(pid)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux) to read process states")
def test_child_dies_with_a_parent_killed_by_sigkill():
    parent_code = textwrap.dedent(
        """
        import os, sys, time
        from metamod.llm.llamacpp.server import spawn_watched
        process, fd = spawn_watched("http.server", ["0", "--bind", "127.0.0.1"], log_fd=os.open(os.devnull, os.O_WRONLY), grace=2)
        print(process.pid, flush=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.3)
        assert not gone(child)
        assert "watchdog.py" in Path(f"/proc/{child}/cmdline").read_text()
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert wait_gone(child, 10), f"child {child} outlived its SIGKILLed parent"
    finally:
        parent.kill()
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def test_closing_the_pipe_stops_the_child():
    process, fd = spawn_watched(
        "http.server", ["0", "--bind", "127.0.0.1"], log_fd=os.open(os.devnull, os.O_WRONLY), grace=2
    )
    try:
        time.sleep(0.3)
        assert process.poll() is None
        os.close(fd)
        assert process.wait(timeout=10) is not None
    finally:
        if process.poll() is None:
            process.kill()


def test_child_that_exits_before_answering_is_a_one_line_error_with_its_log(tmp_path):
    log = tmp_path / "server.log"
    handle = os.open(log, os.O_WRONLY | os.O_CREAT)
    process, fd = spawn_watched("metamod_no_such_module", [], log_fd=handle, grace=1)
    os.close(handle)
    server = RunningServer("http://127.0.0.1:9/v1", "m", Path("m.gguf"), process, log)
    try:
        with pytest.raises(ServerError, match=r"exited with code 1 before answering .*log: .*No module named"):
            wait_ready(server, timeout=30)
    finally:
        os.close(fd)


def test_server_config_checks():
    with pytest.raises(ConfigError, match="n_threads must be >= 1, got 0"):
        ServerConfig(n_threads=0)
    with pytest.raises(ConfigError, match="startup_timeout must be > 0"):
        ServerConfig(startup_timeout=0)


def test_llamacpp_backend_refuses_an_adapter_before_starting_anything():
    from metamod.llm import BackendConfig, build_generator

    with pytest.raises(ConfigError, match="cannot apply the LoRA adapter 'runs/adapter': use backend hf"):
        build_generator(BackendConfig(backend="llamacpp", model="smollm2-135m-instruct", adapter="runs/adapter"))
