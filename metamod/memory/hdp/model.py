"""HDP Gaussian mixture (NIW prior, collapsed Gibbs) for the Bayesian Cheatsheet — numpy, scipy and numba.

:class:`HDPGMM` follows the organiser interface (scikit-learn style): ``fit(X, domains)``, ``labels_``,
``n_components_``, ``component_ids_``, ``partial_fit`` (online novelty), ``refit`` (Gibbs sweep + KL merge),
``retrieve`` (posterior-predictive or nearest-centroid component selection with medoids), ``state_arrays``.

Model: components ``phi_k = (mu_k, Sigma_k) ~ NIW(mu0, kappa0, Psi0, nu0)`` shared by all domains; domain ``d``
mixes them with ``pi_d ~ DP(alpha, beta)``, ``beta ~ GEM(gamma)`` (Chinese restaurant franchise). Inference is
the direct-assignment collapsed Gibbs sampler (Teh et al. 2006): ``p(z = k) ∝ (n_{d,k}^{-i} + alpha beta_k)
f_k^{-i}(x)``, new component ``∝ alpha beta_u f_0(x)`` (``beta_u`` split by ``Beta(1, gamma)`` on birth); after
each sweep table counts ``m_{d,k}`` are drawn (Antoniak) and ``beta ~ Dir(m_.1, ..., m_.K, gamma)``.
``flat=True`` is the pooled DP-GMM: ``p(z = k) ∝ N_k^{-i} f_k``, new ``∝ gamma f_0``.

Sweep kernel (exact, blocked; :mod:`metamod.memory.hdp.sweep`): one GEMM of cached quadratic features per block
gives every point's quadratic form against every component (``dtype`` float32 by default, log densities in
float64); the points are then drawn in order in a compiled loop (:mod:`metamod.memory.hdp.kernel`), and a move
updates the two touched components' precisions (Sherman-Morrison) and the rest of the block's quadratic forms
against them in O(D) per point, so the result is the sequential Gibbs sweep. During ``fit`` the forms are carried
between sweeps: a block replays the rank-1 changes logged since its last visit instead of recomputing them when
that is cheaper (``replay_forms``, :mod:`metamod.memory.hdp.forms`; exact). Initialisation: an exact sequential
CRP pass over a random subset of ``init_size`` rows and ``init_sweeps`` Gibbs sweeps over them, then every other
row drawn from its conditional given those components (a "new component" draw joins its most likely component);
then ``sweeps`` sweeps (the final state is kept; ``history_`` records K, log marginal likelihood, moves, seconds
and replayed blocks per sweep, flagged ``burn_in`` for the first ``burn_in`` sweeps).

Priors (``prior=``; explicit ``kappa0`` / ``nu0`` override the preset). ``"paper"`` is table 3: ``Psi0 =
psi_scale x empirical covariance``, ``nu0 = D + 2``, ``kappa0 = 0.01``. ``"stable"`` (default):

- ``Psi0 = psi_scale (nu0 - D - 1) Sigma_w``: the prior mean of a component covariance is ``psi_scale Sigma_w``,
  the pooled within-cluster covariance of a quick k-means (``k = clip(sqrt(n), 8, 128)`` on at most 20,000 rows)
  shrunk 10% towards its diagonal, instead of the covariance of the whole corpus;
- ``nu0 = 2 D + 2``: about D pseudo-observations of ``Sigma_w``, so a component of a few points already has a
  sensible covariance (with ``nu0 = D + 2`` a cluster needs ~D points of its own);
- ``kappa0 = tr(Sigma_w) / (tr(Sigma) - tr(Sigma_w))`` (clipped to [0.01, 100]): the mean prior
  ``N(mu0, Sigma_w / kappa0)`` spans the between-cluster spread, so the new-component predictive ``f_0`` is about
  the corpus covariance. With ``kappa0 = 0.01`` in D = 128 every new component pays ``D/2 log(n / kappa0)`` nats
  of Occam factor (~500 nats at n = 30) and everything merges into one component.

Measured with benchmarks/bench_hdp.py (64 clusters in D = 128, two domains; ARI / fitted K, 20 sweeps, seed 0):
N = 500: stable 0.572 / 23, paper 0.047 / 43; N = 2,000: 0.688 / 31 vs 0.048 / 143; N = 10,000: 0.980 / 48 vs
0.000 / 1 (everything in one component); variants (nu0 = D + 2, 4D + 2, kappa0 = 0.01) and N = 130,000 in
benchmarks/README.md ("Bayesian Cheatsheet: HDP-GMM numerics"). Single-point Gibbs moves rarely split a component
that holds two true clusters, so at small N the fits under-split.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> X = np.concatenate([rng.normal(-5, 1, (40, 3)), rng.normal(5, 1, (40, 3))])
>>> model = HDPGMM(sweeps=10, burn_in=5, seed=1).fit(X, np.repeat([0, 1], 40))
>>> model.n_components_
2
>>> [(k, round(w, 3)) for k, w, _ in model.retrieve(X[:1], top_k=2)[0]]
[(1, 1.0), (0, 0.0)]
"""

from __future__ import annotations

import inspect
import logging
import time
from contextlib import nullcontext
from typing import Any

import numpy as np

from metamod.memory.hdp import stats as hs
from metamod.memory.hdp import support as sup
from metamod.memory.hdp.forms import FormCache
from metamod.memory.hdp.online import insert_rows
from metamod.memory.hdp.query import centroid_logits, predictive_rank, rank_logits
from metamod.memory.hdp.state import from_state_arrays, state_arrays
from metamod.memory.hdp.stats import NIWComponents, quad_features, t_logpdf_from_q
from metamod.memory.hdp.support import as_domain, as_rows, blas_threads
from metamod.memory.hdp.sweep import (
    SCAN_CHUNK,
    ScanStore,
    gibbs_sweep,
    greedy_merge,
    initialise,
    resample_beta,
)

logger = logging.getLogger(__name__)

PRIORS = ("stable", "paper")
STABLE_NU0_FACTOR = 2  # the stable preset's nu0 = STABLE_NU0_FACTOR * D + 2 (see the module docstring)
BIRTH_MODES = ("threshold", "sample")
RETRIEVE_METHODS = ("predictive", "centroids")
KERNELS = ("auto", "numba")  # both: the compiled kernels (the only ones; "numpy" was removed, see Args)


class HDPGMM:
    """Hierarchical Dirichlet-process Gaussian mixture with a NIW prior (see the module docstring).

    Args:
        sweeps, burn_in: offline collapsed Gibbs sweeps and how many of them count as burn-in (table 3: 100 / 50).
        seed: RNG seed (same seed and data -> same labels).
        gamma, alpha: global and per-domain concentrations (5.0 / 1.0).
        kappa0: NIW mean strength (0.01). nu0: NIW degrees of freedom (None: D + 2).
        psi_scale: factor on the covariance that sets Psi0 (1.2; see ``prior``).
        prior: "stable" (within-cluster covariance, default) or "paper" (empirical covariance).
        flat: pooled DP-GMM instead of the hierarchy.
        tau_new: novelty threshold for online births; birth: "threshold" or "sample" (Bernoulli(rho_new)).
        merge, merge_eps: greedy merge in ``refit`` of pairs whose symmetric KL, KL01 + KL10 (the sum, as the
            paper's rule reads; :func:`~metamod.memory.hdp.stats.gaussian_sym_kl`), is < merge_eps (table 3:
            0.1). Runs before this rule used the mean of the two directions: merge_eps 0.2 reproduces them.
        dtype: dtype of the sweep / retrieval GEMM ("float32" or "float64").
        block: points per GEMM block in the sweep kernel (1 to 1024; does not change results).
        init_size: rows of the sequential CRP initialisation; init_sweeps: Gibbs sweeps over those rows before
            the other rows are labelled from them.
        feature_cache_gb: largest cache of the rows' quadratic features (F = D (D + 1) / 2 + D + 1 floats per
            row: 33.5 kB at D = 128, 4.4 GB for 130,000 rows); larger corpora are featurised per block (slower).
        kernel: "auto" (default) or "numba", the same thing: the sweep's sequential part, the online inserts and
            the retrieval ranking always run compiled (:mod:`metamod.memory.hdp.kernel`; numba is a core
            dependency). The option stays so that settings and saved states that name it keep working and
            ``get_params`` keeps its keys. "numpy", the removed numpy path (it ran the same chain), is refused
            here; a saved state that recorded it loads with "auto" (:meth:`from_state_arrays`).
        replay_forms: during ``fit``, keep every row's quadratic forms between sweeps and bring a block up to date
            by replaying the rank-1 changes of the moves since its last visit instead of recomputing it, when that
            is cheaper (:mod:`metamod.memory.hdp.forms`; a settled sweep moves a few hundred rows). Exact; results
            change only by the GEMM dtype's rounding. Costs (K, N) float64 of memory during the fit.
        threads: BLAS threads for the big GEMMs (sweep blocks, batches of >= 64 queries); None keeps the caller's
            setting. Small products always run on one thread; on a loaded machine one thread is often faster for
            the big ones too (benchmarks/README.md). Does not change results.
    """

    def __init__(
        self,
        *,
        sweeps: int = 100,
        burn_in: int = 50,
        seed: int = 0,
        gamma: float = 5.0,
        alpha: float = 1.0,
        kappa0: float | None = None,
        nu0: float | None = None,
        psi_scale: float = 1.2,
        prior: str = "stable",
        flat: bool = False,
        tau_new: float = 0.5,
        birth: str = "threshold",
        merge: bool = True,
        merge_eps: float = 0.1,
        dtype: str = "float32",
        block: int = 1024,
        init_size: int = 1000,
        init_sweeps: int = 5,
        threads: int | None = None,
        feature_cache_gb: float = 8.0,
        kernel: str = "auto",
        replay_forms: bool = True,
    ) -> None:
        if prior not in PRIORS:
            raise ValueError(f"prior={prior!r}: expected one of {PRIORS}")
        if birth not in BIRTH_MODES:
            raise ValueError(f"birth={birth!r}: expected one of {BIRTH_MODES}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype={dtype!r}: expected 'float32' or 'float64'")
        for name, value in (
            ("gamma", gamma),
            ("alpha", alpha),
            ("kappa0", 1.0 if kappa0 is None else kappa0),
            ("psi_scale", psi_scale),
        ):
            if not value > 0:
                raise ValueError(f"{name}={value!r}: expected a positive number")
        if not 0.0 <= tau_new <= 1.0:
            raise ValueError(f"tau_new={tau_new!r}: expected a probability in [0, 1]")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads={threads!r}: expected None or an integer >= 1")
        if sweeps < 0 or burn_in < 0 or not 1 <= block <= SCAN_CHUNK or init_size < 1:
            raise ValueError(
                f"sweeps={sweeps}, burn_in={burn_in}, block={block}, init_size={init_size}: "
                f"expected sweeps, burn_in >= 0, 1 <= block <= {SCAN_CHUNK} and init_size >= 1"
            )
        if kernel not in KERNELS:
            raise ValueError(
                f"kernel={kernel!r}: expected one of {KERNELS} (the sampler always runs its numba-compiled kernels; "
                "the numpy path was removed)"
            )
        if not feature_cache_gb >= 0:
            raise ValueError(f"feature_cache_gb={feature_cache_gb!r}: expected a size in GB >= 0")
        self.sweeps, self.burn_in, self.seed, self.gamma, self.alpha = (
            int(sweeps),
            int(burn_in),
            int(seed),
            gamma,
            alpha,
        )
        self.kappa0, self.nu0, self.psi_scale, self.prior, self.flat = kappa0, nu0, psi_scale, prior, bool(flat)
        self.tau_new, self.birth, self.merge, self.merge_eps = tau_new, birth, bool(merge), merge_eps
        self.dtype, self.block, self.init_size, self.init_sweeps = dtype, int(block), int(init_size), int(init_sweeps)
        self.threads, self.feature_cache_gb, self.kernel = threads, float(feature_cache_gb), kernel
        self.replay_forms = bool(replay_forms)
        self._fitted = False

    def get_params(self) -> dict[str, Any]:
        """JSON-safe constructor parameters (every keyword of ``__init__``)."""
        return {
            name: getattr(self, name) for name in inspect.signature(type(self).__init__).parameters if name != "self"
        }

    def _gemm_threads(self, rows: int):
        """BLAS thread scope for a product over ``rows`` points: one thread under 64, else ``threads``."""
        if rows < 64:
            return blas_threads(1)
        return nullcontext() if self.threads is None else blas_threads(self.threads)

    def fit(self, X: np.ndarray, domains: np.ndarray | None = None) -> HDPGMM:
        """Offline fit: prior from the data, initialisation, then ``sweeps`` collapsed Gibbs sweeps."""
        X = as_rows(X, "X")
        n, D = X.shape
        doms = np.zeros(n, dtype=np.int64) if domains is None else as_domain(domains, "domains", n=n)
        self._rng = np.random.default_rng(self.seed)
        self.dim_, self.n_domains_ = D, int(doms.max()) + 1
        self.mu0_ = X.mean(axis=0)
        kappa0, nu0, psi0 = sup.preset_prior(
            X - self.mu0_,
            prior=self.prior,
            kappa0=self.kappa0,
            nu0=self.nu0,
            psi_scale=self.psi_scale,
            rng=self._rng,
            stable_nu0_factor=STABLE_NU0_FACTOR,
        )
        t0 = time.perf_counter()
        self._setup(X, doms, kappa0, nu0, psi0, scan=self._rng.permutation(n))
        self._initialise()
        self.history_ = [
            {
                "sweep": 0,
                "K": self.n_components_,
                "loglik": self.log_marginal(),
                "moves": -1,
                "seconds": time.perf_counter() - t0,
                "replayed": 0,
                "burn_in": True,
            }
        ]
        if self.replay_forms:
            self._form_cache = FormCache(rows=n, dim=D, dtype=self.comps.dtype, slots=self.comps.n.shape[0])
        try:
            for sweep in range(1, self.sweeps + 1):
                t0 = time.perf_counter()
                replayed = 0 if self._form_cache is None else self._form_cache.replayed
                moves, _ = self._sweep()
                self.history_.append(
                    {
                        "sweep": sweep,
                        "K": self.n_components_,
                        "loglik": self.log_marginal(),
                        "moves": moves,
                        "seconds": time.perf_counter() - t0,
                        "replayed": 0 if self._form_cache is None else self._form_cache.replayed - replayed,
                        "burn_in": sweep <= self.burn_in,
                    }
                )
                logger.debug("sweep %d: K=%d moves=%d", sweep, self.n_components_, moves)
        finally:
            self._form_cache = None  # valid only while fit's sweeps are the only changes
        self._medoid_dirty = True
        return self

    def _setup(self, X: np.ndarray, doms: np.ndarray, kappa0: float, nu0: float, psi0: np.ndarray, scan) -> None:
        D = X.shape[1]
        self.kappa0_, self.nu0_, self.psi0_ = kappa0, nu0, psi0
        self.comps = NIWComponents(dim=D, kappa0=kappa0, nu0=nu0, psi0=psi0, dtype=np.dtype(self.dtype))
        n = len(X)
        X = np.asarray(X, dtype=np.float64)
        Xc = X - self.mu0_
        values = {
            "_X": X,
            "_Xc64": Xc,  # statistics always use the float64 centred rows
            "_Xc": Xc.astype(self.dtype),  # the GEMM copy
            "_doms": doms,
            "_z": np.full(n, -1, dtype=np.int64),
            "_logf0": self.comps.prior_logpdf(Xc),
        }
        # head-room for online inserts: np.empty pages are only committed when written, so doubling the capacity
        # costs no memory until used, and the first insert does not copy every row
        self._rows = {}
        for name, value in values.items():
            buf = np.empty((max(16, 2 * n), *value.shape[1:]), dtype=value.dtype)
            buf[:n] = value
            self._rows[name] = buf
        self._n_rows = n
        self._view_rows()
        self._form_cache: FormCache | None = None
        self._store = ScanStore(scan, dim=D, dtype=self.dtype, limit_bytes=self.feature_cache_gb * 1e9)
        # the online inserts' uniforms (birth, table): a stream of their own, so batching never changes them
        self._online_rng = np.random.default_rng([self.seed, 1])
        self._ndk = np.zeros((self.n_domains_, 16), dtype=np.int64)
        self._mdk = np.zeros((self.n_domains_, 16), dtype=np.int64)
        self._beta = np.zeros(16)
        self._beta_u = 1.0
        self._ids = np.zeros(16, dtype=np.int64)
        self._next_id = 0
        self.births_ = {"novelty": 0, "sample": 0, "refit": 0}
        self.merges_ = 0
        self._dom_sum = np.zeros((self.n_domains_, D))
        np.add.at(self._dom_sum, doms, self._X)
        self._dom_count = np.bincount(doms, minlength=self.n_domains_).astype(np.int64)
        self._centroid_cache: tuple[np.ndarray, np.ndarray] | None = None
        self._medoid_dirty, self._fitted = True, True
        self._medoid_stale: set[int] = set()
        self._medoids = np.zeros(0, dtype=np.int64)

    def _view_rows(self) -> None:
        """Row arrays are views of growable buffers (amortised O(1) appends in partial_fit)."""
        for name, buf in self._rows.items():
            setattr(self, name, buf[: self._n_rows])

    def _append_rows(self, X: np.ndarray, Xc: np.ndarray, doms: np.ndarray, logf0: np.ndarray) -> int:
        """Append rows (unassigned: label -1) to the growable row buffers; returns the first new row."""
        first, n = self._n_rows, len(X)
        if first + n > len(self._rows["_X"]):
            for name, buf in self._rows.items():
                grown = np.empty((max(16, 2 * (first + n)), *buf.shape[1:]), dtype=buf.dtype)
                grown[:first] = buf[:first]
                self._rows[name] = grown
        for name, value in (("_X", X), ("_Xc64", Xc), ("_Xc", Xc), ("_doms", doms), ("_z", -1), ("_logf0", logf0)):
            self._rows[name][first : first + n] = value
        self._n_rows += n
        self._view_rows()
        self._store.extend(np.arange(first, first + n))
        return first

    def _grow(self, k: int) -> None:
        if k >= self._beta.shape[0]:
            extra = max(k + 1, 2 * self._beta.shape[0]) - self._beta.shape[0]
            self._ndk = np.pad(self._ndk, ((0, 0), (0, extra)))
            self._mdk = np.pad(self._mdk, ((0, 0), (0, extra)))
            self._beta = np.pad(self._beta, (0, extra))
            self._ids = np.pad(self._ids, (0, extra))

    def _new_component(self) -> int:
        k = self.comps.new_slot()
        self._grow(k)
        self._ndk[:, k] = self._mdk[:, k] = 0
        self._ids[k], self._next_id = self._next_id, self._next_id + 1
        if not self.flat:
            b = self._rng.beta(1.0, self.gamma)
            self._beta[k], self._beta_u = b * self._beta_u, (1.0 - b) * self._beta_u
        return k

    def _prior_weights(self, d: int) -> tuple[np.ndarray, float]:
        """Unnormalised mixture weights of domain ``d`` over slots, and of a new component."""
        K = self.comps.size
        if self.flat:
            return self._ndk[:, :K].sum(axis=0).astype(np.float64), self.gamma
        return self._ndk[d, :K] + self.alpha * self._beta[:K], self.alpha * self._beta_u

    def _initialise(self) -> None:
        initialise(self)

    def _assign(self, i: int, k: int, x: np.ndarray):
        change = self.comps.add(k, x)
        self._ndk[self._doms[i], k] += 1
        self._z[i] = k
        return change

    def _rebuild(self, labels: np.ndarray, rows: np.ndarray) -> None:
        """Statistics and counts from hard labels of ``rows`` (slots kept, contents replaced)."""
        K, D = self.comps.size, self.dim_
        self._z[rows] = labels
        Xc = self._Xc64[rows]
        n = np.bincount(labels, minlength=K).astype(np.float64)
        S1 = np.zeros((K, D))
        np.add.at(S1, labels, Xc)
        S2 = np.zeros((K, D, D))
        for k in np.flatnonzero(n):
            m = Xc[labels == k]
            S2[k] = m.T @ m
        with blas_threads(1):
            self.comps.set_stats(n, S1, S2)
        self._ndk[:] = 0
        np.add.at(self._ndk, (self._doms[rows], labels), 1)

    def _sample_logits(self, logits: np.ndarray) -> int:
        p = np.exp(logits - logits.max())
        return int(min(np.searchsorted(np.cumsum(p), self._rng.random() * p.sum()), len(p) - 1))

    def _component_logpdf(self, Xc: np.ndarray, *, fast: bool = True) -> np.ndarray:
        """(K, B) Student-t log densities of centred rows against every slot (``fast``: one ``dtype`` product of
        quadratic features with the packed coefficients; otherwise float64 around each mean)."""
        if fast:
            q = self.comps.quad_packed(quad_features(Xc, dtype=self.comps.dtype))
        else:
            q = self.comps.quad_exact(Xc)
        df, c, log_norm = self.comps.consts()
        return t_logpdf_from_q(q, df[:, None], c[:, None], log_norm[:, None], self.dim_)

    def _sweep(self) -> tuple[int, int]:
        """One exact collapsed Gibbs sweep (:mod:`metamod.memory.hdp.sweep`); returns (moves, births).
        Compacts empty slots and redraws the global weights."""
        moves, births = gibbs_sweep(self)
        resample_beta(self)
        return moves, births

    def log_marginal(self) -> float:
        """Log marginal likelihood of the data given the current partition (sum over components)."""
        K = self.comps.size
        return float(
            hs.niw_log_marginal(
                self.comps.n[:K], self.comps.logdet[:K], self.kappa0_, self.nu0_, self.comps.logdet0, self.dim_
            ).sum()
        )

    @property
    def labels_(self) -> np.ndarray:
        self._check_fitted()
        return self._z.copy()

    @property
    def n_components_(self) -> int:
        return self.comps.size

    @property
    def component_ids_(self) -> np.ndarray:
        return self._ids[: self.comps.size].copy()

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError("HDPGMM is not fitted: call fit(X, domains) first")

    def log_predictive(self, X: np.ndarray) -> np.ndarray:
        """(n, K+1) float64 posterior-predictive Student-t log densities; last column: new-component prior."""
        self._check_fitted()
        Xc = as_rows(X, "X", dim=self.dim_) - self.mu0_
        return np.hstack([self._component_logpdf(Xc, fast=False).T, self.comps.prior_logpdf(Xc)[:, None]])

    def component_posterior(self, k: int) -> tuple[np.ndarray, float, float, np.ndarray]:
        """NIW posterior ``(mu_n, kappa_n, nu_n, Psi_n)`` of component ``k`` (original coordinates)."""
        self._check_fitted()
        if not 0 <= k < self.comps.size:
            raise IndexError(f"component k={k}: expected 0 <= k < {self.comps.size}")
        n = self.comps.n[k]
        return self.mu0_ + self.comps.mu[k], self.kappa0_ + n, self.nu0_ + n, self.comps.psi(k)

    def mixture_weights(self, domain: int | None = None) -> np.ndarray:
        """Normalised weights over existing components: ``∝ n_{d,k} + alpha beta_k`` (flat or None: ``N_k``)."""
        self._check_fitted()
        if domain is not None:
            domain = int(as_domain(np.array([domain]), "domain", n_domains=self.n_domains_)[0])
        w = (
            self._ndk[:, : self.comps.size].sum(axis=0).astype(np.float64)
            if self.flat or domain is None
            else self._prior_weights(domain)[0]
        )
        return w / w.sum()

    @property
    def domain_centroids_(self) -> np.ndarray:
        return self._centroids()[0].copy()

    def _centroids(self) -> tuple[np.ndarray, np.ndarray]:
        """Cached domain centroids (running means; an insert invalidates them) and their squared norms."""
        if self._centroid_cache is None:
            C = self._dom_sum / np.maximum(self._dom_count, 1)[:, None]
            self._centroid_cache = (C, np.einsum("ij,ij->i", C, C))
        return self._centroid_cache

    @property
    def medoids_(self) -> np.ndarray:
        """(K,) stored row that is each component's medoid: the hard member whose summed Euclidean distance to the
        other hard members is smallest (-1: no member)."""
        self._check_fitted()
        return self._current_medoids().copy()

    def _current_medoids(self) -> np.ndarray:
        """The medoid cache, brought up to date: fully after a sweep / compaction, otherwise only for the
        components an online insert gave a hard member (a soft fold-in moves means, not medoids)."""
        K = self.comps.size
        if self._medoid_dirty:
            self._medoids = self._medoids_of(None, K)
            self._medoid_dirty, self._medoid_stale = False, set()
        elif self._medoid_stale or len(self._medoids) != K:
            stale = np.array(sorted(self._medoid_stale | set(range(len(self._medoids), K))), dtype=np.int64)
            grown = np.full(K, -1, dtype=np.int64)
            grown[: min(K, len(self._medoids))] = self._medoids[:K]
            grown[stale] = -1
            mask = np.zeros(K, dtype=bool)
            mask[stale] = True
            rows = np.flatnonzero(mask[np.maximum(self._z, 0)] & (self._z >= 0))
            part = self._medoids_of(rows, K)
            grown[stale] = part[stale]
            self._medoids, self._medoid_stale = grown, set()
        return self._medoids

    def _medoids_of(self, rows: np.ndarray | None, K: int) -> np.ndarray:
        """(K,) medoid row per component among ``rows`` (None: all; -1: no member): the hard member with the least
        summed Euclidean distance to the others (:func:`metamod.memory.medoids.medoid_index`)."""
        from metamod.memory.medoids import medoids_by_label

        out = np.full(K, -1, dtype=np.int64)
        for k, row in medoids_by_label(self._Xc64, self._z, range(K), rows).items():
            out[k] = row
        return out

    def predict_domain(self, queries: np.ndarray) -> np.ndarray:
        """Nearest domain centroid (squared Euclidean) of each query row."""
        return self._nearest_domain(as_rows(queries, "queries", dim=self.dim_))

    def _nearest_domain(self, Q: np.ndarray) -> np.ndarray:
        C, sq = self._centroids()
        return np.argmin(sq[None, :] - 2.0 * Q @ C.T, axis=1)

    def retrieve(
        self,
        queries: np.ndarray,
        top_k: int = 5,
        threshold: float | None = None,
        domain=None,
        method: str = "predictive",
    ) -> list[list[tuple[int, float, int]]]:
        """Per query ``[(component, weight, medoid_row), ...]`` best first (see the organiser interface).

        ``method="predictive"``: ``w_k ∝ pi_{d,k} p_k(q)`` normalised over existing components (domain predicted
        by the nearest domain centroid unless given). ``method="centroids"`` (BC-centroids): components ranked by
        squared distance of the query to the posterior mean, weight = softmax of ``-d^2 / (2 s^2)`` with ``s^2``
        the mean per-dimension variance of the components' posterior-mean covariances; the domain is not used.
        """
        self._check_fitted()
        if method not in RETRIEVE_METHODS:
            raise ValueError(f"method={method!r}: expected one of {RETRIEVE_METHODS}")
        if threshold is None and top_k < 1:
            raise ValueError(f"top_k={top_k}: expected >= 1 (or give threshold)")
        Q = as_rows(queries, "queries", dim=self.dim_)
        K = self.comps.size
        top = K if threshold is not None else min(top_k, K)
        if method == "predictive":
            doms = None
            if domain is not None:
                doms = as_domain(np.broadcast_to(np.asarray(domain), (len(Q),)), "domain", n_domains=self.n_domains_)
            order, weights = predictive_rank(self, Q, doms, top)
        else:
            order, weights = rank_logits(centroid_logits(self, Q - self.mu0_), top)
        medoids = self._current_medoids()[order]
        flat = list(zip(order.ravel().tolist(), weights.ravel().tolist(), medoids.ravel().tolist(), strict=True))
        if threshold is None:  # one zip over every hit, cut into rows: 1.8x faster than a zip per row
            return [flat[s : s + top] for s in range(0, len(flat), top)]
        keep = (weights >= threshold).sum(axis=1).tolist()
        return [flat[s : s + c] for s, c in zip(range(0, len(flat), top), keep, strict=True)]

    def partial_fit(self, x: np.ndarray, domain: int) -> dict[str, Any]:
        """Online insert of one row (appended as row n): novelty birth or soft fold-in (see issue part 4).

        Returns ``{"component", "born", "cause", "rho_new"}``. Same as ``partial_fit_many([x], [domain])[0]``.
        """
        return self.partial_fit_many(np.asarray(x).reshape(1, -1), [domain], field="x")[0]

    def partial_fit_many(self, X: np.ndarray, domains, *, field: str = "X") -> list[dict[str, Any]]:
        """Online inserts of several rows in order (:mod:`metamod.memory.hdp.online`): the result of calling
        :meth:`partial_fit` on each, computed in batches. ``domains``: one domain per row, or one for all."""
        self._check_fitted()
        X = as_rows(X, field, dim=self.dim_)
        raw = np.asarray(domains)
        doms = as_domain(
            np.broadcast_to(raw, (len(X),)) if raw.ndim == 0 or raw.size == 1 else raw,
            "domain",
            n=len(X),
            n_domains=self.n_domains_,
        )
        return insert_rows(self, X, X - self.mu0_, doms)

    def refit(self) -> dict[str, int]:
        """Rebuild statistics from hard assignments, one Gibbs sweep (domains fixed), then greedy KL merges."""
        self._check_fitted()
        K = self.comps.size
        self._rebuild(self._z.copy(), np.arange(len(self._X)))
        before = set(self._ids[:K].tolist())
        _, births = self._sweep()
        removed = len(before - set(self.component_ids_.tolist()))
        self.births_["refit"] += births
        merges = greedy_merge(self) if self.merge else 0
        self.merges_ += merges
        return {"births": births, "merges": merges, "removed": removed}

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Everything needed to continue identically (statistics, counts, rows, RNG states)."""
        self._check_fitted()
        return state_arrays(self)

    @classmethod
    def from_state_arrays(cls, arrays: dict[str, np.ndarray], **params: Any) -> HDPGMM:
        """Rebuild a model from :meth:`state_arrays` (``params`` override the saved constructor parameters;
        ``kernel="numpy"``, saved or given, loads as "auto": the same chain, compiled)."""
        return from_state_arrays(cls, arrays, **params)
