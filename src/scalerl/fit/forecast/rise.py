"""Is the run rising at all? The evidence a forecast needs before it extrapolates a rise.

A sigmoid fitted to a flat run still has a shape: it may step up past the data or, as a run
flat at 0.125 showed, step *down* and back, and its band then gives a target well above the
run a real chance. So before anything is read off a fit, the run's own evaluations are asked
whether they rose, without the law:

    d = mean(last third) - mean(first third),
    SE(d) = sigma * sqrt(deff * (1 / m_first + 1 / m_last)),   deff = (1 + rho) / (1 - rho),

with ``sigma`` the evaluation noise read model-free from successive differences (AR(1):
``Var(y_i - y_{i-1}) = 2 sigma^2 (1 - rho)`` where the trend is slow) and ``rho`` the fit's
AR(1) correlation. A rise is detected when ``d / SE > Phi^-1(level)`` (one-sided). A run
without one is not learning (``states``): its own level is ``flat_band``: the mean of its last third, with that mean's
own uncertainty, and its evaluation noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from scalerl.fit.options import LEVEL

__all__ = ["Rise", "flat_band", "rise"]

MIN_POINTS = 6  # fewer evaluations cannot tell a rise from noise: a rise is assumed


@dataclass(frozen=True)
class Rise:
    """The evidence of a rise (module docstring)."""

    detected: bool
    first: float  # mean of the first third of the evaluations
    last: float  # mean of the last third
    z: float  # d / SE(d)
    sigma: float  # the model-free evaluation noise
    m_last: int
    of: str = ""  # the signal, where not the validation (a companion's training reward)

    @property
    def message(self) -> str:
        if self.detected:
            where = f" in {self.of}" if self.of else ""
            return f"rise detected{where}: {self.first:.3f} -> {self.last:.3f} ({self.z:.1f} sd of noise)"
        where = f" in {self.of}" if self.of else ""
        return (f"no rise detected{where}: the last third of the evaluations reads {self.last:.3f} against "
                f"{self.first:.3f} in the first third, {self.z:+.1f} sd of their noise")  # fmt: skip

    def to_dict(self) -> dict:
        return {"detected": self.detected, "first": self.first, "last": self.last, "z": self.z,
                "sigma": self.sigma, "message": self.message}  # fmt: skip


def rise(reward, *, rho: float, level: float = LEVEL) -> Rise:
    """The evidence of a rise in ``reward`` (n,), in evaluation order (module docstring)."""
    y = np.asarray(reward, dtype=float)
    n = y.size
    m = max(n // 3, 1)
    first, last = float(y[:m].mean()), float(y[-m:].mean())
    diffs = np.diff(y)
    sigma = float(np.std(diffs, ddof=1) / np.sqrt(2.0 * (1.0 - rho))) if diffs.size > 1 else 0.0
    deff = (1.0 + rho) / (1.0 - rho)
    se = sigma * np.sqrt(deff * 2.0 / m)
    z = (last - first) / se if se > 0 else (np.inf if last > first else 0.0)
    detected = n < MIN_POINTS or z > float(stats.norm.ppf(level))
    return Rise(bool(detected), first, last, float(z), sigma, m)


def flat_band(evidence: Rise, *, rho: float, level: float):
    """(centre, band) of a run without a rise: the last third's mean, and its own interval."""
    deff = (1.0 + rho) / (1.0 - rho)
    half = float(stats.norm.ppf((1.0 + level) / 2.0)) * evidence.sigma * np.sqrt(deff / evidence.m_last)
    level_ = evidence.last

    def centre(C):
        return np.full(np.shape(np.atleast_1d(C)), level_)

    def band(C):
        mid = centre(C)
        return mid - half, mid + half

    return centre, band
