"""``metamod fit-cheatsheet``: mined behaviours -> PCA, query projector and HDP-GMM -> a fitted corpus folder.

``metamod fit-cheatsheet --behaviours runs/mine/behaviours.jsonl --output_dir runs/bc`` reads the mined behaviours
and their embeddings (``embeddings.npz`` next to the file), then:

1. fits the PCA to ``dim`` dimensions on the behaviour embeddings E(description) (once; held fixed afterwards);
2. trains the query projector f_theta (an MLP from the question embedding E(question) to the PCA embedding of a
   behaviour mined from it, appendix D.3) unless ``projector: false``;
3. fits the HDP-GMM on the projected behaviours with their domains (collapsed Gibbs, ``hdp_params``);
4. writes ``corpus.json``, ``behaviours.jsonl`` and ``arrays.npz`` (:mod:`metamod.memory.cheatsheet.corpus`) and
   prints K, the per-domain counts, the projector's held-out error and the time each step took.

The folder is what ``memory_options: {corpus: runs/bc}`` of the cheatsheet memories reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metamod.config import ConfigError, check_output_dir, parse_config
from metamod.files import write_after_checks
from metamod.memory.cheatsheet.corpus import FITTED_MANIFEST, read_behaviours, read_embeddings, write_fitted

logger = logging.getLogger(__name__)


@dataclass
class FitCheatsheetConfig:
    """Settings of ``metamod fit-cheatsheet``."""

    behaviours: str = field(
        default="", metadata={"help": "behaviours.jsonl written by `metamod mine-behaviours` (embeddings beside it)."}
    )
    output_dir: str = field(default="runs/bc", metadata={"help": "Folder of the fitted corpus."})
    dim: int = field(default=128, metadata={"help": "PCA dimension D (capped at the number of behaviours)."})
    projector: bool = field(default=True, metadata={"help": "Train the query projector f_theta (appendix D.3)."})
    projector_options: dict = field(
        default_factory=dict,
        metadata={"help": "Projector training options, e.g. {epochs: 10, batch_size: 256, lr: 1e-4}."},
    )
    hdp_params: dict = field(
        default_factory=dict,
        metadata={"help": "HDPGMM options, e.g. {prior: stable, sweeps: 100, burn_in: 50, gamma: 5.0, alpha: 1.0}."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the projector and the Gibbs sampler."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing fitted corpus in output_dir."})

    def __post_init__(self) -> None:
        if not self.behaviours:
            raise ValueError("behaviours is required: --behaviours runs/mine/behaviours.jsonl")
        if self.dim < 1:
            raise ValueError(f"dim must be >= 1, got {self.dim}")
        for key in ("projector_options", "hdp_params"):
            if not isinstance(getattr(self, key), dict):
                raise ValueError(f"{key} must be a dict, got {type(getattr(self, key)).__name__}")


def fit_cheatsheet(config: FitCheatsheetConfig) -> dict[str, Any]:
    """Run the three fitting steps and write the fitted corpus; returns its manifest."""
    from metamod.memory.cheatsheet.projector import ProjectorOptions
    from metamod.memory.hdp import HDPGMM

    source = Path(config.behaviours)
    out = Path(config.output_dir)

    def checks() -> tuple:  # everything it will read, before the folder is locked or written (docs/contracts.md)
        if (out / FITTED_MANIFEST).is_file() and not config.overwrite:
            raise FileExistsError(f"{out} already holds a fitted corpus; pass --overwrite true to replace it")
        check_output_dir(out)
        hdp = _built("hdp_params", HDPGMM, {"seed": config.seed, **config.hdp_params})
        options = _built("projector_options", ProjectorOptions, {"seed": config.seed, **config.projector_options})
        behaviours = read_behaviours(source)
        if len(behaviours) < 2:
            raise ValueError(f"{source} has {len(behaviours)} behaviour(s); fitting needs at least 2")
        raw, queries, embedder = read_embeddings(source.parent if source.is_file() else source, len(behaviours))
        return behaviours, raw, queries, embedder, hdp, options

    with write_after_checks(out, checks) as (behaviours, raw, queries, embedder, hdp, options):
        return _fit(config, source, out, behaviours, raw, queries, embedder, hdp, options)


def _built(key: str, kind: type, options: dict[str, Any]) -> Any:
    """``kind(**options)``, an unknown or ill-typed option being a ConfigError that names ``key`` and the valid ones.

    >>> from metamod.memory.hdp import HDPGMM
    >>> _built("hdp_params", HDPGMM, {"sweepz": 3})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: hdp_params: unknown option 'sweepz'; valid: alpha, birth, block, burn_in, ...
    """
    import inspect

    valid = sorted(n for n in inspect.signature(kind).parameters if n != "self")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"{key}: unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
    try:
        return kind(**options)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: {err}") from err


def _fit(config, source, out, behaviours, raw, queries, embedder, hdp, options) -> dict[str, Any]:
    """The three fitting steps and the write, with ``out`` locked."""
    from metamod.memory.cheatsheet.projector import PCAProjection, train_projector

    domains = sorted({b["domain"] for b in behaviours})
    domain_ids = np.array([domains.index(b["domain"]) for b in behaviours], dtype=np.int64)
    timings: dict[str, float] = {}

    start = time.perf_counter()
    pca = PCAProjection(n_components=config.dim).fit(raw)
    projected = pca.transform(raw)
    timings["pca_s"] = round(time.perf_counter() - start, 3)

    projector_report: dict[str, Any] | None = None
    arrays: dict[str, np.ndarray] = {"raw": raw.astype(np.float32)}
    arrays.update({f"pca.{k}": v for k, v in pca.state_arrays().items()})
    if config.projector:
        start = time.perf_counter()
        groups = [b.get("question_id") or b["id"] for b in behaviours]
        projector = train_projector(queries, projected, options, groups=groups)
        timings["projector_s"] = round(time.perf_counter() - start, 3)
        projector_report = {
            "parameters": int(projector.num_parameters()),
            "train_mse": round(float(projector.train_mse_), 6),
            "held_out_mse": None
            if projector.held_out_mse_ != projector.held_out_mse_
            else round(float(projector.held_out_mse_), 6),
            "target_variance": round(float(((projected - projected.mean(axis=0)) ** 2).sum(axis=1).mean()), 6),
            "options": asdict(options),
        }
        arrays.update({f"projector.{k}": v for k, v in projector.state_arrays().items()})

    start = time.perf_counter()
    hdp = hdp.fit(np.asarray(projected, dtype=np.float64), domain_ids)
    timings["hdp_s"] = round(time.perf_counter() - start, 3)
    arrays.update({f"hdp.{k}": v for k, v in hdp.state_arrays().items()})

    sizes = np.bincount(np.asarray(hdp.labels_), minlength=hdp.n_components_)
    manifest = {
        "source": str(source),
        "embedder": embedder,
        "domains": domains,
        "behaviours": len(behaviours),
        "behaviours_by_domain": {d: int((domain_ids == i).sum()) for i, d in enumerate(domains)},
        "raw_dim": int(raw.shape[1]),
        "dim": int(projected.shape[1]),
        "pca_explained_variance": round(float(np.sum(pca.explained_variance_ratio_)), 4),
        "projector": projector_report,
        "hdp": {
            "params": hdp.get_params(),
            "n_components": int(hdp.n_components_),
            "component_sizes": sorted((int(s) for s in sizes), reverse=True),
        },
        "timings": timings,
        "config": asdict(config),
    }
    write_fitted(out, [dict(b) for b in behaviours], manifest, arrays)
    logger.info("fitted cheatsheet corpus -> %s (K=%d over %d behaviours)", out, hdp.n_components_, len(behaviours))
    return manifest


def main(argv: list[str] | None = None) -> int:
    """``metamod fit-cheatsheet --behaviours runs/mine/behaviours.jsonl --output_dir runs/bc``."""
    (config,) = parse_config([FitCheatsheetConfig], argv, prog="metamod fit-cheatsheet")
    manifest = fit_cheatsheet(config)
    hdp = manifest["hdp"]
    print(f"fitted cheatsheet corpus -> {config.output_dir}")
    print(f"  behaviours {manifest['behaviours']} by domain {manifest['behaviours_by_domain']}")
    print(
        f"  PCA {manifest['raw_dim']} -> {manifest['dim']} dims; HDP-GMM K = {hdp['n_components']} "
        f"(largest components {hdp['component_sizes'][:8]})"
    )
    if manifest["projector"]:
        print(f"  projector {manifest['projector']}")
    print(f"  seconds {manifest['timings']}")
    return 0
