"""Traces on disk: schema version 1, one JSON object per debate (question) per line; MRO traces (``"loop": "mro"``,
:mod:`metamod.rollout.mro.traces`) share the files, the writer, the reader, sharding and merging.

Writing is append-only with a flush after every line, so a crash or Ctrl-C loses at most the line being
written. Reading tolerates exactly that: a torn LAST line is dropped with a warning, while a broken line in the
middle of a file is an error naming the file and line. :class:`TraceWriter` resumes a file (``done_ids``) and cuts
a torn tail before appending. Sharding helpers pick a stable subset of examples per shard and merge the shard
files back in the original example order.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "traces.jsonl"
>>> with TraceWriter(path) as writer:
...     writer.write(example_trace("q1"))
>>> [t["id"] for t in read_traces(path)]
['q1']
>>> shard_of("q1", 4) == shard_of("q1", 4)
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from metamod.files import JsonlWriter, iter_jsonl, repair_torn_tail
from metamod.rollout.trace_schema import (
    QUESTION_FIELDS,
    SCHEMA_VERSION,
    TraceError,
    check_binary,
    check_field,
    check_record,
)

logger = logging.getLogger(__name__)

STOP_REASONS = ("max_rounds", "hook")
BACKEND_NAMES = ("sim", "hf", "vllm", "openai", "fake")

# field -> accepted python types (the schema in docs/contracts.md; `index` is an optional additive field).
_TOP_FIELDS: dict[str, tuple[type, ...]] = {
    **QUESTION_FIELDS,
    "agents": (list,),
    "rounds": (list,),
    "num_rounds": (int,),
    "stop_reason": (str,),
}
_RESPONSE_FIELDS: dict[str, tuple[type, ...]] = {
    "agent": (int,),
    "text": (str,),
    "answer": (str, type(None)),
    "prompt_tokens": (int,),
    "completion_tokens": (int,),
    "trimmed": (bool,),
}


def validate_trace(trace: Any, where: str = "trace") -> dict:
    """Check one trace object against schema version 1.

    Args:
        trace: the decoded JSON object.
        where: a location prefix for error messages (e.g. ``"traces.jsonl:12"``).

    Returns:
        The same object, when valid.

    Raises:
        TraceError: naming the location and the bad field.

    >>> validate_trace(example_trace("q1"))["id"]
    'q1'
    >>> bad = example_trace("q1"); bad["rounds"][0]["eta"] = 2
    >>> validate_trace(bad, "f.jsonl:3")
    Traceback (most recent call last):
    ...
    metamod.rollout.trace_schema.TraceError: f.jsonl:3: field 'rounds[0].eta' must be 0 or 1, got 2
    """
    if isinstance(trace, dict) and "loop" in trace and trace["loop"] != "debate":  # MRO traces: their own payload
        from metamod.rollout.mro.traces import validate_mro_trace

        return validate_mro_trace(trace, where)
    check_record(trace, _TOP_FIELDS, where)
    if trace["stop_reason"] not in STOP_REASONS:
        raise TraceError(f"{where}: field 'stop_reason' must be one of {STOP_REASONS}, got {trace['stop_reason']!r}")
    agents = trace["agents"]
    if not agents:
        raise TraceError(f"{where}: field 'agents' is empty; a debate has at least one agent")
    for i, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise TraceError(f"{where}: field 'agents[{i}]' must be an object")
        for name, types in (("index", (int,)), ("backend", (str,)), ("model", (str,)), ("settings", (dict,))):
            check_field(agent, name, types, f"{where}: agents[{i}]")
    rounds = trace["rounds"]
    if len(rounds) != trace["num_rounds"]:
        raise TraceError(f"{where}: field 'num_rounds' is {trace['num_rounds']} but 'rounds' has {len(rounds)} entries")
    for t, rnd in enumerate(rounds):
        if not isinstance(rnd, dict):
            raise TraceError(f"{where}: field 'rounds[{t}]' must be an object")
        if rnd.get("round") != t:
            raise TraceError(f"{where}: field 'rounds[{t}].round' must be {t}, got {rnd.get('round')!r}")
        check_binary(rnd.get("eta"), f"rounds[{t}].eta", where)
        responses = rnd.get("responses")
        if not isinstance(responses, list) or len(responses) != len(agents):
            raise TraceError(f"{where}: field 'rounds[{t}].responses' must list one response per agent ({len(agents)})")
        for j, resp in enumerate(responses):
            if not isinstance(resp, dict):
                raise TraceError(f"{where}: field 'rounds[{t}].responses[{j}]' must be an object")
            for name, types in _RESPONSE_FIELDS.items():
                check_field(resp, name, types, f"{where}: rounds[{t}].responses[{j}]")
    return trace


def example_trace(example_id: str = "q1", *, answers: tuple[str | None, ...] = ("4", "5"), gold: str = "4") -> dict:
    """A small valid one-round trace (for docs and tests).

    >>> example_trace("x")["rounds"][0]["eta"]
    1
    """
    responses = [
        {
            "agent": i,
            "text": f"<answer>{a}</answer>" if a is not None else "unsure",
            "answer": a,
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "trimmed": False,
        }
        for i, a in enumerate(answers)
    ]
    return {
        "schema_version": SCHEMA_VERSION,
        "id": example_id,
        "task": "arith",
        "question": "What is 2 + 2?",
        "gold": gold,
        "kind": "math",
        "choices": None,
        "meta": {},
        "simulated": True,
        "agents": [{"index": i, "backend": "sim", "model": "sim", "settings": {}} for i in range(len(answers))],
        "rounds": [{"round": 0, "eta": int(gold in answers), "responses": responses}],
        "num_rounds": 1,
        "stop_reason": "max_rounds",
    }


# --------------------------------------------------------------------------------------------- reading


def read_traces(path: str | os.PathLike, *, validate: bool = True) -> Iterator[dict]:
    """Stream the traces of a ``traces.jsonl`` file.

    A torn last line (left by a crash or Ctrl-C mid-write) is dropped with a warning. A broken line anywhere
    else is an error naming the line, as is a schema violation (when ``validate``).

    Args:
        path: the JSONL file.
        validate: check every trace against the schema.

    Yields:
        One trace dict per debate.

    Raises:
        FileNotFoundError: when the file does not exist.
        TraceError: for a corrupt line in the middle of the file or an invalid trace.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Trace file not found: {path}")
    check = validate_trace if validate else _require_object
    for _, trace in iter_jsonl(path, check=check, error=TraceError, blank_lines="error"):
        yield trace


def _require_object(trace: Any, where: str) -> None:
    """The least every reader needs: a line that is a JSON object (``[1, 2]`` or ``"text"`` is valid JSON too)."""
    if not isinstance(trace, dict):
        raise TraceError(f"{where}: a trace must be a JSON object, got a {type(trace).__name__}; expected one debate")


# --------------------------------------------------------------------------------------------- writing


class TraceWriter:
    """Append traces to a JSONL file, one line each, flushed immediately.

    Args:
        path: the output file (parent folders are created).
        resume: keep existing traces (their ids are in :attr:`done_ids`) and append; a torn tail is cut first.
            With ``resume=False`` an existing file is replaced.
        validate: check each trace against the schema before writing it.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"
    >>> with TraceWriter(path) as w:
    ...     w.write(example_trace("a"))
    >>> TraceWriter(path, resume=True).done_ids
    {'a'}
    """

    def __init__(self, path: str | os.PathLike, *, resume: bool = True, validate: bool = True) -> None:
        self.path = Path(path)
        self.validate = validate
        self.done_ids: set[str] = set()
        resume = resume and self.path.exists()
        if resume:
            repair_torn_tail(self.path)
            self.done_ids = {t["id"] for t in read_traces(self.path, validate=False)}
        self._writer = JsonlWriter(self.path, resume=resume)  # flush per line, fsync on sync()/close()

    @property
    def num_written(self) -> int:
        return self._writer.num_written

    def write(self, trace: dict) -> None:
        """Append one trace and flush it to the OS (a crash after this call cannot lose it)."""
        if self.validate:
            validate_trace(trace, f"trace {trace.get('id')!r} for {self.path}")
        self._writer.write(trace)
        self.done_ids.add(trace["id"])

    def sync(self) -> None:
        """``fsync`` the traces written so far (e.g. at the end of a batch)."""
        self._writer.sync()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------- sharding


def shard_of(example_id: str, num_shards: int) -> int:
    """The shard (0-based) an example id belongs to: a stable hash, identical across runs and machines.

    >>> [shard_of(i, 3) for i in ("a", "b", "c")] == [shard_of(i, 3) for i in ("a", "b", "c")]
    True
    """
    digest = hashlib.sha1(str(example_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


def check_shard_args(num_shards: int, shard_index: int) -> None:
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be in [0, {num_shards - 1}] for num_shards={num_shards}, got {shard_index}")


def in_shard(example_id: str, position: int, *, num_shards: int, shard_index: int, by: str = "hash") -> bool:
    """Whether the example (id, position in the stream) belongs to shard ``shard_index`` of ``num_shards``.

    >>> in_shard("q7", 7, num_shards=2, shard_index=1, by="position")
    True
    """
    if num_shards == 1:
        return True
    if by == "hash":
        return shard_of(example_id, num_shards) == shard_index
    if by == "position":
        return position % num_shards == shard_index
    raise ValueError(f"shard_by must be 'hash' or 'position', got {by!r}")


def shard_filename(num_shards: int, shard_index: int) -> str:
    """``traces.jsonl`` for an unsharded run, else ``traces.shard-i-of-K.jsonl``.

    >>> shard_filename(4, 1)
    'traces.shard-1-of-4.jsonl'
    """
    check_shard_args(num_shards, shard_index)
    return "traces.jsonl" if num_shards == 1 else f"traces.shard-{shard_index}-of-{num_shards}.jsonl"


_CONSISTENT_FIELDS = ("task", "question", "gold", "kind", "choices")


def merge_shards(inputs: Iterable[str | os.PathLike], output: str | os.PathLike) -> dict[str, int]:
    """Merge shard files into one ``traces.jsonl``: de-duplicated by id, in the original example order.

    Traces are ordered by their ``index`` (position in the task's example stream, written by the engine) and
    then by id, so the merged file is identical to an unsharded run's. A duplicate id must describe the same
    question (same task, question, gold, kind, choices); otherwise the merge fails naming both files.

    Args:
        inputs: shard files (a missing file is an error).
        output: the merged file (overwritten).

    Returns:
        Counts: ``{"inputs": files, "traces": written, "duplicates": dropped}``.

    Raises:
        FileNotFoundError: for a missing input.
        TraceError: for inconsistent duplicates, mixed schema versions or invalid traces.
    """
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise ValueError("merge_shards needs at least one input file")
    for path in inputs:
        if not path.is_file():
            raise FileNotFoundError(f"Shard file not found: {path}")
    output = Path(output)
    if output.resolve() in {p.resolve() for p in inputs}:
        raise ValueError(f"merge output {output} is also an input; choose another output path")
    seen: dict[str, tuple[Path, dict]] = {}
    keys: list[tuple[int, str]] = []
    duplicates = 0
    for path in inputs:
        for trace in read_traces(path):
            tid = trace["id"]
            if tid in seen:
                first_path, first = seen[tid]
                diff = [f for f in _CONSISTENT_FIELDS if first.get(f) != trace.get(f)]
                if diff:
                    raise TraceError(f"id {tid!r} appears in {first_path} and {path} with different {diff}")
                duplicates += 1
                continue
            seen[tid] = (path, trace)
            index = trace.get("index")
            keys.append((index if isinstance(index, int) else 1 << 62, tid))
    keys.sort()
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for _, tid in keys:
            handle.write(json.dumps(seen[tid][1], ensure_ascii=False) + "\n")
    tmp.replace(output)
    if duplicates:
        logger.info("merge_shards: dropped %d duplicate trace(s)", duplicates)
    return {"inputs": len(inputs), "traces": len(keys), "duplicates": duplicates}
