"""HDP-GMM numerics benchmark: prior study (ARI / K vs truth), sweep / fit / retrieval / online speed, sklearn.

Synthetic data: 64 Gaussian clusters in D = 128 (means ~ N(0, 0.5^2 I), per-cluster diagonal standard deviations
in [0.6, 1.4]), cluster sizes from a Dirichlet(1) draw (unequal), two domains sharing every component with
different mixing weights (the base weights times a log-normal factor per domain).

    .venv/bin/python benchmarks/bench_hdp.py --quick          # seconds: small N, D = 32
    .venv/bin/python benchmarks/bench_hdp.py                  # the full study (about 30 minutes on 2 loaded cores)
    .venv/bin/python benchmarks/bench_hdp.py --only speed --sizes 130000

Prints markdown tables (and the thread count and ``os.getloadavg()`` with every block of numbers).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
from scipy.stats import multivariate_t
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_info, threadpool_limits

from metamod.memory.hdp import HDPGMM
from metamod.memory.hdp.forms import FormCache


def synth(n: int, dim: int = 128, k: int = 64, seed: int = 0, sep: float = 0.5):
    """(X, labels, domains) as described in the module docstring (``sep`` is rescaled for D != 128 so that the
    expected squared distance between two means stays 2 x 128 x sep^2)."""
    rng = np.random.default_rng(seed)
    sep = sep * np.sqrt(128.0 / dim)
    means = rng.normal(0, sep, (k, dim))
    scales = rng.uniform(0.6, 1.4, (k, dim))
    base = rng.dirichlet(np.ones(k))
    dom_w = np.stack([base * rng.lognormal(0, 1, k) for _ in range(2)])
    dom_w /= dom_w.sum(1, keepdims=True)
    doms = rng.integers(0, 2, n)
    labels = np.empty(n, dtype=np.int64)
    for d in range(2):
        idx = np.flatnonzero(doms == d)
        labels[idx] = rng.choice(k, len(idx), p=dom_w[d])
    X = means[labels] + scales[labels] * rng.normal(size=(n, dim))
    return X, labels, doms


def env_line(threads: int) -> str:
    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    return f"threads={threads} blas={blas} loadavg={tuple(round(x, 2) for x in os.getloadavg())}"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


VARIANTS = {
    "stable (default)": {},
    "paper": {"prior": "paper"},
    "stable, nu0 = D + 2": {"nu0": "D+2"},
    "stable, nu0 = 4D + 2": {"nu0": "4D+2"},
    "stable, kappa0 = 0.01": {"kappa0": 0.01},
}


def resolve(params: dict, dim: int) -> dict:
    out = dict(params)
    if isinstance(out.get("nu0"), str):
        out["nu0"] = {"D+2": dim + 2, "4D+2": 4 * dim + 2}[out["nu0"]]
    return out


def prior_study(sizes, variants, sweeps, dim, threads):
    print(f"\n### Prior study: ARI and K vs truth ({sweeps} sweeps, seed 0)  [{env_line(threads)}]\n")
    print("| N | variant | true K (non-empty) | fitted K | ARI | kappa0 | nu0 | fit s | last sweep s | moves last |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        X, labels, doms = synth(n, dim=dim)
        for name in variants:
            if name == "stable, nu0 = D + 2" and n > 2000:
                continue  # over-splits into hundreds of components: minutes per sweep at 10k
            t0 = time.perf_counter()
            model = HDPGMM(sweeps=sweeps, burn_in=sweeps // 2, seed=0, **resolve(VARIANTS[name], dim)).fit(X, doms)
            fit_s = time.perf_counter() - t0
            last = model.history_[-1]
            print(
                f"| {n:,} | {name} | {len(np.unique(labels))} | {model.n_components_} | "
                f"{adjusted_rand_score(labels, model.labels_):.3f} | {model.kappa0_:.3g} | {model.nu0_:g} | "
                f"{fit_s:.1f} | {last['seconds']:.2f} | {last['moves']} |",
                flush=True,
            )


def predictive_check(dim: int) -> None:
    X, _, doms = synth(400, dim=dim, k=8)
    model = HDPGMM(sweeps=3, burn_in=1, seed=0).fit(X, doms)
    Y = np.random.default_rng(1).normal(0, 2, (50, dim))
    got = model.log_predictive(Y)
    worst = 0.0
    for k in range(model.n_components_):
        mu, kappa, nu, psi = model.component_posterior(k)
        df = nu - dim + 1
        ref = multivariate_t(loc=mu, shape=psi * (kappa + 1) / (kappa * df), df=df).logpdf(Y)
        worst = max(worst, float(np.abs(got[:, k] - ref).max()))
    print(
        f"\nlog_predictive vs scipy.stats.multivariate_t: max |diff| = {worst:.2e} over {model.n_components_} "
        f"components x 50 points (D = {dim})"
    )


def timed_inserts(model: HDPGMM, rows: np.ndarray, doms: np.ndarray, *, batched: bool) -> tuple[float, int]:
    """(rows / s, births) of online inserts: one ``partial_fit`` call per row, or one ``partial_fit_many``."""
    t0 = time.perf_counter()
    if batched:
        births = sum(r["born"] for r in model.partial_fit_many(rows, doms))
    else:
        births = sum(model.partial_fit(x, int(d))["born"] for x, d in zip(rows, doms, strict=True))
    return len(rows) / (time.perf_counter() - t0), births


def gemm_pass(model: HDPGMM) -> float:
    """Seconds of the sweep's feature GEMMs alone: every block of cached features against every component."""
    store, comps = model._store, model.comps
    store.features(0, 1, model._Xc, model._Xc64)  # build the cache (as a sweep would)
    comps.coefficients()
    t0 = time.perf_counter()
    for s in range(0, store.count, model.block):
        e = min(s + model.block, store.count)
        with model._gemm_threads(e - s):
            comps.quad_packed(store.features(s, e, model._Xc, model._Xc64))
    return time.perf_counter() - t0


def share_cache(dst: HDPGMM, src: HDPGMM) -> None:
    """Let ``dst`` (loaded from ``src``'s state, maybe with rows appended) reuse ``src``'s feature cache."""
    a, b = dst._store, src._store
    assert np.array_equal(a.scan[: b.count], b.scan)
    a.phi, a.rows64, a.cached = b.phi, b.rows64, b.cached


def best_of(fn, reps: int = 5) -> float:
    """Minimum seconds of ``reps`` calls of ``fn`` (after one warm-up call)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def speed(n: int, sweeps: int, dim: int, threads: int, save_state: str | None = None) -> HDPGMM:
    X, labels, doms = synth(n, dim=dim)  # the same rows as before the held-out rows were added to the benchmark
    more, _, more_doms = synth(n + 4000, dim=dim)  # same mixture (means, scales, weights), other draws
    held, held_doms = more[n:], more_doms[n:]  # in-distribution rows for the online inserts (2 x 2,000)
    del more
    print(f"\nfit with HDPGMM(threads={threads}), {sweeps} sweeps  [{env_line(threads)}]", flush=True)
    t0 = time.perf_counter()
    model = HDPGMM(sweeps=sweeps, burn_in=sweeps // 2, seed=0, threads=threads).fit(X, doms)
    fit_s = time.perf_counter() - t0
    load_fit = env_line(threads)
    hist = model.history_
    init_s = hist[0]["seconds"]
    per_sweep = [h["seconds"] for h in hist[1:]]
    K = model.n_components_
    state = model.state_arrays()
    if save_state:
        np.savez(save_state, **state)
    gemm_s = gemm_pass(model)
    copy = HDPGMM.from_state_arrays(state)  # one more settled sweep from the same state, forms recomputed
    share_cache(copy, model)
    t0 = time.perf_counter()
    moves, _ = copy._sweep()
    recomputed = (time.perf_counter() - t0, moves)
    del copy
    # the same state, forms carried: one sweep fills the form cache (every block recomputed), the next replays
    carried = HDPGMM.from_state_arrays(state)
    share_cache(carried, model)
    carried._form_cache = FormCache(rows=n, dim=dim, dtype=carried.comps.dtype, slots=carried.comps.n.shape[0])
    carried._sweep()
    before = carried._form_cache.replayed
    t0 = time.perf_counter()
    moves, _ = carried._sweep()
    replay = (time.perf_counter() - t0, moves, carried._form_cache.replayed - before, -(-n // model.block))
    del carried
    queries = X[:1000] + np.random.default_rng(2).normal(0, 0.3, (1000, dim))
    single_us = best_of(lambda: [model.retrieve(q[None]) for q in queries[:200]]) / 200 * 1e6
    batch_ms = best_of(lambda: model.retrieve(queries)) * 1e3
    novel_rows, _, novel_doms = synth(4000, dim=dim, seed=5)  # other cluster means
    HDPGMM.from_state_arrays(state).partial_fit_many(held[:20], held_doms[:20])  # load the compiled kernels once
    inserts = {}
    for label, rows, row_doms in (("the same mixture", held, held_doms), ("another mixture", novel_rows, novel_doms)):
        for batched in (True, False):
            online = HDPGMM.from_state_arrays(state)
            # the first 2,000 rows after loading, then the next 2,000 on the same copy
            inserts[label, batched, "first"] = timed_inserts(online, rows[:2000], row_doms[:2000], batched=batched)
            inserts[label, batched, "next"] = timed_inserts(online, rows[2000:], row_doms[2000:], batched=batched)
    online = HDPGMM.from_state_arrays(state)
    online.partial_fit_many(held[:2000], held_doms[:2000])
    share_cache(online, model)
    t0 = time.perf_counter()
    refit = online.refit()
    refit_s = time.perf_counter() - t0
    print(f"\n### Speed at N = {n:,}, D = {dim}  [{env_line(threads)}; during the fit: {load_fit}]\n")
    print("| measure | value | target | value / target |")
    print("|---|---|---|---|")
    print(f"| fitted K / ARI | {K} / {adjusted_rand_score(labels, model.labels_):.3f} | | |")
    print(f"| initialisation (feature cache, CRP subset + its sweeps, batched labelling) | {init_s:.1f} s | | |")
    print(f"| sweeps: seconds each | {', '.join(f'{s:.2f}' for s in per_sweep)} | | |")
    print(f"| sweeps: moves each | {', '.join(str(h['moves']) for h in hist[1:])} | | |")
    print(f"| sweeps: blocks replayed each | {', '.join(str(h['replayed']) for h in hist[1:])} | | |")
    if per_sweep:
        last = per_sweep[-1]
        print(f"| last sweep of the fit ({hist[-1]['moves']} moves) | {last:.2f} s | 1.5 s | {last / 1.5:.2f} |")
        print(
            f"| its feature GEMMs alone (one pass, K = {K}) | {gemm_s:.2f} s | | sweep / GEMM = {last / gemm_s:.1f} |"
        )
    sec, moves = recomputed
    print(f"| one more sweep, forms recomputed ({moves} moves) | {sec:.2f} s | 1.5 s | {sec / 1.5:.2f} |")
    sec, moves, replayed, blocks = replay
    print(
        f"| the sweep after that, forms carried ({moves} moves, {replayed} of {blocks} blocks replayed) | {sec:.2f} s "
        f"| 1.5 s | recomputed / carried = {recomputed[0] / sec:.2f} |"
    )
    if sweeps >= 100:
        print(f"| whole {sweeps}-sweep fit | {fit_s:.0f} s | 240 s | {fit_s / 240:.2f} |")
    else:
        est = init_s + 100 * per_sweep[-1] if per_sweep else float("nan")
        print(f"| whole fit ({sweeps} sweeps) | {fit_s:.1f} s | | |")
        print(f"| 100-sweep fit, estimated (init + 100 x last sweep) | {est:.0f} s | 240 s | {est / 240:.2f} |")
    print(
        f"| retrieve, one query per call (200 calls, best of 5) | {single_us:.0f} us / query | 40 us | {single_us / 40:.2f} |"
    )
    print(f"| retrieve, batch of 1,000 (best of 5) | {batch_ms:.1f} ms | 15 ms | {batch_ms / 15:.2f} |")
    for (label, batched, when), (rate, births) in inserts.items():
        how = "partial_fit_many (one call)" if batched else "partial_fit (one call per row)"
        which = "first 2,000 after loading" if when == "first" else "next 2,000"
        print(
            f"| online inserts, {which} rows of {label} ({births} births), {how} | {rate:,.0f} rows / s | "
            f"10,000 / s | {rate / 10000:.2f} |"
        )
    print(f"| refit after the 2,000 same-mixture inserts (rebuild + sweep + merge) | {refit_s:.1f} s, {refit} | | |")
    print(
        f"| peak RSS of the process so far (feature cache {model._store.nbytes() / 1e9:.1f} GB) | {peak_mb():.0f} MB | | |"
    )
    return model


def sklearn_compare(n: int, dim: int, threads: int, max_iter: int, sweeps: int) -> None:
    from sklearn.mixture import BayesianGaussianMixture

    X, labels, doms = synth(n, dim=dim)
    t0 = time.perf_counter()
    ours = HDPGMM(sweeps=sweeps, burn_in=sweeps // 2, seed=0).fit(X, doms)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    bgm = BayesianGaussianMixture(
        n_components=100, weight_concentration_prior_type="dirichlet_process", max_iter=max_iter, random_state=0
    ).fit(X)
    sk_s = time.perf_counter() - t0
    sk_labels = bgm.predict(X)
    print(f"\n### HDPGMM vs sklearn BayesianGaussianMixture at N = {n:,}, D = {dim}  [{env_line(threads)}]\n")
    print("| model | K (non-empty) | ARI | seconds | per iteration |")
    print("|---|---|---|---|---|")
    print(
        f"| HDPGMM, {sweeps} sweeps | {ours.n_components_} | {adjusted_rand_score(labels, ours.labels_):.3f} | "
        f"{ours_s:.1f} | {ours_s / max(sweeps, 1):.2f} s / sweep (incl. init) |"
    )
    print(
        f"| BGMM DP, 100 comps, full cov, max_iter={max_iter} (n_iter={bgm.n_iter_}, converged={bgm.converged_}) | "
        f"{len(np.unique(sk_labels))} | {adjusted_rand_score(labels, sk_labels):.3f} | {sk_s:.1f} | "
        f"{sk_s / bgm.n_iter_:.2f} s / iteration |"
    )
    print(f"| ratio sklearn / HDPGMM (whole fits) | | | {sk_s / ours_s:.1f}x | |")


def sklearn_iteration(n: int, dim: int, threads: int) -> None:
    from sklearn.mixture import BayesianGaussianMixture

    X, _, _ = synth(n, dim=dim)
    t0 = time.perf_counter()
    BayesianGaussianMixture(
        n_components=100, weight_concentration_prior_type="dirichlet_process", max_iter=1, random_state=0
    ).fit(X)
    print(
        f"\nsklearn BGMM (100 components, full covariance) one EM iteration incl. k-means init at N = {n:,}: "
        f"{time.perf_counter() - t0:.1f} s  [{env_line(threads)}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N and D = 32: a smoke run in seconds")
    parser.add_argument("--threads", type=int, default=2, help="BLAS threads (the targets are for 2 cores)")
    parser.add_argument("--only", choices=("all", "prior", "speed", "sklearn"), default="all")
    parser.add_argument("--sizes", type=int, nargs="*", default=None, help="N values for the prior study")
    parser.add_argument("--sweeps", type=int, default=20, help="sweeps per fit in the prior study")
    parser.add_argument("--big", type=int, default=130000, help="the paper-scale N for speed and the big study row")
    parser.add_argument("--big_sweeps", type=int, default=5, help="sweeps at the paper-scale N")
    parser.add_argument("--sklearn_n", type=int, default=10000)
    parser.add_argument(
        "--save_state", default=None, help="speed: also save the fitted model's state_arrays here (.npz, to profile)"
    )
    parser.add_argument(
        "--sklearn_max_iter", type=int, default=100, help="BGMM max_iter (its own default tol decides when it stops)"
    )
    args = parser.parse_args()
    dim = 32 if args.quick else 128
    with threadpool_limits(args.threads):
        print(f"HDP-GMM benchmark: {env_line(args.threads)}")
        if args.quick:
            predictive_check(8)
            prior_study([500, 2000], ["stable (default)", "paper"], 5, dim, args.threads)
            speed(2000, 5, dim, args.threads)
            sklearn_compare(1000, dim, args.threads, max_iter=20, sweeps=5)
            return
        if args.only in ("all", "prior"):
            predictive_check(16)
            prior_study(args.sizes or [500, 2000, 10000], list(VARIANTS), args.sweeps, dim, args.threads)
            prior_study([args.big], ["paper"], args.big_sweeps, dim, args.threads)  # the default: see "speed"
        if args.only in ("all", "sklearn"):
            sklearn_compare(args.sklearn_n, dim, args.threads, max_iter=args.sklearn_max_iter, sweeps=args.sweeps)
            if args.sklearn_n != args.big:
                sklearn_iteration(args.big, dim, args.threads)
        if args.only in ("all", "speed"):
            speed(args.big, args.big_sweeps, dim, args.threads, save_state=args.save_state)


if __name__ == "__main__":
    main()
