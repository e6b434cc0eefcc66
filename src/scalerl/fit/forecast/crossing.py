"""The compute at which a run is seen to reach a target: read off the predictive draws.

Nobody watches the expected curve: a run is seen to reach ``r`` when its validation, read as
the mean of its last ``window`` evaluations, first does. ``scalerl.fit.forecast.draws`` draws whole
future runs (the expected curve's uncertainty, calibrated, and the run's AR(1) evaluation
noise on its own schedule); the crossing ``C*_j`` of each draw is its first read at or above
``r`` after the data (``window`` 0: where its expected curve first is, before or after the
data), ``inf`` when none comes within the draws' horizon. Then

    F(C) = P(C* <= C) = mean_j [C*_j <= C],
    P(reach at all) = F(horizon) = mean_j [C*_j < inf],

one distribution: P(within any budget) is F at that budget, never above P(at all), never
falling as the budget grows. Only reads after the data count: the run has not been seen to
reach ``r`` yet (a target already reached is the caller's case). A target within noise of
the ceiling is reached at some time rather than never, and noise makes a run cross earlier
than its expected curve (a high read counts). "Not reachable" means P(at all) below the
``(1 - level) / 2`` tail the interval leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.fit.forecast.draws import Draws

__all__ = ["WINDOW", "Crossing", "crossing"]

WINDOW = 5
"""Evaluations a run's validation is averaged over when it is read (``scalerl plan --window``):
one lucky evaluation is not a run that reached its target."""


@dataclass(frozen=True, eq=False)
class Crossing:
    """The crossing compute's draws and their CDF on the draws' schedule (module docstring)."""

    target: float
    level: float
    window: int
    draws: np.ndarray  # (n,) C*_j, inf where never within the horizon
    grid: np.ndarray  # (t,) the future evaluations' compute, increasing
    centre: np.ndarray  # (t,) the expected curve's median on the grid
    horizon: float

    @property
    def cdf(self) -> np.ndarray:
        """(t,) ``P(C* <= grid)``, non-decreasing."""
        return np.searchsorted(np.sort(self.draws), self.grid, side="right") / self.draws.size

    @property
    def p_reach(self) -> float:
        """P(reach within the horizon)."""
        return float(np.mean(np.isfinite(self.draws)))

    @property
    def reachable(self) -> bool:
        """False when the target is reached in fewer than the ``(1 - level) / 2`` tail of
        the draws: even the interval's upper edge never gets there."""
        return self.p_reach >= (1.0 - self.level) / 2.0

    @property
    def estimate(self) -> float:
        """Where the expected curve's median first reaches the target (inf: never)."""
        hit = self.centre >= self.target
        return float(self.grid[np.argmax(hit)]) if hit.any() else np.inf

    def quantile(self, q: float) -> float:
        """The draws' ``q`` quantile (``inf`` when fewer than ``q`` of them cross)."""
        return float(np.quantile(self.draws, q, method="inverted_cdf"))

    @property
    def interval(self) -> tuple[float, float, float]:
        """(median, lo, hi) of ``C*`` at ``level``; ``inf`` where the draws never reach it."""
        tail = (1.0 - self.level) / 2.0
        return self.quantile(0.5), self.quantile(tail), self.quantile(1.0 - tail)

    def p_within(self, compute: float) -> float:
        """``P(C* <= compute)``."""
        return float(np.mean(self.draws <= compute))

    @property
    def if_reached(self) -> tuple[float, float, float]:
        """(median, lo, hi) of ``C*`` among the draws that reach the target within the
        horizon: "if it gets there, then about here", finite whenever any draw does (nan
        where none)."""
        hit = self.draws[np.isfinite(self.draws)]
        if not hit.size:
            return (np.nan, np.nan, np.nan)
        tail = (1.0 - self.level) / 2.0
        q = np.quantile(hit, [0.5, tail, 1.0 - tail], method="inverted_cdf")
        return float(q[0]), float(q[1]), float(q[2])


def crossing(pred: Draws, target: float, window: int = WINDOW) -> Crossing:
    """The crossing of ``target`` by ``pred``'s draws, read as ``window``-evaluation means."""
    grid = pred.grid(window)
    draws = pred.first_crossing(target, window)
    return Crossing(float(target), pred.level, int(window), draws, grid, pred.median(grid), pred.horizon)
