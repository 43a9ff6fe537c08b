"""HDP-GMM numerics (metamod/memory/hdp/model.py, hdp/stats.py): statistics, predictive, sampler, online, retrieval.

The compiled kernels (hdp/kernel.py) are checked against the numpy reference in tests/_hdp_reference.py."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import pytest
from scipy.stats import multivariate_t
from sklearn.metrics import adjusted_rand_score

from metamod.memory.hdp import HDPGMM
from metamod.memory.hdp import kernel as hdp_kernel
from metamod.memory.hdp.query import rank_logits
from metamod.memory.hdp.stats import NIWComponents, Rank1, gaussian_sym_kl, n_features, quad_features
from tests import _hdp_reference as ref


def blobs(n=300, dim=6, k=5, spread=8.0, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, spread, (k, dim))
    labels = rng.integers(0, k, n)
    X = means[labels] + scale * rng.normal(size=(n, dim))
    return X, labels, (labels % 2).astype(np.int64), means


@pytest.fixture(scope="module")
def fitted():
    X, labels, doms, means = blobs()
    return HDPGMM(sweeps=15, burn_in=5, seed=0).fit(X, doms), X, labels, doms, means


def consistent(model: HDPGMM, X: np.ndarray, doms: np.ndarray) -> None:
    z, K = model.labels_, model.n_components_
    assert z.min() >= 0 and z.max() < K
    np.testing.assert_array_equal(
        model._ndk[:, :K], np.array([np.bincount(z[doms == d], minlength=K) for d in range(model.n_domains_)])
    )
    np.testing.assert_allclose(model.comps.n[:K], np.bincount(z, minlength=K))
    Xc = X - model.mu0_
    for k in range(K):
        m = Xc[z == k]
        np.testing.assert_allclose(model.comps.S1[k], m.sum(0), atol=1e-8)
        np.testing.assert_allclose(model.comps.S2[k], m.T @ m, atol=1e-7)


# ------------------------------------------------------------------ statistics
def test_stats_add_remove_round_trip_and_fresh_factor():
    rng = np.random.default_rng(1)
    psi0 = np.eye(4) * 2.0
    comps = NIWComponents(dim=4, kappa0=0.5, nu0=7.0, psi0=psi0, dtype=np.float64)
    k = comps.new_slot()
    X = rng.normal(size=(10, 4))
    for x, w in zip(X, np.linspace(0.2, 1.0, 10), strict=True):
        comps.add(k, x, w)
    snapshot = comps.S2[k].copy()
    extra = rng.normal(size=4)
    comps.add(k, extra, 0.3)
    comps.remove(k, extra, 0.3)
    np.testing.assert_allclose(comps.S2[k], snapshot, atol=1e-12)
    w = np.linspace(0.2, 1.0, 10)
    kappa = 0.5 + w.sum()
    mu = (w[:, None] * X).sum(0) / kappa
    psi = psi0 + (w[:, None, None] * np.einsum("ni,nj->nij", X, X)).sum(0) - kappa * np.outer(mu, mu)
    np.testing.assert_allclose(comps.mu[k], mu, atol=1e-12)
    assert comps.updates[k] > 0  # the precision below came from Sherman-Morrison updates / downdates
    np.testing.assert_allclose(comps.prec[k], np.linalg.inv(psi), atol=1e-10)
    np.testing.assert_allclose(comps.logdet[k], np.linalg.slogdet(psi)[1], atol=1e-10)
    for x, wi in zip(X, w, strict=True):
        comps.remove(k, x, wi)
    assert comps.n[k] == 0.0
    np.testing.assert_allclose(comps.prec[k], np.linalg.inv(psi0), atol=1e-10)


def test_rank1_record_updates_other_points_quadratic_forms():
    rng = np.random.default_rng(2)
    comps = NIWComponents(dim=5, kappa0=0.3, nu0=9.0, psi0=np.eye(5) * 1.5, dtype=np.float64)
    k = comps.new_slot()
    for x in rng.normal(size=(8, 5)):
        comps.add(k, x)
    Y = rng.normal(0, 2, size=(30, 5))
    for w in (1.0, -1.0, 0.4):
        x = rng.normal(size=5) if w > 0 else comps.mu[k] + 0.3
        before = comps.quad_exact(Y, [k])[0]
        change = comps.add(k, x, w)
        assert isinstance(change, Rank1)
        np.testing.assert_allclose(change.apply(before, Y), comps.quad_exact(Y, [k])[0], rtol=1e-10)
        np.testing.assert_allclose(comps.prec[k], np.linalg.inv(comps.psi(k)), atol=1e-10)


def test_rank1_updates_between_refactorisations_do_not_drift():
    rng = np.random.default_rng(7)
    D = 24
    A = rng.normal(size=(D, D)) / np.sqrt(D)
    cov = A @ A.T + 0.1 * np.eye(D)
    comps = NIWComponents(dim=D, kappa0=1.0, nu0=2 * D + 2, psi0=cov * (D + 1), dtype=np.float64)
    X = rng.normal(size=(400 + comps.refresh_every, D)) @ np.linalg.cholesky(cov).T
    k = comps.new_slot()
    for x in X[:400]:
        comps.add(k, x)
    comps.refresh(k)
    live, fresh = deque((j, 1.0) for j in range(400)), iter(range(400, len(X)))
    for t in range(comps.refresh_every - 1):  # the most changes a slot takes before it is refactorised
        if t % 2:  # add a new row with weight 0.5, or remove the oldest live row with its weight
            live.append((next(fresh), 0.5))
            comps.add(k, X[live[-1][0]], 0.5)
        else:
            j, w = live.popleft()
            comps.remove(k, X[j], w)
    assert comps.updates[k] == comps.refresh_every - 1 and comps.n[k] > 150
    P, logdet = comps.prec[k].copy(), comps.logdet[k]
    comps.refresh(k)
    np.testing.assert_allclose(P, comps.prec[k], rtol=0, atol=1e-12 * np.abs(P).max())
    assert abs(logdet - comps.logdet[k]) < 1e-10


def test_packed_quadratic_features_equal_the_exact_form():
    rng = np.random.default_rng(21)
    for dim in (3, 37):
        comps = NIWComponents(dim=dim, kappa0=0.2, nu0=dim + 4.0, psi0=np.eye(dim), dtype=np.float64)
        for _ in range(3):
            k = comps.new_slot()
            for x in rng.normal(k, 1, size=(dim + 5, dim)):
                comps.add(k, x)
        for n in (1, 5, 40):
            Y = rng.normal(size=(n, dim))
            np.testing.assert_allclose(comps.quad_packed(quad_features(Y)), comps.quad_exact(Y), rtol=1e-9)
        comps.add(1, rng.normal(size=dim))  # a change repacks only that slot's coefficients
        assert comps.stale[:3].tolist() == [False, True, False]
        np.testing.assert_allclose(comps.quad_packed(quad_features(Y)), comps.quad_exact(Y), rtol=1e-9)
        packed = ref.pack_coefficients(comps, np.arange(3))  # the compiled packing: the numpy reference's values
        np.testing.assert_allclose(comps.coefficients(3), packed, rtol=1e-12, atol=1e-12 * np.abs(packed).max())


def test_loo_formula_matches_explicit_removal():
    rng = np.random.default_rng(3)
    comps = NIWComponents(dim=5, kappa0=0.1, nu0=8.0, psi0=np.eye(5), dtype=np.float64)
    k = comps.new_slot()
    X = rng.normal(size=(12, 5))
    for x in X:
        comps.add(k, x)
    x = X[4]
    q = comps.quad_exact(x[None], [k])[0, 0]
    kappa = 0.1 + 12
    q_loo, dlog = ref.loo_quadratic(np.array([q]), np.array([kappa / (kappa - 1.0)]))
    logdet_full = comps.logdet[k]
    comps.remove(k, x)
    np.testing.assert_allclose(q_loo[0], comps.quad_exact(x[None], [k])[0, 0], rtol=1e-9)
    np.testing.assert_allclose(logdet_full + dlog[0], comps.logdet[k], rtol=1e-9)


def test_gaussian_sym_kl_against_closed_form():
    rng = np.random.default_rng(4)
    A, B = rng.normal(size=(2, 3, 3))
    covs = np.stack([A @ A.T + np.eye(3), B @ B.T + np.eye(3)])
    mu = rng.normal(size=(2, 3))
    precs = np.linalg.inv(covs)
    logdets = np.linalg.slogdet(covs)[1]

    def kl(i, j):
        diff = mu[j] - mu[i]
        return 0.5 * (np.trace(precs[j] @ covs[i]) + diff @ precs[j] @ diff - 3 + logdets[j] - logdets[i])

    got = gaussian_sym_kl(mu, covs, precs, logdets)
    np.testing.assert_allclose(got[0, 1], kl(0, 1) + kl(1, 0), rtol=1e-10)  # the sum of both directions
    np.testing.assert_allclose(np.diag(got), 0.0, atol=1e-10)


# ------------------------------------------------------------------ predictive
def test_log_predictive_matches_scipy_student_t(fitted):
    model, X, *_ = fitted
    rng = np.random.default_rng(5)
    Y = rng.normal(0, 6, size=(20, X.shape[1]))
    got = model.log_predictive(Y)
    K, D = model.n_components_, model.dim_
    assert got.shape == (20, K + 1)
    for k in range(K):
        mu, kappa, nu, psi = model.component_posterior(k)
        df = nu - D + 1
        ref = multivariate_t(loc=mu, shape=psi * (kappa + 1) / (kappa * df), df=df).logpdf(Y)
        np.testing.assert_allclose(got[:, k], ref, atol=1e-8, rtol=0)
    df0 = model.nu0_ - D + 1
    prior = multivariate_t(loc=model.mu0_, shape=model.psi0_ * (model.kappa0_ + 1) / (model.kappa0_ * df0), df=df0)
    np.testing.assert_allclose(got[:, K], prior.logpdf(Y), atol=1e-8, rtol=0)


# ------------------------------------------------------------------ sampler
def test_sweep_keeps_counts_and_statistics_consistent(fitted):
    model, X, _, doms, _ = fitted
    consistent(model, X, doms)
    X2, _, doms2, _ = blobs(n=200, spread=2.0, seed=7)  # overlapping: many moves
    for flat in (False, True):
        m = HDPGMM(sweeps=5, burn_in=0, seed=1, flat=flat, block=16).fit(X2, doms2)
        assert sum(h["moves"] for h in m.history_[1:]) > 0
        consistent(m, X2, doms2)


def test_blocked_sweep_equals_point_by_point_sweep():
    X, _, doms, _ = blobs(n=150, spread=2.5, seed=8)
    for flat in (True, False):  # the hierarchy also draws beta splits inside sweeps (births, re-splits)
        kw = dict(sweeps=4, burn_in=0, seed=3, flat=flat, dtype="float64", init_size=30)
        a = HDPGMM(block=64, **kw).fit(X, doms)
        b = HDPGMM(block=1, **kw).fit(X, doms)
        assert sum(h["moves"] for h in a.history_[1:]) > 0
        np.testing.assert_array_equal(a.labels_, b.labels_)
        np.testing.assert_allclose(a.comps.prec[: a.n_components_], b.comps.prec[: b.n_components_], atol=1e-9)


def test_compiled_chain_equals_the_numpy_reference_chain(monkeypatch):
    X, _, doms, _ = blobs(n=300, spread=2.5, seed=8)
    for flat in (True, False):
        kw = dict(sweeps=5, burn_in=0, seed=3, flat=flat, dtype="float64", init_size=40, block=128)
        a = HDPGMM(**kw).fit(X, doms)
        with monkeypatch.context() as patch:
            ref.use_reference(patch)
            b = HDPGMM(**kw).fit(X, doms)
        assert sum(h["moves"] for h in a.history_[1:]) > 20
        assert [h["moves"] for h in a.history_] == [h["moves"] for h in b.history_]
        np.testing.assert_array_equal(a.labels_, b.labels_)
        K = a.n_components_
        np.testing.assert_allclose(a.comps.prec[:K], b.comps.prec[:K], atol=1e-10)
        np.testing.assert_allclose(a.comps.logdet[:K], b.comps.logdet[:K], atol=1e-10)
        consistent(a, X, doms)
    a32 = HDPGMM(sweeps=3, seed=1).fit(X, doms)  # float32 GEMM: statistics stay consistent
    consistent(a32, X, doms)


def test_kernel_option_names_the_compiled_kernels_only(fitted):
    """The option takes "auto" and "numba", both the compiled kernels (recorded as given); "numpy", the removed
    path, is refused by the constructor and loads as "auto" from a saved state that recorded it."""
    model, X, *_ = fitted
    assert HDPGMM(kernel="numba").get_params()["kernel"] == "numba" and model.get_params()["kernel"] == "auto"
    for bad in ("numpy", "cuda"):
        with pytest.raises(ValueError, match=rf"^kernel='{bad}': expected one of \('auto', 'numba'\)"):
            HDPGMM(kernel=bad)
    arrays = model.state_arrays()
    saved = json.loads(bytes(arrays["params"]).decode())
    arrays["params"] = np.frombuffer(json.dumps({**saved, "kernel": "numpy"}).encode(), dtype=np.uint8)
    for loaded in (HDPGMM.from_state_arrays(arrays), HDPGMM.from_state_arrays(model.state_arrays(), kernel="numpy")):
        assert loaded.kernel == "auto" and loaded.retrieve(X[:5]) == model.retrieve(X[:5])


def test_uncached_features_give_the_same_chain():
    X, _, doms, _ = blobs(n=260, spread=2.5, seed=4)
    kw = dict(sweeps=4, burn_in=0, seed=2, dtype="float64", init_size=50, block=100)
    cached = HDPGMM(**kw).fit(X, doms)
    uncached = HDPGMM(feature_cache_gb=0.0, **kw).fit(X, doms)  # features built per block, rows gathered
    assert cached._store.cached == len(X) and uncached._store.cached == 0
    np.testing.assert_array_equal(cached.labels_, uncached.labels_)
    with pytest.raises(ValueError, match="feature_cache_gb"):
        HDPGMM(feature_cache_gb=-1)


def _always_replay(monkeypatch) -> None:
    """Blocks replay the logged changes whenever they can (the cost rule's weights zeroed)."""
    from metamod.memory.hdp import forms as hdp_forms

    monkeypatch.setattr(hdp_forms, "REPLAY_COST", 0.0)
    monkeypatch.setattr(hdp_forms, "STALE_COST", 0.0)


def _carried(monkeypatch, X, doms, **kw):
    """A fit with the forms carried between sweeps and always replayed."""
    _always_replay(monkeypatch)
    return HDPGMM(replay_forms=True, **kw).fit(X, doms)


@pytest.mark.parametrize("reference", [False, True], ids=["compiled", "reference"])
def test_replayed_forms_equal_recomputed_forms(monkeypatch, reference):
    """After sweeps with moves, births and compactions, every block's replayed forms equal forms computed afresh
    from the current components (float64); compiled, and through the numpy reference."""
    from metamod.memory.hdp import forms as hdp_forms

    if reference:
        ref.use_reference(monkeypatch)
    _always_replay(monkeypatch)
    # overlapping clusters and large concentrations: moves, births, emptied slots and K past the first 16 rows
    X, _, doms, _ = blobs(n=500, k=30, spread=2.0, seed=5)
    kw = dict(gamma=50.0, alpha=20.0, dtype="float64", block=50, init_size=40)
    model = HDPGMM(sweeps=0, seed=4, **kw).fit(X, doms)
    cache = model._form_cache = hdp_forms.FormCache(
        rows=len(X), dim=X.shape[1], dtype=np.float64, slots=model.comps.n.shape[0]
    )
    remaps = []
    real_remap = cache.remap
    monkeypatch.setattr(cache, "remap", lambda alive: (remaps.append(len(alive)), real_remap(alive)))
    moves = births = 0
    for _ in range(4):
        m, b = model._sweep()
        moves, births = moves + m, births + b
    K, store = model.comps.size, model._store
    assert moves > 50 and births > 0 and remaps and cache.replayed > 0
    assert K > 16 and cache.values.shape[0] >= K
    for start in range(0, store.count, 50):
        stop = min(start + 50, store.count)
        Y = store.centred(start, stop, model._Xc64)
        assert cache.replay(start, stop, Y, model.comps)
        np.testing.assert_allclose(cache.forms_of(start, stop, K), model.comps.quad_exact(Y), rtol=1e-9, atol=1e-12)
    assert int(cache.count[0]) == 0 or cache.base > 0  # trimmed after each sweep


@pytest.mark.parametrize("reference", [False, True], ids=["compiled", "reference"])
def test_carried_forms_give_the_recomputed_chain(monkeypatch, reference):
    if reference:
        ref.use_reference(monkeypatch)
    X, _, doms, _ = blobs(n=300, spread=2.5, seed=8)
    base = dict(sweeps=5, burn_in=0, seed=3, dtype="float64", init_size=40, block=64)
    for extra in ({"flat": False}, {"flat": True}, {"gamma": 50.0, "alpha": 20.0}):  # the last: K grows past 16
        kw = {**base, **extra}
        carried = _carried(monkeypatch, X, doms, **kw)
        recomputed = HDPGMM(replay_forms=False, **kw).fit(X, doms)
        assert sum(h["replayed"] for h in carried.history_[1:]) > 0
        assert all(h["replayed"] == 0 for h in recomputed.history_)
        assert [h["moves"] for h in carried.history_] == [h["moves"] for h in recomputed.history_]
        np.testing.assert_array_equal(carried.labels_, recomputed.labels_)
        assert carried._form_cache is None  # dropped after the fit
        consistent(carried, X, doms)
    float32 = _carried(monkeypatch, X, doms, sweeps=4, seed=1)  # float32 replay: statistics consistent
    consistent(float32, X, doms)


def test_state_saved_before_the_precision_form_still_loads(fitted):
    model, X, *_ = fitted
    arrays = model.state_arrays()
    K = model.n_components_
    old = {k: v for k, v in arrays.items() if k not in ("prec", "scan", "online_rng_state")}
    old["winv"] = np.stack([np.linalg.inv(np.linalg.cholesky(model.comps.psi(k))) for k in range(K)])
    loaded = HDPGMM.from_state_arrays(old)
    np.testing.assert_allclose(loaded.comps.prec[:K], model.comps.prec[:K], rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(loaded._store.scan, np.arange(len(X)))
    assert [[k for k, _, _ in hit] for hit in loaded.retrieve(X[:10])] == [
        [k for k, _, _ in hit] for hit in model.retrieve(X[:10])
    ]
    loaded.partial_fit(X[0], 0)
    loaded.refit()


def test_reproducible_by_seed_and_seeds_differ():
    X, _, doms, _ = blobs(n=200, spread=2.0, seed=9)
    a = HDPGMM(sweeps=5, burn_in=0, seed=11).fit(X, doms)
    b = HDPGMM(sweeps=5, burn_in=0, seed=11).fit(X, doms)
    c = HDPGMM(sweeps=5, burn_in=0, seed=12).fit(X, doms)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert [h["loglik"] for h in a.history_] == [h["loglik"] for h in b.history_]
    assert [h["loglik"] for h in a.history_] != [h["loglik"] for h in c.history_]


def test_recovers_well_separated_clusters_with_default_prior():
    X, labels, doms, _ = blobs(n=400, dim=16, k=8, spread=6.0, seed=10)
    model = HDPGMM(sweeps=20, burn_in=10, seed=0).fit(X, doms)
    assert adjusted_rand_score(labels, model.labels_) > 0.9


def test_paper_preset_exists_and_differs(fitted):
    model, X, _, doms, _ = fitted
    paper = HDPGMM(sweeps=0, prior="paper").fit(X, doms)
    np.testing.assert_allclose(paper.psi0_, 1.2 * np.cov(X, rowvar=False) + 1e-9 * np.eye(X.shape[1]))
    assert paper.nu0_ == X.shape[1] + 2
    assert not np.allclose(paper.psi0_, model.psi0_)
    with pytest.raises(ValueError, match="prior="):
        HDPGMM(prior="flat")


# ------------------------------------------------------------------ refit and merge
def constructed(X, labels, doms, **params):
    """A model whose state holds the given hard labels (through the public persistence API)."""
    base = HDPGMM(sweeps=0, **params).fit(X, doms)
    arrays = {k: v for k, v in base.state_arrays().items() if k not in ("prec", "logdet", "updates")}
    K = int(labels.max()) + 1
    Xc = X - base.mu0_
    arrays.update(
        labels=labels,
        component_ids=np.arange(K),
        next_id=np.array(K),
        n=np.bincount(labels, minlength=K).astype(float),
        S1=np.stack([Xc[labels == k].sum(0) for k in range(K)]),
        S2=np.stack([Xc[labels == k].T @ Xc[labels == k] for k in range(K)]),
        n_dk=np.stack([np.bincount(labels[doms == d], minlength=K) for d in range(2)]),
        m_dk=np.ones((2, K), dtype=np.int64),
        beta=np.full(K, 0.9 / K),
        beta_u=np.array(0.1),
    )
    return HDPGMM.from_state_arrays(arrays)


def test_refit_merges_near_duplicates_and_keeps_distinct_components():
    rng = np.random.default_rng(12)
    X = rng.normal(size=(2000, 3))
    doms = rng.integers(0, 2, 2000)
    halves = (np.arange(2000) % 2).astype(np.int64)
    model = constructed(X, halves, doms, merge_eps=0.1, prior="paper")
    out = model.refit()
    assert out["merges"] == 1 and model.n_components_ == 1 and model.merges_ == 1
    consistent(model, X, doms)
    X2 = np.concatenate([X[:1000], X[1000:] + 20.0])
    truth = np.repeat([0, 1], 1000)
    model = constructed(X2, truth, doms, merge_eps=0.1, prior="paper")
    out = model.refit()
    assert out == {"births": 0, "merges": 0, "removed": 0} and model.n_components_ == 2
    np.testing.assert_array_equal(model.labels_, truth)


def test_merge_threshold_applies_to_the_sum_of_both_kl_directions():
    """eps = 0.1 bounds KL01 + KL10: a pair at sum 0.15 (mean 0.075) stays apart; eps = 0.2 (the mean rule) merges it."""
    from metamod.memory.hdp.stats import posterior_gaussians
    from metamod.memory.hdp.sweep import greedy_merge

    rng = np.random.default_rng(3)
    Z = rng.normal(size=(3000, 3))
    Z = (Z - Z.mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(Z, rowvar=False))).T  # mean 0, covariance I
    X = np.concatenate([Z, Z + np.array([np.sqrt(0.15), 0.0, 0.0])])
    labels = np.repeat([0, 1], 3000)
    doms = np.tile([0, 1], 3000)
    model = constructed(X, labels, doms, merge_eps=0.1, prior="paper")
    total = gaussian_sym_kl(*posterior_gaussians(model.comps, model.nu0_))[0, 1]
    assert 0.1 < total < 0.2  # the old 0.5 (KL01 + KL10) would be below eps
    assert greedy_merge(model) == 0 and model.n_components_ == 2
    model.merge_eps = 0.2
    assert greedy_merge(model) == 1 and model.n_components_ == 1
    consistent(model, X, doms)


# ------------------------------------------------------------------ online
def test_novelty_birth_for_outlier_not_for_inlier(fitted):
    model = HDPGMM.from_state_arrays(fitted[0].state_arrays())
    X, labels, _, means = fitted[1:]
    K = model.n_components_
    inlier = model.partial_fit(means[labels[0]] + 0.1, domain=0)
    assert inlier["born"] is False and inlier["cause"] is None
    assert inlier["component"] == model.labels_[0] and model.n_components_ == K
    out = model.partial_fit(np.full(X.shape[1], 200.0), domain=1)
    assert out == {**out, "born": True, "cause": "novelty", "component": K}
    assert model.births_ == {"novelty": 1, "sample": 0, "refit": 0} and model.n_components_ == K + 1
    assert model.component_ids_[K] > max(fitted[0].component_ids_)  # a never-used id
    assert model.labels_[-1] == K and len(model.labels_) == len(X) + 2


def test_bernoulli_birth_mode_is_reproducible(fitted):
    arrays = fitted[0].state_arrays()
    rng = np.random.default_rng(13)
    rows = np.concatenate([fitted[1][:5] + 0.5, rng.normal(0, 30, (5, fitted[1].shape[1]))])
    runs = []
    for _ in range(2):
        model = HDPGMM.from_state_arrays(arrays, birth="sample")
        runs.append([model.partial_fit(x, i % 2) for i, x in enumerate(rows)])
    assert runs[0] == runs[1]
    assert {r["cause"] for r in runs[0] if r["born"]} == {"sample"}


def test_insert_fast_path_equals_refactorising_every_change(fitted):
    arrays = fitted[0].state_arrays()
    fast, slow = HDPGMM.from_state_arrays(arrays), HDPGMM.from_state_arrays(arrays)
    slow.comps.refresh_every = 0  # every change refactors Psi_n from the statistics (LAPACK), no rank-1 updates
    rng = np.random.default_rng(22)
    rows = np.concatenate(
        [fitted[1][:12] + rng.normal(0, 0.5, (12, fitted[1].shape[1])), np.full((1, fitted[1].shape[1]), 150.0)]
    )
    for i, x in enumerate(rows):
        a, b = fast.partial_fit(x, i % 2), slow.partial_fit(x, i % 2)
        assert (a["component"], a["born"], a["cause"]) == (b["component"], b["born"], b["cause"])
        np.testing.assert_allclose(a["rho_new"], b["rho_new"], rtol=1e-9, atol=1e-300)
    K = fast.n_components_
    assert fast.comps.updates[:K].max() > 0 and slow.comps.updates[:K].max() == 0
    np.testing.assert_allclose(fast.comps.prec[:K], slow.comps.prec[:K], atol=1e-10)
    np.testing.assert_allclose(fast.comps.logdet[:K], slow.comps.logdet[:K], rtol=1e-10)
    q = fitted[1][:15]
    np.testing.assert_allclose(fast.log_predictive(q), slow.log_predictive(q), rtol=1e-9)


def test_batched_inserts_equal_one_row_at_a_time(monkeypatch):
    from metamod.memory.hdp import online as hdp_online

    X, _, doms, _ = blobs(n=200, seed=6)
    rng = np.random.default_rng(25)
    rows = np.concatenate([X[:30] + rng.normal(0, 0.7, (30, X.shape[1])), np.full((2, X.shape[1]), 90.0), X[30:40]])
    row_doms = rng.integers(0, 2, len(rows))
    monkeypatch.setattr(hdp_online, "INSERT_BLOCK", 7)  # several batches, births inside a batch
    for dtype, birth in (("float64", "threshold"), ("float64", "sample"), ("float32", "threshold")):
        base = HDPGMM(sweeps=3, burn_in=1, seed=4, dtype=dtype, birth=birth).fit(X, doms)
        one = HDPGMM.from_state_arrays(base.state_arrays())  # one row at a time through the reference
        many = HDPGMM.from_state_arrays(base.state_arrays())  # batches, compiled
        with monkeypatch.context() as patch:
            ref.use_reference(patch)
            a = [one.partial_fit(x, int(d)) for x, d in zip(rows, row_doms, strict=True)]
            hits_one = one.retrieve(X[:5])  # the reference ranking
        b = many.partial_fit_many(rows, row_doms)
        assert [(r["component"], r["born"], r["cause"]) for r in a] == [
            (r["component"], r["born"], r["cause"]) for r in b
        ]
        assert sum(r["born"] for r in a) >= 1
        tol = 1e-9 if dtype == "float64" else 1e-4
        np.testing.assert_allclose([r["rho_new"] for r in a], [r["rho_new"] for r in b], rtol=tol, atol=1e-12)
        np.testing.assert_array_equal(one.labels_, many.labels_)
        np.testing.assert_allclose(one.comps.S2[: one.n_components_], many.comps.S2[: many.n_components_])
        np.testing.assert_allclose(one.domain_centroids_, many.domain_centroids_)
        hits_many = many.retrieve(X[:5])
        assert [[(k, r) for k, _, r in h] for h in hits_one] == [[(k, r) for k, _, r in h] for h in hits_many]
        np.testing.assert_allclose(
            [w for h in hits_one for _, w, _ in h], [w for h in hits_many for _, w, _ in h], rtol=tol, atol=1e-300
        )
    with pytest.raises(ValueError, match="domain: expected a 1-D integer array of length 3"):
        many.partial_fit_many(rows[:3], [0, 1])


def test_pending_precision_updates_equal_one_row_at_a_time(monkeypatch):
    """The compiled inserts keep up to PENDING rank-1 changes per slot: ~16 rows per component in one block fill
    the list, so the fused apply-and-multiply pass runs (and the partial pass before returning). float64
    coefficients: the batch's starting forms then match the per-row ones to rounding."""
    X, _, doms, _ = blobs(seed=3)
    arrays = HDPGMM(sweeps=4, burn_in=1, seed=2, dtype="float64").fit(X, doms).state_arrays()
    rng = np.random.default_rng(31)
    rows = X[:80] + rng.normal(0, 0.3, (80, X.shape[1]))
    row_doms = rng.integers(0, 2, len(rows))
    one, many = HDPGMM.from_state_arrays(arrays), HDPGMM.from_state_arrays(arrays)
    with monkeypatch.context() as patch:
        ref.use_reference(patch)
        a = [one.partial_fit(x, int(d)) for x, d in zip(rows, row_doms, strict=True)]
    before = many.comps.updates.copy()
    b = many.partial_fit_many(rows, row_doms)
    K = many.n_components_
    assert (many.comps.updates[:K] - before[:K]).max() > 2 * hdp_kernel.PENDING  # several full passes
    assert [(r["component"], r["born"]) for r in a] == [(r["component"], r["born"]) for r in b]
    np.testing.assert_allclose([r["rho_new"] for r in a], [r["rho_new"] for r in b], rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(one.comps.prec[:K], many.comps.prec[:K], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(one.comps.logdet[:K], many.comps.logdet[:K], rtol=1e-12)
    np.testing.assert_allclose(one.comps.S2[:K], many.comps.S2[:K], rtol=1e-12)
    fresh = HDPGMM.from_state_arrays(many.state_arrays())
    for k in range(K):  # refactorised from the statistics (LAPACK)
        fresh.comps.refresh(k)
    np.testing.assert_allclose(fresh.comps.prec[:K], many.comps.prec[:K], rtol=1e-9, atol=1e-12)


def test_incremental_medoids_and_centroids_equal_recomputation(fitted):
    model = HDPGMM.from_state_arrays(fitted[0].state_arrays())
    X = fitted[1]
    model.retrieve(X[:2])  # fills the medoid cache
    rng = np.random.default_rng(23)
    for i, x in enumerate(
        np.concatenate([X[:8] + rng.normal(0, 1.0, (8, X.shape[1])), np.full((1, X.shape[1]), -120.0), X[8:12] + 0.3])
    ):
        model.partial_fit(x, i % 2)
        if i % 3 == 0 and i < 10:
            model.retrieve(X[:1])  # interleaved queries bring only the touched components up to date
    assert model.births_["novelty"] >= 1 and model._medoid_stale
    lazy = model.medoids_
    model._medoid_dirty = True  # force the full recomputation
    np.testing.assert_array_equal(lazy, model.medoids_)
    z, rows = model.labels_, model._X
    for k, row in enumerate(lazy):
        assert row == brute_medoid(rows, np.flatnonzero(z == k))
    doms = model._doms
    np.testing.assert_allclose(model.domain_centroids_, np.stack([rows[doms == d].mean(0) for d in range(2)]))
    df, c, ln = model.comps.consts()  # the cached Student-t constants follow the updates
    fresh = model.comps.consts(np.arange(model.n_components_))
    for got, want in zip((df, c, ln), fresh, strict=True):
        np.testing.assert_array_equal(got, want)


def test_batched_retrieval_equals_per_query_retrieval(fitted):
    model, X, *_ = fitted
    rng = np.random.default_rng(24)
    Q = np.concatenate([X[:70] + rng.normal(0, 1.5, (70, X.shape[1]))])  # >= 64 rows: the batched GEMM path
    for kwargs in ({"top_k": 3}, {"threshold": 1e-4}, {"top_k": 2, "domain": 1}):
        batch = model.retrieve(Q, **kwargs)
        for q, hit in zip(Q, batch, strict=True):
            one = model.retrieve(q[None], **kwargs)[0]
            assert [(k, m) for k, _, m in one] == [(k, m) for k, _, m in hit]
            # float32 GEMV and GEMM sum the features in different orders: ~1e-5 nats apart
            np.testing.assert_allclose([w for _, w, _ in one], [w for _, w, _ in hit], rtol=1e-4, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_quadratic_features_are_bit_identical(dtype):
    X = np.random.default_rng(5).normal(size=(40, 9)).astype(dtype)
    for n in (1, 3, 40):  # the reference's gather (<= 8 rows) and slice paths
        got = quad_features(X[:n])
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, ref.quad_features(X[:n]))
    out = np.zeros((40, n_features(9)), dtype=dtype)
    assert quad_features(X.astype(np.float64), dtype=dtype, out=out) is out
    np.testing.assert_array_equal(out, ref.quad_features(X))
    with pytest.raises(ValueError, match="quad_features: X has dtype int64; expected float32 or float64"):
        quad_features(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="quad_features: out has dtype float16"):
        quad_features(X, out=np.zeros((40, n_features(9)), dtype=np.float16))


def test_compiled_retrieval_equals_the_numpy_reference(fitted, monkeypatch):
    model, X, _, doms, _ = fitted
    flat = HDPGMM(sweeps=3, burn_in=1, seed=0, flat=True).fit(X, doms)
    f64 = HDPGMM(sweeps=3, burn_in=1, seed=0, dtype="float64").fit(X, doms)
    Q = X[:40] + np.random.default_rng(3).normal(0, 1.0, X[:40].shape)
    options = ({"top_k": 3}, {"threshold": 1e-6}, {"top_k": 2, "domain": 1})
    # fused (<= 16 queries) and chunked, hierarchical and flat, float32 and float64 products
    cases = [(m, q, kw) for m in (model, flat, f64) for q in (Q[:1], Q[:5], Q) for kw in options]
    fast = [m.retrieve(q, **kw) for m, q, kw in cases]
    ref.use_reference(monkeypatch)  # the compiled rankings now fail if called
    for (m, q, kw), got in zip(cases, fast, strict=True):
        want = m.retrieve(q, **kw)
        assert [[(k, row) for k, _, row in hit] for hit in got] == [[(k, row) for k, _, row in hit] for hit in want]
        for a, b in zip(got, want, strict=True):  # matrix-vector vs matrix product sums: ~1e-5 nats apart
            np.testing.assert_allclose([w for _, w, _ in a], [w for _, w, _ in b], rtol=1e-4, atol=1e-12)


def test_compiled_ranking_breaks_ties_by_component_and_keeps_the_top():
    rng = np.random.default_rng(0)
    K, n, D = 9, 30, 4
    q = rng.choice([0.5, 2.0, 7.0], size=(n, K)).astype(np.float32)  # many exact ties
    ndk = np.ones((2, K))
    beta, df, c, ln = np.full(K, 0.1), np.full(K, 5.0), np.full(K, 0.3), np.zeros(K)
    doms = rng.integers(0, 2, n)
    logits = np.log(ndk[doms] + beta).T + (-0.5 * (df[:, None] + D) * np.log1p(q.T / (c[:, None] * df[:, None])))
    for top in (1, 3, K):
        order, weights = np.zeros((n, top), dtype=np.int64), np.zeros((n, top))
        hdp_kernel.rank_rows_compiled(q, doms, ndk, beta, 1.0, False, df, c, ln, float(D), top, order, weights)
        ref_order, ref_weights = rank_logits(logits, top)
        np.testing.assert_array_equal(order, ref_order)
        np.testing.assert_allclose(weights, ref_weights, rtol=1e-12)


def test_threads_option_does_not_change_the_fit():
    X, _, doms, _ = blobs(n=200, seed=5)
    a = HDPGMM(sweeps=4, burn_in=2, seed=3, block=64).fit(X, doms)
    b = HDPGMM(sweeps=4, burn_in=2, seed=3, block=64, threads=1).fit(X, doms)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert b.get_params()["threads"] == 1
    with pytest.raises(ValueError, match="threads=0"):
        HDPGMM(threads=0)


# ------------------------------------------------------------------ retrieval
def test_retrieval_order_threshold_domain_and_centroids(fitted):
    model, X, labels, doms, means = fitted
    z = model.labels_
    hits = model.retrieve(X[:10], top_k=3)
    for row, hit in enumerate(hits):
        assert hit[0][0] == z[row] and len(hit) == 3
        assert [w for _, w, _ in hit] == sorted((w for _, w, _ in hit), reverse=True)
        assert z[hit[0][2]] == hit[0][0]  # medoid is a member
    weights = np.array([w for _, w, _ in model.retrieve(X[:1], top_k=model.n_components_)[0]])
    np.testing.assert_allclose(weights.sum(), 1.0)
    thr = model.retrieve(X[:1], threshold=1e-12)[0]
    assert all(w >= 1e-12 for _, w, _ in thr) and thr[0][0] == z[0]
    pred = model.predict_domain(X[:10])
    C = model.domain_centroids_
    np.testing.assert_array_equal(pred, np.argmin(((X[:10, None] - C[None]) ** 2).sum(-1), axis=1))
    assert model.retrieve(X[:10], top_k=3, domain=pred) == hits
    assert model.retrieve(X[:10], top_k=3, domain=1 - pred) != hits
    cen = model.retrieve(X[:10], top_k=2, method="centroids")
    mus = np.stack([model.component_posterior(k)[0] for k in range(model.n_components_)])
    np.testing.assert_array_equal([c[0][0] for c in cen], np.argmin(((X[:10, None] - mus[None]) ** 2).sum(-1), 1))


def brute_medoid(X: np.ndarray, members: np.ndarray) -> int:
    """The member with the least summed Euclidean distance to the other members (lower row on a tie)."""
    sums = np.sqrt(((X[members][:, None, :] - X[members][None, :, :]) ** 2).sum(-1)).sum(1)
    return int(members[np.flatnonzero(sums <= sums.min() * (1 + 1e-12))[0]])


def test_medoid_minimises_the_summed_distance_to_the_members(fitted):
    model, X, *_ = fitted
    z = model.labels_
    for k, row in enumerate(model.medoids_):
        assert row == brute_medoid(X, np.flatnonzero(z == k))


def test_medoid_is_not_the_member_nearest_the_mean_of_a_skewed_component():
    """A tight group plus a few far members: the mean moves towards the far ones, the medoid stays in the group."""
    rng = np.random.default_rng(8)
    X = np.concatenate([rng.normal(0, 0.3, (40, 2)), rng.normal(0, 0.3, (8, 2)) + [6.0, 0.0]])
    model = constructed(X, np.zeros(48, dtype=np.int64), np.tile([0, 1], 24), prior="paper")
    row = int(model.medoids_[0])
    nearest_mean = int(np.argmin(((X - X.mean(0)) ** 2).sum(1)))
    assert row == brute_medoid(X, np.arange(48)) and row != nearest_mean and row < 40
    assert model.retrieve(X[:1], top_k=1)[0][0][2] == row


def test_state_round_trip_identical_retrieve_and_updates(fitted):
    model = HDPGMM.from_state_arrays(fitted[0].state_arrays())
    X = fitted[1]
    copy = HDPGMM.from_state_arrays({k: np.array(v) for k, v in model.state_arrays().items()})
    assert copy.get_params() == model.get_params()
    assert copy.retrieve(X[:20]) == model.retrieve(X[:20])
    rng = np.random.default_rng(14)
    for m in (model, copy):
        m._log = [m.partial_fit(x, i % 2) for i, x in enumerate(rng.normal(0, 9, (6, X.shape[1])))]
        rng = np.random.default_rng(14)
        m._log.append(m.refit())
    assert model._log == copy._log
    np.testing.assert_array_equal(model.labels_, copy.labels_)
    np.testing.assert_array_equal(model.component_ids_, copy.component_ids_)
    assert copy.retrieve(X[:20]) == model.retrieve(X[:20])


# ------------------------------------------------------------------ errors
def test_clear_errors_name_the_field(fitted):
    model, X, *_ = fitted
    with pytest.raises(ValueError, match="queries: expected dimension D=6"):
        model.retrieve(X[:2, :4])
    bad = X[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="X: row 1 contains NaN"):
        HDPGMM().fit(bad)
    bad[1, 2] = -np.inf
    with pytest.raises(ValueError, match="queries: row 1 contains NaN or inf"):
        model.retrieve(bad)
    huge = np.full((2, X.shape[1]), 1e308)  # finite, though their sum overflows: accepted
    assert len(model.retrieve(huge)) == 2
    with pytest.raises(ValueError, match="domain=5: out of range"):
        model.retrieve(X[:1], domain=5)
    m = HDPGMM.from_state_arrays(model.state_arrays())
    with pytest.raises(ValueError, match="domain=2: out of range"):
        m.partial_fit(X[0], domain=2)
    with pytest.raises(ValueError, match="x: expected dimension"):
        m.partial_fit(X[0, :3], domain=0)
    with pytest.raises(ValueError, match="domains: expected a 1-D integer array of length 3"):
        HDPGMM().fit(X[:3], np.array([0, 1]))
    with pytest.raises(ValueError, match="tau_new"):
        HDPGMM(tau_new=2.0)
    with pytest.raises(RuntimeError, match="not fitted"):
        HDPGMM().retrieve(X[:1])
