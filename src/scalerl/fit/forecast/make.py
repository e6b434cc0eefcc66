"""``forecast_of``: the one function that makes a ``Forecast`` from a run's log, a cut and the options.

In order (each step says why in ``Forecast.why`` when it passes a method by):

1. **Too few evaluations** (``states.MIN_EVALS``, after ``min_compute``): no draws; the state
   says how many more and when.
2. **The validation's own fit** (``FitOptions.fit``) and its intervals (``calibrate.assess``,
   calibrated by lead up to the horizon, so one forecast serves every question). A flat
   curve has no sigmoid: it is not learning. Then the rise test (``rise``) and the fall test
   (``states.declining``).
3. **The method**, the first that applies:
   - *declining*: the run's recent level, held (``rise.flat_band``);
   - *the prior* (``options.prior``), where the validation rises and the prior accepts the run
     (``prior.posterior``), calibrated at the run's budget (else the horizon);
   - *the training reward* (``companion``), where the log has one that fits and rises and the
     validation did not fall behind it (``states.diverging``): its calibrated draws plus the
     validation's offset; where a prior was given and not used on the validation (its rise not
     yet shown, or the run unlike the prior), the training reward's curve is fitted under the
     finished runs' training rewards (``Prior.train``) if it accepts the run (the bench's
     scores of the other order: ``docs/design/fit.md``);
   - *not learning* (no rise, or diverging): the finished runs that looked as flat at the same
     share of their budget (``late``), else the flat level;
   - *the fit*: its band with the rolling-origin factors by lead.

   The three methods that follow a rise (the prior, the training reward, the fit) hold their
   curves at or above what the run has shown (``draws.shown``, the draws' floor).

The draws reach the horizon, the later of ``draws.HORIZON`` x the cut and the budget.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy import stats

from scalerl.fit.calibrate import assess
from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import FLAT_TOL, FitResult
from scalerl.fit.forecast import states as st
from scalerl.fit.forecast.companion import MIN_POINTS, Companion, offset_drift
from scalerl.fit.forecast.draws import HORIZON, N_DRAWS, Draws, band_draws, curve_draws, widened
from scalerl.fit.forecast.early import early
from scalerl.fit.forecast.late import late_risers
from scalerl.fit.forecast.log import RunLog
from scalerl.fit.forecast.options import ForecastOptions
from scalerl.fit.forecast.rise import Rise, flat_band, rise
from scalerl.fit.forecast.value import Forecast
from scalerl.fit.noise import RHO_MIN

__all__ = ["forecast_of"]


def forecast_of(log: RunLog, *, cut: float | None = None, options: ForecastOptions | None = None) -> Forecast:
    """The forecast of ``log`` seen up to compute ``cut`` (all of it when None) (module docstring)."""
    options = ForecastOptions() if options is None else options
    # the run as seen at its last evaluation (at or before ``cut``): what the forecast made there
    # saw, so that a live log's later training records and clock never change it (``serve``
    # remakes it once per evaluation, and ``plan`` on the live folder gives the same)
    seen = log.upto(float(log.curve.compute[-1]) if cut is None and len(log.curve) else cut if cut is not None else 0.0)
    if not len(seen.curve):
        raise CurveError(f"{log.curve.source}: no evaluation" + ("." if cut is None else f" has compute <= {cut:g}."))
    c, y = seen.curve.compute, seen.curve.reward
    now = float(c[-1])
    horizon = max(HORIZON * now, options.budget or 0.0)
    used = c >= options.fit.min_compute
    kw = dict(observed_compute=c, observed=y, level=options.level, horizon=horizon,
              bounds=(0.0, 1.0) if options.fit.bounded else None)  # a pass rate's draws stay in [0, 1]
    if used.sum() < st.MIN_EVALS:
        steps = None if seen.steps is None else seen.steps[used]
        few = st.too_few(c[used], steps, seen.metric, seen.eval_plan)
        made, why_not = early(seen, options, kw)
        if made is None:
            return Forecast(seen, options, few, "none", f"a forecast needs more evaluations; no early one: {why_not}",
                            None, horizon)  # fmt: skip
        said = f"{made.sentence(seen.metric)}; {few.message.split(': ', 1)[1]} give the validation's own"
        return Forecast(seen, options, st.State(st.EARLY, said, few.more, few.at_compute, few.at_step),
                        "early", said, made.draws, horizon, evidence=made.evidence,
                        uncalibrated=made.uncalibrated)  # fmt: skip
    if np.ptp(y[used]) < FLAT_TOL:  # no sigmoid to fit: the run has not moved
        evidence = rise(y[used], rho=RHO_MIN, level=options.level)
        return _not_learning(seen, options, horizon, kw, evidence, None, None, "the validation is exactly flat")
    fit = options.fit.fit(c, y, source=seen.curve.source)
    unc = assess(fit, level=options.level, margin=options.margin)
    rho = unc.noise.rho
    evidence = rise(fit.reward, rho=rho, level=options.level)
    base = dict(fit=fit, unc=unc)
    fall = st.declining(fit.reward, rho=rho, level=options.level, margin=options.margin)
    if fall is not None:
        centre, band = flat_band(rise(fit.reward[-max(fit.reward.size // 3, 1):], rho=rho, level=options.level),
                                 rho=rho, level=options.level)  # fmt: skip
        draws = band_draws(centre, band, sigma=unc.noise.sigma, rho=rho, **kw)
        return Forecast(seen, options, st.State(st.DECLINING, fall), "flat", fall, draws, horizon,
                        evidence=evidence, **base)  # fmt: skip
    why: list[str] = []
    if options.prior is not None and evidence.detected:
        made = _with_prior(fit, options, horizon, kw, unc)
        if made[0] is not None:
            draws, pf = made
            return Forecast(seen, options, st.from_rise(evidence), "prior", pf.reason, draws, horizon,
                            evidence=evidence, notes=(pf.reason,), prior=pf, **base)  # fmt: skip
        why.append(made[1].reason)
    comp = seen.companion() if options.follows_train_reward else None
    if comp is not None:
        diverged = None if evidence.detected else st.diverging(comp.val, comp.train, rho=rho, level=options.level,
                                                                   column=comp.column)  # fmt: skip
        if diverged is not None:
            return _not_learning(seen, options, horizon, kw, evidence, unc, fit, diverged, st.DIVERGING,
                                 notes=tuple(why))  # fmt: skip
        draws, note, trained, tpf, tcal = _companion(comp, options, kw, sigma=unc.noise.sigma, rho=rho,
                                                     prior=_train_prior(options))  # fmt: skip
        if draws is not None:
            followed = evidence if evidence.detected else trained
            notes = (*why, *(() if tpf is None else (tpf.reason,)))
            return Forecast(seen, options, st.from_rise(followed), "training reward",
                            "; ".join([*notes, f"the validation follows the training reward ({comp.column})"]),
                            draws, horizon, evidence=followed, notes=notes, train_prior=tpf, uncalibrated=tcal,
                            **base)  # fmt: skip
        why.append(note)
    if not evidence.detected:
        return _not_learning(seen, options, horizon, kw, evidence, unc, fit, "; ".join(why), notes=tuple(why))
    cal = unc.calibration
    k = 1.0 if cal is None or not cal.calibrated else cal.sides_at
    draws = band_draws(fit.predict, unc.band, sigma=unc.noise.sigma, rho=rho, k=k, rising=True, **kw)
    return Forecast(seen, options, st.from_rise(evidence), "fit", "; ".join(why) or "the law's own fit", draws,
                    horizon, evidence=evidence, notes=tuple(why), uncalibrated=_uncalibrated(cal), **base)  # fmt: skip


def _uncalibrated(cal) -> str:
    """Why a fit's intervals are not calibrated (``calibrate.rolling_origin``), "" where they are."""
    if cal is not None and cal.calibrated:
        return ""
    return "no held-out check" if cal is None else cal.message.removeprefix("interval not calibrated: ")


def _with_prior(fit: FitResult, options: ForecastOptions, horizon: float, kw: dict, unc):
    """(draws, PriorForecast) under the prior, or (None, the PriorForecast that says why not)."""
    pf = _prior_forecast(fit, options, horizon, options.prior[0])
    if not pf.used:
        return None, pf
    return band_draws(pf.predict, pf.band, sigma=unc.noise.sigma, rho=unc.noise.rho, rising=True, **kw), pf


def _prior_forecast(fit: FitResult, options: ForecastOptions, horizon: float, learned, what: str = ""):
    """The PriorForecast of ``fit``'s curve under ``learned``, calibrated at the run's budget
    (else the horizon); ``what`` the curve, where its reason names it."""
    from scalerl.fit.prior.posterior import forecast_with_prior

    _, why, n_runs = options.prior
    last = float(fit.compute.max())
    reach = options.budget if options.budget and options.budget > last else horizon
    pf = forecast_with_prior(fit, fit_until=last, budget=reach, prior=learned, options=options.fit,
                             n_runs=n_runs, why_none=why)  # fmt: skip
    return replace(pf, reason=f"{what} {pf.reason}") if what else pf


def _train_prior(options: ForecastOptions):
    """The prior of the finished runs' training rewards (``Prior.train``), None without one."""
    learned = None if options.prior is None else options.prior[0]
    return None if learned is None else learned.train


def _companion(comp: Companion, options: ForecastOptions, kw: dict, *, sigma: float, rho: float, prior=None):
    """(draws or None, why not, the training reward's Rise, its PriorForecast or None, why its
    intervals are not calibrated or ""): the validation as
    the training reward's calibrated draws plus the offset ``g`` (``companion``): centre
    ``t(C) + g``, each side widened by ``g``'s standard error in quadrature, one evaluation's
    noise the offsets' spread (never below the validation's own ``sigma``). With ``prior``
    (the finished runs' training rewards, ``Prior.train``) the training reward's curve and band
    are its forecast under that prior (``prior.posterior``), unless the prior refuses the run."""
    if len(comp) < MIN_POINTS:
        return None, f"training reward not used: {len(comp)} evaluations have one, below {MIN_POINTS}", None, None, ""
    try:
        tfit = options.fit.fit(comp.compute, comp.train, source=comp.column)
    except (CurveError, ValueError, np.linalg.LinAlgError) as err:
        return None, f"training reward not used: {err}", None, None, ""
    tunc = assess(tfit, level=options.level, margin=options.margin)
    trained = rise(comp.train, rho=tunc.noise.rho, level=options.level)
    trained = replace(trained, of=f"the training reward ({comp.column})")
    if not trained.detected:
        return None, f"training reward not used: {trained.message}", trained, None, ""
    now = float(kw["observed_compute"][-1])
    cal = tunc.calibration
    k = 1.0 if cal is None or not cal.calibrated else cal.sides_at
    centre_t, band_t, noise_t, pf, drift = tfit.predict, tunc.band, tunc.noise.sigma, None, None
    if prior is not None:
        pf = _prior_forecast(tfit, options, kw["horizon"], prior, what="training reward:")
        if pf.used:  # the prior's band carries its own calibration factor
            centre_t, band_t, noise_t, k = pf.predict, pf.band, pf.mode.sigma, 1.0
            drift = offset_drift([*prior.runs, *prior.unshaped], pf.fit_until / pf.mode.budget, options.level)
            if drift is not None:
                pf = replace(pf, reason=f"{pf.reason}; {drift.sentence()}")
    sds = widened(centre_t, band_t, k=k, sigma=noise_t, level=options.level, now=now)
    gaps = comp.offsets(centre_t)
    g, s_g = float(gaps.mean()), float(gaps.std(ddof=1))
    se = s_g / np.sqrt(gaps.size)
    if drift is not None:  # the offset moves on to the end as the finished runs' did (``companion``)
        g, se = g + drift.mean, float(np.hypot(se, drift.sd))
    z = float(stats.norm.ppf((1.0 + options.level) / 2.0))

    def centre(C):
        return sds(C)[0] + g

    def band(C):
        mid, down, up = sds(C)
        d, u = (np.sqrt(s**2 + se**2) * z for s in (down, up))
        return mid + g - d, mid + g + u

    draws = band_draws(centre, band, sigma=max(s_g, sigma), rho=rho, rising=True, **kw)
    uncalibrated = "" if pf is not None and pf.used else _uncalibrated(cal)
    return draws, "", trained, pf, uncalibrated


def _not_learning(seen: RunLog, options: ForecastOptions, horizon: float, kw: dict, evidence: Rise, unc,
                  fit, why: str, state: str = st.NOT_LEARNING, notes: tuple[str, ...] = ()) -> Forecast:
    """A run with no rise: its level (the last third's mean, within its own uncertainty) and,
    where the population table has enough cases, the paths of finished runs that looked as
    flat at the same share of their budget (``late``)."""
    rho = RHO_MIN if unc is None else unc.noise.rho
    sigma = evidence.sigma
    centre, band = flat_band(evidence, rho=rho, level=options.level)
    now = float(kw["observed_compute"][-1])
    share = now / options.budget if options.budget and options.budget > now else None  # no budget: unknown
    cases = late_risers(share, options.population, evals=int(np.sum(kw["observed_compute"] >= options.fit.min_compute)))
    message = evidence.message if state == st.NOT_LEARNING else why
    if state == st.NOT_LEARNING:
        message = "not learning: " + message
    if cases is None:
        draws: Draws = band_draws(centre, band, sigma=sigma, rho=rho, **kw)
        method, extra = "flat", "no finished runs as flat at this share of their budget to read a later rise from"
    else:
        z = float(stats.norm.ppf((1.0 + options.level) / 2.0))
        half = float(band(np.array([now]))[1][0] - centre(np.array([now]))[0])
        u = stats.norm.ppf((np.arange(N_DRAWS) + 0.5) / N_DRAWS)
        levels = evidence.last + np.random.default_rng(5).permutation(u) * half / z
        curves = cases.curves(levels, now, bounded=options.fit.bounded)
        draws = curve_draws(curves, sigma=sigma, rho=rho, **kw)
        method, extra = "late risers", cases.sentence()
    message = f"{message}; {extra}"
    return Forecast(seen, options, st.State(state, message), method, "; ".join(filter(None, (why, extra))), draws,
                    horizon, fit=fit, unc=unc, evidence=evidence, notes=(*notes, extra))  # fmt: skip
