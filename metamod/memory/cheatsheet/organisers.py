"""The retrieval structures ("organisers") a cheatsheet memory wraps: the registry, the flat baselines, churn.

Every organiser follows one scikit-learn style interface over float rows of shape (n, D) with int domains:
``fit(X, domains)``, ``labels_`` / ``n_components_`` / ``component_ids_`` (persistent ids), ``partial_fit(x, domain)``
(one new row, appended as row n), ``refit()``, ``retrieve(queries, top_k=5, threshold=None, domain=None)`` (per query
``[(component_index, weight, medoid_row), ...]`` best first), ``state_arrays()`` / ``from_state_arrays(arrays,
**params)`` and ``get_params()``. The registered organisers:

===============  ======================================================  ============================================
name             class                                                   what it is
===============  ======================================================  ============================================
``hdp``          ``metamod.memory.hdp:HDPGMM``                           the HDP Gaussian mixture (Bayesian Cheatsheet)
``dp``           the same class with ``flat=True`` fixed                 the domain-pooled DP-GMM
``kmeans_hard``  :class:`metamod.memory.cheatsheet.kmeans.HardKMeans`    hard k-means, online running means, Lloyd refit
``kmeans_soft``  :class:`metamod.memory.cheatsheet.kmeans.SoftKMeans`    isotropic soft k-means, soft EM refit
``flat``         :class:`FlatIndex`                                      every row its own component, cosine top-k
``random``       :class:`RandomIndex`                                    k' uniformly random rows per query
===============  ======================================================  ============================================

Each registry value is an :class:`OrganiserSpec` ``(target, preset)``: the class (or its dotted path, imported only
when built, so this module never imports the HDP-GMM or k-means code up front) and the constructor parameters the
name *fixes* (``dp`` = ``HDPGMM(flat=True)``; passing ``flat=False`` to ``dp`` is refused rather than silently
turning it into ``hdp``). A dotted path ``package.module:Class`` works as a name too (no preset).

``flat`` is "metacognitive reuse" when the memory keeps it in the raw embedding space and "direct retrieval" in the
projected space: the memory chooses the space, the organiser only sees rows.

>>> sorted(ORGANISERS)
['dp', 'flat', 'hdp', 'kmeans_hard', 'kmeans_soft', 'random']
>>> org = build_organiser("flat").fit(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), np.zeros(3, dtype=int))
>>> [(k, round(w, 3), row) for k, w, row in org.retrieve(np.array([[1.0, 0.2]]), top_k=2)[0]]
[(0, 0.981, 0), (2, 0.832, 2)]
>>> build_organiser("kmeans", n_clusters=2)
Traceback (most recent call last):
...
KeyError: "Unknown organiser 'kmeans'. Valid names: dp, flat, hdp, kmeans_hard, kmeans_soft, random (or a dotted path 'package.module:attr')."
>>> churn([0, 0, 1], [0, 1, 1])["fraction"]
0.3333333333333333
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from metamod.errors import ConfigError
from metamod.registry import import_dotted, resolve

logger = logging.getLogger(__name__)

#: largest number of query-by-row similarities computed at once by the flat organisers (bounds memory).
_CHUNK_CELLS = 4_000_000


# ------------------------------------------------------------------------------------------ shared helpers


def as_rows(X: Any, *, what: str = "X", dim: int | None = None) -> np.ndarray:
    """``X`` as a C-contiguous float64 array of shape (n, D) with finite entries; a 1-D ``X`` is one row.

    >>> as_rows([1, 2]).shape
    (1, 2)
    >>> as_rows(np.zeros((2, 3)), dim=4)
    Traceback (most recent call last):
    ...
    ValueError: X has 3 columns; expected 4 (the organiser's dimension D)
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (n, D), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{what} has {arr.shape[1]} columns; expected {dim} (the organiser's dimension D)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} holds NaN or infinite values")
    return np.ascontiguousarray(arr)


def check_domains(domains: Any, n: int) -> None:
    """Refuse a domain vector whose length is not the number of rows (organisers that ignore domains still check)."""
    if domains is None:
        return
    arr = np.asarray(domains)
    if arr.ndim == 0 or len(arr) != n:
        raise ValueError(f"domains must hold one int per row ({n}), got shape {arr.shape}")


def check_retrieve_args(top_k: int, threshold: float | None) -> None:
    """Refuse ``top_k < 1`` and a non-finite ``threshold``."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    if threshold is not None and not np.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number or None, got {threshold!r}")


class RowStore:
    """A growable (n, D) float64 buffer: O(D) amortised appends, ``rows`` is a view of the filled part.

    >>> store = RowStore(np.zeros((1, 2)))
    >>> store.append(np.array([1.0, 2.0])); store.rows.tolist()
    [[0.0, 0.0], [1.0, 2.0]]
    """

    def __init__(self, rows: np.ndarray | None = None) -> None:
        rows = np.zeros((0, 0)) if rows is None else np.asarray(rows, dtype=np.float64)
        self._buf = np.array(rows, dtype=np.float64, copy=True, ndmin=2)
        self._n = len(rows)

    @property
    def rows(self) -> np.ndarray:
        return self._buf[: self._n]

    @property
    def dim(self) -> int | None:
        """D, or None while nothing (not even an empty (0, D) array) fixed it."""
        return self._buf.shape[1] if self._buf.shape[1] or self._n else None

    def __len__(self) -> int:
        return self._n

    def append(self, row: np.ndarray) -> None:
        row = np.asarray(row, dtype=np.float64).ravel()
        if self._buf.shape[1] == 0 and self._n == 0:
            self._buf = np.zeros((8, len(row)))
        if len(row) != self._buf.shape[1]:
            raise ValueError(f"row has {len(row)} values; expected {self._buf.shape[1]} (the organiser's dimension D)")
        if self._n == len(self._buf):
            grown = np.zeros((max(8, 2 * len(self._buf)), self._buf.shape[1]))
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n] = row
        self._n += 1


def select_components(weights: np.ndarray, top_k: int, threshold: float | None = None) -> list[list[tuple[int, float]]]:
    """Per row of ``weights`` (m, K): the top ``top_k`` columns, or every column with weight >= ``threshold``.

    Sorted by weight, best first; equal weights keep the lower column first.

    >>> select_components(np.array([[0.2, 0.5, 0.3], [0.4, 0.2, 0.4]]), top_k=2)
    [[(1, 0.5), (2, 0.3)], [(0, 0.4), (2, 0.4)]]
    >>> select_components(np.array([[0.2, 0.5, 0.3]]), top_k=1, threshold=0.25)
    [[(1, 0.5), (2, 0.3)]]
    """
    check_retrieve_args(top_k, threshold)
    out: list[list[tuple[int, float]]] = []
    n_cols = weights.shape[1]
    for row in weights:
        if threshold is not None:
            cand = np.flatnonzero(row >= threshold)
        elif top_k >= n_cols:
            cand = np.arange(n_cols)
        else:
            kth = np.partition(row, n_cols - top_k)[n_cols - top_k]
            cand = np.flatnonzero(row >= kth)
        order = cand[np.lexsort((cand, -row[cand]))]
        if threshold is None:
            order = order[:top_k]
        out.append([(int(k), float(row[k])) for k in order])
    return out


# ------------------------------------------------------------------------------------------ flat organisers


class _FlatBase:
    """Shared by the flat organisers: every stored row is its own component (labels_ = component_ids_ = arange(n))."""

    def __init__(self) -> None:
        self._store = RowStore()

    def fit(self, X: Any, domains: Any = None) -> _FlatBase:
        """Store the rows (an empty (0, D) array is allowed: the index then fills by ``partial_fit``); domains are
        checked for length and otherwise ignored (flat structure)."""
        X = as_rows(X)
        check_domains(domains, len(X))
        self._store = RowStore(X)
        self._after_fit()
        return self

    def _after_fit(self) -> None:
        pass

    @property
    def X_(self) -> np.ndarray:
        return self._store.rows

    @property
    def labels_(self) -> np.ndarray:
        return np.arange(len(self._store), dtype=np.int64)

    @property
    def component_ids_(self) -> np.ndarray:
        return np.arange(len(self._store), dtype=np.int64)

    @property
    def n_components_(self) -> int:
        return len(self._store)

    def partial_fit(self, x: Any, domain: int | None = None) -> dict[str, Any]:
        """Append ``x`` as row n (its own component). Flat structures have no births: ``born`` is always False."""
        row = as_rows(x, what="x", dim=self._store.dim)
        if len(row) != 1:
            raise ValueError(f"partial_fit takes one row, got {len(row)}")
        self._store.append(row[0])
        self._after_append(row[0])
        return {"component": len(self._store) - 1, "born": False, "cause": None}

    def _after_append(self, row: np.ndarray) -> None:
        pass

    def refit(self) -> dict[str, int]:
        """Nothing to reorganise in a flat structure."""
        return {"births": 0, "merges": 0, "removed": 0}

    def state_arrays(self) -> dict[str, np.ndarray]:
        """``rows``: the stored (n, D) rows (all the state there is)."""
        return {"rows": self._store.rows.copy()}

    @classmethod
    def from_state_arrays(cls, arrays: Mapping[str, np.ndarray], **params: Any) -> _FlatBase:
        if "rows" not in arrays:
            raise ValueError(f"{cls.__name__} state needs array 'rows'; got {sorted(arrays)}")
        return cls(**params).fit(np.asarray(arrays["rows"], dtype=np.float64))


class FlatIndex(_FlatBase):
    """Every stored row is its own component; retrieval is cosine top-k (metacognitive reuse / direct retrieval).

    Weights are the cosine similarities themselves (in [-1, 1], not normalised over the rows: a softmax over
    thousands of rows would make ``threshold`` meaningless), so ``threshold`` is a minimum similarity. A zero row
    (or query) has similarity 0 to everything.

    >>> idx = FlatIndex().fit(np.array([[1.0, 0.0], [0.0, 2.0]]))
    >>> idx.partial_fit(np.array([3.0, 3.0]))
    {'component': 2, 'born': False, 'cause': None}
    >>> [(k, round(w, 3)) for k, w, _ in idx.retrieve(np.array([[0.0, 1.0]]), top_k=2)[0]]
    [(1, 1.0), (2, 0.707)]
    """

    def __init__(self) -> None:
        super().__init__()
        self._unit = RowStore()

    def _after_fit(self) -> None:
        self._unit = RowStore(_unit_rows(self._store.rows))

    def _after_append(self, row: np.ndarray) -> None:
        self._unit.append(_unit_rows(row[None, :])[0])

    def retrieve(
        self, queries: Any, top_k: int = 5, threshold: float | None = None, domain: Any = None
    ) -> list[list[tuple[int, float, int]]]:
        """Per query: ``[(row, cosine, row), ...]`` best first (``domain`` is ignored: flat structure)."""
        check_retrieve_args(top_k, threshold)
        Q = as_rows(queries, what="queries", dim=self._store.dim)
        n = len(self._store)
        if n == 0:
            return [[] for _ in range(len(Q))]
        Qu = _unit_rows(Q)
        step = max(1, _CHUNK_CELLS // n)
        out: list[list[tuple[int, float, int]]] = []
        for start in range(0, len(Q), step):
            sims = Qu[start : start + step] @ self._unit.rows.T
            for hits in select_components(sims, top_k, threshold):
                out.append([(k, w, k) for k, w in hits])
        return out

    def get_params(self) -> dict[str, Any]:
        return {}


class RandomIndex(_FlatBase):
    """k' distinct uniformly random rows per query: the "random selection" baseline.

    The draw is a pure function of ``(seed, the query's float64 bytes, n)`` (a numpy generator seeded with the seed
    and a BLAKE2 hash of the query row), so the same question gets the same rows, a resumed run draws the same,
    and no RNG state needs saving. Weights are uniform (1/n); rows are listed in increasing order. ``threshold``
    is refused: every row has the same weight, so it would keep all rows or none.

    >>> idx = RandomIndex(seed=3).fit(np.eye(6))
    >>> hits = idx.retrieve(np.ones((1, 6)), top_k=3)[0]
    >>> len({row for _, _, row in hits}), hits == idx.retrieve(np.ones((1, 6)), top_k=3)[0]
    (3, True)
    """

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        self.seed = int(seed)

    def retrieve(
        self, queries: Any, top_k: int = 5, threshold: float | None = None, domain: Any = None
    ) -> list[list[tuple[int, float, int]]]:
        """Per query: ``min(top_k, n)`` distinct random rows ``(row, 1/n, row)``; ``domain`` is ignored."""
        check_retrieve_args(top_k, threshold)
        if threshold is not None:
            raise ValueError("RandomIndex draws top_k rows at random; threshold is not supported (set it to None)")
        Q = as_rows(queries, what="queries", dim=self._store.dim)
        n = len(self._store)
        out: list[list[tuple[int, float, int]]] = []
        for q in Q:
            if n == 0:
                out.append([])
                continue
            digest = hashlib.blake2b(np.ascontiguousarray(q, dtype=np.float64).tobytes(), digest_size=16).digest()
            words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
            rng = np.random.default_rng([self.seed, *words])
            rows = np.sort(rng.choice(n, size=min(top_k, n), replace=False))
            out.append([(int(r), 1.0 / n, int(r)) for r in rows])
        return out

    def get_params(self) -> dict[str, Any]:
        return {"seed": self.seed}


def _unit_rows(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


# ------------------------------------------------------------------------------------------ registry


class OrganiserSpec(NamedTuple):
    """A registry entry: the class (or its dotted path, imported when first built) and the parameters it fixes."""

    target: str | type
    preset: Mapping[str, Any] = MappingProxyType({})


#: organiser name -> spec (see the module docstring).
ORGANISERS: dict[str, OrganiserSpec] = {
    "hdp": OrganiserSpec("metamod.memory.hdp:HDPGMM"),
    "dp": OrganiserSpec("metamod.memory.hdp:HDPGMM", MappingProxyType({"flat": True})),
    "kmeans_hard": OrganiserSpec("metamod.memory.cheatsheet.kmeans:HardKMeans"),
    "kmeans_soft": OrganiserSpec("metamod.memory.cheatsheet.kmeans:SoftKMeans"),
    "flat": OrganiserSpec(FlatIndex),
    "random": OrganiserSpec(RandomIndex),
}


def organiser_class(name: str) -> tuple[type, dict[str, Any]]:
    """The class registered as ``name`` (a dotted path works too) and the parameters the name fixes.

    >>> organiser_class("random")
    (<class 'metamod.memory.cheatsheet.organisers.RandomIndex'>, {})
    """
    entry = resolve(ORGANISERS, name, what="organiser")
    spec = entry if isinstance(entry, OrganiserSpec) else OrganiserSpec(entry)
    target = spec.target
    if isinstance(target, str):
        try:
            target = import_dotted(target)
        except (ImportError, AttributeError) as err:
            raise KeyError(f"organiser {name!r} is {spec.target!r}, which could not be imported: {err}") from err
    if not isinstance(target, type):
        raise KeyError(f"organiser {name!r} resolves to {target!r}, which is not a class")
    return target, dict(spec.preset)


def organiser_params(name: str, params: Mapping[str, Any] | None = None) -> tuple[type, dict[str, Any]]:
    """The class of ``name`` and the full keyword set to build it with: the preset plus ``params``, checked.

    Raises:
        ConfigError: a parameter the class does not take, or one that contradicts the name's preset.

    >>> organiser_params("kmeans_hard", {"n_cluster": 4})
    Traceback (most recent call last):
    ...
    metamod.errors.ConfigError: organiser 'kmeans_hard': 'n_cluster' is not a parameter; valid: max_iter, min_variance, n_clusters, seed
    """
    cls, preset = organiser_class(name)
    params = dict(params or {})
    signature = inspect.signature(cls)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    valid = sorted(p.name for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD)
    for key in sorted(params):
        if not takes_any and key not in valid:
            raise ConfigError(f"organiser {name!r}: {key!r} is not a parameter; valid: {', '.join(valid) or '(none)'}")
        if key in preset and params[key] != preset[key]:
            raise ConfigError(
                f"organiser {name!r} fixes {key}={preset[key]!r} (got {params[key]!r}); use another organiser name"
            )
    return cls, {**preset, **params}


def build_organiser(name: str, **params: Any) -> Any:
    """A new (unfitted) organiser by registry name or dotted path, with its constructor parameters as keywords.

    Raises:
        KeyError: unknown name (the message lists the valid ones).
        ConfigError: a bad parameter name or value (the message names it).

    >>> build_organiser("kmeans_soft", n_clusters=3).get_params()["n_clusters"]
    3
    """
    cls, full = organiser_params(name, params)
    try:
        return cls(**full)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"organiser {name!r}: {err}") from err


def save_organiser(org: Any) -> dict[str, np.ndarray]:
    """``org.state_arrays()``, checked to be plain numeric/string numpy arrays (so an npz saves them without pickle)."""
    arrays = org.state_arrays()
    for key, value in arrays.items():
        if not isinstance(value, np.ndarray) or value.dtype == object:
            raise TypeError(f"{type(org).__name__}.state_arrays()[{key!r}] must be a non-object numpy array")
    return dict(arrays)


def load_organiser(name: str, arrays: Mapping[str, np.ndarray], params: Mapping[str, Any] | None = None) -> Any:
    """Rebuild a saved organiser: ``params`` = its ``get_params()``, ``arrays`` = its ``state_arrays()``.

    >>> org = build_organiser("random", seed=2).fit(np.eye(4))
    >>> again = load_organiser("random", save_organiser(org), org.get_params())
    >>> again.retrieve(np.ones(4), top_k=2) == org.retrieve(np.ones(4), top_k=2)
    True
    """
    cls, full = organiser_params(name, params)
    if hasattr(cls, "from_state_arrays"):
        return cls.from_state_arrays(arrays, **full)
    org = cls(**full)
    org.load_state_arrays(arrays)
    return org


# ------------------------------------------------------------------------------------------ churn


def churn(before_ids: Any, after_ids: Any, *, max_dense: int = 1_000_000) -> dict[str, Any]:
    """Assignment churn across a refit: M[b, a] = #rows with persistent component id b before and a after.

    ``before_ids`` = ``component_ids_[labels_]`` before the refit (the n rows present then), ``after_ids`` the same
    after it (rows inserted since may follow; only the first n count).

    Returns:
        ``{"rows": n, "changed": rows whose id changed, "fraction": changed / n (0.0 when n = 0),
        "before": the row ids b (sorted), "after": the column ids a (sorted), "entries": [[b, a, count], ...]
        (the non-zero cells, sorted), "matrix": the dense M as lists (rows = before, columns = after), or None
        when it would exceed ``max_dense`` cells (e.g. a flat index, where every row is its own component)}``.

    >>> out = churn([5, 5, 7, 7], [5, 8, 8, 8, 9])
    >>> out["fraction"], out["before"], out["after"], out["matrix"], out["entries"]
    (0.75, [5, 7], [5, 8], [[1, 1], [0, 2]], [[5, 5, 1], [5, 8, 1], [7, 8, 2]])
    """
    before = np.asarray(before_ids, dtype=np.int64).ravel()
    after = np.asarray(after_ids, dtype=np.int64).ravel()
    if len(after) < len(before):
        raise ValueError(f"after_ids has {len(after)} rows, fewer than before_ids ({len(before)})")
    after = after[: len(before)]
    n = len(before)
    rows, cols = np.unique(before), np.unique(after)
    if n:
        pairs, counts = np.unique(np.stack([before, after], axis=1), axis=0, return_counts=True)
    else:
        pairs, counts = np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    matrix = None
    if len(rows) * len(cols) <= max_dense:
        dense = np.zeros((len(rows), len(cols)), dtype=np.int64)
        dense[np.searchsorted(rows, pairs[:, 0]), np.searchsorted(cols, pairs[:, 1])] = counts
        matrix = dense.tolist()
    changed = int((before != after).sum())
    return {
        "rows": n,
        "changed": changed,
        "fraction": changed / n if n else 0.0,
        "before": rows.tolist(),
        "after": cols.tolist(),
        "entries": [[int(b), int(a), int(c)] for (b, a), c in zip(pairs, counts, strict=True)],
        "matrix": matrix,
    }
