"""Reading the ``results.json`` that ``metamod eval`` writes (lm-eval-like: ``results[task][method][metric]``).

The model card (:mod:`metamod.train.model_card`) and ``metamod export`` read evaluation results through this
module only.

>>> import json, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "results.json"
>>> _ = path.write_text(json.dumps({"results": {"arith": {"majority": {"accuracy": 0.5}}},
...                                 "labels": {"majority": "MAD"}, "config": {"debaters": "simulated"}}))
>>> load_results(path), results_labels(path), results_simulated(path)
({'arith': {'majority': {'accuracy': 0.5}}}, {'majority': 'MAD'}, True)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"results file not found: {path} (pass the results.json written by `metamod eval`)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"results file {path} is not valid JSON: {err}") from err


def load_results(path: str | os.PathLike) -> dict[str, dict[str, dict[str, Any]]]:
    """Read an lm-eval-like ``results.json``: ``results[task][method][metric]`` (``*_stderr`` twins optional).

    A file whose top level has a ``"results"`` mapping (the lm-eval layout, with ``"config"`` etc. beside it) is
    accepted too; only that mapping is returned.

    Args:
        path: the JSON file.

    Returns:
        ``{task: {method: {metric: value}}}``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, or not that shape (the message names the offending entry).
    """
    path = Path(path)
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("results"), dict):
        data = data["results"]
    if not isinstance(data, dict) or not data:
        raise ValueError(f"results file {path} must map task -> method -> metric -> value; got {type(data).__name__}")
    for task, methods in data.items():
        if not isinstance(methods, dict):
            raise ValueError(f"results file {path}: results[{task!r}] must map method -> metrics, got {methods!r}")
        for method, metrics in methods.items():
            if not isinstance(metrics, dict):
                raise ValueError(
                    f"results file {path}: results[{task!r}][{method!r}] must map metric -> value, got {metrics!r}"
                )
    return data


def results_labels(path: str | os.PathLike) -> dict[str, str]:
    """Method display names from a ``results.json`` written by ``metamod eval`` (``{}`` when absent)."""
    data = _read_json(Path(path))
    labels = data.get("labels") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def results_simulated(path: str | os.PathLike) -> bool:
    """Whether a results file says it came from simulated debaters (top-level or ``config`` ``simulated`` flag)."""
    data = _read_json(Path(path))
    if not isinstance(data, dict):
        return False
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    return bool(data.get("simulated") or config.get("simulated") or config.get("debaters") == "simulated")
