"""The compute at which a run is seen to reach a target: its distribution.

**The expected curve.** ``C*`` is where Eq. 1, ``R(C)``, first reaches the target ``r``. For
a rising curve ``C* <= C`` exactly when ``R(C) >= r``, so the distribution of ``R(C)`` at
every ``C`` is the CDF of ``C*``:

    F(C) = P(C* <= C) = P(R(C) >= r).

``P(R(C) >= r)`` is read from the band on the expected curve the forecast already reports
(``Uncertainty.band`` for the prior-free fit, ``PriorForecast.band`` under a prior), both
at the forecast's ``level``: the band's edges are taken as the ``(1 -/+ level) / 2``
quantiles of a split normal centred on the fitted curve (one sd below, another above), so
the expected curve is the family ``R_u(C) = centre(C) + u * s(C)``, ``u ~ N(0, 1)``, with
``s = (centre - lo) / z`` for ``u < 0`` and ``(hi - centre) / z`` above, ``z =
Phi^-1((1 + level) / 2)``. The prior-free band is widened by the same rolling-origin
conformal factor as the predictive interval (``calibrate``), as the prior's band already
is. ``P(reach at all) = F(REACH x the data)`` decides "not reachable": the expected curve's
plausible ceiling lies below the target.

**What the user sees** (``Looks``). Nobody watches the expected curve: a run is seen to reach
``r`` when its validation, read as the mean of its last ``window`` evaluations, first does.
After the data (``now``) evaluations come every ``spacing`` of compute (the run's own recent
spacing); the window mean's error around the expected curve is AR(1) noise averaged over
``window`` evaluations (``scalerl.fit.noise``; sd ``sigma * sqrt(v)``, ``v = (W + 2 sum_k (W - k)
rho^k) / W^2``), and two reads more than ``length = W + rho / (1 - rho)`` evaluations apart
are taken as independent (the window's overlap plus the AR(1) memory: an approximation, which
the tests check on simulated runs). For one expected curve ``R_u`` the chance that no read
has reached ``r`` by ``C`` is then

    S_u(C) = prod over reads C_j in (now, C] of (1 - Phi((R_u(C_j) - r) / sd)),

with ``(C - now) / (spacing * length)`` independent reads, and the CDF of the first crossing is
``F(C) = 1 - E_u[S_u(C)]`` (257 quantiles of ``u``). Only reads after the data count: the
run has not been seen to reach ``r`` yet (a target already reached is the caller's case).
Noise makes a run cross earlier than its expected curve (a high read counts), and a target
within noise of the ceiling is reached at some time rather than never. Without ``Looks``
``F`` is the expected curve's own (the formula above, made non-decreasing).

``F`` is evaluated on a log grid from the first positive compute to ``REACH`` times the last
one; mass beyond it counts as never (``inf``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from scalerl.fit import law

__all__ = ["REACH", "Crossing", "Looks", "crossing", "looks_for"]

REACH = 1000.0  # the grid ends at this multiple of the last compute: "never" beyond it
_N_GRID = 800
_N_U = 257  # quantiles of the expected curve's family
WINDOW = 5
"""Evaluations a run's validation is averaged over when it is read (``scalerl plan --window``):
one lucky evaluation is not a run that reached its target."""


@dataclass(frozen=True)
class Looks:
    """How the run is read after its data (module docstring): from ``now`` on, every
    ``spacing`` of compute, a ``window``-evaluation mean with error sd ``sd`` whose reads
    are independent every ``length`` evaluations."""

    now: float
    spacing: float
    sd: float
    length: float
    window: int


def looks_for(compute: np.ndarray, sigma: float, rho: float, window: int = WINDOW) -> Looks:
    """``Looks`` of a curve evaluated at ``compute`` (n,) whose noise is AR(1) (``sigma``,
    ``rho``): the spacing of its last evaluations (median of up to 5 gaps)."""
    c = np.sort(np.asarray(compute, dtype=float))
    gaps = np.diff(c)[-5:]
    gaps = gaps[gaps > 0]
    spacing = float(np.median(gaps)) if gaps.size else float(c[-1])
    k = np.arange(1, window)
    v = (window + 2.0 * float(np.sum((window - k) * rho**k))) / window**2
    return Looks(float(c[-1]), spacing, float(sigma * np.sqrt(v)), window + rho / (1.0 - rho), int(window))


@dataclass(frozen=True, eq=False)
class Crossing:
    """The distribution of the crossing compute ``C*`` on a grid (module docstring)."""

    target: float
    level: float
    grid: np.ndarray  # (g,) compute, increasing
    cdf: np.ndarray  # (g,) P(C* <= grid), non-decreasing: the first read at the target with looks
    estimate: float  # the fit's own crossing (inf: its asymptote lies below the target)
    centre: np.ndarray  # (g,) the expected curve the distribution is centred on
    p_reach: float  # P(the expected curve reaches the target within REACH x the data)

    @property
    def reachable(self) -> bool:
        """False when even the band's upper edge stays below the target: P(reach) below
        ``(1 - level) / 2``, the one-sided tail the interval leaves out."""
        return self.p_reach >= (1.0 - self.level) / 2.0

    def quantile(self, q: float) -> float:
        """Smallest grid compute with ``F >= q`` (``inf`` when F stays below q)."""
        hit = self.cdf >= q
        return float(self.grid[np.argmax(hit)]) if hit.any() else np.inf

    @property
    def interval(self) -> tuple[float, float, float]:
        """(median, lo, hi) of ``C*`` at ``level``; ``inf`` where F never reaches it."""
        tail = (1.0 - self.level) / 2.0
        return self.quantile(0.5), self.quantile(tail), self.quantile(1.0 - tail)

    def p_within(self, compute: float) -> float:
        """``P(C* <= compute)``; 0 below the grid, ``p_reach`` beyond it."""
        if compute < self.grid[0]:
            return 0.0
        return float(self.cdf[np.searchsorted(self.grid, compute, side="right") - 1])

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of ``C*`` by inverting F (``inf`` with probability 1 - p_reach)."""
        u = rng.uniform(size=n)
        idx = np.searchsorted(self.cdf, u, side="left")
        out = np.full(n, np.inf)
        ok = idx < self.grid.size
        out[ok] = self.grid[idx[ok]]
        return out


def crossing(fit, target: float, band, *, level: float, scale: float = 1.0, centre=None,
             looks: Looks | None = None) -> Crossing:
    """The distribution of ``C*`` from ``band(C) -> (lo, hi)`` at ``level``.

    ``fit`` is the ``FitResult`` (its points set the grid; its curve is the centre unless
    ``centre(C)`` is given, as under a prior); ``scale`` widens the band's half-widths
    (the prior-free conformal factor; 1 where ``band`` is already calibrated); ``looks``:
    the first read at the target instead of the expected curve's crossing.
    """
    pos = fit.compute[fit.compute > 0]
    grid = np.geomspace(pos.min(), pos.max() * REACH, _N_GRID)
    mid = np.asarray(fit.predict(grid) if centre is None else centre(grid), dtype=float).ravel()
    lo, hi = (np.asarray(v, dtype=float).ravel() for v in band(grid))
    z = float(stats.norm.ppf((1.0 + level) / 2.0))
    down, up = np.maximum(mid - lo, 0.0) * scale / z, np.maximum(hi - mid, 0.0) * scale / z
    below = target <= mid
    sd = np.where(below, down, up)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(sd > 0, stats.norm.sf((target - mid) / np.where(sd > 0, sd, 1.0)), below.astype(float))
    curve_cdf = np.maximum.accumulate(np.clip(p, 0.0, 1.0))
    cdf = curve_cdf if looks is None else _first_read(grid, mid, down, up, target, looks)
    if centre is None:
        estimate = float(law.compute_for_reward(target, fit.A, fit.B, fit.C_mid, fit.R0))
    else:
        hit = mid >= target
        estimate = float(grid[np.argmax(hit)]) if hit.any() else np.inf
    if np.all(fit.reward >= target) or estimate == 0.0:
        estimate = float(grid[0])
    return Crossing(float(target), float(level), grid, cdf, estimate, mid, float(curve_cdf[-1]))


def _first_read(grid, mid, down, up, target: float, looks: Looks) -> np.ndarray:
    """``F(C) = 1 - E_u[S_u(C)]`` on ``grid`` (module docstring); grid (g,), the rest (g,)."""
    u = stats.norm.ppf((np.arange(_N_U) + 0.5) / _N_U)[:, None]  # (J, 1)
    curves = mid + u * np.where(u < 0, down, up)  # (J, g)
    if looks.sd > 0:
        p = stats.norm.sf((target - curves) / looks.sd)
    else:
        p = (curves >= target).astype(float)
    reads = np.diff(np.maximum(grid, looks.now), prepend=looks.now) / (looks.spacing * looks.length)  # (g,)
    log_miss = np.cumsum(reads * np.log1p(-np.clip(p, 0.0, 1.0 - 1e-15)), axis=1)
    return np.maximum.accumulate(1.0 - np.exp(log_miss).mean(axis=0))
