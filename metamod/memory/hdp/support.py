"""Support code for :mod:`metamod.memory.hdp` that is not NIW algebra: the prior presets (with the small k-means
they use), CRF table counts, input validation, RNG state round trips and the BLAS thread switch.

>>> import numpy as np
>>> as_domain(np.array([0, 1, 1]), "domains", n=3).tolist()
[0, 1, 1]
"""

from __future__ import annotations

import numpy as np


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
