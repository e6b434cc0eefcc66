"""How a study's points move together: Eq. 1 fitted to all of them with one shape (issue 49, item 3).

The points of a learning-rate or batch-size study run the same recipe on the same task, so
they share the law's shape: one exponent ``B`` and one midpoint ``C_mid`` for all, each point
with its own start and ceiling,

    R_i(C) = R0_i + (A_i - R0_i) * g(C),    g(C) = 1 / (1 + (C_mid / C)^B)        (Eq. 1)

Given the shape, each point is a straight line in ``g`` (intercept ``R0_i``, slope
``A_i - R0_i``): the fit searches the shape on a log grid and solves every point's line in
closed form, and a residual bootstrap refits all points together, so that each replicate
moves every point with the one shape it draws.

Whether the points share one shape at all is tested first: each point's own best shape on the
same grid against the one shape, by the drop in the noise-weighted residuals,

    D = sum_i (SSE_i(shared) - SSE_i(own)) / s_i^2  ~  chi^2 with 2(k - 1) degrees of freedom,

``s_i^2`` each point's residual variance about its own shape. Where ``P(chi^2 > D)`` is below
``ONE_SHAPE_P`` the points do not share a shape (Table 1's bs512 and bs2048, C_mid 2818 against
10909) and the study pairs them independently. Residuals that follow each other (AR(1), the
evaluations' noise) only make ``D`` larger: the test errs toward independence.

What a study reads from it is only the *dependence* between the points' forecasts at the
budget: the ranks of each point's value across the replicates (``ranks``). Each point's
forecast stays its own ``Forecast`` (the interval ``scalerl plan`` gives for that run); the
ranks pair the points' draws when ``choose.p_best`` compares them (a copula), so that a shape
both points are unsure of moves them together instead of apart. Where the shape is not
shared, each point's own residuals dominate the replicates and the pairing is close to
independent. ``bench/pruners.py`` measures what this pairing stops, and how often wrongly.

(``prior.pooling`` is the other joint fit of a study: a comparison's partial pooling of each
run's own ``(B, C_mid)``, one fit per run for its figures. This one shares the shape outright
and is refitted hundreds of times a rung, which the grid makes cheap: a few hundredths of a
second for four points.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from scalerl.fit.fitting import B_BOUNDS

__all__ = ["ONE_SHAPE_P", "REPLICATES", "SharedShape", "fit_shared_shape", "ranks"]

ONE_SHAPE_P = 0.05
"""The points share one shape unless the chi-square test (module docstring) rejects it at this level."""

REPLICATES = 400
"""Bootstrap replicates of the fit: the pairs ``p_best`` averages over (its Monte Carlo
error on a probability is at most 0.5 / sqrt(400) = 0.025, a quarter of the default threshold)."""
B_GRID = np.geomspace(0.2, B_BOUNDS[1], 40)  # the exponent's grid: below 0.2 a curve is a ramp over decades
MID_SPAN = (0.05, 50.0)  # C_mid's grid, as multiples of the compute seen: a midpoint far outside is a ridge
MID_POINTS = 48
MAX_BINS = 100  # each point is fitted from at most this many consecutive means: the shape needs no more


def _binned(compute: np.ndarray, reward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most ``MAX_BINS`` consecutive means of a curve (each bin's mean compute and reward)."""
    c, y = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    if c.size <= MAX_BINS:
        return c, y
    parts = np.array_split(np.arange(c.size), MAX_BINS)
    return np.array([c[i].mean() for i in parts]), np.array([y[i].mean() for i in parts])


class SharedShape:
    """The shared shape and each point's line in it, and the bootstrap's values at the budget."""

    def __init__(self, b: float, c_mid: float, lines: np.ndarray, at_budget: np.ndarray, p_one: float) -> None:
        self.b, self.c_mid = b, c_mid
        self.p_one = p_one  # P(chi^2 > D): the test that the points share one shape (module docstring)
        self.lines = lines  # (k, 2): each point's (R0_i, A_i - R0_i)
        self.at_budget = at_budget  # (replicates, k): each replicate's R_i(C_b)


def _shapes(reach: float) -> tuple[np.ndarray, np.ndarray]:
    """The grid of shapes: (S,) exponents and (S,) midpoints, every pair of the two grids."""
    mids = np.geomspace(reach * MID_SPAN[0], reach * MID_SPAN[1], MID_POINTS)
    b, m = np.meshgrid(B_GRID, mids, indexing="ij")
    return b.ravel(), m.ravel()


def _g(compute: np.ndarray, b: np.ndarray, mid: np.ndarray) -> np.ndarray:
    """g for every shape at every compute: (S, n)."""
    return 1.0 / (1.0 + (mid[:, None] / compute[None, :]) ** b[:, None])


def _lines(g: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of ``y`` (R, n) on [1, g] for each shape of ``g`` (S, n): the slopes and
    intercepts (R, S) and the residual sums of squares (R, S)."""
    gc = g - g.mean(axis=1, keepdims=True)  # (S, n)
    yc = y - y.mean(axis=1, keepdims=True)  # (R, n)
    sgg = np.maximum((gc**2).sum(axis=1), 1e-300)  # (S,)
    sgy = yc @ gc.T  # (R, S)
    slope = sgy / sgg
    intercept = y.mean(axis=1, keepdims=True) - slope * g.mean(axis=1)[None, :]
    sse = (yc**2).sum(axis=1, keepdims=True) - sgy**2 / sgg
    return slope, intercept, sse


def fit_shared_shape(curves: Sequence[tuple[np.ndarray, np.ndarray]], budget: float, *, replicates: int = REPLICATES,
              seed: int = 0) -> SharedShape:  # fmt: skip
    """Fit Eq. 1 with one shape to every ``(compute, reward)`` of ``curves`` (module
    docstring), then refit ``replicates`` times with each point's residuals resampled (with
    replacement, every point at once), reading each point at ``budget``.

    Each point is weighted by its own noise (the residuals' spread at the best shape), so that
    a noisy point does not choose the shape for a quiet one."""
    curves = [_binned(c, y) for c, y in curves]
    reach = max(float(np.max(c)) for c, _ in curves)
    b, mid = _shapes(reach)
    gb = 1.0 / (1.0 + (mid / budget) ** b)  # (S,) g at the budget
    gs = [_g(c, b, mid) for c, _ in curves]  # each (S, n_i)
    ys = [y[None, :] for _, y in curves]  # each (1, n_i)
    sse = [_lines(g, y)[2][0] for g, y in zip(gs, ys)]  # each (S,)
    var = [max(float(s.min()) / max(y.size - 4, 1), 1e-8) for s, y in zip(sse, ys)]  # about its own shape
    best = int(np.argmin(sum(s / v for s, v in zip(sse, var))))
    drop = sum((s[best] - s.min()) / v for s, v in zip(sse, var))
    p_one = float(stats.chi2.sf(drop, 2 * (len(curves) - 1))) if len(curves) > 1 else 1.0
    fitted, resid, lines = [], [], []
    for g, y in zip(gs, ys):
        slope, icpt, _ = _lines(g[best:best + 1], y)
        f = icpt[0, 0] + slope[0, 0] * g[best]
        fitted.append(f)
        resid.append(y[0] - f)
        lines.append((icpt[0, 0], slope[0, 0]))
    rng = np.random.default_rng(seed)
    total = np.zeros((replicates, b.size))
    parts = []
    for f, e, g, v in zip(fitted, resid, gs, var):
        ystar = f[None, :] + rng.choice(e, size=(replicates, e.size), replace=True)  # (R, n)
        slope, icpt, s = _lines(g, ystar)
        total += s / v
        parts.append((slope, icpt))
    pick = np.argmin(total, axis=1)  # (R,) each replicate's shape
    rows = np.arange(replicates)
    at = np.stack([icpt[rows, pick] + slope[rows, pick] * gb[pick] for slope, icpt in parts], axis=1)  # (R, k)
    return SharedShape(float(b[best]), float(mid[best]), np.array(lines), at, p_one)


def ranks(fit: SharedShape) -> np.ndarray:
    """(replicates, k): each point's rank among the replicates, as a quantile in (0, 1) (ties
    broken by order): the copula ``choose.p_best`` pairs the points' own draws by."""
    at = fit.at_budget
    order = np.argsort(np.argsort(at, axis=0, kind="stable"), axis=0, kind="stable")
    return (order + 0.5) / at.shape[0]
