"""Medoid benchmark: the cost of the exact medoid and the error of the candidate search used above its size limit.

A retrieved component is shown to the solver as its medoid (the member with the least summed Euclidean distance to
the other members; :func:`metamod.memory.medoids.medoid_index`). Exact costs O(n^2 D), so clusters larger than
``MEDOID_EXACT_MAX`` rows are searched among their ``MEDOID_CANDIDATES`` rows nearest the mean. This script
measures, in D = 128 (the paper's PCA dimension):

- the time of the exact medoid and of the candidate search per cluster size;
- the candidate search's error against the exact medoid on several cluster shapes: the excess of the picked row's
  summed distance over the exact medoid's (relative), and whether it is the same row.

    .venv/bin/python benchmarks/bench_medoid.py --quick        # seconds
    .venv/bin/python benchmarks/bench_medoid.py                # a few minutes on 2 cores

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from metamod.memory.medoids import MEDOID_CANDIDATES, MEDOID_EXACT_MAX, medoid_index, summed_distances


def cluster(shape: str, n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """One cluster of ``n`` rows: an isotropic or anisotropic Gaussian, heavy-tailed, or two merged sub-clusters."""
    if shape == "gaussian":
        return rng.normal(size=(n, dim))
    if shape == "anisotropic":
        return rng.normal(size=(n, dim)) * rng.uniform(0.2, 3.0, dim)
    if shape == "student-t(3)":
        return rng.standard_t(3, size=(n, dim))
    if shape == "two groups 70/30":
        m = int(0.7 * n)
        shift = np.zeros(dim)
        shift[0] = 4.0
        return np.concatenate([rng.normal(size=(m, dim)), rng.normal(size=(n - m, dim)) + shift])
    if shape == "skewed (lognormal)":
        return rng.lognormal(0.0, 0.8, size=(n, dim))
    raise ValueError(shape)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    sizes = [1500, 3000] if args.quick else [6000, 12000, 20000]
    shapes = ["gaussian", "anisotropic", "student-t(3)", "two groups 70/30", "skewed (lognormal)"]
    print(
        f"D = {args.dim}, exact up to {MEDOID_EXACT_MAX} rows, {MEDOID_CANDIDATES} candidates above; load {os.getloadavg()}"
    )
    print("\n| shape | n | seeds | same row | worst relative excess | exact s | candidates s |")
    print("|---|---|---|---|---|---|---|")
    for shape in shapes:
        for n in sizes:
            same, worst, t_exact, t_cand = 0, 0.0, 0.0, 0.0
            for seed in range(args.seeds):
                Y = cluster(shape, n, args.dim, np.random.default_rng(seed))
                start = time.perf_counter()
                sums = summed_distances(Y)
                exact = int(np.argmin(sums))
                t_exact += time.perf_counter() - start
                start = time.perf_counter()
                pick = medoid_index(Y, exact_max=0)
                t_cand += time.perf_counter() - start
                same += pick == exact
                worst = max(worst, float(sums[pick] / sums[exact] - 1.0))
            print(
                f"| {shape} | {n:,} | {args.seeds} | {same}/{args.seeds} | {worst:.2e} | "
                f"{t_exact / args.seeds:.2f} | {t_cand / args.seeds:.3f} |"
            )
    print("\n| n | exact medoid s (one cluster) |")
    print("|---|---|")
    for n in [1000, 2000] if args.quick else [1000, 2000, 4096]:
        Y = cluster("gaussian", n, args.dim, np.random.default_rng(0))
        start = time.perf_counter()
        medoid_index(Y)
        print(f"| {n:,} | {time.perf_counter() - start:.3f} |")
    if not args.quick:
        Y = cluster("gaussian", 130_000, args.dim, np.random.default_rng(0))
        start = time.perf_counter()
        medoid_index(Y)
        print(f"\ncandidate search at n = 130,000: {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
