"""The viewer's data: one JSON document built from an eval or a rollout output folder (read, never written).

An **eval** folder (``samples.jsonl``, with ``results.json``, ``traces-seed<s>.jsonl`` and ``method-traces.jsonl``
when present) gives one entry per ``(task, seed, question)`` with each method's outcome, decisions and, where the
method ran its own loop (MRO, MARCO), its own trace from ``method-traces.jsonl``. Without a traces file (``mode=live``
keeps no transcripts) a question's rounds come from its ``samples.jsonl`` row: answers, ``eta`` and tokens, no text. A **rollout** folder (``traces.jsonl``) gives
one entry per debate and no methods. Rows that a resumed eval appended are merged per question (later rows win) and
only rows written under the folder's ``settings_fingerprint`` count, as in the eval's own metrics.

>>> import json, pathlib, tempfile
>>> run = pathlib.Path(tempfile.mkdtemp())
>>> trace = {"id": "q1", "task": "arith", "question": "1+1?", "gold": "2", "kind": "math", "rounds": [
...     {"round": 0, "eta": 1, "responses": [{"agent": 0, "text": "<answer>2</answer>", "answer": "2"},
...                                          {"agent": 1, "text": "<answer>3</answer>", "answer": "3"}]}]}
>>> _ = (run / "traces.jsonl").write_text(json.dumps(trace) + "\\n")
>>> doc = load_run(run)
>>> doc["kind"], doc["methods"], [(q["key"], q["disagree0"]) for q in doc["questions"]]
('rollout', [], [('arith|0|q1', True)])
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from metamod.errors import InputError, load_json
from metamod.files import read_jsonl
from metamod.rollout.traces import shard_filename
from metamod.tasks.voting import all_agree

from ..cells import METHOD_TRACES_FILE, RESULTS_FILE, SAMPLES_FILE

logger = logging.getLogger(__name__)

ROLLOUT_TRACES_FILE = shard_filename(1, 0)  # an unsharded rollout's traces.jsonl
_SEED_TRACES = re.compile(r"traces-seed(-?\d+)\.jsonl$")
#: fields of a debate response the page shows (the rest, e.g. raw sampling settings, stays on disk)
_RESPONSE_KEYS = ("agent", "text", "answer", "prompt_tokens", "completion_tokens", "trimmed", "memory_items")


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """The viewer document of ``run_dir`` (an eval or a rollout output folder).

    Args:
        run_dir: the folder.

    Returns:
        ``{"kind": "eval"|"rollout", "run_dir", "simulated", "mode", "methods", "labels", "tasks", "max_rounds",
        "questions": [...]}``; each question has ``key`` (``task|seed|id``), ``id``, ``task``, ``seed``,
        ``question``, ``gold``, ``choices``, ``disagree0`` (round-0 answers do not all agree, ``None`` without a
        debate), ``debate`` (the shared debate's rounds or ``None``) and ``methods`` (method -> outcome).

    Raises:
        InputError: the folder is missing or holds neither ``samples.jsonl`` nor ``traces.jsonl``, or holds no rows.
    """
    folder = Path(run_dir)
    if not folder.is_dir():
        raise InputError(f"run folder not found: {folder} (expected an eval or rollout output folder)")
    if (folder / SAMPLES_FILE).is_file():
        return _eval_document(folder)
    if (folder / ROLLOUT_TRACES_FILE).is_file():
        return _rollout_document(folder)
    shards = " (it holds rollout shards: merge them first with `metamod merge-shards`)"
    raise InputError(
        f"{folder}: neither {SAMPLES_FILE} (an eval output folder) nor {ROLLOUT_TRACES_FILE} (a rollout output folder)"
        + (shards if any(folder.glob("traces.shard-*.jsonl")) else "")
    )


# --------------------------------------------------------------------------------------------- traces


def slim_debate(trace: dict[str, Any]) -> dict[str, Any]:
    """The parts of a debate trace the page shows: per round ``eta`` and each agent's response.

    >>> slim_debate({"stop_reason": "max_rounds", "rounds": [{"round": 0, "eta": 1,
    ...     "responses": [{"agent": 0, "text": "t", "answer": "4", "logprobs": [0.1]}]}]})
    {'stop_reason': 'max_rounds', 'rounds': [{'round': 0, 'eta': 1, 'responses': [{'agent': 0, 'text': 't', 'answer': '4'}]}]}
    """
    rounds = []
    for index, rnd in enumerate(trace.get("rounds") or []):
        responses = [{k: r[k] for k in _RESPONSE_KEYS if k in r} for r in rnd.get("responses") or []]
        rounds.append({"round": rnd.get("round", index), "eta": rnd.get("eta"), "responses": responses})
    return {"stop_reason": trace.get("stop_reason"), "rounds": rounds}


def round0_disagree(trace: dict[str, Any] | None) -> bool | None:
    """Whether the round-0 answers of a debate fail to agree (:func:`metamod.tasks.voting.all_agree`; a missing or
    unparsable answer disagrees); ``None`` when there is no debate.

    >>> round0_disagree({"kind": "math", "rounds": [{"responses": [{"answer": "4"}, {"answer": "4.0"}]}]})
    False
    >>> round0_disagree({"kind": "math", "rounds": [{"responses": [{"answer": "4"}, {"answer": None}]}]})
    True
    """
    if not trace or not trace.get("rounds"):
        return None
    answers = [r.get("answer") for r in trace["rounds"][0].get("responses") or []]
    if len(answers) < 2:
        return None
    return not all_agree(answers, kind=trace.get("kind") or "math", choices=trace.get("choices"))


def _is_debate(trace: Any) -> bool:
    return isinstance(trace, dict) and isinstance(trace.get("rounds"), list) and "loop" not in trace


def _seed_traces(folder: Path) -> dict[tuple[int, str | None, str], dict[str, Any]]:
    """``(seed, task, id)`` and ``(seed, None, id)`` -> trace, from every ``traces-seed<s>.jsonl`` (the last line per
    question wins; the task keeps apart equal ids of two entries of one task, ``name@variant``)."""
    out: dict[tuple[int, str | None, str], dict[str, Any]] = {}
    for path in sorted(folder.glob("traces-seed*.jsonl")):
        match = _SEED_TRACES.search(path.name)
        if match is None:
            continue
        seed = int(match.group(1))
        for trace in read_jsonl(path):
            out[(seed, str(trace.get("task")), str(trace.get("id")))] = trace
            out[(seed, None, str(trace.get("id")))] = trace
    return out


def _method_traces(folder: Path) -> dict[tuple[str, int, str, str], tuple[str | None, Any]]:
    """``(task, seed, id, method) -> (fingerprint, trace)`` from ``method-traces.jsonl`` (the last line wins)."""
    out: dict[tuple[str, int, str, str], tuple[str | None, Any]] = {}
    for line in read_jsonl(folder / METHOD_TRACES_FILE):
        key = (str(line.get("task")), int(line.get("seed", 0)), str(line.get("id")), str(line.get("method")))
        out[key] = (line.get("fingerprint"), line.get("trace"))
    return out


# --------------------------------------------------------------------------------------------- eval folders


def _merged_rows(rows: list[dict[str, Any]], settings: str | None) -> list[dict[str, Any]]:
    """One row per ``(task, seed, id)``, merging the method records of appended rows (later rows win), in first-seen
    order; rows written under other settings than ``settings`` (when given) are left out.

    >>> rows = [{"task": "t", "seed": 0, "id": "a", "settings": "S", "methods": {"x": 1}},
    ...         {"task": "t", "seed": 0, "id": "a", "settings": "S", "methods": {"y": 2}},
    ...         {"task": "t", "seed": 0, "id": "b", "settings": "OLD", "methods": {"x": 3}}]
    >>> [(r["id"], r["methods"]) for r in _merged_rows(rows, "S")]
    [('a', {'x': 1, 'y': 2})]
    """
    merged: dict[tuple[str, int, str], dict[str, Any]] = {}
    for row in rows:
        if settings is not None and row.get("settings") not in (None, settings):
            continue
        key = (str(row.get("task")), int(row.get("seed", 0)), str(row.get("id")))
        if key not in merged:
            merged[key] = {**row, "methods": {}, "fingerprints": {}}
        elif not merged[key].get("rounds") and row.get("rounds"):
            merged[key].update({k: v for k, v in row.items() if k not in ("methods", "fingerprints")})
        merged[key]["methods"].update(row.get("methods") or {})
        merged[key]["fingerprints"].update(row.get("fingerprints") or {})
    return list(merged.values())


def _outcome(record: dict[str, Any], own: Any) -> dict[str, Any]:
    """One method's outcome for the page: its record from ``samples.jsonl`` and its own trace (or ``None``)."""
    out = {
        k: record.get(k)
        for k in ("final_answer", "correct", "covered", "stop_round", "rounds", "tokens", "decisions", "texts")
    }
    out["memory_items"] = record.get("memory_items")
    if own is not None:
        out["loop"] = own  # an MRO / MARCO trace: shown as it is
    return out


def _check_eval_row(row: Any, where: str) -> None:
    """Refuse a line that is not an eval row (a train folder also has a ``samples.jsonl``, of completions).

    >>> _check_eval_row({"step": 4, "completion": "STOP"}, "run/samples.jsonl:1")
    Traceback (most recent call last):
    ...
    metamod.errors.InputError: run/samples.jsonl:1: not an eval row (expected the keys id, task and methods, a mapping); is this an eval output folder?
    """
    if not (isinstance(row, dict) and "id" in row and "task" in row and isinstance(row.get("methods"), dict)):
        raise InputError(
            f"{where}: not an eval row (expected the keys id, task and methods, a mapping); is this an eval output folder?"
        )


def _eval_document(folder: Path) -> dict[str, Any]:
    results = load_json(folder / RESULTS_FILE, what="eval results") if (folder / RESULTS_FILE).is_file() else {}
    rows = _merged_rows(read_jsonl(folder / SAMPLES_FILE, check=_check_eval_row), results.get("settings_fingerprint"))
    if not rows:
        raise InputError(f"{folder / SAMPLES_FILE}: no rows (the eval wrote no question yet)")
    debates = _seed_traces(folder)
    own_traces = _method_traces(folder)
    labels = dict(results.get("labels") or {})
    methods: list[str] = [m for m in labels]
    questions = []
    for row in rows:
        task, seed, qid = str(row.get("task")), int(row.get("seed", 0)), str(row.get("id"))
        for method in row["methods"]:
            if method not in methods:
                methods.append(method)
        debate = debates.get((seed, task, qid)) or debates.get((seed, None, qid))
        outcomes = {}
        for method, record in row["methods"].items():
            fingerprint, own = own_traces.get((task, seed, qid, method), (None, None))
            if fingerprint is not None and fingerprint != (row.get("fingerprints") or {}).get(method, fingerprint):
                own = None  # a trace of an earlier setting of the method
            outcomes[method] = _outcome(record, own)
        questions.append(
            _question(row, task=task, seed=seed, debate=debate, methods=outcomes, rounds=row.get("rounds") or [])
        )
    return {
        "kind": "eval",
        "run_dir": str(folder),
        "simulated": bool(results.get("simulated") or any(r.get("simulated") for r in rows)),
        "mode": results.get("mode"),
        "methods": methods,
        "labels": {m: labels.get(m, m) for m in methods},
        "tasks": sorted({q["task"] for q in questions}),
        "max_rounds": max((q["num_rounds"] for q in questions), default=0),
        "questions": questions,
    }


def _question(
    source: dict[str, Any],
    *,
    task: str,
    seed: int,
    debate: dict[str, Any] | None,
    methods: dict[str, Any],
    rounds: list[dict[str, Any]],
) -> dict[str, Any]:
    """One question entry; the round-0 agreement comes from the debate or, without one, the row's ``rounds``."""
    qid = str(source.get("id"))
    if debate is None and rounds:  # a row's per-round answers stand in for a missing traces file
        debate_like = {
            "kind": source.get("kind"),
            "choices": source.get("choices"),
            "rounds": [{"responses": [{"answer": a} for a in r.get("answers") or []]} for r in rounds[:1]],
        }
        disagree = round0_disagree(debate_like)
    else:
        disagree = round0_disagree({**(debate or {}), "kind": source.get("kind"), "choices": source.get("choices")})
    slim = slim_debate(debate) if debate is not None else None
    if slim is None and rounds:
        slim = {
            "stop_reason": None,
            "rounds": [
                {
                    "round": r.get("round", i),
                    "eta": r.get("eta"),
                    "prompt_tokens": r.get("prompt_tokens"),
                    "completion_tokens": r.get("completion_tokens"),
                    "responses": [{"agent": k, "answer": a} for k, a in enumerate(r.get("answers") or [])],
                }
                for i, r in enumerate(rounds)
            ],
        }
    return {
        "key": f"{task}|{seed}|{qid}",
        "id": qid,
        "task": task,
        "seed": seed,
        "question": source.get("question"),
        "gold": source.get("gold"),
        "choices": source.get("choices"),
        "disagree0": disagree,
        "num_rounds": len(slim["rounds"]) if slim else 0,
        "debate": slim,
        "methods": methods,
    }


# --------------------------------------------------------------------------------------------- rollout folders


def _rollout_document(folder: Path) -> dict[str, Any]:
    traces = read_jsonl(folder / ROLLOUT_TRACES_FILE)
    if not traces:
        raise InputError(f"{folder / ROLLOUT_TRACES_FILE}: no traces")
    questions: dict[str, dict[str, Any]] = {}
    for trace in traces:  # a rerun's later line for the same question wins
        task, seed = str(trace.get("task")), 0
        if _is_debate(trace):
            entry = _question(trace, task=task, seed=seed, debate=trace, methods={}, rounds=[])
        else:  # an MRO loop trace in a rollout folder: shown as it is
            entry = _question(trace, task=task, seed=seed, debate=None, methods={}, rounds=[])
            entry["loop"] = trace
        questions.pop(entry["key"], None)
        questions[entry["key"]] = entry
    return {
        "kind": "rollout",
        "run_dir": str(folder),
        "simulated": any(t.get("simulated") for t in traces),
        "mode": None,
        "methods": [],
        "labels": {},
        "tasks": sorted({q["task"] for q in questions.values()}),
        "max_rounds": max((q["num_rounds"] for q in questions.values()), default=0),
        "questions": list(questions.values()),
    }
