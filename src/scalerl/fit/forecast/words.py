"""A forecast in words: the sentences every command prints, from the ``Forecast`` alone.

One renderer, so that ``fit``, ``plan``, the trainer's report and a study say the same thing
in the same words: a compute or hour that no draw reaches within the horizon is "never"
(never "inf"), a probability has three decimals, an interval is ``[lo, hi]``.
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.forecast.reach import Reach
from scalerl.fit.forecast.value import Forecast

__all__ = ["at_sentence", "calibration_text", "compute_text", "hours_text", "number", "reach_sentences", "source_sentence",
           "state_sentence", "triple_text"]  # fmt: skip


def number(value: float | None, digits: int = 4) -> str:
    """A compute or hour: "never" where infinite, "-" where unknown, else ``digits`` significant."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if not np.isfinite(value):
        return "never"
    return f"{value:.{digits}g}"


compute_text = number


def hours_text(value: float | None) -> str:
    return number(value, 3)


def triple_text(triple, fmt=number) -> str:
    """(median, lo, hi) as "median [lo, hi]"."""
    med, lo, hi = triple
    return f"{fmt(med)} [{fmt(lo)}, {fmt(hi)}]"


def state_sentence(f: Forecast) -> str:
    """The run's state, one sentence (the ``forecast_state_message``)."""
    return f"{f.log.name}: {f.state.message}."


def source_sentence(f: Forecast) -> str:
    """Whose curves the intervals follow, and why the methods before it were not used."""
    extra = f" ({f.why})" if f.why and f.method != "training reward" else ""
    if f.method == "training reward" and f.notes:  # why the prior was not used, or which it was and how
        extra = f" ({'; '.join(f.notes)})"
    return f"intervals from: {f.source_sentence}{extra}."


def at_sentence(f: Forecast, C: float, what: str = "") -> str:
    """"forecast at compute C (what): 0.827; band on the expected curve [..]; predictive interval [..]"."""
    a = f.at(C)
    label = f" ({what})" if what else ""
    if not np.isfinite(a.value):
        return f"no forecast at compute {number(C)}{label}: {f.state.message}."
    return (f"forecast at compute {number(C)}{label}: {a.value:.3f}; band on the expected curve "
            f"[{a.lo:.3f}, {a.hi:.3f}]; predictive interval for one evaluation [{a.pred_lo:.3f}, {a.pred_hi:.3f}] "
            f"({f.level:.0%}{calibration_text(f.uncalibrated)}).")  # fmt: skip


def calibration_text(uncalibrated: str | None) -> str:
    """What every printed interval carries where its calibration could not be checked: ", not
    calibrated: WHY" ("" where it was), so that a narrow interval from few points never reads
    as a checked claim."""
    return f", not calibrated: {uncalibrated}" if uncalibrated else ""


def _within(f: Forecast, reach: Reach) -> str:
    why = "the budget" if reach.horizon > f.cut * 10.0 * (1 + 1e-9) else "10x the compute so far"
    clock = f.clock
    hours = ""
    if clock is not None:
        hours = f", about {hours_text(float(clock.hours(np.array([reach.horizon]))[0]))} h"
    return f"{number(reach.horizon)} compute ({why}{hours})"


def reach_sentences(f: Forecast, reach: Reach) -> list[str]:
    """When the run reaches the target, the chance it does, and (where a clock says) in hours."""
    t = reach.target
    read = f"the mean of its last {reach.window} evaluations" if reach.window else "its expected curve"
    if reach.already:
        when = f", {hours_text(reach.hours[0])} hours" if reach.hours else ""
        return [f"target {t:g} already reached: {read} read at least {t:g} at compute "
                f"{number(reach.compute[0])}{when}."]  # fmt: skip
    if np.isnan(reach.p_at_all):
        return [f"target {t:g}: no forecast yet: {reach.note}."]
    out = []
    within = _within(f, reach)
    if not reach.supported:
        out.append(f"target {t:g}: no crossing time ({reach.note}); P(reaching it within {within}) = "
                   f"{reach.p_at_all:.3f}.")  # fmt: skip
    elif not reach.reachable:
        out.append(f"target {t:g} is not reachable: P(reaching it within {within}) = {reach.p_at_all:.3f}, below "
                   f"{(1 - reach.level) / 2:.3f}.")  # fmt: skip
    else:
        if reach.note:  # a run not learning, timed by the corpus's late risers
            out.append(f"{reach.note}.")
        hours = ""
        if reach.hours is not None:
            hours = (f", hours {triple_text(reach.hours, hours_text)}, device-hours "
                     f"{triple_text(reach.device_hours, hours_text)}")  # fmt: skip
        out.append(f"target {t:g} (read as {read}; {reach.level:.0%} intervals{calibration_text(f.uncalibrated)}): compute "
                   f"{triple_text(reach.compute)}{hours}; P(reached within {within}) = {reach.p_at_all:.3f}.")  # fmt: skip
    if reach.p_at_all > 0 and np.isfinite(reach.if_reached[0]) and (not reach.supported or reach.compute[2] == np.inf):
        hours = f", hours {triple_text(reach.if_reached_hours, hours_text)}" if reach.if_reached_hours else ""
        out.append(f"if it gets there: compute {triple_text(reach.if_reached)}{hours} "
                   f"(the draws that reach {t:g}).")  # fmt: skip
    if reach.p_within is not None:
        budgets = " and ".join(f"{number(v)} {u}" for v, u in ((reach.budget_hours, "hours"),
                                                                (reach.budget_compute, "compute")) if v is not None)  # fmt: skip
        out.append(f"P(reaching {t:g} within {budgets}) = {reach.p_within:.3f}.")
    return out
