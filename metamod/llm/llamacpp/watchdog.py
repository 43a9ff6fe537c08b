"""Run a Python module as ``__main__`` (llama.cpp's server), and end it when the process that started it goes away.

Started BY PATH (``python watchdog.py --parent-fd N [--module llama_cpp.server] -- <module arguments>``), so it
imports only the standard library and the module, never ``metamod`` (the child needs no ``metamod`` on its path). The starting process keeps
the write end of a pipe and passes the read end as ``--parent-fd``; a daemon thread here blocks reading it. The read
returns end-of-file once every copy of the write end is closed, which happens however the parent ends (exit, crash,
``kill -9``), so the server never outlives it: the thread sends this process SIGTERM (uvicorn shuts down) and, if it
is still alive after ``--grace`` seconds, exits hard.

(``prctl(PR_SET_PDEATHSIG)`` is not used: it fires when the parent *thread* that forked ends, so a server started
from a worker thread would die with that thread; and it is Linux-only.)
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
import threading
import time


def _watch(fd: int, grace: float) -> None:
    """Block until the parent's end of the pipe closes, then stop this process (SIGTERM, then a hard exit)."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace)
    os._exit(1)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent-fd", type=int, required=True, help="read end of the parent's pipe")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds between SIGTERM and a hard exit")
    parser.add_argument("--module", default="llama_cpp.server", help="the module to run as __main__")
    parser.add_argument("server_args", nargs=argparse.REMAINDER, help="-- then the module's arguments")
    args = parser.parse_args(argv)
    server_args = args.server_args[1:] if args.server_args[:1] == ["--"] else args.server_args
    threading.Thread(target=_watch, args=(args.parent_fd, args.grace), daemon=True).start()
    sys.argv = [args.module, *server_args]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
