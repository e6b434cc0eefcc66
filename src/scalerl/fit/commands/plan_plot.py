"""The time-to-target figure: the run's curve against hours, the forecast band ahead of it,
the target line, and the interval of the crossing time, all read from the plan's one
predictive distribution (matplotlib through ``plot.new_axes``, never ``pyplot``)."""

from __future__ import annotations

import numpy as np

from scalerl.fit import plot

__all__ = ["plot_plan"]


def plot_plan(plan):
    """Evaluations (dots); the draws' median curve and their band on the expected curve
    (dashed, shaded) ahead of the data, against hours at the clock's rate; the target as a
    horizontal line; the median crossing time as a vertical line and its interval shaded (to
    the right edge, marked "never" in the legend, when its upper end is never reached)."""
    if plan.clock is None or plan.answer.hours is None:  # no wall time: the forecast against compute
        return plot.plot_forecast(plan.forecast, title=f"{plan.curve.source}: the forecast of {plan.curve.y}")
    ax = plot.new_axes()
    clock, answer, f = plan.clock, plan.answer, plan.forecast
    hours = clock.hours(plan.curve.compute)
    ax.plot(hours, plan.curve.reward, "o", ms=3, color="C0", label="evaluations")
    med, lo, hi = answer.hours
    finite = [h for h in (med, lo, hi) if np.isfinite(h)]
    right = max([float(hours.max()) * 1.5, *(1.15 * h for h in finite)])
    if f.draws is not None:
        grid = np.geomspace(f.cut, max(f.horizon, f.cut * 1.0001), 200)
        grid_h = clock.hours(grid)
        at = f.at(grid[grid_h <= right])
        ax.plot(grid_h[grid_h <= right], at.value, "--", color="C0", label="forecast (median of the draws)")
        ax.fill_between(grid_h[grid_h <= right], at.lo, at.hi, color="C0", alpha=0.15,
                        label=f"{f.level:.0%} band on the expected curve")  # fmt: skip
    ax.axhline(answer.target, color="C3", lw=1, label=f"target {answer.target:g}")
    if np.isfinite(lo):
        top = hi if np.isfinite(hi) else right
        never = "" if np.isfinite(hi) else " (upper end: never)"
        ax.axvspan(lo, top, color="C3", alpha=0.15, label=f"{answer.level:.0%} interval of the crossing{never}")
    if np.isfinite(med):
        ax.axvline(med, color="C3", ls=":", label=f"median crossing {med:.3g} h")
    ax.set_xlim(0.0, right)
    ax.set_xlabel("hours since the run's start")
    ax.set_ylabel(plan.curve.y)
    ax.set_title(f"{plan.curve.source}: time to reach {answer.target:g}")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return ax
