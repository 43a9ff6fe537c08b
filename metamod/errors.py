"""The anticipated failures of every ``metamod`` command, in one place.

An anticipated failure is input the user can fix: a bad option, a path that cannot be read or written, a file that
does not decode or parse, an input that holds nothing to work on. Library code raises one of the classes below with
a message that says what is wrong, where (option, file, line) and what was expected; the dispatcher
(:mod:`metamod.cli`) prints it as the single line ``metamod <command>: error: <message>`` and exits with code 2
(``--debug``: the traceback instead). Every other exception is a bug and keeps its traceback.

Each class also derives from ``ValueError``, so callers that catch ``ValueError`` keep working.

>>> issubclass(ConfigError, ValueError) and issubclass(InputError, MetamodError)
True
>>> anticipated_message(ConfigError("max_rounds must be >= 1, got 0"))
'max_rounds must be >= 1, got 0'
>>> anticipated_message(IndexError("list index out of range")) is None  # a bug: keep the traceback
True
"""

from __future__ import annotations

import json
import linecache
import os
from pathlib import Path
from types import TracebackType
from typing import Any

_PACKAGE_DIR = str(Path(__file__).resolve().parent) + os.sep


class MetamodError(Exception):
    """Marker base of every anticipated failure; its message says what, where and what was expected."""


class ConfigError(MetamodError, ValueError):
    """A configuration problem found before any expensive work starts (a bad value, combination or config file)."""


class InputError(MetamodError, ValueError):
    """An input file that cannot be used: undecodable, unparsable or corrupt, or holding nothing (0 traces, 0 rows)."""


# ------------------------------------------------------------------------------------------ reading files


def decode_utf8(data: bytes, path: str | os.PathLike, *, first_line: int = 1) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark is dropped); a bad byte names the file, line and column.

    ``first_line`` is the file's line number of ``data``'s first line (when decoding a file line by line).

    >>> decode_utf8(b"ok\\n", "f.txt")
    'ok\\n'
    >>> decode_utf8(b'{"a": 1}\\n{"b": "\\xff"}\\n', "rows.jsonl")
    Traceback (most recent call last):
    ...
    metamod.errors.InputError: rows.jsonl:2:8: byte 0xff is not valid UTF-8; expected a UTF-8 text file (re-save it as UTF-8)
    """
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + first_line
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise InputError(
            f"{path}:{line}:{column}: byte 0x{data[err.start]:02x} is not valid UTF-8; expected a UTF-8 text file "
            "(re-save it as UTF-8)"
        ) from err


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of ``path`` (see :func:`decode_utf8`)."""
    return decode_utf8(Path(path).read_bytes(), path)


def load_yaml_text(text: str, source: str | os.PathLike, error: type[MetamodError] = InputError) -> Any:
    """``yaml.safe_load(text)``; a syntax error names ``source``, the line and the column.

    >>> load_yaml_text("a: 1", "c.yaml")
    {'a': 1}
    >>> load_yaml_text("a: [1, 2\\nb: 3\\n", "c.yaml")
    Traceback (most recent call last):
    ...
    metamod.errors.InputError: c.yaml:2:2: YAML syntax error: expected ',' or ']', but got ':'; expected valid YAML
    """
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(source)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise error(f"{where}: YAML syntax error: {problem}; expected valid YAML") from err


def load_json(path: str | os.PathLike, *, what: str = "JSON file") -> Any:
    """The JSON document in ``path``; undecodable or invalid content names the file, line and column."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); expected a {what}") from err


def load_npz(path: str | os.PathLike, *, what: str = "arrays") -> dict[str, Any]:
    """Every array of the ``.npz`` file ``path``, read now; a corrupt, truncated or non-npz file is one
    :class:`InputError` naming the file (numpy would raise ``zipfile.BadZipFile`` and friends).

    >>> import tempfile
    >>> bad = Path(tempfile.mkdtemp()) / "arrays.npz"
    >>> _ = bad.write_bytes(b"PK\\x03\\x04 cut short")
    >>> load_npz(bad, what="memory arrays")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    metamod.errors.InputError: .../arrays.npz: memory arrays do not load (BadZipFile: File is not a zip file); expected an .npz file written by metamod (rerun the step that wrote it)
    """
    import zipfile

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, KeyError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise InputError(
            f"{path}: {what} do not load ({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); expected an "
            ".npz file written by metamod "
            "(rerun the step that wrote it)"
        ) from err


def check_safetensors(path: str | os.PathLike, *, what: str = "weights") -> None:
    """Fail naming ``path`` when its safetensors header does not read (a truncated or corrupt file).

    Only the header is read (no tensor data), so this is cheap for large files.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            handle.keys()
    except (SafetensorError, OSError, ValueError) as err:
        raise InputError(
            f"{path}: {what} do not load ({err}); expected a complete .safetensors file (was the run interrupted "
            "while saving? retrain or re-export it)"
        ) from err


# ------------------------------------------------------------------------------------------ the CLI's view


def one_line(text: str) -> str:
    """The message on one line (the CLI prints exactly one line per error).

    >>> one_line("a problem\\n  details here\\n")
    'a problem details here'
    """
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def anticipated_message(err: BaseException) -> str | None:
    """The one-line message for an anticipated failure, or ``None`` for a bug (which keeps its traceback).

    Anticipated are: every :class:`MetamodError`; every ``OSError`` (a path that is missing, not writable, ...: the
    environment, not the code); a ``ValueError``/``KeyError``/``ImportError`` raised by a ``raise`` statement in
    metamod's own code (the older checks, whose messages already say what to fix); a corrupt file reported by a
    library (safetensors, JSON, YAML, UTF-8; the file is named when the traceback shows it); and weights that do
    not fit their model (``Error(s) in loading state_dict``).
    """
    if isinstance(err, MetamodError):
        return one_line(str(err))
    if isinstance(err, OSError):
        if err.filename is not None and err.strerror:
            where = f"{err.filename} -> {err.filename2}" if err.filename2 else str(err.filename)
            return one_line(f"{where}: {err.strerror}; check that the path exists and this user may read/write it")
        return one_line(str(err))
    if isinstance(err, (ValueError, KeyError, ImportError)) and _raised_by_metamod(err.__traceback__):
        return one_line(err.args[0] if isinstance(err, KeyError) and err.args else str(err))
    kind = _corrupt_file_kind(err)
    if kind is not None:
        path = _file_in_traceback(err.__traceback__)
        where = f"{path}: " if path else ""
        return one_line(f"{where}{kind} does not load ({err}); expected a complete, valid file (re-create it)")
    return None


def _raised_by_metamod(tb: TracebackType | None) -> bool:
    """Whether the innermost frame is a ``raise`` statement in metamod's code (not a library, not ``d[k]``)."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    if not filename.startswith(_PACKAGE_DIR):
        return False
    return linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def _corrupt_file_kind(err: BaseException) -> str | None:
    if isinstance(err, json.JSONDecodeError):
        return "a JSON file"
    if isinstance(err, UnicodeDecodeError):
        return "a text file (not UTF-8)"
    if type(err).__name__ == "SafetensorError":
        return "a safetensors file"
    if any(cls.__module__.startswith("yaml") for cls in type(err).__mro__):
        return "a YAML file"
    if isinstance(err, RuntimeError) and str(err).startswith("Error(s) in loading state_dict"):
        return "the weights (they do not fit the model)"
    return None


def _file_in_traceback(tb: TracebackType | None) -> str | None:
    """The file (or folder) being read when a library failed: a path-valued local, innermost frame first."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for file in (True, False):  # a file in any frame before a folder
        for frame in reversed(frames):
            found = [v for v in frame.f_locals.values() if _is_existing_path(v, file=file)]
            if found:
                return os.fspath(found[0])
    return None


def _is_existing_path(value: Any, *, file: bool) -> bool:
    if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not 0 < len(value) < 4096):
        return False
    try:
        return os.path.isfile(value) if file else os.path.isdir(value) and os.fspath(value) not in (".", "")
    except (OSError, ValueError, TypeError):
        return False
