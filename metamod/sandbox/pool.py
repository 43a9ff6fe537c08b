"""``run_many``: many sandboxed executions in parallel (threads, each waiting on its own child process).

A job is a zero-argument callable (e.g. ``functools.partial(run_function, code, "f", inputs)``), a code string
(``run_python(code)``) or a ``(code, kwargs)`` pair (``run_python(code, **kwargs)``). Results come back in job
order; every job is checked before any runs, and the first exception a job raises is raised (after the jobs
already started have finished, so no child is left behind).

>>> [r.stdout for r in run_many(["print(1)", ("print(input())", {"stdin": "two"}), lambda: run_python("print(3)")])]
['1\\n', 'two\\n', '3\\n']
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metamod.errors import ConfigError
from metamod.sandbox.runner import run_python

Job = Callable[[], Any] | str | tuple[str, Mapping[str, Any]]


def run_many(jobs: Iterable[Job], workers: int | None = None) -> list[Any]:
    """Run ``jobs`` on ``workers`` threads (default: ``os.cpu_count()``), results in job order.

    Args:
        jobs: callables, code strings or ``(code, run_python kwargs)`` pairs.
        workers: parallel sandboxes at most (1: one after the other, in this thread).

    Returns:
        One result per job: what the callable returned, or the :class:`SandboxResult` of ``run_python``.
    """
    calls = [_as_call(i, job) for i, job in enumerate(jobs)]
    if workers is None:
        workers = os.cpu_count() or 1
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an int >= 1 or None (one per CPU core), got {workers!r}")
    if workers == 1 or len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=min(workers, len(calls)), thread_name_prefix="sandbox") as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]


def _as_call(i: int, job: Job) -> Callable[[], Any]:
    if isinstance(job, str):
        return lambda: run_python(job)
    if isinstance(job, tuple) and len(job) == 2 and isinstance(job[0], str) and isinstance(job[1], Mapping):
        code, kwargs = job
        return lambda: run_python(code, **kwargs)
    if callable(job):
        return job
    raise ConfigError(f"jobs[{i}] must be a callable, a code string or a (code, kwargs) pair, got {type(job).__name__}")
