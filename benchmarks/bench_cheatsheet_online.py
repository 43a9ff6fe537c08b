"""Bayesian Cheatsheet online protocol without an LLM: births by cause, merges and refit churn (tables 7, 9-12, fig. 3).

The test-time protocol of paper section 4.4 / appendix F, on embeddings only: an offline ``fit`` on a corpus, then a
stream of new behaviour embeddings inserted one at a time with ``partial_fit``, a ``refit()`` every ``g`` inserts
(``g = 0``: never). After the stream each configuration reports the final K, the net increase over the offline K,
births by cause (``novelty`` = rho_new > tau_new, ``sample`` = the Bernoulli(rho_new) draw, ``refit`` = components
opened by the refit's Gibbs sweep), merges (symmetric-KL merges in refit) and ``removed`` (components the sweep
emptied), and the churn of every refit: the fraction of the rows stored before the refit whose persistent component
id ``component_ids_[labels_]`` changed across it (:func:`metamod.memory.cheatsheet.organisers.churn`, the paper's
M[b, a]).
Every HDP configuration starts from the SAME offline fit (one ``fit``, then ``HDPGMM.from_state_arrays`` with the
configuration's ``tau_new`` / ``birth`` / ``merge``), so the tables differ only in the online protocol.

Data (``--corpus`` selects):

- synthetic (default): Gaussian clusters in D dimensions (means ~ N(0, sep^2 128 / D I), ``--sep`` 0.5; per-dim. standard
  deviations in [0.6, 1.4]), each cluster with its own probability of domain 1 (two domains). The corpus: ``n0``
  rows from 24 clusters (sizes from a Dirichlet(2) draw); the stream: ``stream`` rows, 70% from the corpus clusters
  (same weights) and 30% from 6 clusters the corpus never saw (drift), shuffled. Seeded.
- ``--corpus runs/bc``: a fitted cheatsheet folder (``metamod fit-cheatsheet``): the raw E(description) rows
  projected by its saved PCA, domains from ``behaviours.jsonl``; a random 70% of the rows is the corpus, the other
  30% the stream (in random order).

Tables (markdown, one run): (1) refit interval g (table 7); (2) threshold vs sample births x KL merge on / off at
g = 0 (table 10) and at ``--g`` (tables 9 / 11); (3) tau_new (table 12); (4) churn per refit of the HDP-GMM vs hard
and soft k-means with K = the HDP's offline K (figure 3), plus the largest moves of M[b, a] for the HDP.

    .venv/bin/python benchmarks/bench_cheatsheet_online.py --quick            # seconds (the smoke test runs this)
    .venv/bin/python benchmarks/bench_cheatsheet_online.py                    # synthetic, ~30 s on one loaded core
    .venv/bin/python benchmarks/bench_cheatsheet_online.py --corpus runs/bc   # the real (small) SmolLM2 corpus
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from metamod.memory.cheatsheet.organisers import build_organiser, churn
from metamod.memory.hdp import HDPGMM

REFIT_INTERVALS = (0, 5, 10, 25, 50, 100)
TAUS = (0.1, 0.3, 0.5, 0.7, 0.9)
BIRTH_MERGE = (("threshold", True), ("sample", True), ("threshold", False), ("sample", False))
CHURN_ORGANISERS = ("hdp", "kmeans_hard", "kmeans_soft")


@dataclass
class Dataset:
    """Corpus rows (fitted offline) and stream rows (inserted one by one), with domains; ``drift`` marks stream rows
    from clusters the corpus never saw (None when unknown, i.e. a real corpus)."""

    X0: np.ndarray
    d0: np.ndarray
    XS: np.ndarray
    dS: np.ndarray
    drift: np.ndarray | None
    note: str
    truth0: np.ndarray | None = None


def synthetic(
    *,
    dim: int,
    n0: int,
    stream: int,
    seed: int,
    sep: float = 0.5,
    k_corpus: int = 24,
    k_drift: int = 6,
    drift_fraction: float = 0.3,
) -> Dataset:
    """The synthetic corpus + drifting stream described in the module docstring."""
    rng = np.random.default_rng(seed)
    k = k_corpus + k_drift
    means = rng.normal(0.0, sep * np.sqrt(128.0 / dim), (k, dim))
    scales = rng.uniform(0.6, 1.4, (k, dim))
    p_dom1 = rng.uniform(0.1, 0.9, k)
    weights = rng.dirichlet(np.full(k_corpus, 2.0))
    lab0 = rng.choice(k_corpus, n0, p=weights)
    n_drift = int(round(drift_fraction * stream))
    labS = np.concatenate(
        [rng.choice(k_corpus, stream - n_drift, p=weights), k_corpus + rng.integers(0, k_drift, n_drift)]
    )
    labS = labS[rng.permutation(stream)]

    def draw(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        X = means[lab] + scales[lab] * rng.normal(size=(len(lab), dim))
        return X, (rng.random(len(lab)) < p_dom1[lab]).astype(np.int64)

    X0, d0 = draw(lab0)
    XS, dS = draw(labS)
    note = (
        f"synthetic: D = {dim}, corpus {n0} rows from {k_corpus} clusters ({len(np.unique(lab0))} non-empty), "
        f"stream {stream} rows ({stream - n_drift} from corpus clusters, {n_drift} from {k_drift} unseen "
        f"clusters), two domains, seed {seed}"
    )
    return Dataset(X0, d0, XS, dS, labS >= k_corpus, note, truth0=lab0)


def from_corpus(folder: str, *, seed: int, fraction: float = 0.7) -> Dataset:
    """A fitted cheatsheet folder: PCA-projected E(description) rows, a random ``fraction`` fitted, the rest streamed."""
    from metamod.memory.cheatsheet.corpus import load_fitted
    from metamod.memory.cheatsheet.projector import PCAProjection

    corpus = load_fitted(folder)
    X = PCAProjection.from_state_arrays(corpus.prefixed("pca")).transform(corpus.arrays["raw"]).astype(np.float64)
    doms = corpus.domain_index()
    order = np.random.default_rng(seed).permutation(len(X))
    cut = int(round(fraction * len(X)))
    head, tail = order[:cut], order[cut:]
    by_dom = ", ".join(f"{d}: {int((doms == i).sum())}" for i, d in enumerate(corpus.domains))
    note = (
        f"corpus {folder}: {len(X)} behaviours ({by_dom}), embedder {corpus.embedder_spec.get('name')} "
        f"{corpus.embedder_spec.get('model', '')}, PCA D = {X.shape[1]}; fitted on {len(head)} random rows, "
        f"{len(tail)} streamed (seed {seed}). A SMALL corpus: with g >= {len(tail)} there is at most one refit"
    )
    return Dataset(X[head], doms[head], X[tail], doms[tail], None, note)


def persistent_ids(org: Any) -> np.ndarray:
    """Each stored row's persistent component id."""
    return np.asarray(org.component_ids_)[np.asarray(org.labels_)]


def run_stream(org: Any, data: Dataset, g: int) -> dict[str, Any]:
    """Insert the stream into a fitted organiser with a refit every ``g`` inserts; counts and churn per refit."""
    k0 = int(org.n_components_)
    counters0 = (dict(org.births_), int(org.merges_)) if hasattr(org, "births_") else None
    out: dict[str, Any] = {
        "K0": k0,
        "novelty": 0,
        "sample": 0,
        "online_on_drift": 0,
        "refit_births": 0,
        "merges": 0,
        "removed": 0,
        "refits": 0,
        "churn": [],
        "moves": [],
    }
    t0 = time.perf_counter()
    for t, (x, d) in enumerate(zip(data.XS, data.dS, strict=True), start=1):
        step = org.partial_fit(x, int(d))
        if step["born"]:
            out[step["cause"]] += 1
            if data.drift is not None and data.drift[t - 1]:
                out["online_on_drift"] += 1
        if g and t % g == 0:
            before = persistent_ids(org)
            info = org.refit()
            out["refits"] += 1
            out["refit_births"] += info["births"]
            out["merges"] += info["merges"]
            out["removed"] += info["removed"]
            m = churn(before, persistent_ids(org))
            out["churn"].append(m["fraction"])
            off = sorted(([b, a, c] for b, a, c in m["entries"] if b != a), key=lambda e: (-e[2], e[0], e[1]))
            out["moves"].append(off[:3])
    out["seconds"] = time.perf_counter() - t0
    out["K_final"] = int(org.n_components_)
    out["net"] = out["K_final"] - k0
    out["online"] = out["novelty"] + out["sample"]
    out["births"] = out["online"] + out["refit_births"]
    if counters0 is not None:  # the organiser's own counters must agree with the return values
        births, merges = org.births_, org.merges_
        for cause, key in (("novelty", "novelty"), ("sample", "sample"), ("refit", "refit_births")):
            if births[cause] - counters0[0][cause] != out[key]:
                raise AssertionError(
                    f"births_[{cause!r}] moved by {births[cause] - counters0[0][cause]}, "
                    f"the return values say {out[key]}"
                )
        if merges - counters0[1] != out["merges"]:
            raise AssertionError(f"merges_ moved by {merges - counters0[1]}, refit() returned {out['merges']}")
    out["unaccounted"] = out["net"] - (out["births"] - out["merges"] - out["removed"])
    return out


def fmt_signed(v: int) -> str:
    return f"{v:+d}"


def fmt_churn(values: Sequence[float]) -> str:
    return f"{100 * float(np.mean(values)):.2f}%" if len(values) else "-"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(v) for v in row) + " |")


def counts_row(r: dict[str, Any], drift_known: bool) -> list[Any]:
    return [
        r["K_final"],
        fmt_signed(r["net"]),
        r["online"],
        fmt_signed(r["net"] - r["online"]),
        r["refit_births"],
        r["merges"],
        r["removed"],
        r["online_on_drift"] if drift_known else "-",
        r["refits"],
        fmt_churn(r["churn"]),
        f"{r['seconds']:.2f}",
    ]


COUNT_COLS = [
    "K_final",
    "net increase",
    "online-spawned",
    "refit-triggered (net)",
    "refit births (gross)",
    "merges",
    "removed",
    "online births on drift rows",
    "refits",
    "mean churn",
    "stream s",
]


def loadavg() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=None, help="a fitted cheatsheet folder (e.g. runs/bc); default synthetic")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run in seconds")
    parser.add_argument("--dim", type=int, default=32, help="synthetic: embedding dimension D")
    parser.add_argument("--n0", type=int, default=3000, help="synthetic: corpus rows")
    parser.add_argument("--stream", type=int, default=500, help="synthetic: stream rows")
    parser.add_argument(
        "--sep", type=float, default=0.5, help="synthetic: spread of the cluster means (smaller: more overlap)"
    )
    parser.add_argument("--sweeps", type=int, default=50, help="offline Gibbs sweeps (burn-in = half)")
    parser.add_argument("--g", type=int, default=50, help="refit interval of tables 2-4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.dim, args.n0, args.stream, args.sweeps = 8, 400, 120, 10
    t_start = time.perf_counter()
    print(
        f"# Bayesian Cheatsheet online protocol (no LLM)\n\nload average at start: {loadavg()}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; HDPGMM threads=1"
    )
    data = (
        from_corpus(args.corpus, seed=args.seed)
        if args.corpus
        else synthetic(dim=args.dim, n0=args.n0, stream=args.stream, seed=args.seed, sep=args.sep)
    )
    drift_known = data.drift is not None
    print(f"\ndata: {data.note}")
    t0 = time.perf_counter()
    base = HDPGMM(sweeps=args.sweeps, burn_in=args.sweeps // 2, seed=args.seed, threads=1).fit(data.X0, data.d0)
    fit_s = time.perf_counter() - t0
    state, k0 = base.state_arrays(), base.n_components_
    truth = ""
    if data.truth0 is not None:
        from sklearn.metrics import adjusted_rand_score

        truth = f" (true K {len(np.unique(data.truth0))}, ARI {adjusted_rand_score(data.truth0, base.labels_):.3f})"
    print(
        f"offline HDP-GMM fit: {args.sweeps} sweeps, K = {k0}{truth}, {fit_s:.1f} s (every configuration below "
        "starts from this state)"
    )

    def hdp(g: int, **params: Any) -> dict[str, Any]:
        return run_stream(HDPGMM.from_state_arrays(state, **params), data, g)

    results: dict[str, Any] = {"K0": k0, "note": data.note, "tables": {}}
    main_cfg = {"birth": "threshold", "merge": True, "tau_new": 0.5}

    t1 = {g: hdp(g, **main_cfg) for g in REFIT_INTERVALS}
    results["tables"]["refit_interval"] = t1
    print_table(
        f"1. Refit interval g (table 7): threshold births, tau_new = 0.5, KL merge (eps 0.1); initial K = {k0}",
        ["g", *COUNT_COLS],
        [[g, *counts_row(r, drift_known)] for g, r in t1.items()],
    )

    t2 = {}
    for g in (0, args.g):
        for birth, merge in BIRTH_MERGE:
            if g == 0 and not merge:
                continue  # without refits there is nothing to merge: the row would repeat the merge-on one
            t2[(g, birth, merge)] = hdp(g, birth=birth, merge=merge, tau_new=0.5)
    results["tables"]["birth_merge"] = t2
    print_table(
        f"2. Birth rule x KL merge (tables 10 and 11; g = 0 and g = {args.g}); initial K = {k0}",
        ["g", "configuration", *COUNT_COLS],
        [
            [g, f"{birth}, {'KL-merge' if merge else 'no KL-merge'}" if g else birth, *counts_row(r, drift_known)]
            for (g, birth, merge), r in t2.items()
        ],
    )

    t3 = {tau: hdp(args.g, birth="threshold", merge=True, tau_new=tau) for tau in TAUS}
    results["tables"]["tau_new"] = t3
    print_table(
        f"3. Novelty threshold tau_new (table 12; threshold births, KL merge, g = {args.g}); initial K = {k0}",
        ["tau_new", *COUNT_COLS],
        [[tau, *counts_row(r, drift_known)] for tau, r in t3.items()],
    )

    t4: dict[str, dict[str, Any]] = {"hdp": hdp(args.g, **main_cfg)}
    for name in CHURN_ORGANISERS[1:]:
        org = build_organiser(name, n_clusters=k0, seed=args.seed).fit(data.X0, data.d0)
        t4[name] = run_stream(org, data, args.g)
    results["tables"]["churn"] = t4
    n_refits = max(len(r["churn"]) for r in t4.values())
    label = {
        "hdp": "HDP-GMM (BC)",
        "kmeans_hard": f"hard k-means (K = {k0})",
        "kmeans_soft": f"soft k-means (K = {k0})",
    }
    print_table(
        f"4. Churn per refit (figure 3): % of previously stored rows whose component id changed, g = {args.g}",
        ["organiser", *[f"refit {i + 1}" for i in range(n_refits)], "mean", "K_final"],
        [
            [label[name], *[f"{100 * c:.2f}%" for c in r["churn"]], fmt_churn(r["churn"]), r["K_final"]]
            for name, r in t4.items()
        ],
    )
    print(
        f"\nHDP-GMM: largest off-diagonal cells of M[b, a] per refit ([before id, after id, rows]; ids >= {k0} were "
        "born online or in a refit):"
    )
    for i, moves in enumerate(t4["hdp"]["moves"], start=1):
        print(f"- refit {i}: {moves if moves else 'no row changed component'}")

    results["seconds"] = time.perf_counter() - t_start
    print(f"\nwall time {results['seconds']:.1f} s (offline fit {fit_s:.1f} s); load average at end: {loadavg()}")
    bad = [(tab, key) for tab, rows in results["tables"].items() for key, r in rows.items() if r["unaccounted"]]
    if bad:
        print(f"\nWARNING: net increase != births - merges - removed for {bad}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
