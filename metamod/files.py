"""File helpers shared by the stages, one implementation each: JSONL, atomic JSON, settings signatures, folder locks.

- **JSONL** (traces, eval samples): :class:`JsonlWriter` appends one JSON object per line, flushing every line to
  the OS (a crash of the process loses at most the line being written) and calling ``fsync`` at
  :meth:`JsonlWriter.sync` and on close (a power loss loses at most what came after the last sync).
  :func:`repair_torn_tail` cuts a torn last line before appending, :func:`iter_jsonl` reads a file, dropping a torn
  LAST line with a warning and naming ``file:line`` for a broken line anywhere else.
- **Atomic writes** (summaries, results, memory states, fingerprints): :func:`atomic_write_json` and
  :func:`atomic_write_text` write a temporary file in the same folder and rename it, so a reader sees the old
  file or the new one, never a torn one.
- **Atomic folders** (exports, built models): :func:`staged_folder` fills a hidden sibling folder and renames it
  into place when complete.
- **Folder locks**: :class:`FolderLock` is an exclusive OS-level advisory lock (``fcntl.flock``) on
  ``<folder>/.lock``, which holds the owner's process id. A second writer fails at once with
  :class:`FolderLockedError` naming the folder and that process id. The kernel drops the lock when the process
  ends in any way (``kill -9`` included), so there is never a stale lock to clean up.
- **Validate before writing**: :func:`write_after_checks` is the one order every writing command follows: fail at
  once when another writer holds the folder, read and check every input (writing nothing), only then lock.

>>> import pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> with FolderLock(folder), JsonlWriter(folder / "rows.jsonl") as writer:
...     writer.write({"id": "a"})
>>> [row for _, row in iter_jsonl(folder / "rows.jsonl")]
[{'id': 'a'}]
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from metamod.errors import ConfigError, InputError

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: files above this size are signed by size and modification time instead of their content (:func:`path_signature`)
HASH_LIMIT_BYTES = 64 * 1024 * 1024


# --------------------------------------------------------------------------------------------- atomic writes


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same folder, ``fsync`` and an atomic rename.

    >>> import pathlib
    >>> atomic_write_text(pathlib.Path(tempfile.mkdtemp()) / "t.md", "hi\\n").read_text()
    'hi\\n'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, data: Any, *, indent: int = 1, sort_keys: bool = True) -> Path:
    """Write ``data`` as JSON to ``path`` via a temporary file in the same folder and an atomic rename.

    An interrupted run leaves either the old file or the new one, never a torn one. Non-JSON values (paths,
    numpy scalars) are written with ``str``.

    >>> import pathlib
    >>> p = atomic_write_json(pathlib.Path(tempfile.mkdtemp()) / "m.json", {"a": 1})
    >>> json.loads(p.read_text())
    {'a': 1}
    """
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=False, default=str) + "\n"
    return atomic_write_text(path, text)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike) -> Iterator[Path]:
    """Write a whole folder atomically: yields a new hidden folder beside ``target`` (same file system) to fill.

    When the body ends without error the folder is renamed to ``target``; what was at ``target`` is removed only
    then (and put back when the rename fails). On any error the staged folder is deleted, so a failure never leaves
    half a folder and an earlier one stays whole.

    >>> import pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "model"
    >>> with staged_folder(out) as staging:
    ...     _ = (staging / "a.txt").write_text("a")
    >>> sorted(p.name for p in out.parent.iterdir()), (out / "a.txt").read_text()
    (['model'], 'a')
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    staging.chmod(0o755)
    try:
        yield staging
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            target.rename(old / target.name)
        try:
            staging.rename(target)
        except OSError:
            if old is not None:  # put the earlier folder back
                (old / target.name).rename(target)
                old.rmdir()
            raise
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# --------------------------------------------------------------------------------------------- JSONL


class JsonlError(InputError):
    """A JSONL file with a broken line that is not its last one (the message names ``file:line``)."""


def repair_torn_tail(path: str | os.PathLike) -> int:
    """Cut a torn last line off ``path`` (so appends start on a fresh line); returns the bytes removed.

    A last line is torn when it lacks its newline or is not valid JSON.

    >>> import pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.jsonl"; _ = p.write_text('{"a": 1}\\n{"a": ')
    >>> repair_torn_tail(p), p.read_text()
    (6, '{"a": 1}\\n')
    """
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    if not data:
        return 0
    keep = len(data)
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
        if data[last_start:].strip():
            try:
                json.loads(data[last_start:])
            except (json.JSONDecodeError, UnicodeDecodeError):
                keep = last_start
    removed = len(data) - keep
    if removed:
        with path.open("r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
        logger.warning("%s: removed a torn last line (%d bytes) before resuming", path, removed)
    return removed


def iter_jsonl(
    path: str | os.PathLike,
    *,
    check: Callable[[Any, str], Any] | None = None,
    error: type[ValueError] = JsonlError,
    blank_lines: str = "skip",
) -> Iterator[tuple[int, Any]]:
    """Stream ``(line_number, object)`` pairs of a JSONL file.

    A torn LAST line (no newline and not parseable or not passing ``check``, or not valid JSON at all) is dropped
    with a warning: it is what a crash mid-write leaves, and a rerun redoes it. A broken line anywhere else is an
    ``error`` naming ``file:line``.

    Args:
        path: the file.
        check: optional ``check(obj, "file:line")`` that raises on an invalid object.
        error: the exception class for a corrupt line in the middle of the file.
        blank_lines: ``"skip"`` or ``"error"`` (a blank line before the last one).

    Raises:
        FileNotFoundError: when the file does not exist.

    >>> import pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.jsonl"; _ = p.write_text('{"a": 1}\\nnot json\\n{"a": 3}\\n')
    >>> list(iter_jsonl(p))
    Traceback (most recent call last):
    ...
    metamod.files.JsonlError: .../r.jsonl:2: corrupt line in the middle of the file (Expecting value: line 1 column 1 (char 0)); fix or delete it
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"JSONL file not found: {path}")
    with path.open("rb") as handle:
        previous: tuple[int, bytes] | None = None
        for number, raw in enumerate(handle, start=1):
            if previous is not None:
                item = _decode_line(path, *previous, last=False, check=check, error=error, blank_lines=blank_lines)
                if item is not None:
                    yield item
            previous = (number, raw)
        if previous is not None:
            item = _decode_line(path, *previous, last=True, check=check, error=error, blank_lines=blank_lines)
            if item is not None:
                yield item


def _decode_line(
    path: Path, number: int, raw: bytes, *, last: bool, check: Any, error: type[ValueError], blank_lines: str
) -> tuple[int, Any] | None:
    where = f"{path}:{number}"
    text = raw.strip()
    if not text:
        if last or blank_lines == "skip":
            return None
        raise error(f"{where}: empty line inside the file")
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        if last:
            logger.warning("%s: dropping a torn last line (%s); a rerun redoes it", where, err)
            return None
        raise error(f"{where}: corrupt line in the middle of the file ({err}); fix or delete it") from err
    if check is not None:
        if last and not raw.endswith(b"\n"):
            try:
                check(obj, where)
            except ValueError as err:
                logger.warning("%s: dropping a torn last line (%s); a rerun redoes it", where, err)
                return None
        else:
            check(obj, where)
    return number, obj


def read_jsonl(path: str | os.PathLike, **kwargs: Any) -> list[Any]:
    """All objects of a JSONL file (see :func:`iter_jsonl`); a missing file gives ``[]``."""
    if not Path(path).exists():
        return []
    return [obj for _, obj in iter_jsonl(path, **kwargs)]


FSYNC_POLICIES = ("close", "line", "never")


class JsonlWriter:
    """Append JSON objects to a file, one line each, flushed to the OS after every line.

    Args:
        path: the output file (parent folders are created).
        resume: keep existing lines and append (a torn tail is cut first); ``False`` replaces the file.
        fsync: ``"close"`` (fsync on :meth:`sync` and :meth:`close`, the default), ``"line"`` (after every line,
            slow) or ``"never"``.

    >>> import pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.jsonl"
    >>> with JsonlWriter(p) as w:
    ...     w.write_many([{"i": 0}, {"i": 1}]); w.sync()
    >>> read_jsonl(p)
    [{'i': 0}, {'i': 1}]
    """

    def __init__(self, path: str | os.PathLike, *, resume: bool = True, fsync: str = "close") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {FSYNC_POLICIES}, got {fsync!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        if resume:
            repair_torn_tail(self.path)
        self._handle = self.path.open("a" if resume else "w", encoding="utf-8")
        self.num_written = 0

    def write(self, obj: Any) -> None:
        """Append one object as a line and flush it (a process crash after this call cannot lose it)."""
        self._handle.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self._handle.flush()
        if self.fsync == "line":
            os.fsync(self._handle.fileno())
        self.num_written += 1

    def write_many(self, objs: Iterable[Any]) -> None:
        for obj in objs:
            self.write(obj)

    def sync(self) -> None:
        """``fsync`` what was written so far (the end of a batch)."""
        if not self._handle.closed and self.fsync != "never":
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if not self._handle.closed:
            self.sync()
            self._handle.close()

    @property
    def closed(self) -> bool:
        return self._handle.closed

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def append_jsonl(path: str | os.PathLike, objs: Iterable[Any], *, fsync: bool = True) -> int:
    """Append objects to a JSONL file (cutting a torn tail first); returns the number of lines written.

    >>> import pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> append_jsonl(p, [{"x": 1}]), append_jsonl(p, [{"x": 2}]), read_jsonl(p)
    (1, 1, [{'x': 1}, {'x': 2}])
    """
    with JsonlWriter(path, fsync="close" if fsync else "never") as writer:
        writer.write_many(objs)
        return writer.num_written


# --------------------------------------------------------------------------------------------- signatures


def path_signature(path: str | os.PathLike | None, *, depth: int = 0) -> str | None:
    """A short content signature of a local file or folder (``None`` when ``path`` is not a local path).

    A folder is signed by its non-hidden files, ``depth`` levels of sub-folders deep (``0``: top-level files
    only, which for a model or adapter folder skips ``checkpoint-N/``): names, sizes and the sha256 of each file
    up to :data:`HASH_LIMIT_BYTES` (larger files by size and modification time). A retrained adapter or a
    rebuilt traces file in the same place therefore gets a new signature.

    >>> import pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "f.txt"; _ = p.write_text("a")
    >>> s = path_signature(p); _ = p.write_text("b"); s == path_signature(p), path_signature("org/hub-model")
    (False, None)
    """
    if path is None:
        return None
    path = Path(path).expanduser()
    if path.is_file():
        entries = [(path.name, path)]
    elif path.is_dir():
        entries = sorted((str(p.relative_to(path)), p) for p in _signed_files(path, depth))
    else:
        return None
    digest = hashlib.sha256()
    for name, file in entries:
        stat = file.stat()
        digest.update(f"{name}\0{stat.st_size}\0".encode())
        if stat.st_size <= HASH_LIMIT_BYTES:
            with file.open("rb") as handle:
                for block in iter(lambda h=handle: h.read(1 << 20), b""):
                    digest.update(block)
        else:
            digest.update(str(stat.st_mtime_ns).encode())
    return digest.hexdigest()[:16]


def _signed_files(folder: Path, depth: int) -> Iterator[Path]:
    for child in folder.iterdir():
        if child.name.startswith("."):
            continue
        if child.is_file():
            yield child
        elif child.is_dir() and depth > 0:
            yield from _signed_files(child, depth - 1)


# --------------------------------------------------------------------------------------------- folder locks


class FolderLockedError(ConfigError):
    """Another process holds the output folder's lock (the message names the folder and its process id)."""


def _lock_message(folder: Path, name: str, holder: str | None, label: str | None = None) -> str:
    who = f"process {holder}" if holder else "another process (process id not yet recorded)"
    return (
        f"{label or folder} is in use by {who} (lock {folder / name}); two writers would mix their outputs. Wait for "
        "it to finish, stop it, or use another --output_dir"
    )


def lock_holder(folder: str | os.PathLike, *, name: str = LOCK_FILE) -> str | None:
    """The process id recorded in a folder's lock file (``None`` when there is none); says nothing about liveness."""
    try:
        text = (Path(folder) / name).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return text.split()[0] if text else None


def check_unlocked(folder: str | os.PathLike, *, name: str = LOCK_FILE, label: str | None = None) -> None:
    """Fail at once when another process holds ``folder``'s lock; creates nothing (a probe before validation).

    Raises:
        FolderLockedError: naming the folder (or ``label``) and the holder's process id.
    """
    folder = Path(folder)
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        _try_flock(fd, folder, name, label=label)
    finally:
        os.close(fd)


def _try_flock(fd: int, folder: Path, name: str, *, wait: bool = False, label: str | None = None) -> None:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        raise FolderLockedError(_lock_message(folder, name, lock_holder(folder, name=name), label)) from None


class FolderLock:
    """An exclusive advisory lock on an output folder (``<folder>/<name>``, holding this process's id).

    ``acquire`` creates the folder and the lock file and fails at once, without waiting, when another process
    holds the lock. Locks are per open file: a second :class:`FolderLock` on the same folder fails even in the
    same process. The lock file is left in place after release (removing it would race with a new writer).

    Args:
        folder: the output folder.
        name: the lock file's name (sharded writers into one folder use one name per shard).
        wait: block until the lock is free instead of failing (for short critical sections only).
        label: what an error names instead of ``folder`` (a lock kept elsewhere than the folder it guards).

    Raises:
        FolderLockedError: on ``acquire`` (or ``with``) while another writer holds the lock.

    >>> import pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with FolderLock(folder):
    ...     FolderLock(folder).acquire()
    Traceback (most recent call last):
    ...
    metamod.files.FolderLockedError: ... is in use by process ... two writers would mix their outputs. ...
    >>> with FolderLock(folder) as lock:  # released: free again
    ...     lock.held
    True
    """

    def __init__(
        self, folder: str | os.PathLike, *, name: str = LOCK_FILE, wait: bool = False, label: str | None = None
    ) -> None:
        self.folder = Path(folder)
        self.name = name
        self.wait = wait
        self.label = label
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.folder / self.name

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> FolderLock:
        if self._fd is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _try_flock(fd, self.folder, self.name, wait=self.wait, label=self.label)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        logger.debug("locked %s (pid %d)", self.path, os.getpid())
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        import fcntl

        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def write_after_checks(
    target: str | os.PathLike | FolderLock, checks: Callable[[], Any] | None = None
) -> Iterator[Any]:
    """The validate-before-write rule (docs/contracts.md): fail at once when another writer holds ``target`` (a
    folder, or a :class:`FolderLock` with its own name or place), run ``checks`` (they read and check every input
    and write nothing), and only then lock, for the body; yields what ``checks`` returned.

    >>> import pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "run"
    >>> def bad():
    ...     raise ConfigError("learning_rate must be > 0, got -1")
    >>> with write_after_checks(out, bad):
    ...     pass
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: learning_rate must be > 0, got -1
    >>> out.exists()  # not even created
    False
    >>> with write_after_checks(out, lambda: 3) as checked:
    ...     checked, (out / LOCK_FILE).is_file()
    (3, True)
    """
    lock = target if isinstance(target, FolderLock) else FolderLock(target)
    check_unlocked(lock.folder, name=lock.name, label=lock.label)
    checked = checks() if checks is not None else None
    with lock:
        yield checked
