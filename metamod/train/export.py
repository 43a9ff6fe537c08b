"""``metamod export``: a trained moderator adapter -> a shareable folder (adapter, tokenizer, model card), optional
merged full weights, and an optional upload to the Hugging Face Hub (the upload itself: :mod:`metamod.train.hub`).

Everything is checked before any work starts: the adapter folder (or the checkpoint to pick inside a training run)
and its weights (:func:`metamod.llm.adapter_files.check_adapter`: the safetensors header reads, the tensor names
are the LoRA A/B pairs of the configured target modules, the shapes carry the configured rank, the values are
finite), the base model, the results file, the dataset, the output folder and, for an upload, the Hub token and network mode. The export is
written into a hidden sibling folder and renamed into place at the end, so a failure (a merge that runs out of
memory, a bad file) leaves no half-written folder and an ``--overwrite`` keeps the old export until the new one is
complete.

>>> cfg = ExportConfig(adapter="checkpoints/tiny", output_dir="exports/tiny")
>>> cfg.merge, cfg.push_to_hub
(False, False)
>>> ExportConfig(adapter="a", output_dir="b", push_to_hub=True)
Traceback (most recent call last):
...
ValueError: push_to_hub needs repo_id (e.g. --repo_id your-org/meta-moderator)
>>> resolve_base_model({"base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"})
('Qwen/Qwen2.5-7B-Instruct', False)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from metamod.config import ConfigError
from metamod.files import FolderLock, atomic_write_json, staged_folder, write_after_checks
from metamod.llm.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    ADAPTER_WEIGHTS_BIN,
    check_adapter,
    check_adapter_fits_base,
    read_adapter_config,
    resolve_adapter_dir,
)
from metamod.train.hub import (
    DEFAULT_COMMIT_MESSAGE,
    REPO_ID,
    check_hub_ready,
    find_secrets,
    human_size,
    mask_tokens,
    push_to_hub,
    upload_files,
)

logger = logging.getLogger(__name__)

TRAIN_SUMMARY = "train_summary.json"
#: resolved-config file names looked for beside an adapter (then in its parent, for checkpoint-* folders)
CONFIG_NAMES = (
    "metamod_train_config.yaml",
    "resolved_config.yaml",
    "config.yaml",
    "train_config.yaml",
    "training_config.yaml",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class ExportConfig:
    """Options of ``metamod export``."""

    adapter: str | None = field(
        default=None,
        metadata={
            "help": "Adapter folder: a `metamod train` output dir or one of its checkpoint-* folders "
            "(must hold adapter_config.json + adapter_model.safetensors)."
        },
    )
    output_dir: str | None = field(default=None, metadata={"help": "Folder to write the export to."})
    checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "Inside a training output dir, which checkpoint to export: 'latest', a folder name "
            "(checkpoint-500) or a step (500). Default: the final adapter at the top of --adapter."
        },
    )
    base_model: str | None = field(
        default=None,
        metadata={
            "help": "Base model id or path; overrides adapter_config.json's base_model_name_or_path (and is "
            "written into the exported adapter_config.json). Use a Hub id before pushing."
        },
    )
    merge: bool = field(
        default=False, metadata={"help": "Also write merged full weights (base + adapter) to OUT/merged."}
    )
    merge_only: bool = field(
        default=False,
        metadata={"help": "Write ONLY the merged full weights (+ tokenizer and card) to OUT, no adapter files."},
    )
    merge_dtype: str = field(
        default="auto", metadata={"help": f"dtype of merged weights: one of {', '.join(DTYPES)} (auto = base's)."}
    )
    results: str | None = field(
        default=None, metadata={"help": "results.json from `metamod eval` to render as a table in the model card."}
    )
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Moderator dataset (save_to_disk folder) to compute eta statistics for the card. Default: the "
            "dataset_path recorded in the training config, when it still exists."
        },
    )
    license: str | None = field(
        default=None, metadata={"help": "License id for the card metadata (follow the base model's license)."}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Replace a non-empty output_dir (its contents are deleted first)."}
    )
    push_to_hub: bool = field(default=False, metadata={"help": "Upload output_dir to the Hugging Face Hub."})
    repo_id: str | None = field(default=None, metadata={"help": "Hub repo to upload to, e.g. your-org/meta-moderator."})
    private: bool = field(default=False, metadata={"help": "Create the Hub repo as private."})
    dry_run: bool = field(
        default=False,
        metadata={"help": "With --push_to_hub: export locally and list what would be uploaded, upload nothing."},
    )
    commit_message: str = field(default=DEFAULT_COMMIT_MESSAGE, metadata={"help": "Hub commit message."})

    def __post_init__(self) -> None:
        if self.merge_dtype not in DTYPES:
            raise ValueError(f"merge_dtype must be one of {list(DTYPES)}, got {self.merge_dtype!r}")
        if self.merge_only:
            self.merge = True
        if self.push_to_hub and not self.repo_id:
            raise ValueError("push_to_hub needs repo_id (e.g. --repo_id your-org/meta-moderator)")
        if self.repo_id and not REPO_ID.match(self.repo_id):
            raise ValueError(f"repo_id {self.repo_id!r} is not a Hub repo id; expected 'org/name' or 'name'")
        if self.dry_run and not self.push_to_hub:
            raise ValueError("dry_run previews a Hub upload; add --push_to_hub --repo_id org/name (or drop --dry_run)")

    def check_required(self) -> None:
        """Fail on missing required options (kept out of ``__post_init__`` so the dataclass has defaults)."""
        missing = [name for name in ("adapter", "output_dir") if not getattr(self, name)]
        if missing:
            raise ValueError(f"metamod export needs {', '.join('--' + m for m in missing)}")


# ---------------------------------------------------------------- validation


def embedded_model_of(base: str):
    """The :class:`~metamod.llm.embedded.EmbeddedModel` a base folder or alias is, else ``None``."""
    from metamod.llm.embedded import EMBEDDED_MODELS, embedded_name_of

    name = embedded_name_of(base)
    return EMBEDDED_MODELS.get(name) if name else None


def resolve_base_model(adapter_config: dict[str, Any], base_model: str | None = None) -> tuple[str, bool]:
    """The base model to use and whether it is a local folder.

    A name that exists on disk is local. A name that can only be a path (absolute, ``./``, ``~``, more than one
    ``/``) but does not exist is an error; anything else is taken as a Hub id.

    Args:
        adapter_config: the adapter's config (``base_model_name_or_path``).
        base_model: an explicit override.

    Returns:
        ``(name, is_local)``.

    >>> resolve_base_model({"base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"})
    ('Qwen/Qwen2.5-7B-Instruct', False)
    >>> resolve_base_model({"base_model_name_or_path": "/gone/tiny"})
    Traceback (most recent call last):
    ...
    FileNotFoundError: base model folder /gone/tiny (from adapter_config.json base_model_name_or_path) no longer exists; pass --base_model with its new location or a Hub id
    """
    source = "--base_model" if base_model else "adapter_config.json base_model_name_or_path"
    name = base_model or adapter_config.get("base_model_name_or_path")
    if not name:
        raise ValueError("adapter_config.json has no base_model_name_or_path; pass --base_model <id or path>")
    name = str(name)
    from metamod.llm.embedded import is_embedded, resolve_model_ref

    if is_embedded(name):  # an embedded model: its prepared local folder
        return resolve_model_ref(name), True
    if Path(name).expanduser().exists():
        return name, True
    if name.startswith(("/", "./", "../", "~", ".")) or "\\" in name or not REPO_ID.match(name):
        raise FileNotFoundError(
            f"base model folder {name} (from {source}) no longer exists; pass --base_model with its new location "
            "or a Hub id"
        )
    return name, False


def find_training_files(adapter_dir: Path) -> tuple[dict[str, Any], Path | None, dict[str, Any], Path | None]:
    """The resolved training config and ``train_summary.json`` beside the adapter (or in its parent run dir).

    Returns:
        ``(config, config_path, summary, summary_path)``; ``{}`` / ``None`` for what is not found.
    """
    config: dict[str, Any] = {}
    config_path = summary_path = None
    summary: dict[str, Any] = {}
    for folder in (adapter_dir, adapter_dir.parent):
        if config_path is None:
            candidates = [folder / n for n in CONFIG_NAMES if (folder / n).is_file()]
            if candidates:
                config_path = candidates[0]
                loaded = yaml.safe_load(config_path.read_text()) or {}
                config = loaded if isinstance(loaded, dict) else {}
        if summary_path is None and (folder / TRAIN_SUMMARY).is_file():
            summary_path = folder / TRAIN_SUMMARY
            try:
                loaded = json.loads(summary_path.read_text())
            except json.JSONDecodeError:
                logger.warning("Ignoring %s: not valid JSON", summary_path)
                loaded = {}
            summary = loaded if isinstance(loaded, dict) else {}
    return config, config_path, summary, summary_path


def _check_output(output_dir: Path, adapter_dir: Path, overwrite: bool) -> None:
    """Refuse an output folder that holds the adapter, or is not empty (without ``overwrite``, or not an export)."""
    out, src = output_dir.resolve(), adapter_dir.resolve()
    if out == src or out in src.parents:
        raise ValueError(
            f"output_dir {output_dir} would overwrite the adapter it exports ({adapter_dir}); choose another"
        )
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"output_dir {output_dir} is a file; choose a folder")
    if output_dir.exists() and any(output_dir.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"output_dir {output_dir} is not empty; pass --overwrite to replace it or choose another --output_dir"
            )
        looks_exported = (output_dir / "README.md").is_file() and any(
            (output_dir / name).is_file() for name in (ADAPTER_CONFIG, "config.json")
        )
        if not looks_exported:
            raise FileExistsError(
                f"refusing to delete {output_dir}: it is not empty and does not look like an earlier export (no "
                f"README.md + {ADAPTER_CONFIG} or config.json); choose a new or empty --output_dir"
            )


def _copy_training_file(path: Path, data: Mapping[str, Any], dst: Path) -> None:
    """Copy a run's config / summary; any ``*_token`` value in it is masked (a Hub token never lands in an export)."""
    masked = mask_tokens(dict(data))
    if masked == dict(data):
        shutil.copy2(path, dst)
        return
    logger.warning("%s holds a *_token value; the exported copy has it masked", path)
    text = json.dumps(masked, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(masked, sort_keys=True)
    dst.write_text(text)


# ---------------------------------------------------------------- writing


def _copy_adapter(adapter_dir: Path, output_dir: Path, base_model: str, override_base: bool) -> None:
    config = read_adapter_config(adapter_dir)
    if override_base:
        config["base_model_name_or_path"] = base_model
    atomic_write_json(output_dir / ADAPTER_CONFIG, config, indent=2, sort_keys=True)
    if (adapter_dir / ADAPTER_WEIGHTS).is_file():
        shutil.copy2(adapter_dir / ADAPTER_WEIGHTS, output_dir / ADAPTER_WEIGHTS)
    else:  # older PEFT pickle weights: convert, so the export is always safetensors
        import torch
        from safetensors.torch import save_file

        state = torch.load(adapter_dir / ADAPTER_WEIGHTS_BIN, map_location="cpu", weights_only=True)
        save_file({k: v.contiguous() for k, v in state.items()}, str(output_dir / ADAPTER_WEIGHTS))


def _write_tokenizer(adapter_dir: Path, base_model: str, output_dir: Path) -> str:
    """Copy the adapter's tokenizer files, else save the base model's tokenizer. Returns where it came from."""
    files = [adapter_dir / n for n in TOKENIZER_FILES if (adapter_dir / n).is_file()]
    if any(f.name in ("tokenizer.json", "tokenizer_config.json") for f in files):
        for f in files:
            shutil.copy2(f, output_dir / f.name)
        return str(adapter_dir)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(base_model)
    except OSError as err:
        raise FileNotFoundError(
            f"{adapter_dir} has no tokenizer files and the base model {base_model!r} tokenizer could not be loaded "
            f"({err}); pass --base_model with a reachable path or Hub id"
        ) from err
    tokenizer.save_pretrained(output_dir)
    return base_model


def merge_adapter(
    adapter_dir: str | os.PathLike, base_model: str, output_dir: str | os.PathLike, *, dtype: str = "auto"
) -> Path:
    """Fold the adapter into the base weights and save a plain transformers model (+ tokenizer).

    The adapter is checked first (:func:`check_adapter`); the merged model is written into a hidden sibling of
    ``output_dir`` and renamed into place when complete, so a failed merge leaves no partial folder.

    Args:
        adapter_dir: the PEFT adapter folder.
        base_model: base model id or path.
        output_dir: where to save the merged model (missing or empty).
        dtype: ``auto`` (the base's dtype) or ``float32`` / ``bfloat16`` / ``float16``.

    Returns:
        ``output_dir``, loadable with ``AutoModelForCausalLM.from_pretrained``.

    Raises:
        ConfigError: the adapter does not load.
        FileExistsError: ``output_dir`` is not empty.
        FileNotFoundError: the base model cannot be loaded.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise FileExistsError(f"merge output {output_dir} exists and is not empty; choose a new or empty folder")
    check_adapter(adapter_dir)
    try:
        base = AutoModelForCausalLM.from_pretrained(
            base_model, dtype="auto" if dtype == "auto" else getattr(torch, dtype)
        )
    except OSError as err:
        raise FileNotFoundError(
            f"could not load base model {base_model!r} for merging ({err}); pass --base_model with a local path, or "
            "run where the Hub is reachable (HF_HUB_OFFLINE unset)"
        ) from err
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    with staged_folder(output_dir) as staging:
        merged.save_pretrained(staging)
        _write_tokenizer(adapter_dir, base_model, staging)
    logger.info("Merged %s into %s -> %s", adapter_dir, base_model, output_dir)
    return output_dir


def export_adapter(
    adapter_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    checkpoint: str | None = None,
    base_model: str | None = None,
    merge: bool = False,
    merge_only: bool = False,
    merge_dtype: str = "auto",
    results_path: str | os.PathLike | None = None,
    dataset_path: str | os.PathLike | None = None,
    repo_id: str | None = None,
    license: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a shareable export of a moderator adapter.

    ``output_dir`` gets ``adapter_config.json``, ``adapter_model.safetensors``, the tokenizer files, ``README.md``
    (the model card), the run's ``train_summary.json`` / resolved config when found, and ``results.json`` when
    given; with ``merge`` also ``merged/`` (full weights + tokenizer). With ``merge_only`` the merged weights,
    tokenizer and card go straight into ``output_dir`` and no adapter files are written.

    Nothing is written before every input is checked, the adapter's weights included (:func:`check_adapter`). The
    export is built in a hidden sibling folder and renamed to ``output_dir`` when complete (an earlier export
    there is only removed then); a file of it that holds a Hub token fails the export.

    Args:
        adapter_dir: adapter folder or training output dir (see :func:`resolve_adapter_dir`).
        output_dir: export folder (must be empty or missing unless ``overwrite``).
        checkpoint: which ``checkpoint-*`` to export from a training output dir (``"latest"`` or a step).
        base_model: override of ``base_model_name_or_path`` (written into the exported adapter config).
        merge: also write merged full weights to ``output_dir/merged``.
        merge_only: write only merged weights (implies ``merge``).
        merge_dtype: dtype of the merged weights.
        results_path: ``results.json`` from ``metamod eval`` to render in the card.
        dataset_path: moderator dataset for the card's eta statistics (default: the training config's).
        repo_id: Hub repo the export is meant for (used in the card's snippets).
        license: license id for the card metadata.
        overwrite: replace a non-empty ``output_dir``.

    Returns:
        ``output_dir``.

    Raises:
        ConfigError: the adapter does not load (names the file and what is wrong), or a file of the export holds a
            Hub token.
        FileNotFoundError, FileExistsError, ValueError: see the checks in docs/export.md.
    """
    from metamod.evaluate.results import load_results, results_labels, results_simulated
    from metamod.train.model_card import build_model_card, dataset_statistics

    merge = merge or merge_only
    # ---- validate everything before writing anything
    adapter_dir = resolve_adapter_dir(adapter_dir, checkpoint)
    adapter_config = read_adapter_config(adapter_dir)
    check_adapter(adapter_dir)
    base, base_is_local = resolve_base_model(adapter_config, base_model)
    if base_is_local:
        check_adapter_fits_base(adapter_dir, base)
    card_base, card_base_is_local = base, base_is_local
    embedded = embedded_model_of(base)
    if embedded is not None and base_model is None:
        # The embedded model is loaded from this machine's cache; the export names its Hub original, whose
        # weights the shipped Q4_1 GGUF file was quantised from (the adapter was trained on the dequantised copy).
        card_base, card_base_is_local = embedded.hub_id, False
        base_model = embedded.hub_id
    results = load_results(results_path) if results_path else None
    train_config, config_path, train_summary, summary_path = find_training_files(adapter_dir)
    dataset_ref = dataset_path or train_config.get("dataset_path") or train_summary.get("dataset")
    stats = None
    if dataset_path:
        stats = dataset_statistics(dataset_path)  # explicit: a missing folder is an error
    elif isinstance(dataset_ref, str) and Path(dataset_ref).exists():
        stats = dataset_statistics(str(dataset_ref))
    elif isinstance(train_summary.get("dataset"), dict):
        stats = train_summary["dataset"]
    if card_base_is_local and repo_id:
        logger.warning(
            "The base model %s is a local folder: people loading %s from the Hub cannot reach it. Pass "
            "--base_model <hub id> when the base is on the Hub.", base, repo_id
        )  # fmt: skip
    output_dir = Path(output_dir)
    lock = export_lock(output_dir)
    # ---- write into a hidden sibling folder, renamed to output_dir once complete; one exporter per output_dir
    with write_after_checks(lock, lambda: _check_output(output_dir, adapter_dir, overwrite)):
        _check_output(output_dir, adapter_dir, overwrite)  # another exporter may have finished meanwhile
        with staged_folder(output_dir) as staging:
            merged_dir = None
            if merge:  # first: with merge_only the merged model needs the still-empty folder
                merge_adapter(adapter_dir, base, staging if merge_only else staging / "merged", dtype=merge_dtype)
                merged_dir = "." if merge_only else "merged"
            if not merge_only:
                _copy_adapter(adapter_dir, staging, card_base, override_base=base_model is not None)
                _write_tokenizer(adapter_dir, base, staging)
            for path, data in ((config_path, train_config), (summary_path, train_summary)):
                if path is not None:
                    _copy_training_file(path, data, staging / path.name)
            if results_path:
                shutil.copy2(results_path, staging / "results.json")
            from metamod.train.curves import copy_curves

            learning_curves = copy_curves(summary_path.parent if summary_path else None, staging)
            card = build_model_card(
                base_model=card_base,
                adapter_config=adapter_config,
                train_config=train_config,
                train_summary=train_summary,
                dataset_stats=stats,
                results=results,
                results_are_simulated=bool(results_path and results_simulated(results_path)),
                results_labels=results_labels(results_path) if results_path else None,
                adapter_ref=repo_id or str(output_dir.resolve()),
                repo_id=repo_id,
                merged_dir=merged_dir,
                merged_only=merge_only,
                license=license,
                base_is_local=card_base_is_local,
                learning_curves=learning_curves,
            )
            card.save(staging / "README.md")
            secrets = find_secrets(staging, [_token_in_use()])
            if secrets:
                listed = ", ".join(f"{name} ({what})" for name, what in secrets)
                raise ConfigError(
                    f"the export of {adapter_dir} would hold a Hub token: {listed}; remove it from the source"
                )
    logger.info("Exported %s -> %s", adapter_dir, output_dir)
    return output_dir


def export_lock(output_dir: Path) -> FolderLock:
    """The lock of one export target, a file in the system temp dir named by the target's absolute path (the
    target is renamed into place, so it cannot hold its own lock file, and nothing is left beside it).

    >>> export_lock(Path("/runs/out")).name == export_lock(Path("/runs/../runs/out")).name
    True
    """
    key = hashlib.sha256(os.path.abspath(output_dir).encode()).hexdigest()[:16]
    return FolderLock(Path(tempfile.gettempdir()), name=f"metamod-export-{key}.lock", label=str(output_dir))


def _token_in_use() -> str | None:
    """The Hub token ``huggingface_hub`` would use (env or ``hf auth login``), read locally; ``None`` when unset."""
    import huggingface_hub

    return huggingface_hub.get_token()


# ---------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    """``metamod export --adapter DIR --output_dir OUT [--merge] [--results r.json] [--push_to_hub --repo_id ...]``."""
    from metamod.config import parse_config

    (cfg,) = parse_config([ExportConfig], argv, prog="metamod export")
    cfg.check_required()
    if cfg.push_to_hub and not cfg.dry_run:
        check_hub_ready()  # before any (possibly long) merge
    # errors go to the dispatcher: one line, exit 2 (docs/contracts.md)
    out = export_adapter(
        cfg.adapter,
        cfg.output_dir,
        checkpoint=cfg.checkpoint,
        base_model=cfg.base_model,
        merge=cfg.merge,
        merge_only=cfg.merge_only,
        merge_dtype=cfg.merge_dtype,
        results_path=cfg.results,
        dataset_path=cfg.dataset_path,
        repo_id=cfg.repo_id if cfg.push_to_hub else None,
        license=cfg.license,
        overwrite=cfg.overwrite,
    )
    print(f"exported to {out}")
    for name, size in upload_files(out):
        print(f"  {human_size(size):>10}  {name}")
    if cfg.push_to_hub:
        result = push_to_hub(
            out, cfg.repo_id, private=cfg.private, dry_run=cfg.dry_run, commit_message=cfg.commit_message
        )
        print(result.describe())
    return 0
