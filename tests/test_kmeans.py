"""Hard and soft k-means organisers: update rules, refits and retrieval on small hand-checked cases."""

import math

import numpy as np
import pytest

from metamod.memory.cheatsheet.kmeans import HardKMeans, SoftKMeans
from metamod.memory.cheatsheet.organisers import churn

# Three clusters in 2-D, fitted from a given start that is already a Lloyd fixed point:
# A = {a}, B = {b1, b2} (mean (0, 0)), C = {c}.
A, B1, B2, C = (-1.0, 1.1), (-1.0, 0.0), (1.0, 0.0), (1.0, 1.1)
X3 = np.array([A, B1, B2, C])
INIT3 = np.array([A, (0.0, 0.0), C])


def _blobs(seed=0, n=60, dim=4):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0] * dim, [8.0] * dim, [-8.0, 8.0] + [0.0] * (dim - 2)])
    truth = np.arange(n) % 3
    return centres[truth] + rng.normal(scale=0.5, size=(n, dim)), truth


# ------------------------------------------------------------------------------------------ hard k-means


def test_fit_from_a_fixed_point_keeps_it():
    km = HardKMeans(n_clusters=3).fit(X3, np.zeros(4, dtype=int), init=INIT3)
    assert km.labels_.tolist() == [0, 1, 1, 2]
    np.testing.assert_allclose(km.centroids_, INIT3)
    assert km.counts_.tolist() == [1.0, 2.0, 1.0]
    np.testing.assert_allclose(km.m2_, [0.0, 2.0, 0.0])
    # sigma_k^2 = S_k / (N_k D): 0, 2 / (2 * 2) = 0.5, 0 -> shared sigma^2 = 0.5 / 3 (singletons count as 0)
    assert km.sigma2_ == pytest.approx(0.5 / 3)
    assert km.component_ids_.tolist() == [0, 1, 2] and km.n_components_ == 3


def test_kmeans_plus_plus_fit_recovers_separated_blobs_and_is_reproducible():
    X, truth = _blobs()
    km = HardKMeans(n_clusters=3, seed=5).fit(X)
    again = HardKMeans(n_clusters=3, seed=5).fit(X)
    np.testing.assert_array_equal(km.centroids_, again.centroids_)
    # each fitted cluster is exactly one true blob
    pairs = {(int(a), int(b)) for a, b in zip(km.labels_, truth, strict=True)}
    assert len(pairs) == 3 and len({a for a, _ in pairs}) == 3
    # centroids are the means of their members
    for k in range(3):
        np.testing.assert_allclose(km.centroids_[k], X[km.labels_ == k].mean(axis=0))


def test_domains_are_ignored_but_length_checked():
    X, _ = _blobs()
    one = HardKMeans(n_clusters=3).fit(X, np.zeros(len(X), dtype=int))
    two = HardKMeans(n_clusters=3).fit(X, np.arange(len(X)) % 2)
    np.testing.assert_array_equal(one.centroids_, two.centroids_)
    with pytest.raises(ValueError, match="one int per row"):
        HardKMeans(n_clusters=3).fit(X, np.zeros(3, dtype=int))


def test_hard_online_update_moves_only_the_nearest_centroid_to_the_running_mean():
    km = HardKMeans(n_clusters=3).fit(X3, init=INIT3)
    before = km.centroids_.copy()
    # (-1, 0.7): squared distances 0.16 to A, 1.49 to B, 4.16 to C -> A; A's mean of {(-1, 1.1), (-1, 0.7)}
    assert km.partial_fit(np.array([-1.0, 0.7]), 0) == {"component": 0, "born": False, "cause": None}
    np.testing.assert_allclose(km.centroids_[0], [-1.0, 0.9])
    np.testing.assert_array_equal(km.centroids_[1:], before[1:])
    assert km.counts_.tolist() == [2.0, 2.0, 1.0]
    assert km.m2_[0] == pytest.approx(0.04 + 0.04)
    assert km.labels_.tolist() == [0, 1, 1, 2, 0] and len(km.X_) == 5


def test_lloyd_refit_reassigns_moved_points_and_removes_the_emptied_cluster():
    km = HardKMeans(n_clusters=3).fit(X3, init=INIT3)
    km.partial_fit(np.array([-1.0, 0.7]))  # -> A, now at (-1, 0.9)
    km.partial_fit(np.array([1.0, 0.7]))  # -> C, now at (1, 0.9)
    before = km.component_ids_[km.labels_].copy()
    assert before.tolist() == [0, 1, 1, 2, 0, 2]
    # b1 = (-1, 0) is now 0.81 from A but 1 from B; b2 likewise nearer C: B loses both members
    assert km.refit() == {"births": 0, "merges": 0, "removed": 1}
    assert km.component_ids_.tolist() == [0, 2]  # survivors keep their ids
    assert km.labels_.tolist() == [0, 0, 1, 1, 0, 1]
    np.testing.assert_allclose(km.centroids_, [[-1.0, 0.6], [1.0, 0.6]])  # means of {A, b1, (-1, .7)} and mirror
    np.testing.assert_allclose(km.m2_, [0.25 + 0.36 + 0.01] * 2)
    moved = churn(before, km.component_ids_[km.labels_])
    assert moved["changed"] == 2 and moved["fraction"] == pytest.approx(1 / 3)
    assert moved["before"] == [0, 1, 2] and moved["after"] == [0, 2]
    assert moved["matrix"] == [[2, 0], [1, 1], [0, 2]]
    # the next online row is assigned among the survivors
    assert km.partial_fit(np.array([0.9, 0.5]))["component"] == 1


def test_fewer_distinct_rows_than_clusters_gives_fewer_clusters():
    X = np.array([[0.0, 0.0]] * 3 + [[5.0, 5.0]] * 3)
    km = HardKMeans(n_clusters=5).fit(X)
    assert km.n_components_ == 2
    assert sorted(km.centroids_[:, 0].tolist()) == [0.0, 5.0]


def test_constructor_and_call_errors():
    with pytest.raises(ValueError, match="n_clusters must be an int >= 1"):
        HardKMeans(n_clusters=0)
    with pytest.raises(ValueError, match="fold_threshold"):
        SoftKMeans(n_clusters=2, fold_threshold=1.5)
    with pytest.raises(RuntimeError, match="not fitted"):
        HardKMeans(n_clusters=2).partial_fit(np.zeros(2))
    km = HardKMeans(n_clusters=2).fit(X3)
    with pytest.raises(ValueError, match="expected 2"):
        km.retrieve(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="top_k"):
        km.retrieve(np.zeros((1, 2)), top_k=0)
    with pytest.raises(ValueError, match="init has 3 centroids"):
        HardKMeans(n_clusters=2).fit(X3, init=INIT3)


# ------------------------------------------------------------------------------------------ retrieval

X5 = np.array([[-1.0], [0.5], [1.5], [9.0], [11.0]])


def test_retrieval_weights_order_threshold_and_medoids_by_hand():
    km = HardKMeans(n_clusters=2).fit(X5, init=np.array([[0.0], [10.0]]))
    # cluster 0 = {-1, .5, 1.5}: mean 1/3, variance (16/9 + 1/36 + 49/36) / 3 = 19/18; cluster 1: mean 10, var 1
    assert km.centroids_.ravel() == pytest.approx([1 / 3, 10.0])
    s2 = (19 / 18 + 1.0) / 2
    assert km.sigma2_ == pytest.approx(s2)
    logits = [-((5 - 1 / 3) ** 2) / (2 * s2), -(25.0) / (2 * s2)]
    w0 = 1.0 / (1.0 + math.exp(logits[1] - logits[0]))
    hits = km.retrieve(np.array([[5.0], [9.5]]), top_k=5)
    # medoid of cluster 0: 0.5 (row 1) is nearest to 1/3; cluster 1: 9 and 11 tie -> the lower row (3)
    assert [(k, row) for k, _, row in hits[0]] == [(0, 1), (1, 3)]
    assert hits[0][0][1] == pytest.approx(w0) and hits[0][1][1] == pytest.approx(1 - w0)
    assert [k for k, _, _ in hits[1]] == [1, 0]  # order follows the weights
    assert km.retrieve(np.array([[9.5]]), top_k=1)[0] == [hits[1][0]]
    # threshold keeps every component with weight >= tau (and may keep none)
    w1 = hits[0][1][1]
    assert [k for k, _, _ in km.retrieve(np.array([[5.0]]), threshold=w1)[0]] == [0, 1]
    assert [k for k, _, _ in km.retrieve(np.array([[5.0]]), threshold=w1 + 1e-9)[0]] == [0]
    assert km.retrieve(np.array([[5.0]]), threshold=0.999999)[0] == []
    np.testing.assert_allclose(km.weights(np.array([[5.0]])).sum(axis=1), 1.0)


def test_equal_weights_rank_the_lower_component_first():
    km = HardKMeans(n_clusters=2).fit(np.array([[-1.0], [1.0], [9.0], [11.0]]), init=np.array([[0.0], [10.0]]))
    assert [(k, w) for k, w, _ in km.retrieve(np.array([[5.0]]))[0]] == [(0, 0.5), (1, 0.5)]


def test_singleton_clusters_use_the_variance_floor():
    km = HardKMeans(n_clusters=2, min_variance=1.0).fit(np.array([[0.0], [1.0]]))
    assert km.sigma2_ == 1.0  # both clusters are singletons (variance 0): the floor
    w = km.weights(np.array([[0.4]]))[0]
    near = int(np.argmin(np.abs(km.centroids_.ravel() - 0.4)))
    expected = 1.0 / (1.0 + math.exp(-(0.36 - 0.16) / 2.0))
    assert w[near] == pytest.approx(expected)
    tight = HardKMeans(n_clusters=2).fit(np.array([[0.0], [1.0]]))
    assert tight.sigma2_ == 1e-6 and np.isfinite(tight.weights(np.array([[0.4]]))).all()


def test_medoid_follows_the_online_members():
    km = HardKMeans(n_clusters=2).fit(X5, init=np.array([[0.0], [10.0]]))
    assert km.medoids().tolist() == [1, 3]
    km.partial_fit(np.array([12.0]))  # cluster 1 = {9, 11, 12}: summed distances 5, 3, 4 -> 11 (row 4)
    assert km.medoids().tolist() == [1, 4]
    assert km.retrieve(np.array([[10.0]]), top_k=1)[0][0][2] == 4


def test_medoid_minimises_the_summed_distance_not_the_distance_to_the_mean():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [40.0], [100.0], [101.0]])
    km = HardKMeans(n_clusters=2).fit(X, init=np.array([[9.2], [100.5]]))
    assert km.labels_.tolist() == [0, 0, 0, 0, 0, 1, 1]
    # cluster 0 = {0, 1, 2, 3, 40}: mean 9.2, nearest member 3 (row 3); summed distances 46, 43, 42, 43, 154 -> row 2
    assert km.medoids().tolist() == [2, 5]
    soft = SoftKMeans(n_clusters=2, em_iter=0).fit(X, init=np.array([[9.2], [100.5]]))
    assert soft.medoids().tolist() == [2, 5]


# ------------------------------------------------------------------------------------------ soft k-means

X4 = np.array([[-1.0], [1.0], [9.0], [11.0]])
INIT2 = np.array([[0.0], [10.0]])


def test_soft_responsibilities_by_hand():
    km = SoftKMeans(n_clusters=2, em_iter=0).fit(X4, init=INIT2)
    assert km.sigma2_ == 1.0  # the hard start: both clusters have variance 1
    r = km.responsibilities(np.array([[4.0], [5.0]]))
    # x = 4: squared distances 16 and 36 -> logits -8 and -18
    assert r[0, 0] == pytest.approx(1 / (1 + math.exp(-10))) and r[0, 1] == pytest.approx(
        math.exp(-10) / (1 + math.exp(-10))
    )
    assert r[1].tolist() == [0.5, 0.5]


def test_soft_fold_is_responsibility_weighted_and_skips_tiny_responsibilities():
    km = SoftKMeans(n_clusters=2, em_iter=0).fit(X4, init=INIT2)
    # x = 5 has responsibility 1/2 for both: N_k = 2.5, mu = (0 + 2.5) / 2.5 = 1 and 9,
    # S_0 = (-1 - 1)^2 + (1 - 1)^2 + 0.5 (5 - 1)^2 = 12 (same for cluster 1)
    assert km.partial_fit(np.array([5.0]), 1) == {"component": 0, "born": False, "cause": None}
    assert km.counts_.tolist() == [2.5, 2.5]
    np.testing.assert_allclose(km.centroids_.ravel(), [1.0, 9.0])
    np.testing.assert_allclose(km.m2_, [12.0, 12.0])
    assert km.sigma2_ == pytest.approx(12 / 2.5)
    # x = -30: logits differ by (1521 - 961) / (2 * 4.8) = 58.3 -> responsibility e^-58 < 1e-6 for cluster 1
    c1, n1, s1 = km.centroids_[1].copy(), km.counts_[1], km.m2_[1]
    assert km.partial_fit(np.array([-30.0]))["component"] == 0
    assert km.centroids_[1] == c1 and km.counts_[1] == n1 and km.m2_[1] == s1  # untouched
    assert km.centroids_[0, 0] == pytest.approx((-1 + 1 + 2.5 - 30) / 3.5)
    assert km.counts_[0] == pytest.approx(3.5)


def test_one_soft_em_step_equals_the_hand_computation():
    X = np.array([[-1.0], [1.0], [3.0], [5.0]])
    km = SoftKMeans(n_clusters=2, em_iter=0).fit(X, init=np.array([[0.0], [4.0]]))
    assert km.sigma2_ == 1.0
    # E step (sigma^2 = 1): logits -d^2/2 -> r_0 = a, b, 1-b, 1-a with a = 1/(1+e^-12), b = 1/(1+e^-4)
    a, b = 1 / (1 + math.exp(-12)), 1 / (1 + math.exp(-4))
    r0 = np.array([a, b, 1 - b, 1 - a])
    mu0 = float(r0 @ X[:, 0]) / 2.0  # N_0 = 2 by symmetry
    assert mu0 == pytest.approx(4 - 3 * a - b)
    s0 = float(r0 @ (X[:, 0] - mu0) ** 2)
    assert km.refit() == {"births": 0, "merges": 0, "removed": 0}
    np.testing.assert_allclose(km.counts_, [2.0, 2.0])
    np.testing.assert_allclose(km.centroids_.ravel(), [mu0, 4 - mu0])
    np.testing.assert_allclose(km.m2_, [s0, s0])
    assert km.sigma2_ == pytest.approx(s0 / 2)  # mean of the per-cluster variances S_k / N_k
    assert km.labels_.tolist() == [0, 0, 1, 1]


def test_soft_em_removes_a_cluster_without_responsibility():
    X = np.array([[0.0], [0.2], [0.4]])
    km = SoftKMeans(n_clusters=2, em_iter=0).fit(X, init=np.array([[0.2], [50.0]]))
    assert km.n_components_ == 1  # the far start is empty already in the hard start
    km2 = SoftKMeans(n_clusters=2, em_iter=0).fit(np.array([[0.0], [0.2], [0.4], [3.0]]), init=np.array([[0.2], [3.0]]))
    km2.centroids_[1] = [1e4]  # push cluster 1 out of reach: every responsibility for it underflows
    assert km2.refit()["removed"] == 1 and km2.component_ids_.tolist() == [0]


def test_soft_fit_runs_em_to_a_fixed_point():
    X, truth = _blobs(seed=2)
    km = SoftKMeans(n_clusters=3, seed=1).fit(X)
    centres = km.centroids_.copy()
    km.refit()
    assert np.max(np.abs(km.centroids_ - centres)) < 1e-5
    assert len({(int(a), int(b)) for a, b in zip(km.labels_, truth, strict=True)}) == 3


# ------------------------------------------------------------------------------------------ persistence


@pytest.mark.parametrize("cls", [HardKMeans, SoftKMeans])
def test_state_round_trip_gives_identical_retrieval_and_updates(cls):
    X, _ = _blobs(seed=3)
    rng = np.random.default_rng(9)
    km = cls(n_clusters=3, seed=4).fit(X[:40])
    for row in X[40:50]:
        km.partial_fit(row)
    queries = rng.normal(scale=4.0, size=(6, X.shape[1]))
    first = km.retrieve(queries, top_k=2)  # fills the medoid cache of the original only
    again = cls.from_state_arrays(km.state_arrays(), **km.get_params())
    assert again.retrieve(queries, top_k=2) == first
    for row in X[50:]:
        assert again.partial_fit(row) == km.partial_fit(row)
    np.testing.assert_array_equal(again.centroids_, km.centroids_)
    assert again.refit() == km.refit()
    np.testing.assert_array_equal(again.labels_, km.labels_)
    assert again.retrieve(queries, threshold=0.1) == km.retrieve(queries, threshold=0.1)


def test_state_arrays_are_checked():
    km = HardKMeans(n_clusters=2).fit(X4)
    arrays = km.state_arrays()
    del arrays["m2"]
    with pytest.raises(ValueError, match="lacks arrays \\['m2'\\]"):
        HardKMeans.from_state_arrays(arrays, **km.get_params())
    arrays = km.state_arrays()
    arrays["labels"] = np.array([0, 1, 5, 0])
    with pytest.raises(ValueError, match="labels must be 4 ints in \\[0, 2\\)"):
        HardKMeans.from_state_arrays(arrays, **km.get_params())


@pytest.mark.parametrize("cls", [HardKMeans, SoftKMeans])
def test_a_querys_retrieval_does_not_depend_on_its_batch(cls):
    X, _ = _blobs(seed=4)
    km = cls(n_clusters=3).fit(X)
    queries = np.random.default_rng(1).normal(scale=4.0, size=(7, X.shape[1]))
    batch = km.retrieve(queries, top_k=3)
    assert [km.retrieve(q[None, :], top_k=3)[0] for q in queries] == batch
