"""The compute at which a run's expected curve reaches a target: its distribution.

``C*`` is where Eq. 1, ``R(C)``, first reaches the target ``r``. For a rising curve
``C* <= C`` exactly when ``R(C) >= r``, so the distribution of ``R(C)`` at every ``C`` is the
CDF of ``C*``:

    F(C) = P(C* <= C) = P(R(C) >= r).

``P(R(C) >= r)`` is read from the band on the expected curve the forecast already reports
(``Uncertainty.band`` for the prior-free fit, ``PriorForecast.band`` under a prior), both
at the forecast's ``level``: the band's edges are taken as the ``(1 -/+ level) / 2``
quantiles of a split normal centred on the fitted curve (one sd below, another above), so

    F(C) = Phi((centre(C) - r) / s(C)),  s = (centre - lo) / z if r <= centre else (hi - centre) / z,

``z = Phi^-1((1 + level) / 2)``. The prior-free band is widened by the same rolling-origin
conformal factor as the predictive interval (``calibrate``), as the prior's band already is,
so the crossing interval is exactly where the widened band's edges reach ``r``: the
interval ``compute_to_reach`` reports, and a median at the fit's own crossing. The
projection of a joint region onto one curve point is conservative, so the tails are too.

``F`` is evaluated on a log grid from the first positive compute to ``REACH`` times the last
one and made non-decreasing (a running maximum: the split normal is an approximation of a
distribution whose CDF cannot fall). ``P(reach) = F(grid end)``: mass beyond it counts as
never (``inf``), which is what "not reachable" means here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from scalerl.fit import law

__all__ = ["REACH", "Crossing", "crossing"]

REACH = 1000.0  # the grid ends at this multiple of the last compute: "never" beyond it
_N_GRID = 800


@dataclass(frozen=True, eq=False)
class Crossing:
    """The distribution of the crossing compute ``C*`` on a grid (module docstring)."""

    target: float
    level: float
    grid: np.ndarray  # (g,) compute, increasing
    cdf: np.ndarray  # (g,) P(C* <= grid), non-decreasing
    estimate: float  # the fit's own crossing (inf: its asymptote lies below the target)
    centre: np.ndarray  # (g,) the expected curve the distribution is centred on

    @property
    def p_reach(self) -> float:
        """P(the expected curve reaches the target within ``REACH`` x the data)."""
        return float(self.cdf[-1])

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


def crossing(fit, target: float, band, *, level: float, scale: float = 1.0, centre=None) -> Crossing:
    """The distribution of ``C*`` from ``band(C) -> (lo, hi)`` at ``level``.

    ``fit`` is the ``FitResult`` (its points set the grid; its curve is the centre unless
    ``centre(C)`` is given, as under a prior); ``scale`` widens the band's half-widths
    (the prior-free conformal factor; 1 where ``band`` is already calibrated).
    """
    pos = fit.compute[fit.compute > 0]
    grid = np.geomspace(pos.min(), pos.max() * REACH, _N_GRID)
    mid = np.asarray(fit.predict(grid) if centre is None else centre(grid), dtype=float).ravel()
    lo, hi = (np.asarray(v, dtype=float).ravel() for v in band(grid))
    z = float(stats.norm.ppf((1.0 + level) / 2.0))
    below = target <= mid
    sd = np.where(below, np.maximum(mid - lo, 0.0), np.maximum(hi - mid, 0.0)) * scale / z
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(sd > 0, stats.norm.sf((target - mid) / np.where(sd > 0, sd, 1.0)), below.astype(float))
    cdf = np.maximum.accumulate(np.clip(p, 0.0, 1.0))
    if centre is None:
        estimate = float(law.compute_for_reward(target, fit.A, fit.B, fit.C_mid, fit.R0))
    else:
        hit = mid >= target
        estimate = float(grid[np.argmax(hit)]) if hit.any() else np.inf
    if np.all(fit.reward >= target) or estimate == 0.0:
        estimate = float(grid[0])
    return Crossing(float(target), float(level), grid, cdf, estimate, mid)
