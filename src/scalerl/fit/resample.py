"""Resampling error bars for a sigmoid fit: the bootstrap and the across-seed spread.

The bootstrap treats evaluations as independent and cannot widen beyond its search box,
so it undercovers on real curves; ``scalerl.fit.uncertainty`` gives the intervals the
tool reports. The bootstrap stays as a diagnostic and for users who ask for it.

The paper reports no confidence intervals; its ±0.02 margin on A comes from the spread
of three independent ScaleRL runs (§1.4). Here both are available:

* ``bootstrap`` resamples one curve and refits it many times, giving percentile
  intervals for A, B, C_mid (and R0 when fitted) and a band for the fitted curve.
  ``kind="residual"`` adds resampled residuals to the fitted curve (keeps the compute
  design fixed; residuals are centred and inflated by sqrt(n / (n - p)) to undo the
  shrinkage of least-squares residuals). ``kind="case"`` resamples (compute, reward)
  points. Every resample is refitted from the point estimate with one batched
  Levenberg-Marquardt loop (``scalerl.fit.solver``), so 1000 resamples cost about as
  much as a handful of single fits.
* ``pooled_fit`` fits several seeds of one recipe, each alone and all pooled, and
  reports the across-seed spread of A, B and C_mid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.fit import law, solver
from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import FitResult, fit_points
from scalerl.fit.options import FitOptions

__all__ = ["BootstrapResult", "PooledFit", "bootstrap", "pooled_fit"]

PARAMS = ("A", "B", "C_mid", "R0")


@dataclass(frozen=True, eq=False)
class BootstrapResult:
    """Refitted parameters of ``n`` resamples of one fit.

    ``samples`` (n_ok, 4) holds A, B, C_mid, R0 per usable resample (finite SSE);
    ``n_failed`` resamples gave no finite fit and ``n_unconverged`` hit the iteration
    limit (kept: they are near a minimum, but their count is reported, never hidden).
    ``on_bound`` counts, per parameter, the resamples that ended on a bound of the
    search box: a large count means the interval is cut off by the box.
    """

    fit: FitResult
    kind: str
    level: float
    samples: np.ndarray  # (n_ok, 4)
    n: int
    n_failed: int
    n_unconverged: int
    on_bound: dict[str, int]
    seed: int | None

    def _q(self, level: float | None) -> tuple[float, float]:
        level = self.level if level is None else level
        return (1.0 - level) / 2.0, (1.0 + level) / 2.0

    def interval(self, name: str, level: float | None = None) -> tuple[float, float]:
        """Percentile interval of one parameter ('A', 'B', 'C_mid' or 'R0')."""
        lo, hi = np.quantile(self.samples[:, PARAMS.index(name)], self._q(level))
        return float(lo), float(hi)

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        """Intervals at ``level`` for A, B, C_mid, and R0 when it was fitted."""
        names = PARAMS if self.fit.r0_fitted else PARAMS[:3]
        if self.fit.fixed_A is not None:
            names = tuple(n for n in names if n != "A")
        return {name: self.interval(name) for name in names}

    def predictions(self, C) -> np.ndarray:
        """Eq. 1 for every resample: (n_ok, len(C))."""
        C = np.atleast_1d(np.asarray(C, dtype=float))
        A, B, C_mid, R0 = (self.samples[:, i, None] for i in range(4))
        return law.sigmoid(C[None, :], A, B, C_mid, R0)

    def band(self, C, level: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise percentile band of the fitted curve (the expected reward at C, not a
        single noisy evaluation of it). Returns lo, hi with the shape of ``C``."""
        shape = np.shape(C)
        lo, hi = np.quantile(self.predictions(C), self._q(level), axis=0)
        return lo.reshape(shape), hi.reshape(shape)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "level": self.level,
            "n": self.n,
            "n_failed": self.n_failed,
            "n_unconverged": self.n_unconverged,
            "on_bound": dict(self.on_bound),
            "seed": self.seed,
            "intervals": {k: [lo, hi] for k, (lo, hi) in self.intervals.items()},
        }


def bootstrap(
    result_or_data,
    n: int = 1000,
    *,
    kind: str = "residual",
    seed: int | None = 0,
    level: float = FitOptions.level,
    options: FitOptions | None = None,
) -> BootstrapResult:
    """Bootstrap a fit: ``n`` resamples, each refitted from the point estimate.

    ``result_or_data`` is a ``FitResult`` or a ``(compute, reward)`` pair, which is
    first fitted with ``options`` (default ``FitOptions()``). The refits keep
    the fit's R0 rule, fixed A and search box.
    """
    if kind not in ("residual", "case"):
        raise CurveError(f"unknown bootstrap kind {kind!r}; use 'residual' or 'case'.")
    if not 0 < level < 1 or n < 1:
        raise CurveError(f"bootstrap needs n >= 1 and 0 < level < 1, got n={n}, level={level}.")
    fit = result_or_data
    if not isinstance(fit, FitResult):
        fit = (FitOptions() if options is None else options).fit(*result_or_data)
    scale = float(fit.compute.max())
    lc, lower, upper = solver.to_internal(fit.compute, fit.bounds, scale)
    free = np.array([fit.fixed_A is None, True, True, fit.r0_fitted])
    theta0 = np.array([fit.A, fit.B, np.log(fit.C_mid / scale), fit.R0])
    rng = np.random.default_rng(seed)
    theta, sse, conv = _refits(fit, n, kind, rng, lc, theta0, free, lower, upper)
    ok = np.isfinite(sse) & np.isfinite(theta).all(axis=1)
    theta = theta[ok]
    at_bound = solver.on_bound(theta, lower, upper, free)
    samples = theta.copy()
    samples[:, 2] = scale * np.exp(theta[:, 2])
    return BootstrapResult(
        fit=fit,
        kind=kind,
        level=level,
        samples=samples,
        n=n,
        n_failed=int((~ok).sum()),
        n_unconverged=int((ok & ~conv).sum()),
        on_bound={name: int(k) for name, k in zip(PARAMS, at_bound.sum(axis=0)) if k},
        seed=seed,
    )


def _refits(fit: FitResult, n: int, kind: str, rng, lc, theta0, free, lower, upper):
    """Draw and refit the ``n`` resamples in chunks of resamples: theta (n, 4), sse, conv (n,).

    A chunk of k resamples holds their indices (k, m) and data (k, m) next to the solver's
    working set, so k is ``solver.chunk_rows(m, LM_ROW_ARRAYS + 3)`` and memory stays
    within ``solver.CHUNK_BYTES`` whatever n x m. The chunks draw their indices one after
    another from the same generator, which continues its stream, so the resamples are the
    ones a single (n, m) draw gives.
    """
    m = fit.n_points
    if kind == "residual":
        p = int(free.sum())
        res = (fit.residuals - fit.residuals.mean()) * np.sqrt(m / max(m - p, 1))
        centre = fit.predict(fit.compute)  # (m,)
    parts = []
    for c in solver.chunks(n, solver.chunk_rows(m, solver.LM_ROW_ARRAYS + 3)):
        idx = rng.integers(0, m, size=(c.stop - c.start, m))  # (k, m)
        if kind == "residual":
            y, lc_b = centre + res[idx], lc  # (k, m), (m,)
        else:
            y, lc_b = fit.reward[idx], lc[idx]  # (k, m), (k, m)
        parts.append(solver.batched_lm(lc_b, y, np.tile(theta0, (len(y), 1)), free, lower, upper,
                                       max_iter=100))
    return tuple(np.concatenate(arrays) for arrays in zip(*parts))


@dataclass(frozen=True, eq=False)
class PooledFit:
    """Several seeds of one recipe: the pooled fit, each seed's fit, and their spread.

    ``spread[name]`` is half the range (max - min) / 2 of a parameter across seeds: the
    paper's "A varied by at most ±0.015" (§1.4) is this number for A. ``std`` is the
    across-seed standard deviation (ddof=1).
    """

    fit: FitResult
    per_seed: tuple[FitResult, ...]

    def _values(self, name: str) -> np.ndarray:
        return np.array([getattr(f, name) for f in self.per_seed])

    @property
    def mean(self) -> dict[str, float]:
        return {k: float(self._values(k).mean()) for k in PARAMS[:3]}

    @property
    def std(self) -> dict[str, float]:
        return {k: float(self._values(k).std(ddof=1)) for k in PARAMS[:3]}

    @property
    def spread(self) -> dict[str, float]:
        return {k: float(np.ptp(self._values(k)) / 2.0) for k in PARAMS[:3]}

    def to_dict(self) -> dict:
        return {
            "pooled": self.fit.to_dict(),
            "per_seed": [f.to_dict() for f in self.per_seed],
            "mean": self.mean,
            "std": self.std,
            "spread": self.spread,
        }


def pooled_fit(curves, options: FitOptions | None = None) -> PooledFit:
    """Fit each seed's ``(compute, reward)`` curve alone and all of them pooled.

    Each seed is fitted with ``options`` (same R0 rule and cut). The
    pooled fit uses every seed's fit points together, sorted by compute, and bins them
    like one long curve when there are more than ``options.max_points`` (the result's
    ``binned_from`` and ``message`` say so); R0 is the mean of the seeds' fixed R0 values,
    or fitted if any seed fitted it.
    """
    options = FitOptions() if options is None else options
    curves = list(curves.values()) if isinstance(curves, dict) else list(curves)
    if len(curves) < 2:
        raise CurveError(f"a pooled fit needs at least 2 seeds, got {len(curves)}.")
    per_seed = tuple(
        options.fit(c, r, source=f"seed {i}")
        for i, (c, r) in enumerate(curves)
    )
    compute = np.concatenate([f.compute for f in per_seed])
    reward = np.concatenate([f.reward for f in per_seed])
    order = np.argsort(compute, kind="stable")
    r0 = None if any(f.r0_fitted for f in per_seed) else float(np.mean([f.R0 for f in per_seed]))
    o = options
    pooled = fit_points(
        compute[order], reward[order], r0=r0, bounded=o.bounded, method=o.method,
        a_grid=o.a_grid, c_mid_grid=o.c_mid_grid, a_bounds=o.a_bounds, b_bounds=o.b_bounds,
        c_mid_bounds=o.c_mid_bounds, max_points=o.max_points,
    )  # fmt: skip
    return PooledFit(fit=pooled, per_seed=per_seed)
