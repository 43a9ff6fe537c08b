"""The exact blocked collapsed Gibbs sweep of :class:`~metamod.memory.hdp.HDPGMM` and the row store it scans.

Scan order: rows live in a fixed random *storage order* (drawn once at fit time); a sweep visits chunks of
:data:`SCAN_CHUNK` storage positions in a fresh random order, each chunk front to back. Any scan order that
updates one point at a time from its exact full conditional leaves the posterior invariant (systematic and
random scans are both valid Gibbs samplers); scanning contiguous storage lets every block read its cached
quadratic features as a view instead of gathering rows.

Per block of ``block`` points (one GEMM, :meth:`NIWComponents.quad_packed`; during a fit, the forms carried from
the block's last visit with the rank-1 changes logged since replayed, when cheaper: :func:`block_forms`,
:mod:`metamod.memory.hdp.forms`): every point's Psi-metric quadratic form against every component. Then the
block's points are drawn in order, each by inverse CDF with one pre-drawn uniform, in one compiled loop
(:func:`metamod.memory.hdp.kernel.block_moves`). The own component enters through the O(1) leave-one-out identity
(removing the point gives ``q_loo = s^2 q / (1 - s q)`` and ``det Psi_- = det Psi (1 - s q)``, ``s = kappa /
(kappa - 1)``); points whose leave-one-out term is ill-conditioned in the GEMM ``dtype`` (a point that carries most
of a small component) get their own quadratic form recomputed in float64 first. A move is a rank-1 change of two
components (:class:`~metamod.memory.hdp.stats.Rank1`), so the quadratic forms of the rest of the block against them
are updated in O(D) per point, not recomputed. Births, beta re-splits and emptied components are handed back to
:meth:`_Block._apply`. The result is the sequential Gibbs sweep in that scan order (tested equal to ``block=1``,
and equal in float64 to the numpy reference sweep in ``tests/_hdp_reference.py``).
"""

from __future__ import annotations

import numpy as np

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.stats import gaussian_sym_kl, n_features, posterior_gaussians, quad_features, t_logpdf_from_q
from metamod.memory.hdp.support import antoniak_tables, blas_threads

SCAN_CHUNK = 1024  # storage positions per scan chunk (the largest allowed ``block``)
LOO_GUARD = 0.25  # recompute a point's own quadratic form in float64 when 1 - s q falls below this


class ScanStore:
    """Storage order of the rows (``scan[position] = row``) and their cached quadratic features in that order.

    The cache is built on first use and only when it fits ``limit_bytes`` (rows appended later, and every row
    without a cache, are featurised per block).
    """

    def __init__(self, scan: np.ndarray, *, dim: int, dtype, limit_bytes: float) -> None:
        self._scan = np.asarray(scan, dtype=np.int64).copy()
        self.count = len(self._scan)
        self.dim, self.dtype, self.limit_bytes = dim, np.dtype(dtype), float(limit_bytes)
        self.phi: np.ndarray | None = None
        self.rows64: np.ndarray | None = None  # float64 centred rows in storage order, built with the cache
        self.cached = 0

    @property
    def scan(self) -> np.ndarray:
        return self._scan[: self.count]

    def extend(self, rows: np.ndarray) -> None:
        """Append rows (new storage positions at the end; amortised growth)."""
        need = self.count + len(rows)
        if need > len(self._scan):
            self._scan = np.concatenate([self._scan[: self.count], np.empty(max(16, need), dtype=np.int64)])
        self._scan[self.count : need] = rows
        self.count = need

    def nbytes(self) -> int:
        return 0 if self.phi is None else self.phi.nbytes

    def features(self, start: int, stop: int, Xc: np.ndarray, Xc64: np.ndarray) -> np.ndarray:
        """Quadratic features of storage positions ``[start, stop)`` (a view of the cache when cached)."""
        if self.phi is None and self.count * n_features(self.dim) * self.dtype.itemsize <= self.limit_bytes:
            self._build(Xc, Xc64)
        if stop <= self.cached:
            return self.phi[start:stop]
        return quad_features(Xc[self.scan[start:stop]], dtype=self.dtype)

    def centred(self, start: int, stop: int, Xc64: np.ndarray) -> np.ndarray:
        """float64 centred rows of storage positions ``[start, stop)`` (a view where cached)."""
        if stop <= self.cached:
            return self.rows64[start:stop]
        return Xc64[self.scan[start:stop]]

    def _build(self, Xc: np.ndarray, Xc64: np.ndarray) -> None:
        self.cached = self.count
        self.phi = np.empty((self.count, n_features(self.dim)), dtype=self.dtype)
        self.rows64 = Xc64[self.scan]
        for s in range(0, self.count, 4096):
            quad_features(Xc[self.scan[s : s + 4096]], dtype=self.dtype, out=self.phi[s : s + 4096])


def gibbs_sweep(model, stop: int | None = None) -> tuple[int, int]:
    """One exact collapsed Gibbs sweep over storage positions ``[0, stop)``; returns (moves, births)."""
    store = model._store
    stop = store.count if stop is None else stop
    chunks = model._rng.permutation(-(-stop // SCAN_CHUNK))
    u_all = model._rng.random(stop)
    moves = births = done = 0
    for c in chunks:
        lo, hi = c * SCAN_CHUNK, min((c + 1) * SCAN_CHUNK, stop)
        for s in range(lo, hi, model.block):
            e = min(s + model.block, hi)
            m, b = sweep_block(model, s, e, u_all[done : done + e - s])
            moves, births, done = moves + m, births + b, done + e - s
    if model._form_cache is not None:
        model._form_cache.trim()
    return moves, births


def block_forms(model, start: int, stop: int) -> np.ndarray:
    """(K, B) quadratic forms of storage positions ``[start, stop)`` against every slot: replayed from the form
    cache when that is cheaper (:mod:`metamod.memory.hdp.forms`), else one GEMM of the cached features."""
    store, cache, K = model._store, model._form_cache, model.comps.size
    if cache is not None:
        with model._gemm_threads(stop - start):
            if cache.replay(start, stop, store.centred(start, stop, model._Xc64), model.comps):
                return cache.forms_of(start, stop, K)
    phi = store.features(start, stop, model._Xc, model._Xc64)
    with model._gemm_threads(stop - start):
        Q = model.comps.quad_packed(phi)
    if cache is not None:
        cache.store(K, start, stop, Q)
    return Q


def sweep_block(model, start: int, stop: int, u: np.ndarray) -> tuple[int, int]:
    """Gibbs updates of the points at storage positions ``[start, stop)`` in order, with uniforms ``u``; returns
    (moves, births)."""
    Q = block_forms(model, start, stop)
    with blas_threads(1):  # the rest is many small calls: one thread is faster
        return _Block(model, start, model._store.scan[start:stop], Q).draw(u)


def _no_log(dtype) -> tuple:
    """Empty log arrays for the kernel when no form cache is active (``g`` in the cache's dtype: one compiled
    specialisation serves both)."""
    return (
        np.empty(0, dtype=np.int64),
        np.empty(0, dtype=np.int64),
        np.empty((0, 1), dtype=dtype),
        np.empty((0, 4)),
        np.zeros(1, dtype=np.int64),
    )


class _Block:
    """One block's state, kept equal to the current state's full conditionals as points move: quadratic forms
    ``Q`` and log densities ``F`` (slots x points) and per-domain log mixture weights ``LW`` (domains x slots)."""

    def __init__(self, model, start: int, rows: np.ndarray, Q: np.ndarray) -> None:
        self.model, self.comps, self.rows = model, model.comps, rows
        self.size = len(rows)
        self.Y = model._store.centred(start, start + self.size, model._Xc64)
        self.doms = model._doms[rows]
        self.z = model._z[rows].copy()
        self.logf0 = model._logf0[rows]
        K = self.comps.size
        self.Q = np.vstack([Q, np.zeros((16, self.size))])
        self._guard_own()
        df, c, ln = self.comps.consts()
        self.F = np.empty_like(self.Q)
        self.F[:K] = t_logpdf_from_q(self.Q[:K], df[:, None], c[:, None], ln[:, None], model.dim_)
        self.LW = np.zeros((1 if model.flat else model.n_domains_, self.Q.shape[0]))
        self._weights(np.arange(K))

    def draw(self, u: np.ndarray) -> tuple[int, int]:
        """The block's draws through :func:`metamod.memory.hdp.kernel.block_moves`; the points it hands back
        (new-component draws, emptied components, refactorisations) go through :meth:`_apply`. Returns
        (moves, births)."""
        m, comps, cache = self.model, self.comps, self.model._form_cache
        moves = births = 0
        pos = 0
        while pos < self.size:
            consts = comps.consts_padded(self.Q.shape[0])
            if cache is not None:
                cache.reserve(2 * (self.size - pos))
                log = (cache.row_of, cache.row, cache.g, cache.scal, cache.count)
            else:
                log = _no_log(comps.dtype)
            pos, code, pick, done = hdp_kernel.block_moves(
                self.Q, self.F, self.LW, self.Y, self.z, self.doms, self.logf0, u, self.rows, m._z, pos,
                self.size, comps.size, comps.n, comps.S1, comps.S2, comps.mu, comps.prec, comps.logdet, comps.updates,
                comps.stale, m._ndk, m._beta, np.array([m._beta_u]), *consts, float(m.alpha), float(m.gamma),
                bool(m.flat), float(m.kappa0_), float(m.nu0_), float(comps.refresh_every), *log,
            )  # fmt: skip
            comps.version += 1  # the kernel changed statistics in place: drop cached constants
            moves += done
            if code == hdp_kernel.DONE:
                break
            if code == hdp_kernel.REFRESH:
                comps.refresh_due()
                continue
            old = int(self.z[pos])
            births += self._apply(pos, int(pick))
            moves += int(self.z[pos] != old)
            pos += 1
        return moves, births

    def _guard_own(self) -> None:
        """Recompute in float64 the own quadratic forms whose leave-one-out term amplifies GEMM rounding."""
        comps, z = self.comps, self.z
        if comps.dtype == np.float64:
            return
        kap = self.model.kappa0_ + comps.n[z]
        q_own = self.Q[z, np.arange(self.size)]
        risky = np.flatnonzero((1.0 - kap / (kap - 1.0) * q_own < LOO_GUARD) & (comps.n[z] > 1.0 + 1e-9))
        for k in np.unique(z[risky]):
            pts = risky[z[risky] == k]
            self.Q[k, pts] = comps.quad_exact(self.Y[pts], [k])[0]

    def _weights(self, ks) -> None:
        """``LW[:, ks]``: log of ``n_{d,k} + alpha beta_k`` (flat: ``log N_k``)."""
        m = self.model
        with np.errstate(divide="ignore"):
            if m.flat:
                self.LW[0, ks] = np.log(m._ndk[:, ks].sum(axis=0))
            else:
                self.LW[:, ks] = np.log(m._ndk[:, ks] + m.alpha * m._beta[ks])

    def _apply(self, j: int, new: int) -> int:
        """Apply the draw of block position ``j`` (slot ``new``; ``K`` = a new component); returns births."""
        model, comps = self.model, self.comps
        K, old = comps.size, int(self.z[j])
        i, x, d = int(self.rows[j]), self.Y[j], int(self.doms[j])
        if new == K and comps.n[old] <= 1.0 + 1e-9:  # singleton redrawn as new: stays, beta re-split
            tot = model._beta_u + model._beta[old]
            b = model._rng.beta(1.0, model.gamma)
            model._beta[old], model._beta_u = b * tot, (1.0 - b) * tot
            self._weights([old])
            return 0
        change_old = comps.remove(old, x)
        cache = model._form_cache
        if cache is not None:
            cache.record(old, change_old)
        model._ndk[d, old] -= 1
        if comps.n[old] <= 1e-9 and not model.flat:
            model._beta_u += model._beta[old]
            model._beta[old] = 0.0
        born = int(new == K)
        if born:
            new = model._new_component()
            if new >= self.Q.shape[0]:
                grow = np.zeros((16, self.size))
                self.Q, self.F = np.vstack([self.Q, grow]), np.vstack([self.F, grow])
                self.LW = np.hstack([self.LW, np.zeros((self.LW.shape[0], 16))])
        change_new = model._assign(i, new, x)
        if cache is not None:
            cache.record(new, None if born else change_new)
        self.z[j] = new
        self._follow(j + 1, [(old, change_old), (new, None if born else change_new)])
        self._weights([old, new])
        return born

    def _follow(self, start: int, changes: list) -> None:
        """Bring rows of ``Q`` / ``F`` up to date for positions ``[start, size)`` after component changes
        (``(slot, Rank1 or None)``; None: recompute in float64)."""
        if start >= self.size:
            return
        rest = slice(start, self.size)
        fast = [(k, ch) for k, ch in changes if ch is not None]
        if fast:
            T = self.Y[rest] @ np.stack([ch.g for _, ch in fast], axis=1)
            for col, (k, ch) in enumerate(fast):
                self.Q[k, rest] = ch.apply(self.Q[k, rest], None, t=T[:, col])
        for k, ch in changes:
            if ch is None and self.comps.n[k] > 1e-9:
                self.Q[k, rest] = self.comps.quad_exact(self.Y[rest], [k])[0]
        ks = [k for k, _ in changes]
        df, c, ln = self.comps.consts(ks)
        self.F[ks, rest] = t_logpdf_from_q(self.Q[ks, rest], df[:, None], c[:, None], ln[:, None], self.model.dim_)


# ---------------------------------------------------------------- initialisation (before the first sweep)
def initialise(model) -> None:
    """Sequential CRP pass over the first ``init_size`` storage positions (a random subset), ``init_sweeps``
    sweeps over them, then every other row labelled from its conditional given those components."""
    head = min(model.init_size, len(model._X))
    with blas_threads(1):
        _crp_pass(model, model._store.scan[:head])
    for _ in range(model.init_sweeps if head < len(model._X) else 0):  # settle the subset first
        gibbs_sweep(model, head)
    _crp_tail(model, head)
    resample_beta(model)


def _crp_pass(model, head: np.ndarray) -> None:
    """Exact sequential Chinese-restaurant pass over ``head`` (rows not yet assigned)."""
    for i in head:
        d, x = model._doms[i], model._Xc64[i]
        K = model.comps.size
        w, w_new = model._prior_weights(d)
        logits = np.append(
            np.log(np.maximum(w, 1e-300)) + model._component_logpdf(model._Xc[i : i + 1])[:, 0],
            np.log(w_new) + model._logf0[i],
        )
        k = model._sample_logits(logits)
        if k == K:
            k = model._new_component()
        model._assign(i, k, x)


def _crp_tail(model, head: int) -> None:
    """Label storage positions ``[head, n)`` at once from their conditionals given the head's components."""
    scan = model._store.scan
    if head < len(scan):
        logits = _batch_logits(model, head, len(scan))
        p = np.exp(logits - logits.max(axis=0))
        p /= p.sum(axis=0)
        pick = (p.cumsum(axis=0) < model._rng.random(len(scan) - head)).sum(axis=0)
        # a "new component" draw cannot be honoured in a batched pass: it joins its best existing component
        pick = np.where(pick >= model.comps.size, logits[:-1].argmax(axis=0), pick)
        model._rebuild(np.concatenate([model._z[scan[:head]], pick]), scan)


def _batch_logits(model, start: int, stop: int) -> np.ndarray:
    """(K + 1, stop - start) prior-weighted log densities of storage positions ``[start, stop)``."""
    K = model.comps.size
    out = np.empty((K + 1, stop - start))
    for s in range(start, stop, SCAN_CHUNK):
        e = min(s + SCAN_CHUNK, stop)
        r = model._store.scan[s:e]
        if model.flat:
            w = np.broadcast_to(model._ndk[:, :K].sum(axis=0)[:, None], (K, len(r))).astype(np.float64)
        else:
            w = (model._ndk[model._doms[r], :K] + model.alpha * model._beta[:K]).T
        w_new = model.gamma if model.flat else model.alpha * model._beta_u
        with model._gemm_threads(len(r)):
            q = model.comps.quad_packed(model._store.features(s, e, model._Xc, model._Xc64))
        df, c, ln = model.comps.consts()
        f = t_logpdf_from_q(q, df[:, None], c[:, None], ln[:, None], model.dim_)
        out[:K, s - start : e - start] = np.log(np.maximum(w, 1e-300)) + f
        out[K, s - start : e - start] = np.log(w_new) + model._logf0[r]
    return out


# ---------------------------------------------------------------- after a sweep: slots, global weights, merges
def resample_beta(model) -> int:
    """Compact empty slots, then draw tables (Antoniak) and global weights. Returns the slots removed."""
    removed = compact(model)
    K = model.comps.size
    if not model.flat and K:
        model._mdk[:, :K] = antoniak_tables(model._ndk[:, :K], model.alpha * model._beta[:K], model._rng)
        draw = model._rng.dirichlet(np.append(np.maximum(model._mdk[:, :K].sum(axis=0), 1e-3), model.gamma))
        model._beta[:K], model._beta_u = draw[:K], draw[K]
    return removed


def compact(model) -> int:
    """Drop empty slots (order of the others kept, labels remapped); returns how many were dropped."""
    K = model.comps.size
    alive = np.flatnonzero(model.comps.n[:K] > 1e-9)
    removed = K - len(alive)
    if removed:
        remap = np.full(K, -1, dtype=np.int64)
        remap[alive] = np.arange(len(alive))
        model.comps.keep(alive)
        if model._form_cache is not None:
            model._form_cache.remap(alive)
        model._ndk[:, : len(alive)] = model._ndk[:, alive]
        model._mdk[:, : len(alive)] = model._mdk[:, alive]
        model._beta[: len(alive)] = model._beta[alive]
        model._ids[: len(alive)] = model._ids[alive]
        for arr in (model._ndk, model._mdk):
            arr[:, len(alive) :] = 0
        model._beta[len(alive) :] = 0.0
        model._z[:] = np.where(model._z >= 0, remap[np.maximum(model._z, 0)], -1)
    model._medoid_dirty = True
    return removed


def greedy_merge(model) -> int:
    """Greedy merges of the closest pair while its symmetric KL (KL01 + KL10, :func:`gaussian_sym_kl`) < merge_eps."""
    merges = 0
    while model.comps.size > 1:
        kl = gaussian_sym_kl(*posterior_gaussians(model.comps, model.nu0_))
        np.fill_diagonal(kl, np.inf)
        i, j = np.unravel_index(np.argmin(kl), kl.shape)
        if not kl[i, j] < model.merge_eps:
            break
        keep, drop = (i, j) if model.comps.n[i] >= model.comps.n[j] else (j, i)
        c = model.comps
        c.n[keep] += c.n[drop]
        c.S1[keep] += c.S1[drop]
        c.S2[keep] += c.S2[drop]
        c.n[drop] = c.S1[drop] = c.S2[drop] = 0.0
        c.refresh(keep)
        model._ndk[:, keep] += model._ndk[:, drop]
        model._ndk[:, drop] = 0
        model._mdk[:, keep] += model._mdk[:, drop]
        model._beta[keep] += model._beta[drop]
        model._beta[drop] = 0.0
        model._z[model._z == drop] = keep
        compact(model)
        merges += 1
    return merges
