"""``scalerl plan``'s answer: a run's ``Forecast`` asked when it reaches a target, and how to
split the devices.

The forecast (``fit.forecast``) gives every number about the target: the compute, hours and
device-hours (median and interval), P(reach) within a budget and within the horizon, and the
crossing if it is reached. This module adds only the devices: the run's measured per-step
role costs (``throughput``) predict each other split's step time, and a split answers in
hours by scaling the time left on the run's own split by the model's ratio of step times
(``split_hours``), so the model's error on the measured split cancels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scalerl.fit.forecast.reach import Reach
from scalerl.fit.forecast.value import Forecast
from scalerl.fit.time.throughput import RoleTimes, Split, predict, recommend, splits

__all__ = ["Plan", "make_plan", "split_hours"]


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``scalerl plan`` prints, plots and writes."""

    forecast: Forecast
    answer: Reach
    times: RoleTimes | None = None
    current: Split | None = None
    options: list[Split] = field(default_factory=list)
    best: Split | None = None

    @property
    def curve(self):
        return self.forecast.log.curve

    @property
    def clock(self):
        return self.forecast.clock

    def split_rows(self) -> list[dict]:
        """Each split's prediction and its (median, lo, hi) hours to the target."""
        return [s.to_dict() | {"hours": dict(zip(("median", "lo", "hi"), split_hours(self, s)))}
                for s in self.options]  # fmt: skip

    def to_dict(self) -> dict:
        f = self.forecast
        out = {"run": self.curve.source, "x": self.curve.x, "y": self.curve.y,
               "evaluations": {"compute": self.curve.compute.tolist(), "value": self.curve.reward.tolist()},
               "forecast": f.to_dict(), "intervals_from": f.method, "window": self.answer.window,
               **self.answer.to_dict()}  # fmt: skip
        if f.budget is not None:
            out["at_budget"] = f.at(f.budget).to_dict(f.budget)
        if self.clock is not None:
            out["clock"] = self.clock.to_dict()
        if self.times is not None:
            out["throughput"] = {"measured": self.times.to_dict(), "current": self.current.to_dict(),
                                 "splits": self.split_rows(), "recommended": self.best.to_dict()}  # fmt: skip
        return out


def split_hours(plan: Plan, split: Split) -> tuple[float, ...]:
    """Hours to the target under ``split``: the time left on the run's own split, times
    ``split.step_s / current.step_s``, after the hours already run."""
    if plan.answer.hours is None:
        return (np.inf, np.inf, np.inf)
    now = plan.clock.anchor[1] / 3600.0
    ratio = split.step_s / plan.current.step_s
    return tuple(h if not np.isfinite(h) or h <= now else now + (h - now) * ratio for h in plan.answer.hours)


def make_plan(forecast: Forecast, answer: Reach, *, times: RoleTimes | None = None, devices: int | None = None,
              k: int | None = None) -> Plan:
    """The plan of ``forecast``'s ``answer`` about a target; ``times`` (the run's role costs)
    add the splits of ``devices`` at lag bound ``k``."""
    if times is None or answer.hours is None:
        return Plan(forecast, answer)
    current = predict(times, times.generators, times.learner_devices, times.k)
    options = splits(times, devices, k)
    return Plan(forecast, answer, times, current, options, recommend(options))
