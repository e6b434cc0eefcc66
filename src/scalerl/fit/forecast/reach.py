"""Reaching a target, read off a forecast's draws: the compute, the hours and the chance.

Each draw's crossing ``C*_j`` (``crossing``) goes through the run's clock at its own rate
``s_j ~ N(s, sd)`` (the clock's spread, drawn with a fixed seed, truncated at ``s / 10``):

- compute, hours and device-hours to the target: the draws' median and ``(1 -/+ level) / 2``
  quantiles, ``inf`` ("never") where the quantile falls among draws that never reach it
  within the horizon;
- **if reached**: the same quantiles among the draws that do reach it, finite whenever any
  does ("if it gets there: 0.05-0.09 h");
- P(within a budget) the share of draws within every budget given (hours and compute),
  P(at all) the share within the horizon: the same draws, so P(within) <= P(at all).

A target the run's own reads already reached needs no forecast: the answer is that moment.
Where the forecast's state supports no crossing time (a flat band, a decline, too few
evaluations), the probabilities stand and the unconditional times are "never". A run not
learning whose draws are the corpus's late risers is timed by them: its interval is then
"[lo, never]" unless nearly every such run rose that far, and "if it gets there" is finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.fit.forecast.crossing import Crossing
from scalerl.fit.time.timing import Clock

__all__ = ["Reach", "already_reached", "reach_of", "trailing_mean"]

NEVER = (np.inf, np.inf, np.inf)


@dataclass(frozen=True)
class Reach:
    """The answer to "when does the run reach ``target``?" (module docstring); triples are
    (median, lo, hi); ``hours`` and ``device_hours`` are None without a clock."""

    target: float
    level: float
    window: int
    compute: tuple[float, float, float]
    p_at_all: float  # within the horizon
    horizon: float
    reachable: bool
    hours: tuple[float, float, float] | None = None
    device_hours: tuple[float, float, float] | None = None
    if_reached: tuple[float, float, float] = (np.nan, np.nan, np.nan)  # compute, among draws that reach it
    if_reached_hours: tuple[float, float, float] | None = None
    p_within: float | None = None  # within the budgets given
    budget_compute: float | None = None
    budget_hours: float | None = None
    already: bool = False  # the run's own reads reached it: the triples are that moment
    supported: bool = True  # False: the state gives no crossing time (``note`` says why)
    note: str = ""

    def to_dict(self) -> dict:
        def triple(v):
            return None if v is None else {k: (float(x) if np.isfinite(x) else None)
                                           for k, x in zip(("median", "lo", "hi"), v)}  # fmt: skip

        return {"target": self.target, "level": self.level, "window": self.window, "reachable": self.reachable,
                "already": self.already, "supported": self.supported, "note": self.note,
                "p_reach_at_all": self.p_at_all, "horizon_compute": self.horizon,
                "compute": triple(self.compute), "hours": triple(self.hours),
                "device_hours": triple(self.device_hours), "if_reached": {"compute": triple(self.if_reached),
                                                                          "hours": triple(self.if_reached_hours)},
                "p_reach": self.p_within, "budget": {"compute": self.budget_compute, "hours": self.budget_hours}}  # fmt: skip


def _quantiles(x: np.ndarray, level: float) -> tuple[float, float, float]:
    if not x.size:
        return (np.nan, np.nan, np.nan)
    tail = (1.0 - level) / 2.0
    # inverted_cdf never interpolates between a finite draw and inf (which gives NaN)
    return tuple(float(v) for v in np.quantile(x, [0.5, tail, 1.0 - tail], method="inverted_cdf"))


def trailing_mean(reward, window: int) -> np.ndarray:
    """Each evaluation's read: the mean of the last ``window`` evaluations (of all there are
    at the start); reward (n,) -> (n,)."""
    r = np.asarray(reward, dtype=float)
    w = max(int(window), 1)
    return np.array([r[max(0, i + 1 - w): i + 1].mean() for i in range(r.size)])


def already_reached(target: float, compute: np.ndarray, reward: np.ndarray, clock: Clock | None, level: float,
                    window: int, horizon: float) -> Reach | None:
    """The moment the run's own reads first reached ``target``, or None."""
    hit = np.flatnonzero(trailing_mean(reward, window) >= target)
    if not hit.size:
        return None
    c = float(compute[hit[0]])
    hours = devices = None
    if clock is not None:
        h = float(clock.hours(np.array([c]))[0])
        hours, devices = (h, h, h), (h * clock.devices,) * 3
    return Reach(target, level, window, (c, c, c), 1.0, horizon, True, hours, devices, (c, c, c), hours,
                 already=True)  # fmt: skip


def reach_of(cross: Crossing, clock: Clock | None, *, budget_compute: float | None = None,
             budget_hours: float | None = None, supported: bool = True, note: str = "", seed: int = 0) -> Reach:
    """The module docstring's answer from the crossing's draws and the clock."""
    c_star = cross.draws
    drawn = None
    if clock is not None:
        rate = clock.s
        if clock.s_sd > 0:
            rate = np.maximum(np.random.default_rng(seed).normal(clock.s, clock.s_sd, c_star.size), clock.s / 10.0)
        drawn = clock.hours(c_star, rate)
    p_within = None
    if budget_hours is not None or budget_compute is not None:
        ok = np.ones(c_star.size, dtype=bool)
        if budget_hours is not None and drawn is not None:
            ok &= drawn <= budget_hours
        if budget_compute is not None:
            ok &= c_star <= budget_compute
        p_within = float(np.mean(ok))
    level = cross.level
    compute = _quantiles(c_star, level) if supported else NEVER
    hit = np.isfinite(c_star)
    hours = devices = if_hours = None
    if drawn is not None:
        hours = _quantiles(drawn, level) if supported else NEVER
        devices = tuple(h * clock.devices for h in hours)
        if_hours = _quantiles(drawn[hit], level)
    return Reach(cross.target, level, cross.window, compute, cross.p_reach, cross.horizon, cross.reachable, hours,
                 devices, _quantiles(c_star[hit], level), if_hours, p_within, budget_compute, budget_hours,
                 supported=supported, note=note)  # fmt: skip
