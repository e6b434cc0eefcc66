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

    def to_dict(self) -> dict:
        return {
            "scale": self.scale,
            "calibrated": self.calibrated,
            "n_origins": self.n_origins,
            "n_scores": self.n_scores,
            "ratio": self.ratio,
            "sides": list(self.sides),
            "message": self.message,
        }


def assess(
    fit: FitResult, *, level: float = FitOptions.level, margin: float = FitOptions.margin,
    horizon: float = 2.0
) -> Uncertainty:
    """All three steps: the model-based intervals, calibrated for extrapolating up to
    ``horizon`` times the fit's last compute (2: the paper's half-budget forecast)."""
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
    scores, signs, origins = [], [], 0
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
        signs.extend(np.sign(err))
        origins += 1
    if origins < 2 or len(scores) < MIN_SCORES:
        return Calibration(message=_short(C.size, need + 2))
    q = _conformal(np.array(scores), level)
    sides = tuple(max(1.0, _conformal(np.array(scores)[np.array(signs) == side], (1.0 + level) / 2.0))
                  for side in (-1.0, 1.0))  # fmt: skip
    s = np.asarray(scores)
    reached = float(min(ratio, C[-1] / (first * C[-1])))
    return Calibration(
        scale=max(1.0, q), calibrated=True, n_origins=origins, n_scores=int(s.size), ratio=reached, sides=sides,
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
