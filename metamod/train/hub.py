"""Uploading an export folder to the Hugging Face Hub (``metamod export --push_to_hub``), and keeping tokens out.

The token is never an option of metamod: it comes from ``hf auth login`` or ``HF_TOKEN``
(``huggingface_hub.get_token()``) and lives in memory only. Before any upload, every file that would be sent is
scanned for a Hub token (the one in use and anything shaped like ``hf_...``), so a token pasted into a config file
is never published; :func:`mask_tokens` is how exported config files drop them.

>>> PushResult("org/m", [("README.md", 2048), ("adapter_model.safetensors", 3 * 1024**2)], dry_run=True,
...            private=False).describe().splitlines()[0]
'would upload 2 files (3.0 MB) to org/m'
>>> mask_tokens({"hub_token": "hf_abc", "learning_rate": 0.1, "nested": {"api_token": None}})
{'hub_token': '<HUB_TOKEN>', 'learning_rate': 0.1, 'nested': {'api_token': None}}
>>> bool(REPO_ID.match("org/name")), bool(REPO_ID.match("a/b/c"))
(True, False)
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metamod.errors import MetamodError
from metamod.llm.adapter_files import ADAPTER_CONFIG, check_adapter

logger = logging.getLogger(__name__)

#: a Hub repo id: ``name`` or ``org/name``
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
#: what a Hugging Face user access token looks like
TOKEN_PATTERN = re.compile(rb"hf_[A-Za-z0-9]{30,}")
_CHUNK = 8 * 1024 * 1024
DEFAULT_COMMIT_MESSAGE = "Upload Meta-Moderator adapter (metamod export)"


class HubUploadError(MetamodError, RuntimeError):
    """The Hub upload cannot happen (no token, offline mode, no network, no write access); says what to do.

    A :class:`~metamod.errors.MetamodError`: the CLI reports it as one line (exit 2).
    """


@dataclass
class PushResult:
    """What :func:`push_to_hub` uploaded (or, for a dry run, would upload)."""

    repo_id: str
    files: list[tuple[str, int]]
    dry_run: bool
    private: bool
    url: str | None = None

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def describe(self) -> str:
        """Human-readable listing (repo, each file with its size, total)."""
        verb = "would upload" if self.dry_run else "uploaded"
        lines = [f"{verb} {len(self.files)} files ({human_size(self.total_bytes)}) to {self.repo_id}"
                 + (" (private)" if self.private else "")]  # fmt: skip
        lines += [f"  {human_size(size):>10}  {name}" for name, size in self.files]
        if self.url:
            lines.append(f"commit: {self.url}")
        return "\n".join(lines)


def human_size(size: int) -> str:
    """``1536`` -> ``'1.5 KB'`` (bytes stay whole: ``'12 B'``).

    >>> human_size(12), human_size(1536), human_size(5 * 1024**3)
    ('12 B', '1.5 KB', '5.0 GB')
    """
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def upload_files(folder: str | os.PathLike) -> list[tuple[str, int]]:
    """Files of ``folder`` an upload sends (relative POSIX paths, sizes), skipping hidden files and folders."""
    folder = Path(folder)
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            files.append((rel.as_posix(), path.stat().st_size))
    return files


# ---------------------------------------------------------------- secrets


def mask_tokens(data: Any) -> Any:
    """A copy of a config mapping with every ``*_token`` string value replaced by ``<KEY>`` (as transformers does)."""
    if isinstance(data, dict):
        return {
            k: f"<{str(k).upper()}>"
            if str(k).endswith("_token") and isinstance(v, str) and v and not v.startswith("<")
            else mask_tokens(v)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [mask_tokens(v) for v in data]
    return data


def _safetensors_header(path: Path) -> bytes:
    """The JSON header of a safetensors file: its only text (the rest is tensor bytes)."""
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        return fh.read(min(size, 100 * 1024 * 1024))


def _file_has(path: Path, needles: list[bytes]) -> str | None:
    """What secret ``path`` holds (``"the Hub token in use"`` / ``"a Hub token (hf_...)"``), else ``None``."""
    if path.suffix == ".safetensors":
        chunks: Iterable[bytes] = [_safetensors_header(path)]
    else:

        def read() -> Iterable[bytes]:
            tail = b""
            with path.open("rb") as fh:
                while block := fh.read(_CHUNK):
                    yield tail + block
                    tail = block[-128:]  # a token split across two blocks is still found

        chunks = read()
    for chunk in chunks:
        if any(n in chunk for n in needles):
            return "the Hub token in use"
        if TOKEN_PATTERN.search(chunk):
            return "a Hub token (hf_...)"
    return None


def find_secrets(folder: str | os.PathLike, tokens: Iterable[str | None] = ()) -> list[tuple[str, str]]:
    """Files of ``folder`` (as :func:`upload_files` lists them) that hold a Hub token.

    Args:
        folder: the folder to scan (binary files too; of a ``.safetensors`` file only its header).
        tokens: literal tokens to look for besides the ``hf_...`` shape (e.g. the one in use).

    Returns:
        ``[(relative path, what was found)]``; empty when the folder is clean.
    """
    folder = Path(folder)
    needles = [t.encode() for t in tokens if t]
    found = []
    for name, _ in upload_files(folder):
        what = _file_has(folder / name, needles)
        if what:
            found.append((name, what))
    return found


def check_no_secrets(folder: str | os.PathLike, tokens: Iterable[str | None] = ()) -> None:
    """Raise :class:`HubUploadError` when a file of ``folder`` holds a Hub token (naming the files)."""
    found = find_secrets(folder, tokens)
    if found:
        listed = ", ".join(f"{name} ({what})" for name, what in found)
        raise HubUploadError(
            f"refusing to upload {folder}: {listed}. Remove the token from those files (keep tokens in "
            "`hf auth login` or HF_TOKEN, never in configs), then export again"
        )


# ---------------------------------------------------------------- upload


def _offline() -> bool:
    from huggingface_hub import constants

    env = any(
        os.environ.get(k, "").upper() in {"1", "ON", "YES", "TRUE"} for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
    return env or bool(constants.HF_HUB_OFFLINE)


def check_hub_ready() -> str:
    """Return the Hub token, or raise :class:`HubUploadError` saying how to get one / leave offline mode."""
    import huggingface_hub

    token = huggingface_hub.get_token()
    if not token:
        raise HubUploadError(
            "no Hugging Face token found: run `hf auth login` (or set HF_TOKEN to a token with write access), "
            "then rerun; use --dry_run to preview the upload without a token"
        )
    if _offline():
        raise HubUploadError(
            "Hub offline mode is on (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1; metamod's Makefile and tests set "
            "it): rerun with HF_HUB_OFFLINE=0 on a machine with network access, or copy the export folder there and "
            "run `hf upload <repo_id> <folder>`"
        )
    return token


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    dry_run: bool = False,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
) -> PushResult:
    """Upload an export folder to a Hub model repo (created if missing), after checking what it ships.

    Before anything is sent (and in a dry run too): an adapter in the folder must load
    (:func:`metamod.llm.adapter_files.check_adapter`), and no file may hold a Hub token (:func:`check_no_secrets`).

    Args:
        folder: the export folder (from :func:`metamod.train.export.export_adapter`).
        repo_id: ``org/name`` (or ``name`` under your account).
        private: create the repo as private.
        dry_run: list the files and sizes that would be uploaded; contact nothing, upload nothing.
        commit_message: the Hub commit message.

    Returns:
        A :class:`PushResult` (``url`` is the commit URL after a real upload).

    Raises:
        HubUploadError: no token, offline mode, no network, a token inside a file, or the Hub refused.
        ConfigError: the folder's adapter does not load (names the file and what is wrong).
        FileNotFoundError: ``folder`` is missing or empty.
    """
    folder = Path(folder)
    if not REPO_ID.match(repo_id or ""):
        raise ValueError(f"repo_id {repo_id!r} is not a Hub repo id; expected 'org/name' or 'name'")
    files = upload_files(folder) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"nothing to upload: {folder} is missing or empty (run the export first)")
    if (folder / ADAPTER_CONFIG).is_file():
        check_adapter(folder)
    result = PushResult(repo_id=repo_id, files=files, dry_run=dry_run, private=private)
    if dry_run:
        check_no_secrets(folder)
        logger.info("Dry run: %d files for %s, nothing uploaded", len(files), repo_id)
        return result
    token = check_hub_ready()
    check_no_secrets(folder, [token])

    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, repo_type="model", exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            commit_message=commit_message,
            ignore_patterns=[".*", "*/.*"],
        )
    except HfHubHTTPError as err:
        raise HubUploadError(
            f"the Hub refused the upload to {repo_id} ({err}); check that your token has write access to that "
            "namespace (`hf auth whoami`)"
        ) from err
    except (httpx.HTTPError, OSError) as err:
        raise HubUploadError(
            f"could not reach the Hugging Face Hub ({type(err).__name__}: {err}); check the network (or proxy) and "
            "rerun, or copy the export folder to a machine with access and run `hf upload <repo_id> <folder>`"
        ) from err
    result.url = getattr(commit, "commit_url", None) or str(commit)
    logger.info("Uploaded %s to %s", folder, repo_id)
    return result
