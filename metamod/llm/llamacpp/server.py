"""Start llama.cpp's OpenAI-compatible server on a GGUF file, wait until it answers, and stop it cleanly.

:func:`llamacpp_server` is a context manager around ``python -m llama_cpp.server`` (the ``llamacpp`` extra,
``pip install -e .[llamacpp]``) on a loopback port (a free one unless given). It yields a :class:`RunningServer`
whose ``base_url`` is what the ``openai`` backend takes. Readiness: ``GET /v1/models`` is polled until it answers
200, within ``startup_timeout``; a server that exits or never answers raises :class:`ServerError` with the tail
of its log. Shutdown: SIGTERM, then SIGKILL after ``shutdown_grace`` seconds. The child runs under
:mod:`metamod.llm.llamacpp.watchdog`, which ends it when this process goes away, even by ``kill -9``.

llama-cpp-python's server holds one model and answers one request at a time (concurrent requests queue behind a
lock); a request whose prompt shares a prefix with the previous one re-uses that prefix's KV cache, so few-shot
prompts are prefilled once. It ignores ``n`` (one choice per request).

>>> config = ServerConfig(model="smollm2-135m-instruct", port=8123, n_threads=2)
>>> server_command(config, "/m.gguf", 8123)[3:]
['--model', '/m.gguf', '--model_alias', 'smollm2-135m-instruct', '--host', '127.0.0.1', '--port', '8123', '--n_ctx', '2048', '--n_threads', '2', '--n_threads_batch', '2', '--n_batch', '512', '--verbose', 'False']
>>> ServerConfig(port=70000)
Traceback (most recent call last):
...
metamod.errors.ConfigError: port must be 0 (a free port) or in 1..65535, got 70000
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from metamod.errors import ConfigError, MetamodError

logger = logging.getLogger(__name__)

WATCHDOG = Path(__file__).with_name("watchdog.py")
#: how to install the server when it is missing
INSTALL_HINT = "pip install -e '.[llamacpp]' (llama-cpp-python[server]; builds llama.cpp from source, minutes)"


class ServerError(MetamodError, RuntimeError):
    """The llama.cpp server could not be started (missing package or model, exited early, never ready) or died."""


def is_llamacpp_available() -> bool:
    """Whether ``llama_cpp`` (llama-cpp-python) can be imported, without importing it.

    >>> isinstance(is_llamacpp_available(), bool)
    True
    """
    return importlib.util.find_spec("llama_cpp") is not None


@dataclass
class ServerConfig:
    """How to run llama.cpp's OpenAI-compatible server (``metamod model serve --help`` lists the same options)."""

    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "An embedded model alias (its shipped GGUF file) or a path to a .gguf file."},
    )
    model_alias: str | None = field(
        default=None,
        metadata={"help": "The model name the server answers to (requests' `model`); None: the alias or file stem."},
    )
    host: str = field(default="127.0.0.1", metadata={"help": "Address to listen on (loopback by default)."})
    port: int = field(default=0, metadata={"help": "Port to listen on; 0 picks a free one."})
    n_ctx: int = field(default=2048, metadata={"help": "Context size in tokens (prompt + completion)."})
    n_threads: int = field(default=2, metadata={"help": "CPU threads for generation (one token at a time)."})
    n_threads_batch: int | None = field(
        default=None, metadata={"help": "CPU threads for prompt processing (None: n_threads)."}
    )
    n_batch: int = field(default=512, metadata={"help": "Prompt tokens evaluated per forward pass."})
    startup_timeout: float = field(
        default=120.0, metadata={"help": "Seconds to wait for the server to answer GET /v1/models."}
    )
    shutdown_grace: float = field(
        default=10.0, metadata={"help": "Seconds between SIGTERM and SIGKILL when stopping the server."}
    )
    verbose: bool = field(default=False, metadata={"help": "Let llama.cpp log every request (to the server log)."})

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0 (a free port) or in 1..65535, got {self.port}")
        for name in ("n_ctx", "n_threads", "n_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_threads_batch is not None and self.n_threads_batch < 1:
            raise ConfigError(f"n_threads_batch must be >= 1 or None, got {self.n_threads_batch}")
        if self.startup_timeout <= 0 or self.shutdown_grace < 0:
            raise ConfigError(
                f"startup_timeout must be > 0 and shutdown_grace >= 0, got {self.startup_timeout}, {self.shutdown_grace}"
            )


@dataclass
class RunningServer:
    """A started server: ``base_url`` (up to ``/v1``) and ``model_name`` are what the ``openai`` backend takes.

    Attributes:
        base_url: ``http://host:port/v1``.
        model_name: the name the server answers to.
        gguf: the weights file served.
        process: the server process (its ``pid`` is the server's).
        log_path: the server's stdout and stderr.
    """

    base_url: str
    model_name: str
    gguf: Path
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of the server's log, joined with `` | `` (for one-line errors)."""
        return log_tail(self.log_path, lines)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` non-empty lines of ``path`` joined with `` | `` (empty if unreadable)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join([line.strip() for line in text.splitlines() if line.strip()][-lines:])


def resolve_gguf(model: str) -> Path:
    """The GGUF file of an embedded alias, or ``model`` itself as a path (checked to exist and end in .gguf)."""
    from metamod.llm.embedded import gguf_path, is_embedded

    if is_embedded(model):
        try:
            return gguf_path(model)
        except FileNotFoundError as err:
            raise ServerError(str(err)) from err
    path = Path(model).expanduser()
    if path.suffix.lower() != ".gguf" or not path.is_file():
        raise ConfigError(
            f"model must be an embedded alias (smollm2-135m-instruct) or an existing .gguf file, got {model!r}"
        )
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def served_name(config: ServerConfig) -> str:
    """The name the server answers to: ``model_alias``, else the embedded alias, else the file's stem.

    >>> served_name(ServerConfig(model="SmolLM2-135M-Instruct")), served_name(ServerConfig(model="/x/tiny.gguf"))
    ('smollm2-135m-instruct', 'tiny')
    """
    from metamod.llm.embedded import is_embedded

    if config.model_alias:
        return config.model_alias
    return config.model.strip().lower() if is_embedded(config.model) else Path(config.model).stem


def server_command(config: ServerConfig, gguf: str | Path, port: int) -> list[str]:
    """``python -m llama_cpp.server`` with the options of ``config`` (:func:`start_server` runs it under the
    watchdog)."""
    threads_batch = config.n_threads_batch or config.n_threads
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", str(gguf),
        "--model_alias", served_name(config),
        "--host", config.host,
        "--port", str(port),
        "--n_ctx", str(config.n_ctx),
        "--n_threads", str(config.n_threads),
        "--n_threads_batch", str(threads_batch),
        "--n_batch", str(config.n_batch),
        "--verbose", str(bool(config.verbose)),
    ]  # fmt: skip


def spawn_watched(module: str, args: list[str], *, log_fd: int, grace: float) -> tuple[subprocess.Popen, int]:
    """Run ``python -m module *args`` under :mod:`~metamod.llm.llamacpp.watchdog`; return the process and the
    write end of its watchdog pipe (keep it open while the child should live; closing it, or this process ending
    in any way, stops the child).

    Args:
        module: the module run as ``__main__`` (``llama_cpp.server``).
        args: its arguments.
        log_fd: file descriptor that receives the child's stdout and stderr.
        grace: seconds the child waits after its own SIGTERM before exiting hard.
    """
    read_fd, write_fd = os.pipe()  # both ends non-inheritable; only read_fd is passed on
    launcher = [sys.executable, str(WATCHDOG), "--parent-fd", str(read_fd), "--grace", str(grace), "--module", module]
    try:
        process = subprocess.Popen(
            [*launcher, "--", *args],
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            pass_fds=(read_fd,),
            close_fds=True,
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return process, write_fd


def start_server(config: ServerConfig) -> tuple[RunningServer, int]:
    """Start the server process (not yet ready); return it and the write end of its watchdog pipe."""
    if not is_llamacpp_available():
        raise ServerError(f"llama-cpp-python is not installed: {INSTALL_HINT}")
    gguf = resolve_gguf(config.model)
    port = config.port or free_port(config.host)
    command = server_command(config, gguf, port)
    fd_log, log_name = tempfile.mkstemp(prefix="llamacpp-server-", suffix=".log")
    try:
        process, write_fd = spawn_watched(command[2], command[3:], log_fd=fd_log, grace=config.shutdown_grace)
    finally:
        os.close(fd_log)
    host = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
    server = RunningServer(f"http://{host}:{port}/v1", served_name(config), gguf, process, Path(log_name))
    logger.info("llama.cpp server pid %d starting on %s (%s); log %s", process.pid, server.base_url, gguf, log_name)
    return server, write_fd


def wait_ready(server: RunningServer, timeout: float) -> float:
    """Poll ``GET /v1/models`` until it answers 200; return the seconds waited.

    Raises:
        ServerError: the process exited, or no answer within ``timeout`` seconds (with the log's tail).
    """
    started = time.monotonic()
    deadline = started + timeout
    url = f"{server.base_url}/models"
    with httpx.Client(timeout=2.0) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise ServerError(
                    f"llama.cpp server on {server.gguf.name} exited with code {code} before answering {url}; "
                    f"log: {server.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ServerError(
                    f"llama.cpp server on {server.gguf.name} did not answer {url} within {timeout:.0f} s "
                    f"(startup_timeout); log: {server.log_tail()}"
                )
            time.sleep(0.2)


def stop_server(server: RunningServer, grace: float) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; return the exit code (None if it could not be reaped)."""
    process = server.process
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            logger.warning("llama.cpp server pid %d ignored SIGTERM for %.0f s; killing it", process.pid, grace)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    return process.poll()


@contextlib.contextmanager
def llamacpp_server(config: ServerConfig | None = None, *, keep_log: bool = False) -> Iterator[RunningServer]:
    """Run llama.cpp's OpenAI-compatible server for the duration of a ``with`` block.

    Args:
        config: the server settings (default: the embedded SmolLM2 on a free loopback port, 2 threads).
        keep_log: keep the server's log file after the block (its path is ``server.log_path``).

    Yields:
        The :class:`RunningServer`, ready to answer.

    Raises:
        ServerError: llama-cpp-python missing, the server exited early or never answered.
    """
    config = config or ServerConfig()
    server, watchdog_fd = start_server(config)
    try:
        waited = wait_ready(server, config.startup_timeout)
        logger.info("llama.cpp server ready at %s after %.1f s", server.base_url, waited)
        yield server
    finally:
        stop_server(server, config.shutdown_grace)
        os.close(watchdog_fd)
        if not keep_log:
            with contextlib.suppress(OSError):
                server.log_path.unlink()


# --------------------------------------------------------------------------------------------- CLI


def add_server_arguments(parser) -> None:
    """One ``--name`` option per :class:`ServerConfig` field, with its help text and default."""
    for spec in dataclasses.fields(ServerConfig):
        default = spec.default
        kind = {"int": int, "float": float, "bool": _boolean}.get(str(spec.type).split(" ")[0], str)
        parser.add_argument(
            f"--{spec.name}", type=kind, default=default, help=f"{spec.metadata['help']} (default: {default})"
        )


def _boolean(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def config_from_args(args) -> ServerConfig:
    """The :class:`ServerConfig` of parsed :func:`add_server_arguments` options."""
    return ServerConfig(**{spec.name: getattr(args, spec.name) for spec in dataclasses.fields(ServerConfig)})


def serve(config: ServerConfig) -> int:
    """``metamod model serve``: run the server in the foreground until Ctrl-C or SIGTERM (then stop it cleanly)."""

    def on_term(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with llamacpp_server(config) as server:
            print(f"llama.cpp server (pid {server.pid}) serving {server.gguf}", flush=True)
            print(f"base_url: {server.base_url}", flush=True)
            print(
                f"use it with: backend: openai, model: {server.model_name}, base_url: {server.base_url} "
                "(Ctrl-C stops it)",
                flush=True,
            )
            code = server.process.wait()
            raise ServerError(f"llama.cpp server exited with code {code}; log: {server.log_tail()}")
    except KeyboardInterrupt:
        print("llama.cpp server stopped", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
