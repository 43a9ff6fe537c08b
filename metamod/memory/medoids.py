"""The medoid of a cluster: the member with the least summed Euclidean distance to the others.

The representative behaviour every organiser returns for a retrieved component (the paper returns each retrieved
component's medoid, seed 004 section 4.4): the HDP-GMM (:mod:`metamod.memory.hdp`) and the k-means organisers
(:mod:`metamod.memory.cheatsheet.kmeans`) alike, so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: largest number of row-by-row distances computed at once by :func:`summed_distances` (bounds memory).
_CHUNK_CELLS = 4_000_000

#: clusters of at most this many members get their exact medoid (O(n^2 D) time, blocks of ``_CHUNK_CELLS`` distances)
MEDOID_EXACT_MAX = 4096
#: above :data:`MEDOID_EXACT_MAX`, the medoid is searched among this many members nearest the cluster's mean
MEDOID_CANDIDATES = 512


def summed_distances(Y: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
    """For each row ``i`` in ``which`` (None: every row): sum_j ||Y_i - Y_j||_2 over all rows ``j`` of ``Y``.

    Exact, computed in blocks of at most ``_CHUNK_CELLS`` distances (bounded memory for any cluster size); the rows
    are centred first, which keeps the Gram-matrix form of the distances accurate.

    >>> summed_distances(np.array([[0.0], [1.0], [3.0]])).tolist()
    [4.0, 3.0, 5.0]
    """
    Yc = np.asarray(Y, dtype=np.float64)
    Yc = Yc - Yc.mean(axis=0)
    sq = np.einsum("ij,ij->i", Yc, Yc)
    which = np.arange(len(Yc)) if which is None else np.asarray(which, dtype=np.int64)
    out = np.zeros(len(which))
    step = max(1, _CHUNK_CELLS // max(len(Yc), 1))
    for s in range(0, len(which), step):
        idx = which[s : s + step]
        d2 = sq[idx, None] + sq[None, :] - 2.0 * (Yc[idx] @ Yc.T)
        d2[np.arange(len(idx)), idx] = 0.0  # a row's distance to itself is exactly 0 (not rounding noise)
        out[s : s + len(idx)] = np.sqrt(np.maximum(d2, 0.0)).sum(axis=1)
    return out


def medoid_index(Y: np.ndarray, *, exact_max: int = MEDOID_EXACT_MAX, candidates: int = MEDOID_CANDIDATES) -> int:
    """The medoid of the rows ``Y``: the row whose summed Euclidean distance to all the others is smallest.

    Exact for up to ``exact_max`` rows. A larger cluster is searched among its ``candidates`` rows nearest the mean
    (each candidate's sum is still exact over all rows), which costs O(candidates n D) instead of O(n^2 D); on
    Gaussian, heavy-tailed, skewed and two-group clusters of 6,000-20,000 rows in D = 128 the pick was the exact
    medoid every time (benchmarks/bench_medoid.py). Ties (sums equal to 1e-12 relative) go to the lower row.

    >>> medoid_index(np.array([[0.0], [1.0], [3.0]]))
    1
    >>> Y = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]])
    >>> medoid_index(Y), int(np.argmin(((Y - Y.mean(0)) ** 2).sum(1)))  # the medoid, not the row nearest the mean
    (2, 3)
    """
    n = len(Y)
    if n <= 2:
        return 0
    if n <= exact_max:
        pool = np.arange(n)
    else:
        Yc = np.asarray(Y, dtype=np.float64) - np.asarray(Y, dtype=np.float64).mean(axis=0)
        pool = np.sort(np.argsort(np.einsum("ij,ij->i", Yc, Yc), kind="stable")[: max(1, int(candidates))])
    sums = summed_distances(Y, pool)
    best = sums.min()
    return int(pool[np.flatnonzero(sums <= best + 1e-12 * max(best, 1.0))[0]])


def medoids_by_label(X: np.ndarray, labels: np.ndarray, which: Sequence[int], rows: np.ndarray | None = None) -> dict:
    """For each label in ``which``: the row (an index into ``X``) that is the medoid of that label's members.

    ``rows`` restricts the members to those rows (default: every row); a label with no member is left out.

    >>> X = np.array([[0.0], [0.1], [0.2], [10.0], [5.0], [6.0]])
    >>> medoids_by_label(X, np.array([0, 0, 0, 0, 1, 1]), [0, 1, 2])
    {0: 1, 1: 4}
    """
    rows = np.arange(len(labels)) if rows is None else np.asarray(rows, dtype=np.int64)
    lab = np.asarray(labels)[rows]
    order = np.argsort(lab, kind="stable")
    lab, rows = lab[order], rows[order]
    starts = np.searchsorted(lab, which, side="left")
    ends = np.searchsorted(lab, which, side="right")
    out: dict[int, int] = {}
    for k, s, e in zip(which, starts, ends, strict=True):
        if e > s:
            members = rows[s:e]
            out[int(k)] = int(members[medoid_index(X[members])])
    return out


def medoid_rows(X: np.ndarray, labels: np.ndarray, means: np.ndarray, which: Sequence[int]) -> dict[int, int]:
    """For each component in ``which``: the medoid of its hard members (:func:`medoid_index`; the paper returns
    each retrieved component's medoid, section 4.4).

    A component without hard members (possible for soft k-means) has no medoid; it falls back to the stored row
    nearest its mean (squared Euclidean, ties: the lower row).

    >>> X = np.array([[0.0], [1.0], [2.0], [3.0], [100.0], [9.0]])
    >>> medoid_rows(X, np.array([0, 0, 0, 0, 0, 1]), np.array([[21.2], [9.0], [50.0]]), [0, 1, 2])
    {0: 2, 1: 5, 2: 5}
    """
    which = [int(k) for k in which]
    out = medoids_by_label(X, labels, which)
    for k in which:
        if k not in out:
            out[k] = int(np.argmin(((X - means[k]) ** 2).sum(axis=1)))
    return {k: out[k] for k in which}
