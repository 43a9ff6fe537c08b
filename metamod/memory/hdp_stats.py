"""Normal-inverse-Wishart component statistics and small numeric helpers for :mod:`metamod.memory.hdp`.

Everything here works on *centred* data (the prior mean ``mu0`` is subtracted once), so the NIW posterior of a
component with sufficient statistics ``n = sum w``, ``S1 = sum w x`` and ``S2 = sum w x x^T`` is

- ``kappa_n = kappa0 + n``, ``nu_n = nu0 + n``, ``mu_n = S1 / kappa_n``,
- ``Psi_n = Psi0 + S2 - kappa_n mu_n mu_n^T`` (the ``kappa0 mu0 mu0^T`` term vanishes for ``mu0 = 0``),

and its posterior predictive is a multivariate Student-t with ``df = nu_n - D + 1``, location ``mu_n`` and shape
``Sigma = c Psi_n``, ``c = (kappa_n + 1) / (kappa_n df)``. :class:`NIWComponents` keeps, per component slot, the
Cholesky factor ``L`` of ``Psi_n`` and its inverse ``W = L^{-1}`` (float64, plus a ``dtype`` copy for the sweep
GEMM), so the Psi-metric quadratic form of a block of points against every component is one matrix product:
``q_psi = ||W_k x - W_k mu_k||^2`` and the Student-t quadratic form is ``q_psi / c``.

>>> import numpy as np
>>> comps = NIWComponents(dim=2, kappa0=0.01, nu0=4.0, psi0=np.eye(2))
>>> k = comps.new_slot()
>>> comps.add(k, np.array([1.0, 2.0]))
>>> float(comps.n[k]), comps.mu[k].round(4).tolist()
(1.0, [0.9901, 1.9802])
>>> comps.remove(k, np.array([1.0, 2.0]))
>>> bool(np.allclose(comps.cholesky(k), np.eye(2)))
True
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack
from scipy.special import gammaln, multigammaln

LOG_PI = float(np.log(np.pi))
_ger = blas.dger  # a += alpha x y^T in place (Fortran-order a)


def chol_update(L: np.ndarray, v: np.ndarray, *, downdate: bool = False) -> np.ndarray:
    """Rank-1 update (``L L^T + v v^T``) or downdate (``L L^T - v v^T``) of a lower Cholesky factor, in place.

    O(D^2) (one pass over the columns). Raises ``ValueError`` when a downdate would leave a matrix that is not
    positive definite.

    Args:
        L: (D, D) lower-triangular factor, modified in place and returned.
        v: (D,) vector (copied, not modified).
        downdate: subtract ``v v^T`` instead of adding it.

    >>> L = np.linalg.cholesky(np.array([[4.0, 1.0], [1.0, 3.0]]))
    >>> v = np.array([0.5, -1.0])
    >>> bool(np.allclose(chol_update(L.copy(), v) @ chol_update(L.copy(), v).T, L @ L.T + np.outer(v, v)))
    True
    """
    v = np.array(v, dtype=np.float64, copy=True)
    sign = -1.0 if downdate else 1.0
    dim = L.shape[0]
    for k in range(dim):
        lkk = L[k, k]
        r2 = lkk * lkk + sign * v[k] * v[k]
        if r2 <= 0.0:
            raise ValueError(f"chol_update: downdate leaves a matrix that is not positive definite (pivot {k})")
        r = np.sqrt(r2)
        c, s = r / lkk, v[k] / lkk
        L[k, k] = r
        if k + 1 < dim:
            col = L[k + 1 :, k]
            col += sign * s * v[k + 1 :]
            col /= c
            v[k + 1 :] = c * v[k + 1 :] - s * col
    return L


def inv_chol_rank1(
    W: np.ndarray, v: np.ndarray, sign: float = 1.0, *, out: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Inverse Cholesky factor after a rank-1 change: ``W = L^{-1}`` of ``A = L L^T`` -> that of ``A + sign v v^T``.

    O(D^2): with ``w = W v`` and ``t_i = 1 + sign sum_{j<=i} w_j^2``, ``A + sign v v^T = L M M^T L^T`` where
    ``M = chol(I + sign w w^T)`` has a closed form, and ``M^{-1} W`` is ``W'_i = sqrt(t_{i-1} / t_i) (W_i - sign
    w_i / t_{i-1} sum_{j<i} w_j W_j)`` (the inner sums are one running sum over rows). Returns ``(W', log det
    change)``; ``out`` (may be ``W`` itself) receives ``W'``. Raises ``ValueError`` when a downdate leaves a matrix
    that is not positive definite (``out`` untouched then).

    >>> A = np.array([[4.0, 1.0], [1.0, 3.0]]); v = np.array([0.5, -1.0])
    >>> W2, dlog = inv_chol_rank1(np.linalg.inv(np.linalg.cholesky(A)), v)
    >>> bool(np.allclose(np.linalg.inv(W2.T @ W2), A + np.outer(v, v))), round(dlog, 6)
    (True, 0.420503)
    """
    w = W @ v
    t = 1.0 + sign * np.cumsum(w * w)
    if t[-1] <= 1e-12:
        raise ValueError("inv_chol_rank1: downdate leaves a matrix that is not positive definite")
    tp = np.empty_like(t)
    tp[0], tp[1:] = 1.0, t[:-1]
    S = _row_cumsum(W[:-1] * w[:-1, None])  # S[i] = sum_{j<=i} w_j W_j
    S *= (sign * w[1:] / tp[1:])[:, None]
    out = np.empty_like(W) if out is None else out
    out[0] = W[0]
    np.subtract(W[1:], S, out=out[1:])
    out *= np.sqrt(tp / t)[:, None]
    return out, float(np.log(t[-1]))


_CUMSUM_BLOCK = 16
_TRI_CACHE: dict[int, np.ndarray] = {}


def _row_cumsum(P: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum over the rows of ``P`` (n, m), blocked: a lower-ones product inside blocks of
    16 rows plus a running sum of the block totals (numpy's ``cumsum(axis=0)`` does not vectorise; ~2x faster).

    >>> _row_cumsum(np.arange(6.0).reshape(3, 2)).tolist()
    [[0.0, 1.0], [2.0, 4.0], [6.0, 9.0]]
    """
    n, b = P.shape[0], _CUMSUM_BLOCK
    nb = -(-n // b)
    tri = _TRI_CACHE.get(b)
    if tri is None:
        tri = _TRI_CACHE.setdefault(b, np.tril(np.ones((b, b))))
    if nb * b != n:
        padded = np.zeros((nb * b, P.shape[1]))
        padded[:n] = P
        P = padded
    C = np.matmul(tri, P.reshape(nb, b, -1))
    if nb > 1:
        C[1:] += np.cumsum(C[:-1, -1, :], axis=0)[:, None, :]
    return C.reshape(nb * b, -1)[:n]


def loo_quadratic(q: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Leave-one-out terms for a point that is inside a component's statistics.

    With ``u = x - mu_n``, ``q = u^T Psi_n^{-1} u`` and ``s = kappa_n / (kappa_n - 1)``, removing ``x`` gives
    ``Psi_- = Psi_n - s u u^T``, hence ``det Psi_- = det Psi_n (1 - s q)`` and
    ``(x - mu_-)^T Psi_-^{-1} (x - mu_-) = s^2 q / (1 - s q)`` (Sherman-Morrison with ``x - mu_- = s u``).

    Returns:
        ``(q_loo, log(1 - s q))`` — the LOO Psi-metric quadratic form and the log-determinant change.

    >>> q, s = np.array([0.2]), np.array([2.0])
    >>> [round(float(a[0]), 6) for a in loo_quadratic(q, s)]
    [1.333333, -0.510826]
    """
    one_minus = np.maximum(1.0 - s * q, 1e-300)
    return s * s * q / one_minus, np.log(one_minus)


def student_t_consts(kappa: np.ndarray, nu: np.ndarray, logdet_psi: np.ndarray, dim: int):
    """Per-component Student-t constants: ``(df, c, log_norm)`` with shape ``c Psi`` and
    ``log_norm = lgamma((df+D)/2) - lgamma(df/2) - D/2 log(df pi) - 1/2 log det(c Psi)``."""
    df = nu - dim + 1.0
    c = (kappa + 1.0) / (kappa * df)
    log_norm = (
        gammaln(0.5 * (df + dim))
        - gammaln(0.5 * df)
        - 0.5 * dim * (np.log(df) + LOG_PI)
        - 0.5 * (logdet_psi + dim * np.log(c))
    )
    return df, c, log_norm


def t_logpdf_from_q(q_psi: np.ndarray, df: np.ndarray, c: np.ndarray, log_norm: np.ndarray, dim: int) -> np.ndarray:
    """Student-t log density from the Psi-metric quadratic form (broadcasts: constants per row, points per column)."""
    return log_norm - 0.5 * (df + dim) * np.log1p(q_psi / (c * df))


def chol_and_inverse(psi: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Lower Cholesky factor of ``psi``, its inverse and ``log det psi`` (LAPACK ``potrf`` / ``trtri``)."""
    L, info = lapack.dpotrf(psi, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"Psi_n is not positive definite (potrf info={info})")
    W, info = lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular Cholesky factor (trtri info={info})")
    return L, np.tril(W), float(2.0 * np.log(np.diag(L)).sum())


def niw_log_marginal(
    n: np.ndarray, logdet_psi_n: np.ndarray, kappa0: float, nu0: float, logdet_psi0: float, dim: int
) -> np.ndarray:
    """Log marginal likelihood of each component's data under the NIW prior (closed form)."""
    nu_n, kappa_n = nu0 + n, kappa0 + n
    return (
        -0.5 * n * dim * LOG_PI
        + multigammaln(0.5 * nu_n, dim)
        - multigammaln(0.5 * nu0, dim)
        + 0.5 * nu0 * logdet_psi0
        - 0.5 * nu_n * logdet_psi_n
        + 0.5 * dim * (np.log(kappa0) - np.log(kappa_n))
    )


def antoniak_tables(n_dk: np.ndarray, alpha_beta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample CRF table counts ``m_{d,k} = sum_{j<n_{d,k}} Bernoulli(a / (a + j))`` with ``a = alpha beta_k``.

    >>> m = antoniak_tables(np.array([[3, 0]]), np.array([1.0, 1.0]), np.random.default_rng(0))
    >>> bool(m[0, 0] >= 1 and m[0, 1] == 0)
    True
    """
    counts = np.asarray(n_dk, dtype=np.int64)
    flat = counts.ravel()
    total = int(flat.sum())
    m = np.zeros_like(flat)
    if total == 0:
        return m.reshape(counts.shape)
    owner = np.repeat(np.arange(flat.size), flat)
    starts = np.cumsum(flat) - flat
    j = np.arange(total) - np.repeat(starts, flat)
    a = np.broadcast_to(alpha_beta, counts.shape).ravel()[owner]
    hits = rng.random(total) < a / (a + j)
    np.add.at(m, owner, hits)
    return m.reshape(counts.shape)


def kmeans(X: np.ndarray, k: int, rng: np.random.Generator, iters: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Small k-means (k-means++ seeding, ``iters`` Lloyd steps). Returns ``(centres, labels)``."""
    n = X.shape[0]
    k = max(1, min(k, n))
    sq = np.einsum("ij,ij->i", X, X)
    centres = [X[rng.integers(n)]]
    d2 = np.maximum(sq - 2 * X @ centres[0] + centres[0] @ centres[0], 0.0)
    for _ in range(1, k):
        total = d2.sum()
        pick = rng.integers(n) if total <= 0 else int(np.searchsorted(np.cumsum(d2), rng.random() * total))
        c = X[min(pick, n - 1)]
        centres.append(c)
        d2 = np.minimum(d2, np.maximum(sq - 2 * X @ c + c @ c, 0.0))
    C = np.array(centres)
    labels = np.zeros(n, dtype=np.int64)
    for _ in range(iters):
        labels = np.argmin(np.einsum("ij,ij->i", C, C)[None, :] - 2 * X @ C.T, axis=1)
        for j in range(C.shape[0]):
            members = labels == j
            if members.any():
                C[j] = X[members].mean(axis=0)
    return C, labels


def gaussian_sym_kl(mu: np.ndarray, cov: np.ndarray, prec: np.ndarray, logdet: np.ndarray) -> np.ndarray:
    """Pairwise symmetric KL ``0.5 (KL(i||j) + KL(j||i))`` between Gaussians ``N(mu_k, cov_k)``.

    Args:
        mu: (K, D) means; cov: (K, D, D) covariances; prec: (K, D, D) their inverses; logdet: (K,) log det cov.

    >>> mu = np.array([[0.0, 0.0], [1.0, 0.0]]); cov = np.stack([np.eye(2)] * 2)
    >>> float(gaussian_sym_kl(mu, cov, cov, np.zeros(2))[0, 1])
    0.5
    """
    K, D = mu.shape
    tr = prec.reshape(K, D * D) @ cov.reshape(K, D * D).T  # tr[j, i] = tr(P_j Sigma_i)
    pm = np.einsum("jde,ie->jid", prec, mu)  # P_j mu_i
    a = np.einsum("jid,id->ji", pm, mu)  # mu_i^T P_j mu_i
    b = np.einsum("jid,jd->ji", pm, mu)  # mu_j^T P_j mu_i
    maha = a - 2.0 * b + np.diag(b)[:, None]  # [j, i] = (mu_i - mu_j)^T P_j (mu_i - mu_j)
    kl_ij = 0.5 * (tr + maha - D + logdet[:, None] - logdet[None, :])  # [j, i] = KL(i || j)
    return 0.5 * (kl_ij + kl_ij.T)


class NIWComponents:
    """Growable per-slot NIW sufficient statistics with cached Cholesky factors (centred data).

    Attributes (arrays over slots, first ``size`` valid): ``n``, ``S1``, ``S2``, ``mu``, ``winv`` (``L^{-1}`` of
    ``Psi_n = L L^T``, float64), ``w_fast`` / ``wmu_fast`` (``dtype`` copies of ``L^{-1}`` and ``L^{-1} mu`` for the
    sweep GEMM), ``logdet`` (log det Psi_n). :meth:`add` / :meth:`remove` update ``winv`` and ``logdet`` with an
    O(D^2) rank-1 update / downdate (:func:`inv_chol_rank1`: ``Psi`` changes by ``kappa w / (kappa + w) (x - mu)
    (x - mu)^T``); every ``refresh_every`` incremental changes a slot is refactored from its statistics (LAPACK),
    which bounds rounding drift. ``cholesky(k)`` gives a fresh factor of ``Psi_n``.
    """

    refresh_every = 64
    buffer_bytes = 1 << 25  # quad() keeps its GEMM output buffer up to this size (32 MiB) between calls

    def __init__(
        self, *, dim: int, kappa0: float, nu0: float, psi0: np.ndarray, dtype=np.float32, capacity: int = 16
    ) -> None:
        self.dim, self.kappa0, self.nu0, self.dtype = dim, float(kappa0), float(nu0), np.dtype(dtype)
        self.psi0 = np.asarray(psi0, dtype=np.float64)
        self.chol0, self.winv0, self.logdet0 = chol_and_inverse(self.psi0)
        self.size = 0
        self.version = 0  # bumped on every change of any slot (invalidates :meth:`consts`' cache)
        self._consts_cache: tuple | None = None
        self._ybuf: np.ndarray | None = None  # the GEMM output buffer of :meth:`quad`
        self._prior_consts: tuple | None = None
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        D, old = self.dim, getattr(self, "n", None)
        fields = {"n": (), "S1": (D,), "S2": (D, D), "mu": (D,), "winv": (D, D), "logdet": (), "updates": ()}
        for name, shape in fields.items():
            arr = np.zeros((capacity, *shape))
            if old is not None:
                arr[: self.size] = getattr(self, name)[: self.size]
            setattr(self, name, arr)
        for name, shape in {"w_fast": (D, D), "wmu_fast": (D,)}.items():
            arr = np.zeros((capacity, *shape), dtype=self.dtype)
            if old is not None:
                arr[: self.size] = getattr(self, name)[: self.size]
            setattr(self, name, arr)

    @property
    def kappa(self) -> np.ndarray:
        return self.kappa0 + self.n[: self.size]

    @property
    def nu(self) -> np.ndarray:
        return self.nu0 + self.n[: self.size]

    def new_slot(self) -> int:
        """Append an empty component (prior posterior) and return its slot."""
        if self.size == self.n.shape[0]:
            self._alloc(2 * self.size)
        k = self.size
        self.size += 1
        self.n[k], self.S1[k], self.S2[k] = 0.0, 0.0, 0.0
        self.refresh(k)
        return k

    def psi(self, k: int) -> np.ndarray:
        """``Psi_n`` of slot ``k``."""
        kappa = self.kappa0 + self.n[k]
        return self.psi0 + self.S2[k] - kappa * np.outer(self.mu[k], self.mu[k])

    def cholesky(self, k: int) -> np.ndarray:
        """A fresh lower Cholesky factor of ``Psi_n`` of slot ``k``."""
        return chol_and_inverse(self.psi(k))[0]

    def refresh(self, k: int) -> None:
        """Recompute mean, factors and log-determinant of slot ``k`` from its statistics."""
        self.version += 1
        self.mu[k] = self.S1[k] / (self.kappa0 + self.n[k])
        psi = self.psi(k)
        _, self.winv[k], self.logdet[k] = chol_and_inverse(0.5 * (psi + psi.T))
        self.updates[k] = 0
        self._sync(k)

    def _sync(self, k: int) -> None:
        self.w_fast[k] = self.winv[k]
        self.wmu_fast[k] = self.winv[k] @ self.mu[k]

    def _rank1(self, k: int, x: np.ndarray, w: float) -> bool:
        """Incremental factor change for adding (w > 0) or removing (w < 0) ``x``; False: refactor instead."""
        kappa = self.kappa0 + self.n[k]
        kappa_new = kappa + w
        if self.updates[k] >= self.refresh_every or kappa_new <= self.kappa0 + 1e-9 or self.n[k] <= 1e-9:
            return False
        coef = kappa * w / kappa_new  # Psi_new = Psi + coef (x - mu)(x - mu)^T
        try:
            _, dlog = inv_chol_rank1(
                self.winv[k], np.sqrt(abs(coef)) * (x - self.mu[k]), np.sign(coef), out=self.winv[k]
            )
        except ValueError:
            return False
        self.logdet[k] += dlog
        self.updates[k] += 1
        return True

    def add(self, k: int, x: np.ndarray, w: float = 1.0, *, refresh: bool = True) -> None:
        """Add ``x`` with weight ``w`` (negative: remove) to slot ``k``: O(D^2) statistics and factor update."""
        incremental = refresh and self._rank1(k, x, w)
        self.version += 1
        self.n[k] += w
        self.S1[k] += w * x
        target = self.S2[k].T  # S2 += w x x^T in place (symmetric, and the transpose is Fortran order)
        if _ger(w, x, x, a=target, overwrite_a=True) is not target:  # f2py copied after all: never silently lose it
            raise RuntimeError("dger did not update S2 in place")
        if abs(self.n[k]) < 1e-9:
            self.n[k], self.S1[k], self.S2[k] = 0.0, 0.0, 0.0
            incremental = False
        if incremental:
            self.mu[k] = self.S1[k] / (self.kappa0 + self.n[k])
            self._sync(k)
        elif refresh:
            self.refresh(k)

    def remove(self, k: int, x: np.ndarray, w: float = 1.0, *, refresh: bool = True) -> None:
        """Remove ``x`` with weight ``w`` from slot ``k`` (exact inverse of :meth:`add`)."""
        self.add(k, x, -w, refresh=refresh)

    def set_stats(self, n: np.ndarray, S1: np.ndarray, S2: np.ndarray) -> None:
        """Replace every slot's statistics (arrays over slots) and refactor them all."""
        self.size = 0
        self._alloc(max(16, len(n)))
        self.size = len(n)
        self.n[: self.size], self.S1[: self.size], self.S2[: self.size] = n, S1, S2
        for k in range(self.size):
            self.refresh(k)

    def keep(self, slots: np.ndarray) -> None:
        """Keep only ``slots`` (in that order)."""
        for name in ("n", "S1", "S2", "mu", "winv", "logdet", "updates", "w_fast", "wmu_fast"):
            arr = getattr(self, name)
            arr[: len(slots)] = arr[slots]
        self.size = len(slots)
        self.version += 1

    def consts(self, rows=None):
        """``(df, c, log_norm)`` for ``rows`` (default: every slot, cached until the next change)."""
        if rows is None:
            key = (self.version, self.size)
            if self._consts_cache is None or self._consts_cache[0] != key:
                self._consts_cache = (key, self.consts(np.arange(self.size)))
            return self._consts_cache[1]
        n = self.n[rows]
        return student_t_consts(self.kappa0 + n, self.nu0 + n, self.logdet[rows], self.dim)

    def quad(self, Xc: np.ndarray, rows=None, *, fast: bool = True) -> np.ndarray:
        """Psi-metric quadratic forms ``(len(rows), B)`` of centred points ``Xc`` (B, D): one GEMM."""
        sel = slice(0, self.size) if rows is None else np.asarray(rows)  # a slice: no copy of the factors
        rows = np.arange(self.size) if rows is None else sel
        D = self.dim
        if fast:
            W, Wmu = self.w_fast[sel], self.wmu_fast[sel]
            X = Xc.astype(self.dtype, copy=False)
        else:
            W, Wmu = self.winv[sel], np.einsum("kde,ke->kd", self.winv[sel], self.mu[sel])
            X = np.asarray(Xc, dtype=np.float64)
        size = len(rows) * D * X.shape[0]
        if size * W.dtype.itemsize > self.buffer_bytes:
            Y = np.empty((len(rows) * D, X.shape[0]), dtype=W.dtype)
        else:
            if self._ybuf is None or self._ybuf.dtype != W.dtype or self._ybuf.size < size:
                self._ybuf = np.empty(max(size, 1 << 16), dtype=W.dtype)  # reused: no fresh pages every block
            Y = self._ybuf[:size].reshape(len(rows) * D, X.shape[0])
        np.matmul(W.reshape(len(rows) * D, D), X.T, out=Y)
        Y = Y.reshape(len(rows), D, X.shape[0])
        Y -= Wmu[:, :, None]
        np.square(Y, out=Y)
        return Y.sum(axis=1, dtype=np.float64)

    def prior_logpdf(self, Xc: np.ndarray) -> np.ndarray:
        """Prior predictive (new-component) Student-t log density of centred points, float64."""
        if self._prior_consts is None:
            self._prior_consts = student_t_consts(
                np.array(self.kappa0), np.array(self.nu0), np.array(self.logdet0), self.dim
            )
        df, c, log_norm = self._prior_consts
        Y = np.asarray(Xc, dtype=np.float64) @ self.winv0.T
        return t_logpdf_from_q(np.einsum("ij,ij->i", Y, Y), df, c, log_norm, self.dim)


def gibbs_block_events(model, idx, Xb, doms, z, Q, F, u) -> tuple[int, int]:
    """The sequential part of one block of :class:`~metamod.memory.hdp.HDPGMM`'s exact blocked Gibbs sweep.

    ``Q`` / ``F``: (slots, B) Psi-metric quadratic forms / log densities of the block's points against every slot
    at the block start; ``u``: one uniform per point. All remaining points are drawn at once (inverse CDF with
    their own uniforms); the first point whose draw changes the state is applied (stats, counts, beta), the two
    touched slots' rows are recomputed for the rest of the block, and the rest is redrawn. Returns (moves, births).
    """
    comps, D, B = model.comps, model.dim_, len(idx)
    cols = np.arange(B)
    moves = births = 0
    start = 0
    while start < B:
        K = comps.size
        sel = cols[start:]
        a = z[sel]
        na = comps.n[a]
        # own component, leave-one-out (O(1) from the full-statistics quadratic form)
        kap = model.kappa0_ + na
        q_loo, dlog = loo_quadratic(Q[a, sel], kap / (kap - 1.0))
        df_m, c_m, ln_m = student_t_consts(kap - 1.0, model.nu0_ + na - 1.0, comps.logdet[a] + dlog, D)
        f_own = t_logpdf_from_q(q_loo, df_m, c_m, ln_m, D)
        if model.flat:
            w = np.broadcast_to(model._ndk[:, :K].sum(axis=0)[:, None], (K, len(sel))).astype(np.float64).copy()
            w[a, np.arange(len(sel))] -= 1.0
            w_new = np.full(len(sel), model.gamma)
        else:
            w = (model._ndk[doms[sel], :K] + model.alpha * model._beta[:K]).T.astype(np.float64)
            w[a, np.arange(len(sel))] -= 1.0
            single = na <= 1.0 + 1e-9
            w[a[single], np.flatnonzero(single)] = 0.0  # a singleton's component disappears with it
            w_new = model.alpha * (model._beta_u + np.where(single, model._beta[a], 0.0))
        cols_sel = np.arange(len(sel))
        with np.errstate(divide="ignore"):
            logits = np.vstack(
                [np.log(np.maximum(w, 0.0)) + F[:K, sel], (np.log(w_new) + model._logf0[idx[sel]])[None]]
            )
            logits[a, cols_sel] = np.log(np.maximum(w[a, cols_sel], 0.0)) + f_own
        p = np.exp(logits - logits.max(axis=0))
        cum = np.cumsum(p, axis=0)
        pick = np.minimum((cum < u[sel] * cum[-1]).sum(axis=0), K)
        event = pick != a
        if model.flat:  # a singleton redrawn as "new" is the same state
            event &= ~((na <= 1.0 + 1e-9) & (pick == K))
        hits = np.flatnonzero(event)
        if not len(hits):
            break
        j = int(sel[hits[0]])
        old, new = int(z[j]), int(pick[hits[0]])
        i, x, d = int(idx[j]), model._Xc64[idx[j]], int(doms[j])
        if new == K and comps.n[old] <= 1.0 + 1e-9:  # singleton redrawn as new: stays, beta re-split
            tot = model._beta_u + model._beta[old]
            b = model._rng.beta(1.0, model.gamma)
            model._beta[old], model._beta_u = b * tot, (1.0 - b) * tot
            start = j + 1
            continue
        comps.remove(old, x)
        model._ndk[d, old] -= 1
        if comps.n[old] <= 1e-9 and not model.flat:
            model._beta_u += model._beta[old]
            model._beta[old] = 0.0
        if new == K:
            new = model._new_component()
            births += 1
        model._assign(i, new, x)
        z[j] = new
        moves += 1
        touched = np.array([old, new])
        if new >= Q.shape[0]:
            Q = np.vstack([Q, np.zeros((new + 1 - Q.shape[0], B))])
            F = np.vstack([F, np.zeros((new + 1 - F.shape[0], B))])
        rest = cols[j + 1 :]
        if len(rest):
            Q[np.ix_(touched, rest)] = comps.quad(Xb[rest], touched)
            df, c, ln = comps.consts(touched)
            F[np.ix_(touched, rest)] = t_logpdf_from_q(
                Q[np.ix_(touched, rest)], df[:, None], c[:, None], ln[:, None], D
            )
        start = j + 1
    return moves, births


def preset_prior(
    Xc: np.ndarray,
    *,
    prior: str,
    kappa0: float | None,
    nu0: float | None,
    psi_scale: float,
    rng: np.random.Generator,
    stable_nu0_factor: int = 2,
) -> tuple[float, float, np.ndarray]:
    """``(kappa0, nu0, Psi0)`` of a preset for centred data (see :mod:`metamod.memory.hdp`); explicit values win."""
    n, D = Xc.shape
    cov = np.cov(Xc, rowvar=False).reshape(D, D) if n > 1 else np.eye(D)
    if prior == "paper" or n < 3:
        nu0 = float(D + 2) if nu0 is None else float(nu0)
        _check_nu0(nu0, D)
        return 0.01 if kappa0 is None else float(kappa0), nu0, psi_scale * cov + 1e-9 * np.eye(D)
    sub = Xc[rng.choice(n, 20000, replace=False)] if n > 20000 else Xc
    k = int(np.clip(np.sqrt(len(sub)), 8, 128))
    centres, labels = kmeans(sub, min(k, max(1, len(sub) // 2)), rng, iters=8)
    resid = sub - centres[labels]
    sigma_w = resid.T @ resid / max(len(sub) - len(centres), 1)
    sigma_w = 0.9 * sigma_w + 0.1 * np.diag(np.diag(sigma_w))
    sigma_w += 1e-6 * max(np.trace(sigma_w) / D, 1e-12) * np.eye(D)
    nu0 = float(stable_nu0_factor * D + 2) if nu0 is None else float(nu0)
    _check_nu0(nu0, D)
    between = max(np.trace(cov) - np.trace(sigma_w), 1e-3 * np.trace(sigma_w))
    kappa0 = float(np.clip(np.trace(sigma_w) / between, 0.01, 100.0)) if kappa0 is None else float(kappa0)
    return kappa0, nu0, psi_scale * (nu0 - D - 1.0) * sigma_w


def _check_nu0(nu0: float, dim: int) -> None:
    if nu0 <= dim + 1:
        raise ValueError(f"nu0={nu0}: expected nu0 > D + 1 = {dim + 1}")


def posterior_gaussians(comps: NIWComponents, nu0: float):
    """``(mu, cov, prec, logdet)`` of each slot's Gaussian at the posterior mean: ``mu_n``, ``Psi_n/(nu_n-D-1)``."""
    K, D = comps.size, comps.dim
    scale = nu0 + comps.n[:K] - D - 1.0
    cov = np.stack([comps.psi(k) for k in range(K)]) / scale[:, None, None]
    winv = comps.winv[:K]
    prec = np.einsum("kji,kjl->kil", winv, winv) * scale[:, None, None]
    return comps.mu[:K], cov, prec, comps.logdet[:K] - D * np.log(scale)


def as_rows(X, field: str, *, dim: int | None = None) -> np.ndarray:
    """Validate a (n, D) finite float array; errors name ``field``."""
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{field}: expected a non-empty 2-D array (n, D), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{field}: expected dimension D={dim}, got {arr.shape[1]}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise ValueError(f"{field}: row {bad} contains NaN or inf")
    return arr


def as_domain(domains, field: str, *, n: int | None = None, n_domains: int | None = None) -> np.ndarray:
    """Validate integer domain labels (>= 0, < ``n_domains`` when given, length ``n`` when given)."""
    arr = np.asarray(domains)
    if arr.ndim != 1 or (n is not None and len(arr) != n):
        raise ValueError(f"{field}: expected a 1-D integer array of length {n}, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{field}: expected integer domain labels, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    hi = n_domains if n_domains is not None else None
    if len(arr) and (arr.min() < 0 or (hi is not None and arr.max() >= hi)):
        bad = int(arr[(arr < 0) | ((arr >= hi) if hi is not None else False)][0])
        raise ValueError(f"{field}={bad}: out of range, expected 0 <= domain < {hi if hi is not None else 'J'}")
    return arr


def rng_state_array(rng: np.random.Generator) -> np.ndarray:
    """The generator's bit-generator state as a uint8 array (JSON bytes)."""
    import json

    return np.frombuffer(json.dumps(rng.bit_generator.state).encode(), dtype=np.uint8).copy()


def rng_from_state(arr: np.ndarray) -> np.random.Generator:
    """Inverse of :func:`rng_state_array`."""
    import json

    state = json.loads(bytes(np.asarray(arr, dtype=np.uint8)).decode())
    bitgen = getattr(np.random, state["bit_generator"])()
    bitgen.state = state
    return np.random.Generator(bitgen)


class _BlasThreads:
    """Cheap switch of the BLAS thread count around the many small O(D^2..D^3) calls of the sampler.

    Multi-threaded OpenBLAS is slower than one thread on 128 x 128 factorisations and single-point products (and
    much slower on a loaded machine: a 2-thread (K D, D) matrix-vector product measured 7.7 ms against 52 us on one
    thread at load ~1.7), so small calls run single-threaded and the big block GEMM keeps the caller's thread
    count. Uses OpenBLAS's own ``openblas_get/set_num_threads`` (resolved once through threadpoolctl, ~1 us a
    call; the value is only set when it differs), threadpoolctl's controllers for other BLAS libraries, and is a
    no-op without threadpoolctl.
    """

    def __init__(self) -> None:
        self._libs: list | None = None

    def libs(self) -> list:
        """``[(get_num_threads, set_num_threads), ...]`` per loaded BLAS library."""
        if self._libs is None:
            self._libs = []
            try:
                from threadpoolctl import ThreadpoolController

                controllers = [
                    c for c in ThreadpoolController().lib_controllers if c.internal_api in ("openblas", "mkl", "blis")
                ]
            except Exception:  # threadpoolctl missing or unable to inspect the BLAS: leave threads alone
                controllers = []
            for c in controllers:
                raw = getattr(c, "_get_symbol", None)
                get = raw("openblas_get_num_threads") if raw and c.internal_api == "openblas" else None
                put = raw("openblas_set_num_threads") if raw and c.internal_api == "openblas" else None
                if get is not None and put is not None and getattr(c, "threading_layer", "") != "openmp":
                    self._libs.append((get, put))
                else:
                    self._libs.append((c.get_num_threads, c.set_num_threads))
        return self._libs

    def __call__(self, n: int):
        return _ThreadScope(self.libs(), n)


class _ThreadScope:
    def __init__(self, libs: list, n: int) -> None:
        self.libs, self.n, self.saved = libs, n, []

    def __enter__(self):
        self.saved = [get() for get, _ in self.libs]
        for (_, put), old in zip(self.libs, self.saved, strict=True):
            if old != self.n:
                put(self.n)
        return self

    def __exit__(self, *exc) -> None:
        for (_, put), old in zip(self.libs, self.saved, strict=True):
            if old != self.n and old is not None:
                put(old)


blas_threads = _BlasThreads()
