"""Every stored row's quadratic forms against every component, carried from one sweep to the next.

A blocked sweep needs each point's Psi-metric quadratic form ``q = (y - mu)^T P (y - mu)`` against every slot;
computing them afresh is one GEMM of the cached quadratic features per block (``F = D (D + 1) / 2 + D + 1``
multiply-adds per point and slot: 8,385 at D = 128). Once the chain settles, a sweep moves a few hundred of the
rows, and each move is a rank-1 change of two slots whose effect on *any* point's form is additive:
``q' = q - 2 r t + r^2 a - s_h (t - r a)^2`` with ``t = g . y - g . mu`` (:class:`~metamod.memory.hdp.stats.Rank1`;
the terms after ``q`` do not depend on ``q``). So forms computed at one visit of a block stay exact after the
changes logged since are *replayed*: one GEMM of the block's rows with the logged ``g`` vectors (``D``
multiply-adds per point and change) and an O(1) update per point and change. A block replays when that is cheaper
than recomputing (:meth:`FormCache.replay`) and recomputes from its features otherwise (and on its first visit).
A slot whose forms cannot be replayed (a birth into it, a reset) is marked at that log position and recomputed
around its mean (:func:`slot_forms`) for each block on that block's next visit.

The cache lives only during :meth:`~metamod.memory.hdp.HDPGMM.fit`'s sweeps (``replay_forms=True``): every change
of a component there goes through a move or a birth (logged by the compiled kernel or, for the points it hands
back, by :meth:`~metamod.memory.hdp.sweep._Block._apply`) or a compaction (:meth:`FormCache.remap`); refactorisations
change the forms only by rounding. The replayed forms differ from recomputed ones by the GEMM dtype's rounding
(tested against float64 forms after sweeps with moves, births and compactions).

>>> import numpy as np
>>> from metamod.memory.hdp.stats import NIWComponents
>>> comps = NIWComponents(dim=2, kappa0=0.01, nu0=4.0, psi0=np.eye(2), dtype=np.float64)
>>> k = comps.new_slot()
>>> _ = comps.add(k, np.array([1.0, 0.0]))
>>> Y = np.array([[0.5, -1.0], [2.0, 1.0]])
>>> cache = FormCache(rows=2, dim=2, dtype=np.float64)
>>> cache.store(1, 0, 2, comps.quad_exact(Y))  # forms of the two rows against slot 0, current now
>>> cache.record(k, comps.add(k, np.array([0.0, 3.0])))    # a logged rank-1 change of slot k
>>> cache.replay(0, 2, Y, comps)
True
>>> bool(np.allclose(cache.forms_of(0, 2, 1), comps.quad_exact(Y)))
True
"""

from __future__ import annotations

import numpy as np

from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.stats import Rank1, n_features

# A block replays when REPLAY_COST x (changes x D) + STALE_COST x (stale slots x F) < K x F. Measured at D = 128
# on 2 cores per 1,024 rows: replaying one logged change ~4 us (its GEMM row and the compiled update), a slot's
# share of the feature GEMM ~0.21 ms (so one change ~ D / F x 1.3 slots), recomputing a stale slot ~0.9 ms.
REPLAY_COST = 1.5
STALE_COST = 5.0
NEVER = np.iinfo(np.int64).max  # the epoch of a free row: always stale, its entries never replayed


class FormCache:
    """Quadratic forms (rows x storage positions, float64; slot ``k`` lives in row ``row_of[k]``, so a compaction
    moves no forms), the log position each storage position is current at, and the log of rank-1 changes (row,
    ``g`` in the GEMM dtype, ``(g . mu, r, a, s_h)``; row -1: a marker)."""

    def __init__(self, *, rows: int, dim: int, dtype, slots: int = 16, capacity: int = 4096) -> None:
        self.dim, self.dtype = dim, np.dtype(dtype)
        self.values = np.zeros((max(16, slots), rows))
        self.synced = np.full(rows, -1, dtype=np.int64)  # log position the forms are current at (-1: never)
        self.epoch = np.full(self.values.shape[0], NEVER, dtype=np.int64)  # positions synced before: recompute
        self.row_of = np.empty(self.values.shape[0], dtype=np.int64)
        self.mapped = 0  # slots [0, mapped) have rows
        self.free = list(range(self.values.shape[0] - 1, -1, -1))
        self.base = 0  # log position of entry 0
        self.count = np.zeros(1, dtype=np.int64)  # entries held (an array: the compiled kernel appends in place)
        self.row = np.empty(capacity, dtype=np.int64)
        self.g = np.empty((capacity, dim), dtype=self.dtype)
        self.scal = np.empty((capacity, 4))  # g . mu, r, a, s_h
        self.replayed = self.recomputed = 0  # blocks served each way (for benchmarks and tests)

    @property
    def end(self) -> int:
        """The log position after the last entry."""
        return self.base + int(self.count[0])

    def reserve(self, extra: int) -> None:
        """Room for ``extra`` more entries (the compiled kernel appends without bounds checks)."""
        need = int(self.count[0]) + extra
        if need > len(self.row):
            cap = max(need, 2 * len(self.row))
            n = int(self.count[0])
            for name in ("row", "g", "scal"):
                old = getattr(self, name)
                new = np.empty((cap, *old.shape[1:]), dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)

    def _mark(self, r: int) -> None:
        """Append a marker entry; positions current before it recompute row ``r``."""
        self.reserve(1)
        self.row[int(self.count[0])] = -1
        self.count[0] += 1
        self.epoch[r] = self.end

    def _map(self, K: int) -> None:
        """Give slots ``[mapped, K)`` rows (free ones first), each stale for every position so far."""
        while self.mapped < K:
            if not self.free:
                R = self.values.shape[0]
                self.values = np.vstack([self.values, np.zeros((R, self.values.shape[1]))])
                self.epoch = np.concatenate([self.epoch, np.full(R, NEVER, dtype=np.int64)])
                self.free = list(range(2 * R - 1, R - 1, -1))
            if self.mapped == len(self.row_of):
                self.row_of = np.concatenate([self.row_of, np.empty(len(self.row_of), dtype=np.int64)])
            r = self.free.pop()
            self.row_of[self.mapped] = r
            self.mapped += 1
            self._mark(r)

    def record(self, k: int, change: Rank1 | None) -> None:
        """Log a change of slot ``k`` (None: one that cannot be replayed; a marker, and the slot's forms are
        recomputed for every position current before it)."""
        self._map(k + 1)
        if change is None:
            self._mark(int(self.row_of[k]))
            return
        self.reserve(1)
        e = int(self.count[0])
        self.row[e], self.g[e] = self.row_of[k], change.g
        self.scal[e] = change.g_mu, change.r, change.a, change.s_h
        self.count[0] += 1

    def remap(self, alive: np.ndarray) -> None:
        """Slots were compacted to ``alive`` (in that order): renumber them and free the others' rows."""
        if len(alive):
            self._map(int(alive.max()) + 1)
        rows = self.row_of[: self.mapped].copy()
        dropped = np.setdiff1d(rows, rows[alive])
        self.row_of[: len(alive)] = rows[alive]
        self.mapped = len(alive)
        self.epoch[dropped] = NEVER
        self.free.extend(int(r) for r in dropped)

    def trim(self) -> None:
        """Drop the entries every position has replayed (or never will: positions not yet computed)."""
        seen = self.synced[self.synced >= 0]
        if not len(seen):
            return
        drop = int(seen.min()) - self.base
        if drop > 0:
            n = int(self.count[0]) - drop
            for arr in (self.row, self.g, self.scal):
                arr[:n] = arr[drop : drop + n]
            self.count[0], self.base = n, self.base + drop

    def store(self, K: int, start: int, stop: int, values: np.ndarray) -> None:
        """Forms (K, B) of positions ``[start, stop)`` against slots ``[0, K)``, current now."""
        self._map(K)
        self.values[self.row_of[:K], start:stop] = values
        self.synced[start:stop] = self.end
        self.recomputed += 1

    def forms_of(self, start: int, stop: int, K: int) -> np.ndarray:
        """(K, B) forms of positions ``[start, stop)`` against slots ``[0, K)`` (a copy)."""
        return self.values[self.row_of[:K], start:stop]

    def replay(self, start: int, stop: int, Y: np.ndarray, comps) -> bool:
        """Bring positions ``[start, stop)`` (centred rows ``Y``, float64) up to date by replaying the log; False
        (nothing changed) when they were never computed, are current at different positions, or recomputing them
        from the features is cheaper."""
        K, D = comps.size, self.dim
        self._map(K)
        at = self.synced[start:stop]
        since = int(at[0])
        if since < 0 or since < self.base or (at != since).any():
            return False
        lo, hi = since - self.base, int(self.count[0])
        rows = self.row[lo:hi]
        stale = np.flatnonzero(self.epoch[self.row_of[:K]] > since)
        keep = lo + np.flatnonzero((rows >= 0) & (self.epoch[np.maximum(rows, 0)] <= since))
        F = n_features(D)
        if REPLAY_COST * len(keep) * D + STALE_COST * len(stale) * F >= K * F:
            return False
        if len(keep):
            T = self.g[keep] @ Y.astype(self.dtype, copy=False).T  # (changes, B) g . y in the GEMM dtype
            hdp_kernel.replay_forms_compiled(self.values, start, T, self.row[keep], self.scal[keep])
        for k in stale:
            if comps.n[k] > 1e-9:
                self.values[self.row_of[k], start:stop] = slot_forms(Y, comps, int(k), self.dtype)
        self.synced[start:stop] = self.end
        self.replayed += 1
        return True


def slot_forms(Y: np.ndarray, comps, k: int, dtype) -> np.ndarray:
    """Quadratic forms of centred rows ``Y`` against slot ``k``, computed around its mean in ``dtype`` (float64
    sums)."""
    d = (Y - comps.mu[k]).astype(dtype, copy=False)
    return ((d @ comps.prec[k].astype(dtype, copy=False)) * d).sum(axis=1, dtype=np.float64)
