"""Retrieval scores of :class:`~metamod.memory.hdp.HDPGMM`: which components a query selects, with what weight.

``w_k ∝ pi_{d,k} p_k(q)`` over the existing components (predictive retrieval, issue part 3): the query's
quadratic forms against every component are one ``dtype`` product of its quadratic features with the packed
coefficients (:meth:`~metamod.memory.hdp.stats.NIWComponents.coefficients`), in chunks of :data:`QUERY_CHUNK`
queries so the features stay in cache; then Student-t log densities, the log mixture weights of the query's
domain, a softmax and the ``top`` best. Features and ranking are compiled (:mod:`metamod.memory.hdp.kernel`: no
per-query interpreter work, no (K, n) temporaries; up to :data:`FUSED_MAX` queries in one call); they give the
ranking of the numpy reference in ``tests/_hdp_reference.py`` (weights to float64 rounding). BC-centroids ranks
components by distance to their posterior means instead (:func:`centroid_logits`, ranked by :func:`rank_logits`).

>>> import numpy as np
>>> logits = np.log(np.array([[0.2, 0.5], [0.5, 0.25], [0.3, 0.25]]))  # (K, n): 3 components, 2 queries
>>> order, weights = rank_logits(logits, top=2)
>>> order.tolist(), weights.round(3).tolist()
([[1, 2], [0, 1]], [[0.5, 0.3], [0.5, 0.25]])
"""

from __future__ import annotations

import numpy as np

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.stats import feature_offsets, quad_features

QUERY_CHUNK = 256  # queries per feature block: 256 x 8,385 float32 = 8.6 MB at D = 128 (stays in L3)
FUSED_MAX = 16  # up to this many queries: one compiled call, a matrix-vector product per query


def rank_logits(logits: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, weights)`` of shape (n, top): per column of the (K, n) ``logits``, the softmax weights of the
    ``top`` largest, best first (ties: lower component index first)."""
    W = np.exp(logits - logits.max(axis=0))
    W /= W.sum(axis=0)
    order = np.argsort(-W, axis=0, kind="stable")[:top]
    return np.ascontiguousarray(order.T), np.ascontiguousarray(np.take_along_axis(W, order, axis=0).T)


def predictive_rank(model, Q: np.ndarray, doms: np.ndarray | None, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, weights)`` (n, top) of predictive retrieval for queries ``Q`` (original coordinates) in domains
    ``doms`` (None: each query's nearest domain centroid; ignored for a flat model)."""
    comps = model.comps
    K, n = comps.size, len(Q)
    coef = comps.coefficients(K)
    df, c, ln = comps.consts()
    order = np.empty((n, top), dtype=np.int64)  # every entry is written (top <= K)
    weights = np.empty((n, top))
    if model.flat:  # one pooled row of mixture weights: no domain to predict
        doms = np.zeros(n, dtype=np.int64)
    if n <= FUSED_MAX:  # one compiled call does everything, query by query
        C, csq = model._centroids()
        rows = np.full(n, -1, dtype=np.int64) if doms is None else np.asarray(doms, dtype=np.int64)
        hdp_kernel.retrieve_rows_compiled(
            Q, model.mu0_, C, csq, rows, model._ndk, model._beta, float(model.alpha), bool(model.flat),
            coef, feature_offsets(model.dim_), df, c, ln, top, order, weights,
        )  # fmt: skip
        return order, weights
    rows = model._nearest_domain(Q) if doms is None else np.asarray(doms, dtype=np.int64)
    X = np.ascontiguousarray(Q - model.mu0_, dtype=comps.dtype)
    phi = np.empty((min(n, QUERY_CHUNK), coef.shape[1]), dtype=comps.dtype)
    with model._gemm_threads(n):
        for s in range(0, n, QUERY_CHUNK):
            e = min(s + QUERY_CHUNK, n)
            q = quad_features(X[s:e], out=phi[: e - s]) @ coef.T  # (e - s, K)
            hdp_kernel.rank_rows_compiled(
                q, rows[s:e], model._ndk, model._beta, float(model.alpha), bool(model.flat),
                df, c, ln, float(model.dim_), top, order[s:e], weights[s:e],
            )  # fmt: skip
    return order, weights


def centroid_logits(model, Qc: np.ndarray) -> np.ndarray:
    """(K, n) BC-centroids logits ``-d^2 / (2 s^2)`` of centred queries: squared distance to each posterior mean,
    ``s^2`` the mean per-dimension variance of the components' posterior-mean covariances
    (:meth:`~metamod.memory.hdp.HDPGMM.retrieve` with ``method="centroids"``)."""
    K, c = model.comps.size, model.comps
    d2 = (
        np.einsum("kd,kd->k", c.mu[:K], c.mu[:K])[:, None]
        - 2.0 * c.mu[:K] @ Qc.T
        + np.einsum("ij,ij->i", Qc, Qc)[None, :]
    )
    n = c.n[:K]
    trace_psi = (
        np.trace(model.psi0_)
        + np.einsum("kii->k", c.S2[:K])
        - (model.kappa0_ + n) * np.einsum("kd,kd->k", c.mu[:K], c.mu[:K])
    )
    scale = np.mean(trace_psi / (model.nu0_ + n - model.dim_ - 1.0)) / model.dim_
    return -d2 / (2.0 * scale)
