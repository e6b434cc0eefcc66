"""Rolling-origin conformal calibration of the predictive interval (shape error), and
``assess``: the model-based intervals (``uncertainty``) calibrated here.

Eq. 1 is only approximately the shape of a real run, and the noise model is only
approximately its noise. Both errors show when the fit extrapolates, so they are measured
the same way, on the data the user has: for a few origins ``c_o`` inside the fitted range,

1. fit Eq. 1 on the points with ``C <= c_o`` (same R0 rule, fixed A and box);
2. forecast each later point with ``c_o < C <= min(ratio * c_o, C_last)``, where
   ``ratio`` is the extrapolation ratio the user asks for (2 for a half-budget forecast);
3. score it as ``|y - centre| / h``, ``h`` the half-width of that sub-fit's (uncalibrated)
   predictive interval on the side of the error. The sub-fits use the whole curve's noise
   model: a short prefix's fit absorbs its correlated wiggles and reads rho far too low.

The conformal factor is the ``ceil((N + 1) * level)``-th smallest of the N scores (split
conformal, Vovk et al. 2005), or the largest when there are too few, and never below 1:
the interval is widened when the past would have fallen outside it, never narrowed.

``sides`` is the same per side of the centre: the scores of the points that fell below it
give the lower edge's factor, those above the upper edge's, each at ``(1 + level) / 2``
(each edge carries half the miss rate). A law that reads a still-climbing run low misses on
one side only (its earlier origins' forecasts fell short of the later points), and the
predictive distribution (``predictive.draw``) widens that side, not both.

**One calibration for every question.** The origins run from the earliest prefix that holds
enough points (or ``1 / horizon`` of the range, the further) to ``LAST_ORIGIN``, and every later
point up to ``horizon`` times its origin is scored, with its *lead* ``C / c_o``. The factor a
forecast at lead ``r`` gets (``Calibration.sides_at``) is read from the scores of leads up to
``r`` (at least ``MIN_SCORES`` of them), made non-decreasing in ``r``: a forecast further
ahead is never given a narrower factor than a nearer one. So a forecast's interval at any
compute is the same whichever question (a budget, a target's crossing) it was built for.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from scalerl.fit.fitting import FitResult, Problem, default_box, fit_problem
from scalerl.fit.noise import Noise
from scalerl.fit.options import FitOptions
from scalerl.fit.uncertainty import Uncertainty, model_uncertainty

__all__ = ["Calibration", "assess", "rolling_origin"]

N_ORIGINS = 4
LAST_ORIGIN = 0.8  # the latest origin, as a fraction of the fitted compute range
MIN_EXTRA_POINTS = 3  # a sub-fit needs this many points beyond its free parameters
MIN_SCORES = 4


@dataclass(frozen=True)
class Calibration:
    """The rolling-origin conformal factor (``scale >= 1``) and how it was obtained.

    ``calibrated`` is False when the curve is too short for any held-out check; the
    predictive interval then rests on the noise model alone and ``message`` says why.
    """

    scale: float = 1.0
    calibrated: bool = False
    n_origins: int = 0
    n_scores: int = 0
    ratio: float = float("nan")  # the extrapolation ratio it was checked at
    message: str = "not calibrated"
    sides: tuple[float, float] = (1.0, 1.0)  # (below, above) the centre: each side's own factor
    leads: tuple[float, ...] = ()  # each score's lead C / c_o, ascending
    scores: tuple[float, ...] = ()  # the studentised errors, in the order of ``leads``
    signs: tuple[float, ...] = ()  # their sides: -1 below the centre, +1 above
    level: float = 0.95

    def sides_at(self, ratio) -> tuple[np.ndarray, np.ndarray]:
        """(below, above) factors for forecasts ``ratio`` (array) times the data's compute
        ahead (module docstring); the one pair ``sides`` where the scores were not kept."""
        r = np.atleast_1d(np.asarray(ratio, dtype=float))
        if not self.calibrated or not self.scores:
            return np.full(r.shape, self.sides[0]), np.full(r.shape, self.sides[1])
        return tuple(np.interp(r, grid, f) for grid, f in self._curve())

    def scale_at(self, ratio) -> np.ndarray:
        """The one symmetric factor at ``ratio`` (both sides' scores together)."""
        r = np.atleast_1d(np.asarray(ratio, dtype=float))
        if not self.calibrated or not self.scores:
            return np.full(r.shape, self.scale)
        grid, f = self._curve(sided=False)[0]
        return np.interp(r, grid, f)

    def _curve(self, sided: bool = True):
        """Per side: (leads, factor at each lead), the factor non-decreasing in the lead."""
        leads, scores, signs = (np.asarray(v, dtype=float) for v in (self.leads, self.scores, self.signs))
        parts = ((-1.0, (1.0 + self.level) / 2.0), (1.0, (1.0 + self.level) / 2.0)) if sided else ((0.0, self.level),)
        out = []
        for side, level in parts:
            keep = signs == side if side else np.ones(scores.size, bool)
            s, ld = scores[keep], leads[keep]
            grid = np.unique(ld) if ld.size else np.array([1.0])
            f = np.array([max(1.0, _conformal(s[ld <= max(g, ld[min(MIN_SCORES, ld.size) - 1])], level))
                          if ld.size else 1.0 for g in grid])  # fmt: skip
            out.append((grid, np.maximum.accumulate(f)))
        return out

    def to_dict(self) -> dict:
        return {
            "scale": self.scale,
            "calibrated": self.calibrated,
            "n_origins": self.n_origins,
            "n_scores": self.n_scores,
            "ratio": self.ratio,
            "sides": list(self.sides),
            "leads_up_to": max(self.leads, default=None),
            "message": self.message,
        }


HORIZON = 10.0
"""The furthest lead the rolling origins score by default: a forecast's own horizon
(``forecast.draws.HORIZON``), so one calibration serves every question up to it."""


def assess(
    fit: FitResult, *, level: float = FitOptions.level, margin: float = FitOptions.margin,
    horizon: float = HORIZON
) -> Uncertainty:
    """All three steps: the model-based intervals, calibrated for extrapolating up to
    ``horizon`` times the fit's last compute (by lead: ``Calibration.sides_at``)."""
    unc = model_uncertainty(fit, level=level, margin=margin)
    calibration = rolling_origin(fit, noise=unc.noise, horizon=horizon, level=level)
    return replace(unc, calibration=calibration)


def rolling_origin(fit: FitResult, *, noise: Noise, horizon: float, level: float) -> Calibration:
    """The conformal factor of ``fit`` for forecasts up to ``horizon`` x its last compute.

    ``noise`` is the whole curve's noise model (``Uncertainty.noise``)."""
    C, y = fit.compute, fit.reward
    p = 2 + fit.r0_fitted + (fit.fixed_A is None)
    need = max(p + MIN_EXTRA_POINTS, 6)
    ratio = max(float(horizon), 1.0 + 1e-9)
    if C.size < need + 2:
        return Calibration(message=_short(C.size, need + 2))
    first = max(1.0 / ratio, C[need - 1] / C[-1])
    if first >= LAST_ORIGIN:
        return Calibration(message=_short(C.size, need + 2))
    scores, signs, leads, origins = [], [], [], 0
    for frac in np.unique(np.geomspace(first, LAST_ORIGIN, N_ORIGINS)):
        cut = frac * C[-1] * (1.0 + 1e-12)  # the first origin's own point, despite rounding
        sub = C <= cut
        held = ~sub & (C <= ratio * cut)
        if sub.sum() < need or not held.any():
            continue
        r0 = None if fit.r0_fitted else fit.R0
        problem = Problem(C[sub], y[sub], r0, fit.fixed_A, fit.bounded, fit.r0_point)
        # a paper-grid fit's box is the grid; its region (and so these refits) use the full box
        subfit = fit_problem(problem, default_box(problem) if fit.method == "paper" else fit.bounds)
        # the run's noise model, not the prefix's: the noise is a property of the run
        centre, down, up = model_uncertainty(subfit, level=level, noise=noise).half_widths(C[held])
        err = y[held] - centre
        h = np.where(err > 0, up, down)
        scores.extend(np.abs(err) / np.maximum(h, 1e-12))
        signs.extend(np.where(err > 0, 1.0, -1.0))
        leads.extend(C[held] / cut)
        origins += 1
    if origins < 2 or len(scores) < MIN_SCORES:
        return Calibration(message=_short(C.size, need + 2))
    q = _conformal(np.array(scores), level)
    sides = tuple(max(1.0, _conformal(np.array(scores)[np.array(signs) == side], (1.0 + level) / 2.0))
                  for side in (-1.0, 1.0))  # fmt: skip
    s = np.asarray(scores)
    reached = float(min(ratio, C[-1] / (first * C[-1])))
    order = np.argsort(leads, kind="stable")
    kept = {name: tuple(float(v) for v in np.asarray(values)[order])
            for name, values in (("leads", leads), ("scores", scores), ("signs", signs))}  # fmt: skip
    return Calibration(
        scale=max(1.0, q), calibrated=True, n_origins=origins, n_scores=int(s.size), ratio=reached, sides=sides,
        level=level, **kept,
        message=(
            f"calibrated on {s.size} held-out forecasts from {origins} earlier origins "
            f"(up to {reached:.1f}x ahead): interval scaled by {max(1.0, q):.2f}"
        ),
    )  # fmt: skip


def _conformal(scores: np.ndarray, level: float) -> float:
    """The ``ceil((N + 1) * level)``-th smallest of N scores (the largest when too few; 0 for none)."""
    if not scores.size:
        return 0.0
    s = np.sort(scores)
    return float(s[min(int(np.ceil((s.size + 1) * level)), s.size) - 1])


def _short(n: int, need: int) -> str:
    return (
        f"interval not calibrated: {n} fit points are too few for a held-out check of the "
        f"shape (needs {need}); it rests on the noise model alone"
    )
