"""Where benchmark rows come from: a local jsonl/json/parquet/csv file, or a Hugging Face dataset id + split.

Rows are returned column-wise (``{column: [values...]}``) so that large splits stay cheap to scan; the task
classes in :mod:`metamod.tasks.benchmarks` map columns to :class:`~metamod.tasks.base.Example` fields.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metamod.errors import InputError, decode_utf8, read_text

logger = logging.getLogger(__name__)

#: File suffixes :func:`read_table` understands.
FILE_FORMATS = (".jsonl", ".json", ".parquet", ".csv")

Table = dict[str, list[Any]]


def _rows_to_table(rows: Sequence[dict[str, Any]], path: Path) -> Table:
    columns: dict[str, None] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"{path}: row {index} is a {type(row).__name__}, expected a JSON object of column: value")
        columns.update(dict.fromkeys(row))
    return {column: [row.get(column) for row in rows] for column in columns}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open("rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            line = decode_utf8(raw, path, first_line=line_number)
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise InputError(
                    f"{path}:{line_number}:{err.colno}: not valid JSON ({err.msg}); expected one JSON object per line"
                ) from err
    return rows


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise InputError(
            f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); expected a JSON list of rows"
        ) from err
    if isinstance(data, dict):
        lists = [value for value in data.values() if isinstance(value, list)]
        if "data" in data and isinstance(data["data"], list):
            return data["data"]
        if len(lists) == 1:
            return lists[0]
        raise InputError(f"{path}: expected a JSON list of rows, or an object with one list of rows (e.g. 'data')")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    return data


def _read_csv(path: Path) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    rows = []
    try:
        for row in reader:
            if None in row:  # more fields than the header names
                raise InputError(
                    f"{path}:{reader.line_num}: {len(reader.fieldnames or []) + len(row[None])} fields; expected "
                    f"{len(reader.fieldnames or [])}, one per header column (quote values that contain commas)"
                )
            rows.append(row)
    except csv.Error as err:
        raise InputError(f"{path}:{reader.line_num}: not valid CSV ({err}); expected comma-separated values") from err
    return rows


def _read_parquet(path: Path) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pydict()
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: not a readable Parquet file ({err}); expected a .parquet table") from err


def read_table(path: str | Path) -> Table:
    """Read a local data file into columns.

    Args:
        path: a ``.jsonl``, ``.json`` (a list of rows, or ``{"data": [...]}``), ``.parquet`` or ``.csv`` file.

    Returns:
        ``{column: [value per row]}`` (a value is ``None`` where a row lacks the column).

    Raises:
        FileNotFoundError: when the file does not exist.
        InputError: (a ``ValueError``) for an unknown suffix, or a file that does not decode as UTF-8 or parse
            (naming the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Data file not found: {path} (expected one of {', '.join(FILE_FORMATS)})")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _rows_to_table(_read_jsonl(path), path)
    if suffix == ".json":
        return _rows_to_table(_read_json(path), path)
    if suffix == ".csv":
        return _rows_to_table(_read_csv(path), path)
    if suffix == ".parquet":
        return _read_parquet(path)
    raise InputError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(FILE_FORMATS)}")


def load_hub_table(path: str, config: str | None, split: str, columns: Sequence[str] | None = None) -> Table:
    """Load one split of a Hugging Face dataset (needs network or a warm cache) into columns.

    Args:
        path: the dataset id, e.g. ``"openai/gsm8k"``.
        config: the dataset config name (``None`` for the default).
        split: the split name, e.g. ``"test"``.
        columns: convert only these columns (big corpora stay cheap); ``None`` converts all.

    Returns:
        ``{column: [value per row]}``.
    """
    from datasets import load_dataset

    if columns is None:
        logger.info("Loading %s (config=%s, split=%s) from the Hugging Face hub", path, config, split)
    else:
        logger.info(
            "Loading %s (config=%s, split=%s, columns=%s) from the Hugging Face hub", path, config, split, columns
        )
    try:
        dataset = load_dataset(path, config, split=split)
    except Exception as err:  # datasets raises many error types for offline / missing / bad split
        raise RuntimeError(
            f"Could not load dataset {path!r} (config={config!r}, split={split!r}): {err}. Without hub access, "
            f"pass data_files=<local .jsonl/.json/.parquet/.csv> instead."
        ) from err
    if columns is None:
        return {column: list(dataset[column]) for column in dataset.column_names}
    keep = [column for column in columns if column in dataset.column_names]
    return {column: list(dataset[column]) for column in keep} if keep else dict.fromkeys(dataset.column_names, [])


def require_columns(table: Table, columns: dict[str, str | None], source: str) -> None:
    """Fail clearly when a mapped column is missing.

    Args:
        table: the loaded columns.
        columns: ``{option name: column name}`` (``None`` entries are not required).
        source: the file or dataset id, for the message.

    Raises:
        ValueError: naming the option, the missing column, the source and the available columns.
    """
    for option, column in columns.items():
        if column is not None and column not in table:
            available = ", ".join(sorted(table)) or "(none: the file has no rows)"
            raise ValueError(
                f"{source}: column {column!r} (set by {option}) not found. Available columns: {available}. "
                f"Set {option}=<one of them>."
            )
