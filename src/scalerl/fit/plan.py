"""``scalerl plan``'s answer: the time to a target reward, and how to split the devices.

Inputs are plain: a validation curve (``Curve``), a ``Clock`` (``timing``) and, when the run's
step records or a speeds file give them, its per-step role costs (``throughput``). The
forecast is the one ``scalerl fit`` makes: the fit, ``calibrate.assess``'s intervals at the
extrapolation ratio of the fit's own crossing, or the forecast under ``--prior-runs``'s prior
when it is used. Other splits answer in hours by scaling the remaining time on the run's
own split by the model's ratio of step times (``split_hours``), so the model's error on the
measured split cancels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scalerl.fit import law
from scalerl.fit.calibrate import assess
from scalerl.fit.crossing import WINDOW, Crossing, crossing, looks_for
from scalerl.fit.fitting import FitResult
from scalerl.fit.forecast import horizon_for
from scalerl.fit.options import FitOptions
from scalerl.fit.readers import Curve
from scalerl.fit.throughput import RoleTimes, Split, predict, recommend, splits
from scalerl.fit.timing import Clock, TimeToTarget, already_reached, time_to_target

__all__ = ["Plan", "live_time_to_target", "make_plan", "split_hours"]


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``scalerl plan`` prints, plots and writes."""

    curve: Curve
    fit: FitResult
    crossing: Crossing
    clock: Clock
    answer: TimeToTarget
    source: str  # "fit" or "prior": whose intervals the crossing uses
    window: int  # evaluations a read averages (crossing.Looks)
    prior_reason: str = ""
    times: RoleTimes | None = None
    current: Split | None = None
    options: list[Split] = field(default_factory=list)
    best: Split | None = None

    def split_rows(self) -> list[dict]:
        """Each split's prediction and its (median, lo, hi) hours to the target."""
        return [s.to_dict() | {"hours": dict(zip(("median", "lo", "hi"), split_hours(self, s)))}
                for s in self.options]  # fmt: skip

    def to_dict(self) -> dict:
        out = {"run": self.curve.source, "x": self.curve.x, "y": self.curve.y,
               "intervals_from": self.source, "window": self.window, **self.answer.to_dict(), "clock": self.clock.to_dict(),
               "fit": self.fit.to_dict()}  # fmt: skip
        if self.prior_reason:
            out["prior"] = self.prior_reason
        if self.times is not None:
            out["throughput"] = {"measured": self.times.to_dict(), "current": self.current.to_dict(),
                                 "splits": self.split_rows(), "recommended": self.best.to_dict()}  # fmt: skip
        return out


def split_hours(plan: Plan, split: Split) -> tuple[float, ...]:
    """Hours to the target under ``split``: the time left on the run's own split, times
    ``split.step_s / current.step_s``, after the hours already run."""
    now = plan.clock.anchor[1] / 3600.0
    ratio = split.step_s / plan.current.step_s
    return tuple(h if not np.isfinite(h) or h <= now else now + (h - now) * ratio for h in plan.answer.hours)


def _crossing(fit: FitResult, target: float, options: FitOptions, prior, budget_compute, window: int) -> tuple:
    """(Crossing, "fit" | "prior", reason): under the prior when one is given and used; the
    first ``window``-evaluation read at the target, with the run's own noise (``crossing``),
    or with ``window`` 0 the expected curve's own crossing."""
    last = float(fit.compute.max())
    estimate = float(law.compute_for_reward(target, fit.A, fit.B, fit.C_mid, fit.R0))
    reach = [estimate] if np.isfinite(estimate) and estimate > 0 else []
    unc = assess(fit, level=options.level, margin=options.margin, horizon=horizon_for(last, reach))
    looks = looks_for(fit.compute, unc.noise.sigma, unc.noise.rho, window) if window > 0 else None
    if prior is not None:
        from scalerl.fit.posterior import forecast_with_prior

        learned, why, n_runs = prior
        budget = max([2.0 * last, *reach, budget_compute or 0.0])
        pf = forecast_with_prior(fit, fit_until=last, budget=budget, prior=learned, options=options,
                                 n_runs=n_runs, why_none=why)  # fmt: skip
        if pf.used:
            cross = crossing(fit, target, pf.band, level=options.level, centre=pf.predict, looks=looks)
            return cross, "prior", pf.reason
        reason = pf.reason
    else:
        reason = ""
    scale = unc.calibration.scale if unc.calibration is not None else 1.0
    return crossing(fit, target, unc.band, level=options.level, scale=scale, looks=looks), "fit", reason


def make_plan(
    curve: Curve, clock: Clock, target: float, options: FitOptions, *, prior=None, times: RoleTimes | None = None,
    devices: int | None = None, k: int | None = None, budget_hours: float | None = None,
    budget_compute: float | None = None, window: int = WINDOW,
) -> Plan:
    """The plan for ``curve`` reaching ``target`` (module docstring); ``prior`` is
    ``load_prior``'s (prior, why none, n); ``devices``/``k`` ask about other splits."""
    fit = options.fit(curve.compute, curve.reward, source=curve.source)
    cross, source, reason = _crossing(fit, target, options, prior, budget_compute, window)
    done = already_reached(target, curve.compute, curve.reward, clock, options.level, window) if window else None
    answer = done or time_to_target(cross, clock, budget_hours=budget_hours, budget_compute=budget_compute)
    plan = Plan(curve, fit, cross, clock, answer, source, window, reason)
    if times is None:
        return plan
    current = predict(times, times.generators, times.learner_devices, times.k)
    options_ = splits(times, devices, k)
    return Plan(curve, fit, cross, clock, answer, source, window, reason, times, current, options_,
                recommend(options_))


def live_time_to_target(compute, reward, clock_points, *, target: float, budget: float, options: FitOptions) -> dict:
    """The ``forecast_*`` time-to-target fields ``scalerl train`` logs after an evaluation:
    hours since the start to ``target`` (median, lo, hi; None where never) and ``p_reach``,
    the probability of reaching it within ``budget`` (the compute at the run's end).
    ``clock_points``: (compute, wall_s) of the run's records so far. ``scalerl plan`` on the
    records up to ``forecast_step`` with ``--target <target> --budget-compute <forecast_budget>
    --r0 first`` reproduces them."""
    from scalerl.fit.timing import clock_from_records

    records = [{"compute_gpu_hours": c, "wall_s": t} for c, t in clock_points]
    clock = clock_from_records(records, "the run's records")
    curve = Curve("live", np.asarray(compute, dtype=float), np.asarray(reward, dtype=float), "live",
                  "compute_gpu_hours", "val_pass_rate")  # fmt: skip
    answer = make_plan(curve, clock, target, options, budget_compute=budget).answer
    med, lo, hi = (float(h) if np.isfinite(h) else None for h in answer.hours)
    return {"forecast_time_to_target_h": med, "forecast_time_to_target_h_lo": lo,
            "forecast_time_to_target_h_hi": hi, "forecast_p_reach": answer.p_reach}  # fmt: skip
