"""Retrieval scores of :class:`~metamod.memory.hdp.HDPGMM`: which components a query selects, with what weight.

``w_k ∝ pi_{d,k} p_k(q)`` over the existing components (predictive retrieval, issue part 3): the query's
quadratic forms against every component are one ``dtype`` product of its quadratic features with the packed
coefficients (:meth:`~metamod.memory.hdp.stats.NIWComponents.coefficients`), in chunks of :data:`QUERY_CHUNK`
queries so the features stay in cache; then Student-t log densities, the log mixture weights of the query's
domain, a softmax and the ``top`` best. With numba (:mod:`metamod.memory.hdp.kernel`) and the model's ``kernel``
"auto" or "numba", the ranking is compiled (no per-query interpreter work, no (K, n) temporaries); otherwise the
same arithmetic runs in numpy (:func:`rank_logits`). Both give the same ranking; weights agree to float64 rounding.
The features are built compiled whenever numba is installed (bit-identical to numpy's). BC-centroids ranks
components by distance to their posterior means instead (:func:`centroid_logits`).

>>> import numpy as np
>>> logits = np.log(np.array([[0.2, 0.5], [0.5, 0.25], [0.3, 0.25]]))  # (K, n): 3 components, 2 queries
>>> order, weights = rank_logits(logits, top=2)
>>> order.tolist(), weights.round(3).tolist()
([[1, 2], [0, 1]], [[0.5, 0.3], [0.5, 0.25]])
"""

from __future__ import annotations

import numpy as np

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.stats import feature_offsets, quad_features, t_logpdf_from_q

QUERY_CHUNK = 256  # queries per feature block: 256 x 8,385 float32 = 8.6 MB at D = 128 (stays in L3)
FUSED_MAX = 16  # up to this many queries: one compiled call, a matrix-vector product per query


def rank_logits(logits: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, weights)`` of shape (n, top): per column of the (K, n) ``logits``, the softmax weights of the
    ``top`` largest, best first (ties: lower component index first)."""
    W = np.exp(logits - logits.max(axis=0))
    W /= W.sum(axis=0)
    order = np.argsort(-W, axis=0, kind="stable")[:top]
    return np.ascontiguousarray(order.T), np.ascontiguousarray(np.take_along_axis(W, order, axis=0).T)


def log_mixture_weights(model, K: int) -> np.ndarray:
    """(domains or 1, K) log mixture weights: ``log(n_{d,k} + alpha beta_k)``, flat: ``log N_k`` (one row)."""
    if model.flat:
        return np.log(np.maximum(model._ndk[:, :K].sum(axis=0), 1e-300))[None, :]
    return np.log(model._ndk[:, :K] + model.alpha * model._beta[:K])


def predictive_rank(model, Q: np.ndarray, doms: np.ndarray | None, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, weights)`` (n, top) of predictive retrieval for queries ``Q`` (original coordinates) in domains
    ``doms`` (None: each query's nearest domain centroid; ignored for a flat model)."""
    comps = model.comps
    K, n = comps.size, len(Q)
    coef = comps.coefficients(K)
    df, c, ln = comps.consts()
    order = np.empty((n, top), dtype=np.int64)  # every entry is written (top <= K)
    weights = np.empty((n, top))
    compiled = model._use_kernel()
    if model.flat:  # one pooled row of mixture weights: no domain to predict
        doms = np.zeros(n, dtype=np.int64)
    if compiled and n <= FUSED_MAX:  # one compiled call does everything, query by query
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
    log_w = None if compiled else log_mixture_weights(model, K)
    with model._gemm_threads(n):
        for s in range(0, n, QUERY_CHUNK):
            e = min(s + QUERY_CHUNK, n)
            q = quad_features(X[s:e], out=phi[: e - s]) @ coef.T  # (e - s, K)
            if log_w is None:
                hdp_kernel.rank_rows_compiled(
                    q, rows[s:e], model._ndk, model._beta, float(model.alpha), bool(model.flat),
                    df, c, ln, float(model.dim_), top, order[s:e], weights[s:e],
                )  # fmt: skip
            else:
                logits = log_w[rows[s:e]].T + t_logpdf_from_q(
                    q.T.astype(np.float64), df[:, None], c[:, None], ln[:, None], model.dim_
                )
                order[s:e], weights[s:e] = rank_logits(logits, top)
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
