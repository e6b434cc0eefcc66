"""A forecast as the ``forecast_*`` fields of a live run's record (``runfolder.Forecast`` names them).

``scalerl train`` makes one ``Forecast`` per evaluation (``live_forecast``) and logs these
fields on the next record; ``scalerl plan RUN --max-compute <forecast_fit_until>
--budget-compute <forecast_budget> --target <forecast_target>`` makes the same forecast from the
log and prints the same numbers. Every value is read off the forecast; None where it has none
(a state with no crossing time, a forecast without draws).
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.forecast.value import Forecast
from scalerl.runfolder import Forecast as K

__all__ = ["record_fields"]


def _num(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if np.isfinite(v) else None


def record_fields(forecast: Forecast, *, step: int, target: float | None) -> dict:
    """The ``forecast_*`` fields of ``forecast``, made after the evaluation of ``step``."""
    f = forecast
    out = {K.STEP: step, K.METRIC: f.log.metric, K.CUT: f.cut, K.BUDGET: f.budget, K.STATE: f.state.name,
           K.SAID: f.state.message, K.METHOD: f.method, K.WHY: f.why}  # fmt: skip
    if f.unc is not None:
        lo, hi = f.unc.A_plausible
        out |= {K.A: f.fit.A, K.A_LO: lo, K.A_HI: hi, K.IDENTIFIED: f.unc.identified, K.VERDICT: f.unc.verdict}
    if f.evidence is not None:
        out |= {K.RISE_Z: _num(f.evidence.z), K.RISE_FIRST: f.evidence.first, K.RISE_LAST: f.evidence.last}
    if f.draws is not None and f.budget is not None:
        at = f.at(f.budget)
        out |= {K.FINAL: _num(at.value), K.FINAL_LO: _num(at.pred_lo), K.FINAL_HI: _num(at.pred_hi),
                K.BAND_LO: _num(at.lo), K.BAND_HI: _num(at.hi), K.UNCALIBRATED: f.uncalibrated or None}  # fmt: skip
    if target is not None:
        reach = f.reach(target)
        med, lo, hi = reach.compute
        out |= {K.TARGET: target, K.COMPUTE_TO_TARGET: _num(med), K.COMPUTE_TO_TARGET_LO: _num(lo),
                K.COMPUTE_TO_TARGET_HI: _num(hi), K.P_REACH: _num(reach.p_within)}  # fmt: skip
        if reach.hours is not None:
            out |= {K.HOURS: _num(reach.hours[0]), K.HOURS_LO: _num(reach.hours[1]), K.HOURS_HI: _num(reach.hours[2])}
    return out
