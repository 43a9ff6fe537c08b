"""Online test-time inserts of :class:`~metamod.memory.hdp.HDPGMM` (``partial_fit`` / ``partial_fit_many``).

Each new row, in order: its responsibilities ``r_k ∝ pi_{d,k} p_k(x)`` over the existing components and the
new-component posterior ``rho_new ∝ alpha beta_u f_0(x)`` (flat: ``gamma f_0``); a birth when ``rho_new >
tau_new`` (``birth="threshold"``) or with probability ``rho_new`` (``birth="sample"``), otherwise the row is
folded softly into every component with ``r_k >= 1e-6`` (weighted statistics) and hard-assigned to the most
responsible one (counts, CRF table). Rows are processed in batches of :data:`INSERT_BLOCK`: one GEMM (quadratic
features against the packed coefficients) gives every row's quadratic forms against every component, and each
soft update is a rank-1 change
whose effect on the batch's later rows is applied in O(D) per row
(:class:`~metamod.memory.hdp.stats.Rank1`) — the same sequential result as one row at a time. The rows run
through one compiled loop (:func:`metamod.memory.hdp.kernel._insert_rows`), which also keeps each slot's D x D
updates pending, a few at a time, and applies them in one pass; births and ill-conditioned fold-ins are handed back
to :meth:`_Batch.insert` (tested equal, row by row, to the numpy reference in ``tests/_hdp_reference.py``: every row
through :meth:`_Batch.insert`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.stats import quad_features, t_logpdf_from_q
from metamod.memory.hdp.support import blas_threads

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
    with model._gemm_threads(len(Xc)):
        batch = _Batch(model, first_row, Xc, doms, logf0)
    with blas_threads(1):  # the rest is many small calls: one thread is faster
        batch.insert_all()
    model._medoid_stale.update(np.unique(batch.comp).tolist())  # a medoid changes only with its hard members
    return [
        {"component": int(k), "born": bool(b), "cause": cause, "rho_new": float(r)}
        for k, b, cause, r in zip(batch.comp, batch.born, batch.cause, batch.rho, strict=True)
    ]


class _Batch:
    """A batch of inserts: quadratic forms of its rows against every component (kept current as rows fold in),
    two pre-drawn uniforms per row (Bernoulli birth, CRF table) and the per-row results."""

    def __init__(self, model, first_row: int, Xc: np.ndarray, doms: np.ndarray, logf0: np.ndarray) -> None:
        comps = model.comps
        self.model, self.comps, self.first_row, self.size = model, comps, first_row, len(Xc)
        self.Xc, self.doms, self.logf0 = np.ascontiguousarray(Xc), doms, logf0
        Q = comps.quad_packed(quad_features(Xc, dtype=comps.dtype))
        self.Q = np.vstack([Q, np.zeros((16, self.size))])
        self.u = model._online_rng.random((self.size, 2))
        self.comp = np.zeros(self.size, dtype=np.int64)
        self.rho = np.zeros(self.size)
        self.born = np.zeros(self.size, dtype=bool)
        self.cause: list[str | None] = [None] * self.size
        self.touched = np.zeros(self.Q.shape[0], dtype=bool)

    def _grow(self) -> None:
        extra = np.zeros((16, self.size))
        self.Q = np.vstack([self.Q, extra])
        self.touched = np.concatenate([self.touched, np.zeros(16, dtype=bool)])

    def insert(self, i: int) -> None:
        """Insert row ``i`` of the batch in Python: a row :meth:`insert_all`'s compiled loop hands back (a birth, an
        ill-conditioned fold-in, a slot due for refactorisation when ``refresh_every`` is 0)."""
        model, comps, D = self.model, self.comps, self.model.dim_
        K, d, xc = comps.size, int(self.doms[i]), self.Xc[i]
        w, w_new = model._prior_weights(d)
        df, c, ln = comps.consts()
        f = t_logpdf_from_q(self.Q[:K, i], df, c, ln, D)
        logits = np.append(np.log(np.maximum(w, 1e-300)) + f, np.log(w_new) + self.logf0[i])
        p = np.exp(logits - logits.max())
        p /= p.sum()
        rho_new = float(p[K]) if K else 1.0
        cause = None
        if model.birth == "threshold" and rho_new > model.tau_new:
            cause = "novelty"
        elif model.birth == "sample" and self.u[i, 0] < rho_new:
            cause = "sample"
        rest = slice(i + 1, self.size)
        if cause is not None:
            k = model._new_component()
            if k >= self.Q.shape[0]:
                self._grow()
            comps.add(k, xc)
            self.Q[k, rest] = comps.quad_exact(self.Xc[rest], [k])[0]
            model.births_[cause] += 1
            touched = [k]
        else:
            r = p[:K] / p[:K].sum()
            touched = np.flatnonzero(r >= FOLD_MIN).tolist()
            for j in touched:
                change = comps.add(j, xc, float(r[j]))
                if change is not None:
                    self.Q[j, rest] = change.apply(self.Q[j, rest], self.Xc[rest])
                else:
                    self.Q[j, rest] = comps.quad_exact(self.Xc[rest], [j])[0]
            k = int(np.argmax(r))
        self.touched[touched] = True
        model._ndk[d, k] += 1
        model._z[self.first_row + i] = k
        if not model.flat:  # local table: a new one w.p. alpha beta_z / (alpha beta_z + n_{d,z} before this row)
            ab, before = model.alpha * model._beta[k], model._ndk[d, k] - 1
            if before == 0 or self.u[i, 1] < ab / (ab + before):
                model._mdk[d, k] += 1
        self.comp[i], self.rho[i], self.born[i], self.cause[i] = k, rho_new, cause is not None, cause

    def insert_all(self) -> None:
        """All rows through :func:`metamod.memory.hdp.kernel.insert_rows_compiled`; births and the rare rows it
        hands back go through :meth:`insert`."""
        m, comps = self.model, self.comps
        i = 0
        while i < self.size:
            consts = comps.consts_padded(self.Q.shape[0])
            i, code = hdp_kernel.insert_rows_compiled(
                self.Q, self.Xc, self.doms, self.logf0, self.u, i, m._z, self.first_row, comps.size,
                comps.n, comps.S1, comps.S2, comps.mu, comps.prec, comps.logdet, comps.updates, comps.stale,
                m._ndk, m._mdk, m._beta, float(m._beta_u), *consts, float(m.alpha), float(m.gamma),
                bool(m.flat), float(m.kappa0_), float(m.nu0_), float(comps.refresh_every),
                m.birth == "threshold", float(m.tau_new), FOLD_MIN, self.comp, self.rho, self.touched,
            )  # fmt: skip
            comps.version += 1  # statistics changed in place: drop cached constants
            if code == hdp_kernel.DONE:
                break
            if code == hdp_kernel.REFRESH:
                comps.refresh_due()
                continue
            self.insert(i)
            i += 1
