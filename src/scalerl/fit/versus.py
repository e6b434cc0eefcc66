"""One run against a baseline: the differences a "vs baseline" view shows, with intervals.

- **Parameters.** ``ΔA = A - A_base`` (and ΔB, ΔC_mid), each run fitted on its own
  (``compare.fit_run``). The two fits are independent, so the half-widths add in quadrature,
  side by side: ``lo = Δ - sqrt((A - A_lo)^2 + (A_base,hi - A_base)^2)`` and ``hi = Δ +
  sqrt((A_hi - A)^2 + (A_base - A_base,lo)^2)`` (the usual interval of a difference of two
  independent estimates, kept asymmetric as each fit's profile interval is). A parameter
  either fit leaves without an interval has none here, and neither has ΔA where either
  ceiling is not identified (``Uncertainty.identified``): its interval would be the box's.
- **Forecast at a compute.** ``Δ mu(C) = mu(C) - mu_base(C)`` from the two forecasts' draws
  (``Forecast.draws``), each in its own random order (as ``choose.p_best`` pairs them: the
  draws of one forecast are stratified in a fixed order), and the median and the ``level``
  quantiles of the difference; also ``P(Δ > 0)``.
"""

from __future__ import annotations

import math

from scalerl.fit.compare import PARAMS, RunFit
from scalerl.fit.forecast import between

__all__ = ["forecast_gap", "parameter_gaps"]


def parameter_gaps(run: RunFit, base: RunFit) -> dict[str, dict]:
    """``{"A": {"value", "lo", "hi"}, "B": ..., "C_mid": ...}`` of ``run - base`` (module docstring)."""
    out = {}
    for p in PARAMS:
        v, b = float(getattr(run.fit, p)), float(getattr(base.fit, p))
        gap = {"value": v - b, "lo": None, "hi": None}
        if p == "A" and not (run.identified and base.identified):
            gap["why"] = "a ceiling the data cannot pin down: no interval for its difference"
        elif p in run.intervals and p in base.intervals:
            (lo, hi), (blo, bhi) = run.intervals[p], base.intervals[p]
            if all(math.isfinite(x) for x in (lo, hi, blo, bhi)):
                gap["lo"] = v - b - math.hypot(v - lo, bhi - b)
                gap["hi"] = v - b + math.hypot(hi - v, b - blo)
        out[p] = gap
    return out


def forecast_gap(run, base, at: float, level: float, seed: int = 0) -> dict | None:
    """The difference of two ``Forecast``s' expected curves at compute ``at``: ``{"median",
    "lo", "hi", "p_above"}``, or None where either has no draws."""
    a, b = run.draws_at(at), base.draws_at(at)
    if a is None or b is None:
        return None
    return between.gap(a, b, level, seed=seed)
