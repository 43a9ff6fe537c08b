"""The numpy reference of the HDP-GMM's compiled kernels (metamod/memory/hdp/kernel.py), for the tests.

The package runs one implementation of each hot loop, compiled by numba. These are the numpy paths they replaced,
kept as the reference the compiled code is checked against (tests/test_hdp.py):

- :class:`ReferenceBlock`: the sweep's draws, a sub-block of :data:`EVENT_BLOCK` points at once from per-point
  own-component (leave-one-out) and new-component logits, redrawn from the next point after each state change;
  every change goes through the package's ``_Block._apply`` (the path the compiled loop hands points back to);
- :func:`insert_all`: every online insert through the package's ``_Batch.insert``, one row at a time;
- :func:`predictive_rank`: retrieval scores as (K, n) logits ranked by ``rank_logits``;
- :func:`replay_forms`: the form cache's replay of logged rank-1 changes;
- :func:`quad_features`, :func:`pack_coefficients`, :func:`loo_quadratic`: the features, the packed coefficients
  and the leave-one-out identity the compiled loops compute inline.

:func:`use_reference` puts the first four in place of the compiled calls for a test (a pytest ``MonkeyPatch``), and
makes the compiled calls they replace fail, so a test cannot end up comparing the compiled path with itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp import model as hdp_model
from metamod.memory.hdp import online as hdp_online
from metamod.memory.hdp import sweep as hdp_sweep
from metamod.memory.hdp.query import rank_logits
from metamod.memory.hdp.stats import NIWComponents, feature_offsets, n_features, student_t_consts, t_logpdf_from_q

EVENT_BLOCK = 128  # points redrawn together after a state change


def use_reference(patch: pytest.MonkeyPatch) -> None:
    """Run the sweep, the online inserts, the ranking and the form replay through the numpy reference."""
    patch.setattr(hdp_sweep, "_Block", ReferenceBlock)
    patch.setattr(hdp_online._Batch, "insert_all", insert_all)
    patch.setattr(hdp_model, "predictive_rank", predictive_rank)
    patch.setattr(hdp_kernel, "replay_forms_compiled", replay_forms)
    for name in ("block_moves", "insert_rows_compiled", "rank_rows_compiled", "retrieve_rows_compiled"):
        patch.setattr(hdp_kernel, name, _refused(name))


def _refused(name: str):
    def refused(*args):
        raise AssertionError(f"the numpy reference ran the compiled {name}")

    return refused


# ---------------------------------------------------------------- features, coefficients, leave-one-out
def quad_features(X: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``[x_i x_j (i <= j, row-major), x, 1]`` per row of ``X`` in its dtype: a gather for a handful of rows, else
    one slice product per row of the triangle."""
    n, D = X.shape
    offsets = feature_offsets(D)
    npair = offsets[-1]
    out = np.empty((n, n_features(D)), dtype=X.dtype) if out is None else out
    if n <= 8:
        iu, ju = np.triu_indices(D)
        np.multiply(X[:, iu], X[:, ju], out=out[:, :npair])
    else:
        for i in range(D):
            np.multiply(X[:, i : i + 1], X[:, i:], out=out[:, offsets[i] : offsets[i + 1]])
    out[:, npair : npair + D] = X
    out[:, -1] = 1.0
    return out


def pack_coefficients(comps: NIWComponents, slots: np.ndarray) -> np.ndarray:
    """(len(slots), F) packed coefficients ``[P_ij (x2 off the diagonal), -2 P mu, mu^T P mu]`` (float64)."""
    D = comps.dim
    iu, ju = np.triu_indices(D)
    npair = len(iu)
    P, mu = comps.prec[slots], comps.mu[slots]
    Pmu = np.einsum("kde,ke->kd", P, mu)
    out = np.empty((len(slots), n_features(D)))
    out[:, :npair] = P.reshape(len(slots), D * D)[:, iu * D + ju] * np.where(iu == ju, 1.0, 2.0)
    out[:, npair : npair + D] = -2.0 * Pmu
    out[:, -1] = np.einsum("kd,kd->k", Pmu, mu)
    return out


def loo_quadratic(q: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out terms for a point inside a component's statistics: with ``u = x - mu_n``,
    ``q = u^T Psi_n^{-1} u`` and ``s = kappa_n / (kappa_n - 1)``, removing ``x`` gives ``Psi_- = Psi_n - s u u^T``,
    so ``det Psi_- = det Psi_n (1 - s q)`` and ``(x - mu_-)^T Psi_-^{-1} (x - mu_-) = s^2 q / (1 - s q)``.
    Returns ``(q_loo, log(1 - s q))``."""
    one_minus = np.maximum(1.0 - s * q, 1e-300)
    return s * s * q / one_minus, np.log(one_minus)


# ---------------------------------------------------------------- the sweep
class ReferenceBlock(hdp_sweep._Block):
    """The package's block state plus, per point, the own-component logit (leave-one-out density and count; a
    singleton's component goes with it) and the new-component logit, kept current as points move."""

    def __init__(self, model, start: int, rows: np.ndarray, Q: np.ndarray) -> None:
        super().__init__(model, start, rows, Q)
        self.own, self.new = np.empty(self.size), np.empty(self.size)
        self._own_terms(np.arange(self.size))

    def draw(self, u: np.ndarray) -> tuple[int, int]:
        """The block's draws in sub-blocks of :data:`EVENT_BLOCK` points; returns (moves, births)."""
        moves = births = 0
        for lo in range(0, self.size, EVENT_BLOCK):
            m, b = self._draw_range(u, lo, min(lo + EVENT_BLOCK, self.size))
            moves, births = moves + m, births + b
        return moves, births

    def _draw_range(self, u: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
        """Sequential draws for block positions ``[lo, hi)``: all of them at once by inverse CDF; the first that
        changes the state is applied and the rest redrawn."""
        m, comps = self.model, self.comps
        moves = births = 0
        start = lo
        while start < hi:
            K, sel = comps.size, slice(start, hi)
            a = self.z[sel]
            logits = np.empty((K + 1, hi - start))
            np.add((self.LW[:1, :K] if m.flat else self.LW[self.doms[sel], :K]).T, self.F[:K, sel], out=logits[:K])
            logits[a, np.arange(hi - start)] = self.own[sel]
            logits[K] = self.new[sel]
            p = np.exp(logits - logits.max(axis=0))
            cum = np.cumsum(p, axis=0)
            pick = np.minimum((cum < u[sel] * cum[-1]).sum(axis=0), K)
            event = pick != a
            if m.flat:  # a singleton redrawn as "new" is the same state
                event &= ~((comps.n[a] <= 1.0 + 1e-9) & (pick == K))
            hits = np.flatnonzero(event)
            if not len(hits):
                break
            j = start + int(hits[0])
            old = int(self.z[j])
            births += self._apply(j, int(pick[hits[0]]))
            moves += int(self.z[j] != old)
            start = j + 1
        return moves, births

    def _apply(self, j: int, new: int) -> int:
        """The package's change, then the own / new logits it touched: every later point's when ``beta_u`` moved
        (or a singleton's beta was re-split), else those of the later points in the two slots."""
        old, beta_u = int(self.z[j]), self.model._beta_u
        resplit = new == self.comps.size and self.comps.n[old] <= 1.0 + 1e-9
        born = super()._apply(j, new)
        if resplit or self.model._beta_u != beta_u:
            self._own_terms(np.arange(j + 1, self.size))
        else:
            rest = self.z[j + 1 :]
            self._own_terms(j + 1 + np.flatnonzero((rest == old) | (rest == self.z[j])))
        return born

    def _own_terms(self, cols: np.ndarray) -> None:
        """Own-component and new-component logits of block positions ``cols``."""
        if not len(cols):
            return
        m, comps, D = self.model, self.comps, self.model.dim_
        a = self.z[cols]
        na = comps.n[a]
        single = na <= 1.0 + 1e-9
        kap = m.kappa0_ + na
        q_loo, dlog = loo_quadratic(self.Q[a, cols], kap / (kap - 1.0))
        df_m, c_m, ln_m = student_t_consts(kap - 1.0, m.nu0_ + na - 1.0, comps.logdet[a] + dlog, D)
        if m.flat:
            w_own = m._ndk[:, a].sum(axis=0) - 1.0
            self.new[cols] = np.log(m.gamma) + self.logf0[cols]
        else:
            w_own = np.where(single, 0.0, m._ndk[self.doms[cols], a] - 1.0 + m.alpha * m._beta[a])
            w_new = m.alpha * (m._beta_u + np.where(single, m._beta[a], 0.0))
            self.new[cols] = np.log(w_new) + self.logf0[cols]
        with np.errstate(divide="ignore"):
            self.own[cols] = np.log(np.maximum(w_own, 0.0)) + t_logpdf_from_q(q_loo, df_m, c_m, ln_m, D)


# ---------------------------------------------------------------- inserts, retrieval, form replay
def insert_all(batch) -> None:
    """Every row of an online insert batch through ``_Batch.insert``, in order."""
    for i in range(batch.size):
        batch.insert(i)


def log_mixture_weights(model, K: int) -> np.ndarray:
    """(domains or 1, K) log mixture weights: ``log(n_{d,k} + alpha beta_k)``, flat: ``log N_k`` (one row)."""
    if model.flat:
        return np.log(np.maximum(model._ndk[:, :K].sum(axis=0), 1e-300))[None, :]
    return np.log(model._ndk[:, :K] + model.alpha * model._beta[:K])


def predictive_rank(model, Q: np.ndarray, doms: np.ndarray | None, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, weights)`` (n, top): Student-t log densities from one product of the queries' quadratic features
    with the packed coefficients, plus the log mixture weights of each query's domain, ranked by ``rank_logits``."""
    comps = model.comps
    K = comps.size
    if model.flat:
        doms = np.zeros(len(Q), dtype=np.int64)
    rows = model._nearest_domain(Q) if doms is None else np.asarray(doms, dtype=np.int64)
    q = quad_features(np.ascontiguousarray(Q - model.mu0_, dtype=comps.dtype)) @ comps.coefficients(K).T
    df, c, ln = comps.consts()
    logits = log_mixture_weights(model, K)[rows].T + t_logpdf_from_q(
        q.T.astype(np.float64), df[:, None], c[:, None], ln[:, None], model.dim_
    )
    return rank_logits(logits, top)


def replay_forms(values: np.ndarray, start: int, T: np.ndarray, slots: np.ndarray, scal: np.ndarray) -> None:
    """Add every logged change's update of the quadratic forms (``T[e]``: ``g_e . y`` of the block's rows) to its
    row ``slots[e]`` of ``values`` from column ``start``."""
    g_mu, r, a, s_h = (scal[:, i : i + 1] for i in range(4))
    x = T.astype(np.float64)
    v = x - (g_mu + r * a)
    delta = (r * r * a + 2.0 * r * g_mu) - 2.0 * r * x - s_h * v * v
    order = np.argsort(slots, kind="stable")
    sorted_slots = slots[order]
    heads = np.flatnonzero(np.r_[True, sorted_slots[1:] != sorted_slots[:-1]])
    values[sorted_slots[heads], start : start + T.shape[1]] += np.add.reduceat(delta[order], heads, axis=0)
