"""The organiser registry, the flat baselines (cosine top-k, random k'), churn, and save/load through the registry."""

import importlib.util

import numpy as np
import pytest

from metamod.errors import ConfigError
from metamod.memory import medoids
from metamod.memory.cheatsheet import organisers
from metamod.memory.cheatsheet.kmeans import HardKMeans, SoftKMeans
from metamod.memory.cheatsheet.organisers import (
    ORGANISERS,
    FlatIndex,
    OrganiserSpec,
    RandomIndex,
    build_organiser,
    churn,
    load_organiser,
    organiser_class,
    organiser_params,
    save_organiser,
)

LOCAL = {"kmeans_hard": {"n_clusters": 3}, "kmeans_soft": {"n_clusters": 3}, "flat": {}, "random": {"seed": 1}}


def _rows(n=30, dim=5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, dim))


# ------------------------------------------------------------------------------------------ registry


def test_registry_names_and_specs():
    assert sorted(ORGANISERS) == ["dp", "flat", "hdp", "kmeans_hard", "kmeans_soft", "random"]
    assert ORGANISERS["hdp"].target == ORGANISERS["dp"].target == "metamod.memory.hdp:HDPGMM"
    assert dict(ORGANISERS["dp"].preset) == {"flat": True} and dict(ORGANISERS["hdp"].preset) == {}
    assert organiser_class("kmeans_hard") == (HardKMeans, {})
    assert organiser_class("kmeans_soft")[0] is SoftKMeans
    assert organiser_class("flat")[0] is FlatIndex and organiser_class("random")[0] is RandomIndex
    assert isinstance(build_organiser("metamod.memory.cheatsheet.organisers:FlatIndex"), FlatIndex)  # dotted path


def test_unknown_name_and_bad_params_fail_in_one_line():
    with pytest.raises(KeyError, match="Unknown organiser 'kmean'. Valid names: dp, flat, hdp, kmeans_hard"):
        build_organiser("kmean")
    with pytest.raises(ConfigError, match="organiser 'random': 'k' is not a parameter; valid: seed$"):
        build_organiser("random", k=3)
    with pytest.raises(ConfigError, match="organiser 'flat': 'seed' is not a parameter; valid: \\(none\\)"):
        build_organiser("flat", seed=0)
    with pytest.raises(ConfigError, match="organiser 'kmeans_hard': n_clusters must be an int >= 1, got 0"):
        build_organiser("kmeans_hard", n_clusters=0)
    with pytest.raises(ConfigError, match="organiser 'kmeans_soft': .*missing .*n_clusters"):
        build_organiser("kmeans_soft")
    with pytest.raises(KeyError, match="Could not import organiser 'no.such.module:X'"):
        build_organiser("no.such.module:X")


def test_a_preset_is_applied_and_cannot_be_contradicted(monkeypatch):
    monkeypatch.setitem(ORGANISERS, "random_fixed", OrganiserSpec(RandomIndex, {"seed": 7}))
    assert build_organiser("random_fixed").seed == 7
    assert build_organiser("random_fixed", seed=7).seed == 7
    with pytest.raises(ConfigError, match="organiser 'random_fixed' fixes seed=7 \\(got 8\\)"):
        build_organiser("random_fixed", seed=8)
    assert organiser_params("random_fixed")[1] == {"seed": 7}


@pytest.mark.skipif(importlib.util.find_spec("metamod.memory.hdp") is None, reason="metamod.memory.hdp not written yet")
def test_dp_is_the_hdp_class_with_flat_fixed():
    cls, params = organiser_params("dp")
    assert cls is organiser_class("hdp")[0] and params == {"flat": True}
    with pytest.raises(ConfigError, match="fixes flat=True"):
        build_organiser("dp", flat=False)


# ------------------------------------------------------------------------------------------ the shared interface


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_every_local_organiser_follows_the_interface(name):
    X = _rows()
    org = build_organiser(name, **LOCAL[name]).fit(X, np.arange(len(X)) % 2)
    k = org.n_components_
    assert org.labels_.shape == (len(X),) and org.component_ids_.shape == (k,)
    assert org.labels_.min() >= 0 and org.labels_.max() < k
    event = org.partial_fit(_rows(1, seed=5)[0], 1)
    assert event["born"] is False and event["cause"] is None and 0 <= event["component"] < org.n_components_
    assert org.labels_[-1] == event["component"] and len(org.labels_) == len(X) + 1
    info = org.refit()
    assert info["births"] == info["merges"] == 0 and info["removed"] >= 0
    hits = org.retrieve(_rows(4, seed=6), top_k=2, domain=np.zeros(4, dtype=int))
    assert len(hits) == 4
    for row in hits:
        assert len(row) == 2 and [w for _, w, _ in row] == sorted((w for _, w, _ in row), reverse=True)
        for comp, weight, medoid in row:
            assert isinstance(comp, int) and isinstance(weight, float) and isinstance(medoid, int)
            assert org.labels_[medoid] == comp  # the medoid is a hard member of its component
    expected = {
        "kmeans_hard": ["max_iter", "min_variance", "n_clusters", "seed"],
        "flat": [],
        "random": ["seed"],
        "kmeans_soft": ["em_iter", "fold_threshold", "max_iter", "min_variance", "n_clusters", "seed", "tol"],
    }
    assert sorted(org.get_params()) == expected[name]


@pytest.mark.parametrize("name", sorted(LOCAL))
def test_save_and_load_through_the_registry(name):
    X = _rows(seed=1)
    org = build_organiser(name, **LOCAL[name]).fit(X)
    for row in _rows(5, seed=2):
        org.partial_fit(row)
    queries = _rows(3, seed=3)
    arrays = save_organiser(org)
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in arrays.values())
    again = load_organiser(name, arrays, org.get_params())
    assert again.retrieve(queries, top_k=3) == org.retrieve(queries, top_k=3)
    nxt = _rows(1, seed=4)[0]
    assert again.partial_fit(nxt) == org.partial_fit(nxt)
    assert again.retrieve(queries, top_k=3) == org.retrieve(queries, top_k=3)


def test_save_refuses_object_arrays():
    class Bad:
        def state_arrays(self):
            return {"x": np.array([{"a": 1}], dtype=object)}

    with pytest.raises(TypeError, match=r"Bad.state_arrays\(\)\['x'\] must be a non-object numpy array"):
        save_organiser(Bad())


# ------------------------------------------------------------------------------------------ flat index


def test_flat_cosine_top_k_order_by_hand():
    rows = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [2.0, 2.0]])
    idx = FlatIndex().fit(rows, np.zeros(6, dtype=int))
    # query (1, .5): cosines .894, .447, .949, -.894, 0 (zero row), .949 (row 5 = 2 x row 2: tie, lower row first)
    hits = idx.retrieve(np.array([[1.0, 0.5]]), top_k=4)[0]
    assert [(k, row) for k, _, row in hits] == [(2, 2), (5, 5), (0, 0), (1, 1)]
    assert [w for _, w, _ in hits] == pytest.approx([1.5 / (1.25**0.5 * 2**0.5)] * 2 + [1 / 1.25**0.5, 0.5 / 1.25**0.5])
    assert [k for k, _, _ in idx.retrieve(np.array([[2.0, 1.0]]), threshold=0.5)[0]] == [2, 5, 0]  # scale-free
    assert idx.retrieve(np.array([[0.0, 0.0]]), top_k=2)[0] == [(0, 0.0, 0), (1, 0.0, 1)]  # zero query: all 0
    assert len(idx.retrieve(np.array([[1.0, 0.0]]), top_k=50)[0]) == 6


def test_flat_partial_fit_appends_and_starts_empty():
    idx = FlatIndex()
    assert idx.n_components_ == 0
    assert idx.partial_fit(np.array([0.0, 1.0]), 0) == {"component": 0, "born": False, "cause": None}
    assert idx.partial_fit(np.array([1.0, 0.0]), 1)["component"] == 1
    assert idx.labels_.tolist() == [0, 1] and idx.component_ids_.tolist() == [0, 1]
    assert idx.retrieve(np.array([[3.0, 0.1]]), top_k=1)[0][0][0] == 1
    assert FlatIndex().fit(np.zeros((0, 3))).retrieve(np.ones((2, 3))) == [[], []]
    with pytest.raises(ValueError, match="expected 2"):
        idx.partial_fit(np.zeros(3))


def test_flat_retrieval_in_chunks_matches_one_block(monkeypatch):
    rows, queries = _rows(50, seed=7), _rows(9, seed=8)
    idx = FlatIndex().fit(rows)
    whole = idx.retrieve(queries, top_k=4)
    monkeypatch.setattr(organisers, "_CHUNK_CELLS", 100)  # two queries per block
    chunked = idx.retrieve(queries, top_k=4)
    assert [[r for _, _, r in row] for row in chunked] == [[r for _, _, r in row] for row in whole]
    for got, want in zip(chunked, whole, strict=True):  # BLAS may round a differently shaped block differently
        assert [w for _, w, _ in got] == pytest.approx([w for _, w, _ in want], abs=1e-12)


# ------------------------------------------------------------------------------------------ random index


def test_random_is_deterministic_per_seed_and_query():
    rows = _rows(40, seed=9)
    idx = RandomIndex(seed=3).fit(rows)
    queries = _rows(10, seed=10)
    hits = idx.retrieve(queries, top_k=5)
    assert hits == idx.retrieve(queries, top_k=5) == RandomIndex(seed=3).fit(rows).retrieve(queries, top_k=5)
    assert idx.retrieve(queries[3:4], top_k=5)[0] == hits[3]  # a query's draw does not depend on the batch
    drawn = [tuple(r for _, _, r in row) for row in hits]
    assert all(len(set(d)) == 5 and list(d) == sorted(d) for d in drawn)  # k' distinct rows, listed in order
    assert len(set(drawn)) > 1  # different queries draw differently
    other = [tuple(r for _, _, r in row) for row in RandomIndex(seed=4).fit(rows).retrieve(queries, top_k=5)]
    assert other != drawn
    assert all(w == 1 / 40 for row in hits for _, w, _ in row)


def test_random_edge_cases():
    idx = RandomIndex().fit(np.eye(3))
    assert sorted(r for _, _, r in idx.retrieve(np.ones(3), top_k=10)[0]) == [0, 1, 2]
    with pytest.raises(ValueError, match="threshold is not supported"):
        idx.retrieve(np.ones(3), threshold=0.5)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        RandomIndex(seed=-1)
    assert RandomIndex().retrieve(np.ones((1, 2))) == [[]]


# ------------------------------------------------------------------------------------------ churn


def test_churn_by_hand():
    before = [0, 1, 1, 2, 0, 2]
    after = [0, 0, 2, 2, 0, 2, 9]  # a row inserted after the refit does not count
    out = churn(before, after)
    assert out["rows"] == 6 and out["changed"] == 2 and out["fraction"] == pytest.approx(1 / 3)
    assert out["before"] == [0, 1, 2] and out["after"] == [0, 2]
    assert out["matrix"] == [[2, 0], [1, 1], [0, 2]]
    assert out["entries"] == [[0, 0, 2], [1, 0, 1], [1, 2, 1], [2, 2, 2]]
    assert churn(before, after, max_dense=5)["matrix"] is None  # 3 x 2 cells > 5
    assert churn([], [])["fraction"] == 0.0 and churn([], [])["matrix"] == []
    with pytest.raises(ValueError, match="fewer than before_ids"):
        churn([1, 2], [1])


# ------------------------------------------------------------------ medoids
def _brute_sums(Y):
    return np.sqrt(((Y[:, None, :] - Y[None, :, :]) ** 2).sum(-1)).sum(1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_medoid_index_is_the_exact_medoid_in_any_cluster(seed):
    rng = np.random.default_rng(seed)
    Y = np.concatenate([rng.normal(size=(60, 4)), rng.standard_t(2, size=(15, 4)) * 4 + 3])  # skewed, heavy-tailed
    sums = _brute_sums(Y)
    assert medoids.medoid_index(Y) == int(np.argmin(sums))
    np.testing.assert_allclose(medoids.summed_distances(Y), sums, rtol=1e-9, atol=1e-9)
    # blocks smaller than the cluster give the same sums (the chunked path of a huge cluster)
    saved = medoids._CHUNK_CELLS
    try:
        medoids._CHUNK_CELLS = 7 * len(Y)
        np.testing.assert_allclose(medoids.summed_distances(Y), sums, rtol=1e-9, atol=1e-9)
    finally:
        medoids._CHUNK_CELLS = saved


def test_medoid_index_above_the_exact_size_searches_candidates_near_the_mean():
    rng = np.random.default_rng(5)
    Y = np.concatenate([rng.normal(size=(400, 8)), rng.normal(size=(40, 8)) + 6.0])
    exact = medoids.medoid_index(Y)
    approx = medoids.medoid_index(Y, exact_max=100, candidates=40)
    sums = _brute_sums(Y)
    assert sums[approx] <= sums[exact] * (1 + 1e-4)  # within 0.01% of the exact medoid's summed distance
    assert medoids.medoid_index(Y, exact_max=100, candidates=len(Y)) == exact  # every row a candidate: exact
    assert medoids.medoid_index(Y[:2]) == 0 and medoids.medoid_index(Y[:1]) == 0


def test_medoid_rows_falls_back_to_the_row_nearest_the_mean_without_members():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [100.0], [9.0]])
    got = medoids.medoid_rows(X, np.array([0, 0, 0, 0, 0, 1]), np.array([[21.2], [9.0], [50.0]]), [2, 0, 1])
    assert got == {2: 5, 0: 2, 1: 5}
