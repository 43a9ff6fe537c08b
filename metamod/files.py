"""Small file helpers shared by the stages (one implementation each)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_json(path: str | os.PathLike, data: Any, *, indent: int = 1, sort_keys: bool = True) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file in the same folder and an atomic rename.

    An interrupted run leaves either the old file or the new one, never a torn one. Non-JSON values (paths,
    numpy scalars) are written with ``str``.

    >>> import pathlib
    >>> p = atomic_write_json(pathlib.Path(tempfile.mkdtemp()) / "m.json", {"a": 1})
    >>> json.loads(p.read_text())
    {'a': 1}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=indent, sort_keys=sort_keys, ensure_ascii=False, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
