"""Persistence of :class:`~metamod.memory.hdp.HDPGMM`: the arrays that let a saved model continue identically
(statistics, counts, rows, component ids, storage order, both random streams, constructor parameters).

>>> import numpy as np
>>> from metamod.memory.hdp import HDPGMM
>>> X = np.random.default_rng(0).normal(size=(30, 2))
>>> model = HDPGMM(sweeps=2, burn_in=1).fit(X, np.zeros(30, dtype=int))
>>> copy = HDPGMM.from_state_arrays(model.state_arrays())
>>> copy.retrieve(X[:3]) == model.retrieve(X[:3])
True
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from metamod.memory.hdp import support as sup

logger = logging.getLogger(__name__)


def state_arrays(model) -> dict[str, np.ndarray]:
    """Copies of everything :func:`from_state_arrays` needs to continue identically."""
    K = model.comps.size
    return {name: np.array(value) for name, value in _state_views(model, K).items()}


def _state_views(model, K: int) -> dict[str, np.ndarray]:
    return {
        "X": model._X,
        "domains": model._doms,
        "labels": model._z,
        "component_ids": model._ids[:K],
        "next_id": np.array(model._next_id),
        "n": model.comps.n[:K],
        "S1": model.comps.S1[:K],
        "S2": model.comps.S2[:K],
        "n_dk": model._ndk[:, :K],
        "m_dk": model._mdk[:, :K],
        "beta": model._beta[:K],
        "beta_u": np.array(model._beta_u),
        "mu0": model.mu0_,
        "psi0": model.psi0_,
        "nu0": np.array(model.nu0_),
        "kappa0": np.array(model.kappa0_),
        "prec": model.comps.prec[:K],
        "logdet": model.comps.logdet[:K],
        "scan": model._store.scan,
        "updates": model.comps.updates[:K],
        "births": np.array([model.births_[c] for c in ("novelty", "sample", "refit")]),
        "merges": np.array(model.merges_),
        "dom_sum": model._dom_sum,
        "dom_count": model._dom_count,
        "logf0": model._logf0,
        "rng_state": sup.rng_state_array(model._rng),
        "online_rng_state": sup.rng_state_array(model._online_rng),
        "params": np.frombuffer(json.dumps(model.get_params()).encode(), dtype=np.uint8),
    }


def from_state_arrays(cls, arrays: dict[str, np.ndarray], **params: Any):
    """Rebuild a ``cls`` model from :func:`state_arrays` (``params`` override the saved constructor parameters);
    states saved before the precision form (``winv``) or the scan order existed load with fresh factors and
    ``scan = arange(n)``, and ``kernel="numpy"`` (the removed numpy path of the same chain) loads as "auto"."""
    saved = json.loads(bytes(np.asarray(arrays["params"], dtype=np.uint8)).decode())
    merged = {**saved, **params}
    if merged.get("kernel") == "numpy":
        logger.info("HDP-GMM state with kernel='numpy' (the removed numpy path): loaded with kernel='auto'")
        merged["kernel"] = "auto"
    model = cls(**merged)
    X = np.asarray(arrays["X"], dtype=np.float64)
    model.dim_, model.n_domains_ = X.shape[1], len(arrays["dom_count"])
    model.mu0_ = np.asarray(arrays["mu0"], dtype=np.float64)
    model._rng = np.random.default_rng(0)
    model._setup(
        X,
        np.asarray(arrays["domains"], dtype=np.int64),
        float(arrays["kappa0"]),
        float(arrays["nu0"]),
        np.asarray(arrays["psi0"]),
        scan=np.asarray(arrays["scan"]) if "scan" in arrays else np.arange(len(X)),
    )
    K = len(arrays["n"])
    model.comps.set_stats(np.asarray(arrays["n"]), np.asarray(arrays["S1"]), np.asarray(arrays["S2"]))
    if "prec" in arrays:  # the saved (incrementally updated) precisions; without them: fresh ones
        model.comps.prec[:K], model.comps.logdet[:K] = arrays["prec"], arrays["logdet"]
        model.comps.updates[:K] = arrays["updates"]
        model.comps.stale[:K] = True
        model.comps.version += 1  # log-determinants replaced: drop the cached Student-t constants
    model._grow(K)
    model._z[:] = np.asarray(arrays["labels"], dtype=np.int64)
    model._ids[:K], model._next_id = arrays["component_ids"], int(arrays["next_id"])
    model._ndk[:, :K], model._mdk[:, :K] = arrays["n_dk"], arrays["m_dk"]
    model._beta[:K], model._beta_u = arrays["beta"], float(arrays["beta_u"])
    model.births_ = dict(zip(("novelty", "sample", "refit"), (int(v) for v in arrays["births"]), strict=True))
    model.merges_ = int(arrays["merges"])
    model._dom_sum, model._dom_count = np.array(arrays["dom_sum"]), np.array(arrays["dom_count"])
    model._centroid_cache = None
    model._logf0[:] = arrays["logf0"]
    model._rng = sup.rng_from_state(arrays["rng_state"])
    if "online_rng_state" in arrays:
        model._online_rng = sup.rng_from_state(arrays["online_rng_state"])
    return model
