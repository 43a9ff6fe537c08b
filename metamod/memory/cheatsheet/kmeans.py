"""Hard and soft k-means organisers: the clustered baselines of the Bayesian Cheatsheet (paper sections 3 and 5.1).

Both keep, per component k, the centroid mu_k, a (weighted) count N_k and the (weighted) sum of squared distances
of its members to mu_k, S_k, so the per-cluster variance is sigma_k^2 = S_k / (N_k D) (isotropic, per dimension).

**Retrieval** (both): weights = softmax_k(-||q - mu_k||^2 / (2 sigma^2)) with the shared sigma^2 = (1/K) sum_k
sigma_k^2, floored at ``min_variance``. A singleton cluster has sigma_k^2 = 0 and enters the average as 0 (its true
member variance); the floor only keeps sigma^2 > 0 when every cluster is a singleton (or all rows coincide).
Top-k (or every weight >= ``threshold``), each with its medoid row: the hard member (``labels_``) with the least
summed Euclidean distance to the cluster's other hard members (:func:`~metamod.memory.medoids.medoid_rows`).

**Hard k-means** (:class:`HardKMeans`). ``fit``: k-means++ seeding (numpy generator from ``seed``) then Lloyd
iterations (assign to the nearest centroid, recompute means, drop emptied clusters) until the assignment stops
changing or ``max_iter`` passes. ``partial_fit``: the row goes to the nearest centroid, and only that centroid moves,
to the running mean of its members (Welford update of N_k, mu_k, S_k). ``refit``: one full Lloyd pass over all
stored rows: reassign each to its nearest current centroid, recompute every mean, remove clusters left empty.

**Soft k-means** (:class:`SoftKMeans`), the isotropic generative variant with equal mixing weights: the
responsibilities of a row are exactly its retrieval weights, r_k(x) = softmax_k(-||x - mu_k||^2 / (2 sigma^2)).
``fit``: the hard k-means fit, then up to ``em_iter`` EM steps until the mean per-row log-likelihood of the
mixture (equal weights 1/K, covariance sigma^2 I) changes by less than ``tol`` (as scikit-learn's GaussianMixture).
``partial_fit``: the row is folded into every cluster with r_k > ``fold_threshold`` (1e-6 as in the paper):
N_k += r_k, mu_k moves to the responsibility-weighted running mean, S_k gets the weighted Welford term; its hard
label is argmax_k r_k. ``refit``: one EM step over all stored rows (E: responsibilities under the current mu and
sigma^2; M: N_k = sum_i r_ik, mu_k = sum_i r_ik x_i / N_k, S_k = sum_i r_ik ||x_i - mu_k||^2, so the new shared
sigma^2 is the mean of the per-cluster variances; labels = argmax responsibility; clusters with N_k <
``fold_threshold`` are removed).

Neither creates components after ``fit`` (K only shrinks, by removal): ``partial_fit`` returns ``born: False`` and
``refit`` ``births: 0, merges: 0``. Component ids are persistent (``component_ids_``; 0..K-1 after ``fit``, kept by
the survivors of a removal). Domains are accepted (length-checked) and ignored: k-means is flat. Nothing is random
after ``fit``, so the state (``state_arrays``) holds no RNG state.

>>> X = np.array([[-1.0], [1.0], [9.0], [11.0]])
>>> km = HardKMeans(n_clusters=2).fit(X, np.zeros(4, dtype=int), init=np.array([[0.0], [10.0]]))
>>> km.centroids_.ravel().tolist(), km.sigma2_
([0.0, 10.0], 1.0)
>>> km.partial_fit(np.array([2.0]))
{'component': 0, 'born': False, 'cause': None}
>>> km.centroids_.ravel().tolist()
[0.6666666666666666, 10.0]
>>> [(k, round(w, 4), row) for k, w, row in km.retrieve(np.array([[5.0]]), top_k=2)[0]]
[(0, 0.9194, 1), (1, 0.0806, 2)]
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import sparse
from scipy.special import logsumexp

from metamod.memory.cheatsheet.organisers import RowStore, as_rows, check_domains, select_components
from metamod.memory.medoids import medoid_rows

logger = logging.getLogger(__name__)

#: rows per block in the bulk distance computations (bounds the (rows, K) temporaries).
_BLOCK = 8192
_STATE_KEYS = ("rows", "labels", "centroids", "counts", "m2", "component_ids", "next_id")


def sq_distances(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(n, K) squared Euclidean distances ||x_i - c_k||^2 (expanded form, clipped at 0).

    >>> sq_distances(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[0.0, 0.0]])).ravel().tolist()
    [0.0, 25.0]
    """
    xx = np.einsum("ij,ij->i", X, X)[:, None]
    cc = np.einsum("ij,ij->i", C, C)[None, :]
    return np.maximum(xx - 2.0 * (X @ C.T) + cc, 0.0)


def direct_sq_distances(Q: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(m, K) squared distances summed from the differences, one query row at a time in effect: unlike the BLAS
    expanded form, a query's distances do not depend on which other queries share its batch (retrieval results
    are then independent of batching), and they match the single-row distances of ``partial_fit``.

    >>> direct_sq_distances(np.array([[3.0, 4.0]]), np.array([[0.0, 0.0], [3.0, 0.0]])).tolist()
    [[25.0, 16.0]]
    """
    out = np.empty((len(Q), len(C)))
    step = max(1, _BLOCK * 16 // max(1, C.size))
    for start in range(0, len(Q), step):
        out[start : start + step] = ((Q[start : start + step, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return out


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax (max-subtracted)."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Index of the nearest row of ``C`` for each row of ``X`` (ties: the lower index), in blocks."""
    out = np.empty(len(X), dtype=np.int64)
    for start in range(0, len(X), _BLOCK):
        out[start : start + _BLOCK] = np.argmin(sq_distances(X[start : start + _BLOCK], C), axis=1)
    return out


def kmeans_plus_plus(X: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds (rows of ``X``): the first uniformly, each next with probability proportional to the squared
    distance to the nearest seed so far. Stops early (fewer seeds) when every row coincides with a seed."""
    first = int(rng.integers(len(X)))
    seeds = [first]
    closest = ((X - X[first]) ** 2).sum(axis=1)
    while len(seeds) < k:
        total = float(closest.sum())
        if total <= 0.0:
            break
        idx = int(np.searchsorted(np.cumsum(closest), rng.random() * total, side="right"))
        idx = min(idx, len(X) - 1)
        seeds.append(idx)
        closest = np.minimum(closest, ((X - X[idx]) ** 2).sum(axis=1))
    return X[seeds].copy()


def hard_statistics(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts, means and sums of squared distances to the mean of hard clusters 0..k-1 (every one non-empty)."""
    onehot = sparse.csr_matrix((np.ones(len(X)), (labels, np.arange(len(X)))), shape=(k, len(X)))
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    means = np.asarray(onehot @ X) / counts[:, None]
    m2 = np.bincount(labels, weights=((X - means[labels]) ** 2).sum(axis=1), minlength=k)
    return counts, means, m2


def lloyd_pass(X: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One Lloyd pass: labels to the nearest centroid, then the surviving (non-empty) clusters' indices ``keep``.

    The returned labels index the survivors (0..len(keep)-1, order kept).
    """
    labels = nearest(X, centroids)
    keep = np.flatnonzero(np.bincount(labels, minlength=len(centroids)) > 0)
    remap = np.full(len(centroids), -1, dtype=np.int64)
    remap[keep] = np.arange(len(keep))
    return remap[labels], keep


class _KMeansBase:
    """The state, retrieval and persistence shared by :class:`HardKMeans` and :class:`SoftKMeans`."""

    def __init__(self, *, n_clusters: int, seed: int = 0, max_iter: int = 100, min_variance: float = 1e-6) -> None:
        for key, value in (("n_clusters", n_clusters), ("max_iter", max_iter)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{key} must be an int >= 1, got {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        if not (isinstance(min_variance, (int, float)) and min_variance > 0):
            raise ValueError(f"min_variance must be a number > 0, got {min_variance!r}")
        self.n_clusters = int(n_clusters)
        self.seed = int(seed)
        self.max_iter = int(max_iter)
        self.min_variance = float(min_variance)
        self._store: Any = None
        self._labels = np.zeros(0, dtype=np.int64)
        self._n_labels = 0
        self.centroids_ = np.zeros((0, 0))
        self.counts_ = np.zeros(0)
        self.m2_ = np.zeros(0)
        self.component_ids_ = np.zeros(0, dtype=np.int64)
        self._next_id = 0
        self._medoids: dict[int, int] = {}

    # ---------------------------------------------------------------- read-only views
    @property
    def labels_(self) -> np.ndarray:
        """(n,) hard assignment of every stored row (soft k-means: the argmax responsibility)."""
        return self._labels[: self._n_labels]

    @labels_.setter
    def labels_(self, labels: np.ndarray) -> None:
        self._labels = np.array(labels, dtype=np.int64)
        self._n_labels = len(self._labels)

    @property
    def n_components_(self) -> int:
        return len(self.centroids_)

    @property
    def X_(self) -> np.ndarray:
        """The stored rows (fit rows, then every partial_fit row in order)."""
        self._check_fitted()
        return self._store.rows

    @property
    def cluster_variances_(self) -> np.ndarray:
        """sigma_k^2 = S_k / (N_k D): each cluster's per-dimension variance around its centroid."""
        return self.m2_ / (self.counts_ * self.centroids_.shape[1])

    @property
    def sigma2_(self) -> float:
        """The shared variance: mean of the per-cluster variances, at least ``min_variance``."""
        return max(float(self.cluster_variances_.mean()), self.min_variance)

    def _check_fitted(self) -> None:
        if self._store is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(X, domains) first")

    # ---------------------------------------------------------------- fitting
    def fit(self, X: Any, domains: Any = None, *, init: Any = None) -> _KMeansBase:
        """Fit on the rows ``X`` (n, D); ``domains`` are length-checked and ignored (k-means is flat).

        Args:
            X: the rows.
            domains: one int per row, or None.
            init: optional (K, D) initial centroids instead of k-means++ seeding (K <= n_clusters).

        Returns:
            self. K = ``n_clusters``, or fewer when the data have fewer distinct rows (or Lloyd empties a cluster).
        """
        X = as_rows(X)
        check_domains(domains, len(X))
        if not len(X):
            raise ValueError(f"{type(self).__name__}.fit needs at least one row")
        if init is None:
            centroids = kmeans_plus_plus(X, self.n_clusters, np.random.default_rng(self.seed))
        else:
            centroids = as_rows(init, what="init", dim=X.shape[1]).copy()
            if len(centroids) > self.n_clusters:
                raise ValueError(f"init has {len(centroids)} centroids; n_clusters is {self.n_clusters}")
        if len(centroids) < self.n_clusters:
            logger.info("%s: %d clusters (asked %d)", type(self).__name__, len(centroids), self.n_clusters)
        labels = None
        for _ in range(self.max_iter):
            new, keep = lloyd_pass(X, centroids)
            stable = labels is not None and len(keep) == len(centroids) and np.array_equal(new, labels)
            labels = new
            _, centroids, _ = hard_statistics(X, labels, len(keep))
            if stable:
                break
        self._store = RowStore(X)
        self.labels_ = labels
        self.counts_, self.centroids_, self.m2_ = hard_statistics(X, labels, len(centroids))
        self.component_ids_ = np.arange(len(centroids), dtype=np.int64)
        self._next_id = len(centroids)
        self._medoids = {}
        self._after_fit()
        return self

    def _after_fit(self) -> None:
        pass

    def _append(self, x: np.ndarray, label: int) -> None:
        self._store.append(x)
        if self._n_labels == len(self._labels):  # grow geometrically: O(1) amortised appends
            self._labels = np.concatenate([self._labels, np.zeros(max(8, len(self._labels)), dtype=np.int64)])
        self._labels[self._n_labels] = label
        self._n_labels += 1

    def _keep_components(self, keep: np.ndarray) -> int:
        """Drop every component not in ``keep`` (the caller relabels); returns how many were removed."""
        removed = self.n_components_ - len(keep)
        self.component_ids_ = self.component_ids_[keep]
        return removed

    # ---------------------------------------------------------------- retrieval
    def weights(self, queries: Any) -> np.ndarray:
        """(m, K) retrieval weights softmax_k(-||q - mu_k||^2 / (2 sigma^2)); rows sum to 1."""
        self._check_fitted()
        Q = as_rows(queries, what="queries", dim=self.centroids_.shape[1])
        return softmax_rows(-direct_sq_distances(Q, self.centroids_) / (2.0 * self.sigma2_))

    def retrieve(
        self, queries: Any, top_k: int = 5, threshold: float | None = None, domain: Any = None
    ) -> list[list[tuple[int, float, int]]]:
        """Per query: ``[(component, weight, medoid_row), ...]`` best first (``domain`` is ignored: flat k-means).

        >>> km = SoftKMeans(n_clusters=2, em_iter=0).fit(np.array([[-1.0], [1.0], [9.0], [11.0]]),
        ...                                             init=np.array([[0.0], [10.0]]))
        >>> km.retrieve(np.array([[5.0]]), top_k=1), km.retrieve(np.array([[5.0]]), threshold=0.5)
        ([[(0, 0.5, 0)]], [[(0, 0.5, 0), (1, 0.5, 2)]])
        """
        hits = select_components(self.weights(queries), top_k, threshold)
        needed = sorted({k for row in hits for k, _ in row} - set(self._medoids))
        if needed:
            self._medoids.update(medoid_rows(self._store.rows, self.labels_, self.centroids_, needed))
        return [[(k, w, self._medoids[k]) for k, w in row] for row in hits]

    def medoids(self) -> np.ndarray:
        """(K,) medoid row of every component."""
        self._check_fitted()
        missing = [k for k in range(self.n_components_) if k not in self._medoids]
        self._medoids.update(medoid_rows(self._store.rows, self.labels_, self.centroids_, missing))
        return np.array([self._medoids[k] for k in range(self.n_components_)], dtype=np.int64)

    # ---------------------------------------------------------------- persistence
    def get_params(self) -> dict[str, Any]:
        """The constructor parameters (JSON-safe)."""
        return {
            "n_clusters": self.n_clusters,
            "seed": self.seed,
            "max_iter": self.max_iter,
            "min_variance": self.min_variance,
        }

    def state_arrays(self) -> dict[str, np.ndarray]:
        """``rows`` (n, D), ``labels`` (n,), ``centroids`` (K, D), ``counts`` / ``m2`` (K,) (the N_k and S_k
        statistics), ``component_ids`` (K,), ``next_id`` (0-d: the next unused component id)."""
        self._check_fitted()
        return {
            "rows": self._store.rows.copy(),
            "labels": self.labels_.copy(),
            "centroids": self.centroids_.copy(),
            "counts": self.counts_.copy(),
            "m2": self.m2_.copy(),
            "component_ids": self.component_ids_.copy(),
            "next_id": np.array(self._next_id, dtype=np.int64),
        }

    @classmethod
    def from_state_arrays(cls, arrays: Mapping[str, np.ndarray], **params: Any) -> _KMeansBase:
        """Rebuild from :meth:`state_arrays` and :meth:`get_params`: identical retrieval and further updates."""
        missing = [k for k in _STATE_KEYS if k not in arrays]
        if missing:
            raise ValueError(f"{cls.__name__} state lacks arrays {missing}; expected {list(_STATE_KEYS)}")
        org = cls(**params)
        rows = as_rows(arrays["rows"], what="rows")
        centroids = as_rows(arrays["centroids"], what="centroids", dim=rows.shape[1])
        k = len(centroids)
        labels = np.asarray(arrays["labels"], dtype=np.int64).ravel()
        if len(labels) != len(rows) or (len(labels) and (labels.min() < 0 or labels.max() >= k)):
            raise ValueError(f"{cls.__name__} state: labels must be {len(rows)} ints in [0, {k})")
        for key in ("counts", "m2", "component_ids"):
            if np.asarray(arrays[key]).shape != (k,):
                raise ValueError(
                    f"{cls.__name__} state: {key} has shape {np.asarray(arrays[key]).shape}; expected ({k},)"
                )
        org._store = RowStore(rows)
        org.labels_ = labels
        org.centroids_ = centroids.copy()
        org.counts_ = np.asarray(arrays["counts"], dtype=np.float64).copy()
        org.m2_ = np.asarray(arrays["m2"], dtype=np.float64).copy()
        org.component_ids_ = np.asarray(arrays["component_ids"], dtype=np.int64).copy()
        org._next_id = int(arrays["next_id"])
        return org


class HardKMeans(_KMeansBase):
    """Hard k-means with online running-mean updates and a one-pass Lloyd refit (see the module docstring).

    Args:
        n_clusters: K (the memory sets it to the corpus HDP-GMM's fitted K).
        seed: seeds the k-means++ initialisation (the only randomness).
        max_iter: most Lloyd iterations in ``fit``.
        min_variance: floor of the shared retrieval variance sigma^2.
    """

    def partial_fit(self, x: Any, domain: int | None = None) -> dict[str, Any]:
        """Assign ``x`` to the nearest centroid (ties: lower index) and move that centroid to the running mean."""
        self._check_fitted()
        x = as_rows(x, what="x", dim=self.centroids_.shape[1])[0]
        k = int(np.argmin(((self.centroids_ - x) ** 2).sum(axis=1)))
        self.counts_[k] += 1.0
        delta = x - self.centroids_[k]
        self.centroids_[k] += delta / self.counts_[k]
        self.m2_[k] += float(delta @ (x - self.centroids_[k]))
        self._append(x, k)
        self._medoids.pop(k, None)
        return {"component": k, "born": False, "cause": None}

    def refit(self) -> dict[str, int]:
        """One Lloyd pass over every stored row; clusters left empty are removed (ids of the rest kept)."""
        self._check_fitted()
        X = self._store.rows
        labels, keep = lloyd_pass(X, self.centroids_)
        removed = self._keep_components(keep)
        self.labels_ = labels
        self.counts_, self.centroids_, self.m2_ = hard_statistics(X, labels, len(keep))
        self._medoids = {}
        return {"births": 0, "merges": 0, "removed": removed}


class SoftKMeans(_KMeansBase):
    """Isotropic soft k-means: responsibility-weighted online folds and a one-step soft EM refit (module docstring).

    Args:
        n_clusters: K.
        seed: seeds the k-means++ initialisation of the hard start.
        max_iter: most Lloyd iterations of the hard start in ``fit``.
        min_variance: floor of the shared variance sigma^2.
        em_iter: most EM steps in ``fit`` after the hard start (0: keep the hard k-means statistics).
        tol: ``fit`` stops once an EM step changes the mean per-row log-likelihood by less than this.
        fold_threshold: a row is folded into every cluster whose responsibility exceeds this; a cluster whose total
            responsibility falls below it in an EM step is removed.
    """

    def __init__(
        self,
        *,
        n_clusters: int,
        seed: int = 0,
        max_iter: int = 100,
        min_variance: float = 1e-6,
        em_iter: int = 100,
        tol: float = 1e-3,
        fold_threshold: float = 1e-6,
    ) -> None:
        super().__init__(n_clusters=n_clusters, seed=seed, max_iter=max_iter, min_variance=min_variance)
        if isinstance(em_iter, bool) or not isinstance(em_iter, (int, np.integer)) or em_iter < 0:
            raise ValueError(f"em_iter must be an int >= 0, got {em_iter!r}")
        if not (isinstance(tol, (int, float)) and tol >= 0):
            raise ValueError(f"tol must be a number >= 0, got {tol!r}")
        if not (isinstance(fold_threshold, (int, float)) and 0 <= fold_threshold < 1):
            raise ValueError(f"fold_threshold must be in [0, 1), got {fold_threshold!r}")
        self.em_iter = int(em_iter)
        #: mean per-row log-likelihood at the start of the last EM step (diagnostic; not saved).
        self.log_likelihood_ = float("nan")
        self.tol = float(tol)
        self.fold_threshold = float(fold_threshold)

    def get_params(self) -> dict[str, Any]:
        return {**super().get_params(), "em_iter": self.em_iter, "tol": self.tol, "fold_threshold": self.fold_threshold}

    def responsibilities(self, X: Any) -> np.ndarray:
        """(n, K) responsibilities r_ik = softmax_k(-||x_i - mu_k||^2 / (2 sigma^2)) (= the retrieval weights)."""
        return self.weights(X)

    def _after_fit(self) -> None:
        previous = None
        for _ in range(self.em_iter):
            self._em_step()
            if previous is not None and abs(self.log_likelihood_ - previous) < self.tol:
                break
            previous = self.log_likelihood_

    def _em_step(self) -> int:
        """One EM step over every stored row; sets ``log_likelihood_`` (of the parameters it started from)."""
        X = self._store.rows
        s2 = self.sigma2_
        resp = np.empty((len(X), self.n_components_))
        total_lse = 0.0
        for start in range(0, len(X), _BLOCK):
            logits = -sq_distances(X[start : start + _BLOCK], self.centroids_) / (2.0 * s2)
            total_lse += float(logsumexp(logits, axis=1).sum())
            resp[start : start + _BLOCK] = softmax_rows(logits)
        dim, k = X.shape[1], self.n_components_
        self.log_likelihood_ = total_lse / len(X) - 0.5 * dim * np.log(2 * np.pi * s2) - np.log(k)
        totals = resp.sum(axis=0)
        keep = np.flatnonzero(totals >= self.fold_threshold)
        removed = self._keep_components(keep)
        resp, totals = resp[:, keep], totals[keep]
        self.centroids_ = (resp.T @ X) / totals[:, None]
        m2 = np.zeros(len(keep))
        for start in range(0, len(X), _BLOCK):
            block = X[start : start + _BLOCK]
            m2 += (resp[start : start + _BLOCK] * sq_distances(block, self.centroids_)).sum(axis=0)
        self.counts_, self.m2_ = totals, m2
        self.labels_ = np.argmax(resp, axis=1).astype(np.int64)
        self._medoids = {}
        return removed

    def partial_fit(self, x: Any, domain: int | None = None) -> dict[str, Any]:
        """Fold ``x`` into every cluster with responsibility > ``fold_threshold``; its label is the argmax."""
        self._check_fitted()
        x = as_rows(x, what="x", dim=self.centroids_.shape[1])[0]
        resp = self.responsibilities(x[None, :])[0]
        label = int(np.argmax(resp))
        hard = np.bincount(self.labels_, minlength=self.n_components_)
        for k in np.flatnonzero(resp > self.fold_threshold):
            weight = float(resp[k])
            self.counts_[k] += weight
            delta = x - self.centroids_[k]
            self.centroids_[k] += (weight / self.counts_[k]) * delta
            self.m2_[k] += weight * float(delta @ (x - self.centroids_[k]))
            if not hard[k]:  # no hard member: its stand-in is the row nearest the mean, which moved
                self._medoids.pop(int(k), None)
        self._medoids.pop(label, None)  # a medoid changes only with its hard members
        self._append(x, label)
        return {"component": label, "born": False, "cause": None}

    def refit(self) -> dict[str, int]:
        """One responsibility-weighted EM step over every stored row (module docstring)."""
        self._check_fitted()
        return {"births": 0, "merges": 0, "removed": self._em_step()}
