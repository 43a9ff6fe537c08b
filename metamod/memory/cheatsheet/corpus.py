"""The behaviour corpus: what ``metamod mine-behaviours`` writes and ``metamod fit-cheatsheet`` turns into a fitted one.

Two folder formats, one module:

- **Mined** (``runs/mine/``): ``behaviours.jsonl`` (one deduplicated behaviour per line: ``id``, ``name``,
  ``description``, ``domain``, ``question_id``, ``question``, ``correct``) and ``embeddings.npz`` (``behaviours`` =
  E(description), ``queries`` = E(question), row-aligned) with ``embeddings.json`` (the embedder's spec, rows).
- **Fitted** (``runs/bc/``, :func:`write_fitted` / :func:`load_fitted`): ``corpus.json`` (format, version, embedder
  spec, domains, dimensions, fit settings and measurements), ``behaviours.jsonl`` (a copy) and ``arrays.npz``
  (raw behaviour embeddings, the PCA, the query projector and the fitted HDP-GMM, each under a key prefix).

:func:`read_behaviours` is the one reader of ``behaviours.jsonl``: a row that is not an object, lacks a field or has
an empty name/description fails with ``file:line`` and what was expected.

>>> import json, pathlib, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> row = {"id": "b0", "name": "check-units", "description": "Convert units first.", "domain": "arith",
...        "question_id": "q1", "question": "3 m + 20 cm?", "correct": None}
>>> _ = (folder / "behaviours.jsonl").write_text(json.dumps(row) + "\\n")
>>> [b["name"] for b in read_behaviours(folder / "behaviours.jsonl")]
['check-units']
>>> _ = (folder / "bad.jsonl").write_text(json.dumps({"id": "b1", "name": "x"}) + "\\n")
>>> read_behaviours(folder / "bad.jsonl")
Traceback (most recent call last):
...
metamod.files.JsonlError: ...bad.jsonl:1: behaviour row is missing ['description', 'domain']; expected fields id, name, description, domain (question_id, question, correct optional)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metamod.errors import InputError, load_json, load_npz
from metamod.files import JsonlError, atomic_write_json, atomic_write_text, iter_jsonl
from metamod.memory.embed import Embedder, select_embedder

BEHAVIOURS_FILE = "behaviours.jsonl"
EMBEDDINGS_FILE = "embeddings.npz"
EMBEDDINGS_META = "embeddings.json"
FITTED_MANIFEST = "corpus.json"
FITTED_ARRAYS = "arrays.npz"
FITTED_FORMAT = "metamod-cheatsheet-corpus"
FITTED_VERSION = 1

REQUIRED_FIELDS = ("id", "name", "description", "domain")
OPTIONAL_FIELDS = ("question_id", "question", "correct")


def _check_row(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise JsonlError(f"{where}: behaviour row must be a JSON object, got {type(row).__name__}")
    missing = [k for k in REQUIRED_FIELDS if k not in row]
    if missing:
        raise JsonlError(
            f"{where}: behaviour row is missing {missing}; expected fields {', '.join(REQUIRED_FIELDS)} "
            f"({', '.join(OPTIONAL_FIELDS)} optional)"
        )
    for key in REQUIRED_FIELDS:
        if not isinstance(row[key], str) or not row[key].strip():
            raise JsonlError(f"{where}: behaviour field {key!r} must be a non-empty string, got {row[key]!r}")
    return {k: row.get(k) for k in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)}


def read_behaviours(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every behaviour of a ``behaviours.jsonl`` file (a folder is read as ``<folder>/behaviours.jsonl``).

    Raises:
        FileNotFoundError: no such file.
        JsonlError: a malformed row (``file:line`` named) or a duplicated id.
    """
    path = Path(path)
    if path.is_dir():
        path = path / BEHAVIOURS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"behaviours file {path} not found (written by `metamod mine-behaviours`)")
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        row = _check_row(obj, f"{path}:{line}")
        if row["id"] in seen:
            raise JsonlError(f"{path}:{line}: behaviour id {row['id']!r} already used on line {seen[row['id']]}")
        seen[row["id"]] = line
        rows.append(row)
    return rows


def read_embeddings(folder: str | os.PathLike, rows: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The mined corpus's ``(behaviour embeddings, query embeddings, embedder spec)``, checked against ``rows``."""
    folder = Path(folder)
    path, meta_path = folder / EMBEDDINGS_FILE, folder / EMBEDDINGS_META
    if not path.is_file() or not meta_path.is_file():
        raise FileNotFoundError(
            f"{folder} has no {EMBEDDINGS_FILE} + {EMBEDDINGS_META} (written by `metamod mine-behaviours` next to "
            f"{BEHAVIOURS_FILE})"
        )
    meta = load_json(meta_path, what="embeddings metadata (a JSON object)")
    data = load_npz(path, what="behaviour embeddings")
    missing = [k for k in ("behaviours", "queries") if k not in data]
    if missing:
        raise InputError(f"{path} lacks arrays {missing}; expected 'behaviours' and 'queries'")
    behaviours = np.asarray(data["behaviours"], dtype=np.float32)
    queries = np.asarray(data["queries"], dtype=np.float32)
    for label, array in (("behaviours", behaviours), ("queries", queries)):
        if array.ndim != 2 or array.shape[0] != rows:
            raise InputError(
                f"{path}: array {label!r} has shape {array.shape}; expected ({rows}, dim), one row per line of "
                f"{BEHAVIOURS_FILE} (rerun `metamod mine-behaviours` to rebuild it)"
            )
    if not isinstance(meta, dict) or not isinstance(meta.get("embedder"), dict):
        raise InputError(f"{meta_path} must hold {{'embedder': <spec>, 'rows': n}}")
    return behaviours, queries, dict(meta["embedder"])


def recorded_embedder(path: str | os.PathLike) -> dict[str, Any] | None:
    """The encoder spec a corpus was embedded with: a fitted folder's ``corpus.json``, else a mined folder's
    ``embeddings.json`` (a ``behaviours.jsonl`` path is read as its folder); None when the folder records none.

    Every memory reading a corpus embeds with this encoder unless its options name one (which must be the same;
    :func:`metamod.memory.embed.select_embedder`), cold starts included.

    Raises:
        FileNotFoundError: nothing exists at ``path``.
        InputError: a manifest that is not valid JSON.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"corpus {path} not found: expected a folder written by `metamod mine-behaviours` or `metamod "
            f"fit-cheatsheet`, or its {BEHAVIOURS_FILE} (memories take their encoder from it, cold starts too)"
        )
    folder = path if path.is_dir() else path.parent
    for name in (FITTED_MANIFEST, EMBEDDINGS_META):
        file = folder / name
        if file.is_file():
            meta = load_json(file, what="corpus manifest (a JSON object)")
            spec = meta.get("embedder") if isinstance(meta, dict) else None
            if isinstance(spec, dict) and spec.get("name"):
                return dict(spec)
    return None


def corpus_embedder(options: Any, given: Embedder | None = None) -> Embedder:
    """The encoder of a memory that reads a corpus (``cheatsheet``, ``dc``, ``ace``): ``given`` when not None, else
    :func:`~metamod.memory.embed.select_embedder` of the options' ``embedder`` / ``embedder_model`` and the encoder
    the options' ``corpus`` records (read for a cold start too: the corpus names the evaluation's encoder)."""
    if given is not None:
        return given
    recorded = recorded_embedder(options.corpus) if options.corpus else None
    return select_embedder(options.embedder, options.embedder_model, recorded, source=f"corpus {options.corpus}")


@dataclass
class FittedCorpus:
    """A fitted corpus loaded from ``fit-cheatsheet``'s folder.

    Attributes:
        folder: where it was read from.
        behaviours: the behaviour rows (``behaviours.jsonl``), row ``i`` is organiser row ``i``.
        manifest: ``corpus.json`` (embedder spec, domains, dimensions, fit settings and measurements).
        arrays: ``arrays.npz`` by key (``raw``: E(description); ``pca.*``, ``projector.*``, ``hdp.*``).
    """

    folder: Path
    behaviours: list[dict[str, Any]]
    manifest: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def domains(self) -> list[str]:
        return list(self.manifest["domains"])

    @property
    def embedder_spec(self) -> dict[str, Any]:
        return dict(self.manifest["embedder"])

    def prefixed(self, prefix: str) -> dict[str, np.ndarray]:
        """The arrays saved under ``prefix.`` (prefix removed)."""
        cut = len(prefix) + 1
        return {k[cut:]: v for k, v in self.arrays.items() if k.startswith(prefix + ".")}

    def domain_index(self) -> np.ndarray:
        """Each behaviour's domain as an index into :attr:`domains`."""
        lookup = {d: i for i, d in enumerate(self.domains)}
        return np.array([lookup[b["domain"]] for b in self.behaviours], dtype=np.int64)


def write_fitted(
    folder: str | os.PathLike, behaviours: list[dict[str, Any]], manifest: dict[str, Any], arrays: dict[str, Any]
) -> Path:
    """Write a fitted corpus (arrays first, the manifest last: a folder with ``corpus.json`` is complete)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FITTED_MANIFEST).unlink(missing_ok=True)
    tmp = folder / f".{FITTED_ARRAYS}.tmp"
    with open(tmp, "wb") as handle:
        np.savez(handle, **{k: np.asarray(v) for k, v in arrays.items()})
    os.replace(tmp, folder / FITTED_ARRAYS)
    atomic_write_text(folder / BEHAVIOURS_FILE, "".join(json.dumps(b, sort_keys=True) + "\n" for b in behaviours))
    atomic_write_json(folder / FITTED_MANIFEST, {"format": FITTED_FORMAT, "version": FITTED_VERSION, **manifest})
    return folder


def load_fitted(folder: str | os.PathLike) -> FittedCorpus:
    """Read a folder written by ``metamod fit-cheatsheet``; a one-line error says what is missing or wrong."""
    folder = Path(folder)
    path = folder / FITTED_MANIFEST
    if not path.is_file():
        hint = (
            " (it holds mined behaviours: run `metamod fit-cheatsheet --behaviours "
            f"{folder / BEHAVIOURS_FILE} --output_dir <folder>` first)"
            if (folder / BEHAVIOURS_FILE).is_file()
            else ""
        )
        raise FileNotFoundError(f"corpus {folder} has no {FITTED_MANIFEST}{hint}")
    manifest = load_json(path, what="fitted cheatsheet corpus manifest (a JSON object)")
    if not isinstance(manifest, dict) or manifest.get("format") != FITTED_FORMAT:
        raise InputError(f"{path} is not a fitted cheatsheet corpus (expected 'format': {FITTED_FORMAT!r})")
    if manifest.get("version") != FITTED_VERSION:
        raise InputError(f"{path} has corpus version {manifest.get('version')!r}; this metamod reads {FITTED_VERSION}")
    behaviours = read_behaviours(folder / BEHAVIOURS_FILE)
    arrays = load_npz(folder / FITTED_ARRAYS, what="fitted cheatsheet arrays")
    if len(arrays.get("raw", ())) != len(behaviours):
        raise InputError(
            f"{folder}: {FITTED_ARRAYS} has {len(arrays.get('raw', ()))} embedding rows for {len(behaviours)} "
            "behaviours; refit it with `metamod fit-cheatsheet`"
        )
    unknown = sorted({b["domain"] for b in behaviours} - set(manifest.get("domains", [])))
    if unknown:
        raise InputError(f"{path}: behaviours use domains {unknown} that 'domains' does not list")
    return FittedCorpus(folder=folder, behaviours=behaviours, manifest=manifest, arrays=arrays)
