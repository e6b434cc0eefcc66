"""``scalerl plan``'s answer: the time to a target reward, and how to split the devices.

Inputs are plain: a validation curve (``Curve``), a ``Clock`` (``timing``) and, when the run's
step records or a speeds file give them, its per-step role costs (``throughput``). Every
number comes from one predictive distribution (``predictive``: draws of whole future runs)
built on the forecast ``scalerl fit`` makes: the fit, ``calibrate.assess``'s intervals at the
extrapolation ratio of the fit's own crossing, or the forecast under ``--prior-runs``'s prior
when it is used; a run whose evaluations show no rise (``rise``) is forecast flat. Other splits answer in hours by scaling the remaining time on the run's
own split by the model's ratio of step times (``split_hours``), so the model's error on the
measured split cancels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from scalerl.fit import law
from scalerl.fit.calibrate import assess
from scalerl.fit.companion import MIN_POINTS, Companion
from scalerl.fit.fitting import FitResult
from scalerl.fit.forecast import horizon_for
from scalerl.fit.options import FitOptions
from scalerl.fit.predictive import HORIZON, Predictive, draw
from scalerl.fit.readers import Curve
from scalerl.fit.rise import flat_band, rise
from scalerl.fit.time.crossing import WINDOW, Crossing, crossing
from scalerl.fit.time.throughput import RoleTimes, Split, predict, recommend, splits
from scalerl.fit.time.timing import (
    Clock,
    TimeToTarget,
    already_reached,
    compute_for_hours,
    time_to_target,
)
from scalerl.metric_names import COMPUTE, VAL_PASS_RATE, WALL

__all__ = ["Plan", "forecast_draws", "horizon", "live_time_to_target", "make_plan", "split_hours"]


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything ``scalerl plan`` prints, plots and writes."""

    curve: Curve
    fit: FitResult
    crossing: Crossing
    clock: Clock
    answer: TimeToTarget
    source: str  # "fit", "prior" or "flat" (no rise): whose curve the draws follow
    window: int  # evaluations a read averages (crossing.WINDOW)
    prior_reason: str = ""
    times: RoleTimes | None = None
    current: Split | None = None
    options: list[Split] = field(default_factory=list)
    best: Split | None = None
    predictive: Predictive | None = None  # the draws every number above is read from
    companion_column: str = ""  # the training reward's column, where the draws follow it (source "training reward")

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
        if self.companion_column:
            out["train_reward_column"] = self.companion_column
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


def horizon(fit: FitResult, clock: Clock, budget_hours: float | None, budget_compute: float | None) -> float:
    """The compute P(reach at all) is within: ``HORIZON`` x the compute so far, or the budget
    asked about when that is later, so P(within the budget) <= P(at all)."""
    last = float(fit.compute.max())
    ends = [HORIZON * last, budget_compute or 0.0]
    if budget_hours is not None:
        ends.append(compute_for_hours(clock, budget_hours))
    return max(ends)


def forecast_draws(fit: FitResult, options: FitOptions, prior, end: float, target: float | None = None,
                   budget: float | None = None, sided: bool = True, companion: Companion | None = None):
    """(Predictive, "fit" | "prior" | "training reward" | "flat", reason, Rise): the one
    predictive distribution of the run up to compute ``end``, the first of: under the prior,
    when one is given and used and the evaluations rise; the ``companion``'s (the training
    reward's, ``fit.companion``), when one is given and its curve fits and rises (the dense
    signal may show a rise the evaluations cannot yet: the Rise returned is then its own);
    the flat run's (``rise.flat_band``), when the evaluations show no rise; the prior-free
    fit's band, calibrated at the extrapolation ratio of the fit's own crossing of ``target``
    or of the ``budget`` compute asked about, the further: each side of the band by its own
    factor (``calibrate``'s ``sides``; ``sided=False``: the one symmetric factor).
    ``reason`` says why a prior or companion given was not used."""
    last = float(fit.compute.max())
    estimate = np.inf if target is None else float(law.compute_for_reward(target, fit.A, fit.B, fit.C_mid, fit.R0))
    reach = [c for c in (estimate, budget or np.inf) if np.isfinite(c) and c > 0]
    unc = assess(fit, level=options.level, margin=options.margin, horizon=horizon_for(last, reach))
    sigma, rho = unc.noise.sigma, unc.noise.rho
    evidence = rise(fit.reward, rho=rho, level=options.level)
    kw = dict(observed_compute=fit.compute, observed=fit.reward, level=options.level, horizon=end)
    reason = ""
    if prior is not None and evidence.detected:
        from scalerl.fit.posterior import forecast_with_prior

        learned, why, n_runs = prior
        # the prior is calibrated at the extrapolation asked (its finished runs cut at fit_until / budget):
        # the compute asked about, or the target's crossing; the horizon only when neither is known
        asked = max(reach) if reach else min(end, 10.0 * last)
        pf = forecast_with_prior(fit, fit_until=last, budget=max(2.0 * last, asked),
                                 prior=learned, options=options, n_runs=n_runs, why_none=why)  # fmt: skip
        if pf.used:
            return draw(pf.predict, pf.band, sigma=sigma, rho=rho, **kw), "prior", pf.reason, evidence
        reason = pf.reason
    if companion is not None:  # the dense training reward may show the rise the evaluations cannot yet
        pred, why, trained = _companion_draws(companion.upto(last), kw, options, end, target, budget, sided,
                                              sigma=sigma, rho=rho)  # fmt: skip
        if pred is not None:
            return pred, "training reward", reason, evidence if evidence.detected else trained
        reason = "; ".join(filter(None, (reason, why)))
    if not evidence.detected:
        centre, band = flat_band(evidence, rho=rho, level=options.level)
        return draw(centre, band, sigma=evidence.sigma, rho=rho, **kw), "flat", reason, evidence
    cal = unc.calibration
    k = 1.0 if cal is None else cal.sides if sided and cal.calibrated else cal.scale
    return draw(fit.predict, unc.band, sigma=sigma, rho=rho, k=k, **kw), "fit", reason, evidence


def _companion_draws(comp: Companion, kw: dict, options: FitOptions, end: float, target: float | None,
                     budget: float | None, sided: bool, *, sigma: float, rho: float):
    """(Predictive or None, why not, the training reward's Rise): the validation forecast as
    the training reward's calibrated draws plus the offset ``g`` (``fit.companion``): centre
    ``t(C) + g``, each side
    of the band widened by ``g``'s standard error in quadrature, the noise of one evaluation
    the offsets' spread (never below the validation's own ``sigma``)."""
    from scalerl.fit.errors import CurveError

    if len(comp) < MIN_POINTS:
        return None, f"training reward not used: {len(comp)} evaluations have one, below {MIN_POINTS}", None
    try:
        tfit = options.fit(comp.compute, comp.train, source=comp.column)
    except (CurveError, ValueError, np.linalg.LinAlgError) as err:
        return None, f"training reward not used: {err}", None
    gaps = comp.offsets(tfit.predict)
    g, s_g = float(gaps.mean()), float(gaps.std(ddof=1))
    tpred, tsource, _, trained = forecast_draws(tfit, options, None, end, None if target is None else target - g,
                                                budget, sided)  # fmt: skip
    trained = dataclasses.replace(trained, of=f"the training reward ({comp.column})")
    if tsource == "flat":
        return None, f"training reward not used: {trained.message}", trained
    se = s_g / np.sqrt(gaps.size)
    z = float(stats.norm.ppf((1.0 + options.level) / 2.0))

    def band(C):
        mid, lo, hi = tpred.edges(C)
        down, up = (np.sqrt((np.maximum(w, 0.0) / z) ** 2 + se**2) * z for w in (mid - lo, hi - mid))
        return mid + g - down, mid + g + up

    centre = lambda C: tpred.edges(C)[0] + g  # noqa: E731
    return draw(centre, band, sigma=max(s_g, sigma), rho=rho, **kw), "", trained


def make_plan(
    curve: Curve, clock: Clock, target: float, options: FitOptions, *, prior=None, times: RoleTimes | None = None,
    devices: int | None = None, k: int | None = None, budget_hours: float | None = None,
    budget_compute: float | None = None, window: int = WINDOW, companion: Companion | None = None,
) -> Plan:
    """The plan for ``curve`` reaching ``target`` (module docstring); ``prior`` is
    ``load_prior``'s (prior, why none, n); ``companion`` the run's training reward
    (``fit.companion``); ``devices``/``k`` ask about other splits."""
    fit = options.fit(curve.compute, curve.reward, source=curve.source)
    end = horizon(fit, clock, budget_hours, budget_compute)
    pred, source, reason, evidence = forecast_draws(fit, options, prior, end, target, budget_compute,
                                                    companion=companion)  # fmt: skip
    cross = crossing(pred, target, window)
    done = already_reached(target, curve.compute, curve.reward, clock, options.level, window) if window else None
    no_rise = None if evidence.detected else evidence.message
    answer = done or time_to_target(cross, clock, budget_hours=budget_hours, budget_compute=budget_compute,
                                    no_rise=no_rise)  # fmt: skip
    column = companion.column if companion is not None and source == "training reward" else ""
    plan = Plan(curve, fit, cross, clock, answer, source, window, reason, predictive=pred, companion_column=column)
    if times is None:
        return plan
    current = predict(times, times.generators, times.learner_devices, times.k)
    options_ = splits(times, devices, k)
    return Plan(curve, fit, cross, clock, answer, source, window, reason, times, current, options_,
                recommend(options_), predictive=pred, companion_column=column)  # fmt: skip


def live_time_to_target(compute, reward, clock_points, *, target: float, budget: float, options: FitOptions,
                        companion: Companion | None = None) -> dict:
    """The ``forecast_*`` time-to-target fields ``scalerl train`` logs after an evaluation:
    hours since the start to ``target`` (median, lo, hi; None where never) and ``p_reach``,
    the probability of reaching it within ``budget`` (the compute at the run's end).
    ``clock_points``: (compute, wall_s) of the run's records so far. ``scalerl plan`` on the
    records up to ``forecast_step`` with ``--target <target> --budget-compute <forecast_budget>
    --r0 first`` reproduces them."""
    from scalerl.fit.time.timing import clock_from_records

    records = [{COMPUTE: c, WALL: t} for c, t in clock_points]
    clock = clock_from_records(records, "the run's records")
    curve = Curve("live", np.asarray(compute, dtype=float), np.asarray(reward, dtype=float), "live",
                  COMPUTE, VAL_PASS_RATE)  # fmt: skip
    answer = make_plan(curve, clock, target, options, budget_compute=budget, companion=companion).answer
    med, lo, hi = (float(h) if np.isfinite(h) else None for h in answer.hours)
    return {"forecast_time_to_target_h": med, "forecast_time_to_target_h_lo": lo,
            "forecast_time_to_target_h_hi": hi, "forecast_p_reach": answer.p_reach}  # fmt: skip
