"""Online test-time inserts of :class:`~metamod.memory.hdp.HDPGMM` (``partial_fit`` / ``partial_fit_many``).

Each new row, in order: its responsibilities ``r_k ∝ pi_{d,k} p_k(x)`` over the existing components and the
new-component posterior ``rho_new ∝ alpha beta_u f_0(x)`` (flat: ``gamma f_0``); a birth when ``rho_new >
tau_new`` (``birth="threshold"``) or with probability ``rho_new`` (``birth="sample"``), otherwise the row is
folded softly into every component with ``r_k >= 1e-6`` (weighted statistics) and hard-assigned to the most
responsible one (counts, CRF table). Rows are processed in batches of :data:`INSERT_BLOCK`: one GEMM of quadratic
features gives every row's quadratic forms against every component, and each soft update is a rank-1 change
whose effect on the batch's later rows is applied in O(D) per row
(:class:`~metamod.memory.hdp_stats.Rank1`) — the same sequential result as one row at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from metamod.memory.hdp_stats import quad_features, t_logpdf_from_q

INSERT_BLOCK = 256
FOLD_MIN = 1e-6  # responsibilities below this are not folded in (as in the paper)


def insert_rows(model, X: np.ndarray, Xc: np.ndarray, doms: np.ndarray) -> list[dict[str, Any]]:
    """Append validated rows ``X`` (centred ``Xc``, domains ``doms``) and insert them in order."""
    logf0 = model.comps.prior_logpdf(Xc)
    first = model._append_rows(X, Xc, doms, logf0)
    out: list[dict[str, Any]] = []
    for s in range(0, len(X), INSERT_BLOCK):
        e = min(s + INSERT_BLOCK, len(X))
        out += _insert_block(model, first + s, Xc[s:e], doms[s:e], logf0[s:e])
    np.add.at(model._dom_sum, doms, X)
    model._dom_count += np.bincount(doms, minlength=model.n_domains_)
    model._centroid_cache = None
    return out


def _insert_block(model, first_row: int, Xc: np.ndarray, doms: np.ndarray, logf0: np.ndarray) -> list[dict]:
    comps, D, B = model.comps, model.dim_, len(Xc)
    Q = np.vstack([comps.quad_packed(quad_features(Xc, dtype=comps.dtype)), np.zeros((16, B))])
    df, c, ln = (np.resize(v, Q.shape[0]) for v in comps.consts())
    results = []
    for i in range(B):
        K, d, xc = comps.size, int(doms[i]), Xc[i]
        w, w_new = model._prior_weights(d)
        f = t_logpdf_from_q(Q[:K, i], df[:K], c[:K], ln[:K], D)
        logits = np.append(np.log(np.maximum(w, 1e-300)) + f, np.log(w_new) + logf0[i])
        p = np.exp(logits - logits.max())
        p /= p.sum()
        rho_new = float(p[K]) if K else 1.0
        cause = None
        if model.birth == "threshold" and rho_new > model.tau_new:
            cause = "novelty"
        elif model.birth == "sample" and model._rng.random() < rho_new:
            cause = "sample"
        rest = slice(i + 1, B)
        if cause is not None:
            k = model._new_component()
            if k >= Q.shape[0]:
                Q = np.vstack([Q, np.zeros((16, B))])
                df, c, ln = (np.resize(v, Q.shape[0]) for v in (df, c, ln))
            comps.add(k, xc)
            Q[k, rest] = comps.quad_exact(Xc[rest], [k])[0]
            model.births_[cause] += 1
            touched = [k]
        else:
            r = p[:K] / p[:K].sum()
            touched = np.flatnonzero(r >= FOLD_MIN).tolist()
            for j in touched:
                change = comps.add(j, xc, float(r[j]))
                if change is not None:
                    Q[j, rest] = change.apply(Q[j, rest], Xc[rest])
                else:
                    Q[j, rest] = comps.quad_exact(Xc[rest], [j])[0]
            k = int(np.argmax(r))
        fresh = comps.consts(touched)
        for arr, value in zip((df, c, ln), fresh, strict=True):
            arr[touched] = value
        model._medoid_stale.update(touched)
        model._medoid_stale.add(k)
        model._ndk[d, k] += 1
        model._z[first_row + i] = k
        if not model.flat:  # local table: a new one w.p. alpha beta_z / (alpha beta_z + n_{d,z} before this row)
            ab, before = model.alpha * model._beta[k], model._ndk[d, k] - 1
            if before == 0 or model._rng.random() < ab / (ab + before):
                model._mdk[d, k] += 1
        results.append({"component": k, "born": cause is not None, "cause": cause, "rho_new": rho_new})
    return results
