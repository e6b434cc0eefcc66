"""Paper-mode (App. A.5 grid, 7100 curve_fit calls) vs fast-mode sigmoid fits, side by side
in one run, on noisy curves built from Table 1's parameters; then 1000-resample bootstrap
times; then a 1e6-point curve (a per-sample log): fit (binned to 2000 means), honest
intervals and a 1000-resample bootstrap, with the process's peak RSS; then an unbinned
long curve (``max_points=None``), whose grid and LM work in chunks of ``solver.CHUNK_BYTES``,
with its traced peak.
These speed figures are what the test suite no longer asserts (a busy machine stretches any
timing): the paper/fast ratio (goal >= 100x), 1000 resamples (goal <= 3 s) and the long
curve (issue 12: <= 30 s and <= 1 GB peak RSS); each line says whether its goal is met.
Usage: python bench/fit_speed.py [--rows N] [--repeats K] [--big N] [--unbinned N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _workload import parallel_scaling  # bench/ is on the path when run as a script

from scalerl.fit import bootstrap, fit_sigmoid, sigmoid
from scalerl.fit.paper import TABLE1 as PAPER_TABLE1

TABLE1 = [tuple(row) for row in PAPER_TABLE1]  # name, C_mid (GPU-hours), B, A


def curve(A, B, C_mid, seed, n=80, sigma=0.005, R0=0.3):
    """80 evaluations from step 0 to 6 x C_mid, N(0, 0.005^2) noise after step 0."""
    C = np.linspace(0.0, 6.0 * C_mid, n)
    noise = np.random.default_rng(seed).normal(0.0, sigma, n)
    noise[0] = 0.0
    return C, np.clip(sigmoid(C, A, B, C_mid, R0) + noise, 0.0, 1.0)


def timed(fn, repeats=1):
    best, out = np.inf, None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=len(TABLE1))
    ap.add_argument("--repeats", type=int, default=5, help="fast/bootstrap: best of K runs")
    ap.add_argument("--big", type=int, default=1_000_000, help="points of the long curve (0: skip)")
    ap.add_argument("--unbinned", type=int, default=100_000,
                    help="points of the unbinned long curve (0: skip)")
    args = ap.parse_args()
    print(f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    print(f"{'curve':24s} {'paper s':>8s} {'fast ms':>8s} {'ratio':>7s} {'SSE paper':>10s} "
          f"{'SSE fast':>10s}  |dA| paper/fast")  # fmt: skip
    ratios = []
    for i, (name, C_mid, B, A) in enumerate(TABLE1[: args.rows]):
        C, R = curve(A, B, C_mid, seed=i)
        tp, paper = timed(lambda C=C, R=R: fit_sigmoid(C, R, method="paper"))
        tf, fast = timed(lambda C=C, R=R: fit_sigmoid(C, R), args.repeats)
        ratios.append(tp / tf)
        print(f"{name:24s} {tp:8.2f} {tf * 1e3:8.1f} {tp / tf:6.0f}x {paper.sse:10.4e} "
              f"{fast.sse:10.4e}  {abs(paper.A - A):.4f}/{abs(fast.A - A):.4f}")  # fmt: skip
    print(f"speed-up paper/fast: median {np.median(ratios):.0f}x, min {min(ratios):.0f}x "
          f"(goal >= 100x: {_met(min(ratios) >= 100)})")
    C, R = curve(0.61, 1.92, 2542.0, seed=0)
    fit = fit_sigmoid(C, R)
    for kind in ("residual", "case"):
        tb, boot = timed(lambda kind=kind: bootstrap(fit, 1000, kind=kind, seed=0), args.repeats)
        lo, hi = boot.intervals["A"]
        print(f"bootstrap 1000 {kind:8s}: {tb:.3f} s  (A 95% CI [{lo:.4f}, {hi:.4f}]; "
              f"goal <= 3 s: {_met(tb <= 3.0)})")
    if args.big:
        long_curve(args.big)
    if args.unbinned:
        unbinned_curve(args.unbinned)
    print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _long(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n points to 16k GPU-hours with per-sample noise N(0, 0.05^2)."""
    C = np.linspace(0.0, 16000.0, n)
    noise = np.random.default_rng(1).normal(0.0, 0.05, n)
    return C, np.clip(sigmoid(C, 0.61, 1.92, 2542.0, 0.3) + noise, 0.0, 1.0)


def long_curve(n: int) -> None:
    import resource

    from scalerl.fit import assess

    C, R = _long(n)
    t = time.perf_counter()
    fit = fit_sigmoid(C, R)
    t_fit = time.perf_counter() - t
    unc = assess(fit)
    t_unc = time.perf_counter() - t - t_fit
    boot = bootstrap(fit, 1000, seed=0)
    t_all = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    lo, hi = unc.A_plausible
    print(f"{n:,}-point curve: fit {t_fit:.2f} s ({fit.message}), intervals {t_unc:.2f} s, "
          f"+ bootstrap 1000: {t_all:.2f} s in all; peak RSS {rss:.2f} GB; A {fit.A:.4f} in "
          f"[{lo:.4f}, {hi:.4f}] (bootstrap [{boot.interval('A')[0]:.4f}, {boot.interval('A')[1]:.4f}]); "
          f"goal <= 30 s and <= 1 GB: {_met(t_all <= 30.0 and rss <= 1.0)}")


def unbinned_curve(n: int) -> None:
    """``max_points=None``: every point is fitted, the sigmoid's (B, m) grid and LM seeds in
    chunks, the power law one B at a time. The traced peak (numpy's allocations) stays near
    the chunk budget plus O(n), where one (25, 60, n) grid array alone was 8 * 1500 * n bytes."""
    import tracemalloc

    from scalerl.fit import fit_power_law, solver

    C, R = _long(n)
    tracemalloc.start()
    t = time.perf_counter()
    fit = fit_sigmoid(C, R, max_points=None)
    t_fit = time.perf_counter() - t
    power = fit_power_law(C, R, max_points=None)
    t_all = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    print(f"{n:,}-point curve unbinned: sigmoid fit {t_fit:.2f} s on {fit.n_points:,} points "
          f"(A {fit.A:.4f}), + power law {t_all:.2f} s in all (A {power.A:.4f}); traced peak "
          f"{peak:.0f} MB (chunk budget {solver.CHUNK_BYTES / 2**20:.0f} MB; one unchunked grid "
          f"array {8 * 1500 * n / 1e9:.1f} GB)")



if __name__ == "__main__":
    main()
