"""Paper-mode (App. A.5 grid, 7100 curve_fit calls) vs fast-mode sigmoid fits, side by side
in one run, on noisy curves built from Table 1's parameters; then 1000-resample bootstrap
times. Usage: python bench/fit_speed.py [--rows N] [--repeats K]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

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
    args = ap.parse_args()
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
    print(f"speed-up paper/fast: median {np.median(ratios):.0f}x, min {min(ratios):.0f}x")
    C, R = curve(0.61, 1.92, 2542.0, seed=0)
    fit = fit_sigmoid(C, R)
    for kind in ("residual", "case"):
        tb, boot = timed(lambda kind=kind: bootstrap(fit, 1000, kind=kind, seed=0), args.repeats)
        lo, hi = boot.intervals["A"]
        print(f"bootstrap 1000 {kind:8s}: {tb:.3f} s  (A 95% CI [{lo:.4f}, {hi:.4f}])")


if __name__ == "__main__":
    main()
