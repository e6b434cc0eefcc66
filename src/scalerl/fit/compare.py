"""Compare runs the way the paper does (§1.4, §3.3, App. A.4), and only as far as the
data allow.

- :func:`compare_runs`: fit every run with its honest intervals and apply the paper's
  rule. For two runs: if ``|A1 - A2| <= margin`` (0.02, from the ±0.015 spread of three
  independent ScaleRL runs), refit both with A fixed to their mean and the higher B wins;
  otherwise the higher A wins. For more runs the same rule picks among the *contenders*,
  the runs whose A is within ``margin`` of the best A.

  The rule needs ceilings the data pin down. When a contender's ceiling is not identified
  (``Uncertainty.identified``), or the shared A of the refit sits on a bound of the box,
  no winner is named: the verdict is ``"undecided"`` and says what the data do decide,
  the expected reward at the largest compute every run reached, with its band. One
  exception keeps clear cases clear: an identified ceiling whose whole interval lies
  above every other run's interval wins on the asymptote. Runs whose compute ranges
  differ by more than 2x get a warning: their B values are not comparable.
- :func:`loo_table`: the Fig. 7 leave-one-out table: C_mid, B, A of the baseline and each
  variant, and B refitted with A fixed to the mean A of all runs (the efficiency plot's
  slopes).
- :func:`extrapolation_errors`: App. A.4's sigmoid-versus-power-law test: fit both laws on
  the same prefix (the first ``fit_frac`` of the compute budget, as the paper fits 8k of
  16k GPU-hours) and score each on the held-out rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from scalerl.fit.budget import budget_to_pin_A
from scalerl.fit.calibrate import assess
from scalerl.fit.errors import CurveError, validate_curve
from scalerl.fit.fitting import FitResult
from scalerl.fit.forecast.holdout import Heldout
from scalerl.fit.options import FitOptions
from scalerl.fit.powerlaw import PowerLawResult, fit_power_law
from scalerl.fit.readers import Curve
from scalerl.fit.uncertainty import Uncertainty

PARAMS = ("A", "B", "C_mid")
A_TOL = 1e-9  # grid A values differ by float noise (0.62 - 0.60 = 0.020000000000000018)
RANGE_RATIO = 2.0  # compute ranges further apart than this make B incomparable
SHARED_A_EDGE = 1e-3  # a shared A this close to a box edge counts as on it


@dataclass(frozen=True, eq=False)
class RunFit:
    """One run's fit, its intervals (``unc``) and, when asked, the budget to pin A."""

    name: str
    curve: Curve
    fit: FitResult
    unc: Uncertainty
    budget: float | None = None  # budget_to_pin_A (multiple of the compute so far)
    budget_checked: bool = False
    forecast: object = None  # the run's ``Forecast``, whose band every figure of it shades

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        return self.unc.intervals

    @property
    def band(self):
        """``C -> (lo, hi)``: the band on the expected curve."""
        return self.unc.band

    @property
    def identified(self) -> bool:
        return self.unc.identified

    @property
    def budget_text(self) -> str:
        if not self.budget_checked:
            return "-"
        if self.unc.falling:
            return "withheld: the curve falls, so no forecast of it, this one included, is to be trusted"
        if self.budget is None:
            return "not within 100x"
        if self.budget <= 1.0:
            return "pinned now"
        return f"about {self.budget:g}x the compute so far"

    def row(self) -> dict:
        """Table row: parameters, their intervals, the ceiling verdict, fit flags."""
        row = {"run": self.name, **{p: getattr(self.fit, p) for p in (*PARAMS, "R0")}}
        for p in PARAMS:
            row[f"{p}_interval"] = list(self.intervals[p]) if p in self.intervals else None
        row |= {
            "identified": self.identified,
            "A_plausible": list(self.unc.A_plausible),
            "ceiling": self.unc.verdict,
            "n_points": self.fit.n_points,
            "sse": self.fit.sse,
            "converged": self.fit.converged,
            "bounds_hit": list(self.fit.bounds_hit),
        }
        return row

    def fit_dict(self) -> dict:
        """``fit`` of the JSON contract: the fit, identification and budget advice."""
        return self.fit.to_dict() | {
            "identified": self.identified,
            "A_plausible": list(self.unc.A_plausible),
            "ceiling": self.unc.verdict,
            "budget_to_pin_A": self.budget,
            "budget_advice": self.budget_text,
        }


@dataclass(frozen=True)
class Verdict:
    """Which run scales better under the paper's rule, why, or why the data cannot say.

    ``winner`` is None when ``decided_by == "undecided"``; ``reasons`` are sentences
    (the rule's decision, or why it was withheld, and warnings); ``equal_compute`` is
    the expected reward of each run at ``compute``, the largest compute all runs reached,
    as ``name -> (value, lo, hi)``.
    """

    winner: str | None
    decided_by: Literal["asymptote", "efficiency", "undecided"]
    margin: float
    contenders: tuple[str, ...]  # runs whose A is within margin of the best A
    delta_A: float  # best A minus the next-best A over all runs (0 for a single run)
    shared_A: float | None  # mean A of the contenders, when B decided
    refit_B: dict[str, float]  # B of each contender refitted at shared_A
    reasons: tuple[str, ...] = ()
    equal_compute: dict = field(default_factory=dict)

    @property
    def sentence(self) -> str:
        return " ".join(self.reasons)

    def to_dict(self) -> dict:
        eq = self.equal_compute
        return {
            "winner": self.winner,
            "decided_by": self.decided_by,
            "margin": self.margin,
            "contenders": list(self.contenders),
            "delta_A": self.delta_A,
            "shared_A": self.shared_A,
            "refit_B": dict(self.refit_B),
            "reasons": list(self.reasons),
            "sentence": self.sentence,
            "equal_compute": {
                "compute": eq.get("compute"),
                "runs": {n: {"value": v, "lo": lo, "hi": hi} for n, (v, lo, hi) in eq.get("runs", {}).items()},
            },
        }


@dataclass(frozen=True, eq=False)
class Comparison:
    runs: list[RunFit]
    verdict: Verdict
    refits: dict[str, FitResult]  # the fixed-A refits of the contenders (empty otherwise)

    def rows(self) -> list[dict]:
        rows = [r.row() for r in self.runs]
        for row in rows:
            refit = self.refits.get(row["run"])
            row["B_at_shared_A"] = refit.B if refit is not None else None
        return rows

    def to_dict(self) -> dict:
        return {"runs": self.rows(), "verdict": self.verdict.to_dict()}


def fit_run(
    curve: Curve,
    *,
    options: FitOptions | None = None,
    fit: FitResult | None = None,
    horizon: float = 2.0,
    budget: bool = False,
    unc: Uncertainty | None = None,
    forecast=None,
) -> RunFit:
    """One run's law: ``forecast``'s own fit and intervals where a ``Forecast`` is given (the
    law table then reads the fit the forecast made), else ``fit`` (a joint fit's) or a fit of
    ``curve``, assessed for forecasts up to ``horizon`` x its last compute (or ``unc``);
    ``budget`` adds the budget-to-pin-A advice (withheld, and said so, when the curve falls)."""
    options = FitOptions() if options is None else options
    if forecast is not None and fit is None and forecast.fit is not None:
        fit, unc = forecast.fit, forecast.unc
    if fit is None:
        fit = options.fit(curve.compute, curve.reward, source=curve.source)
    if unc is None:
        unc = assess(fit, level=options.level, margin=options.margin, horizon=horizon)
    # a falling curve's forecasts are not to be trusted, a simulated continuation of it neither
    advice = budget_to_pin_A(unc) if budget and not unc.falling else None
    return RunFit(curve.name, curve, fit, unc, advice, budget, forecast)


def forecast_curve(curve: Curve, options: FitOptions | None = None, budget: float | None = None):
    """The one ``Forecast`` of a curve read as a whole (``forecast_of``, its fit options
    ``options``): what every figure of a compared run shades, so that ``fit a b``,
    ``compare``, ``report`` and the study page show one band for it."""
    from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of

    fo = ForecastOptions() if options is None else ForecastOptions(fit=options)
    log = RunLog.of(curve.compute, curve.reward, name=curve.name, metric=curve.y)
    return forecast_of(log, options=fo.with_(budget=budget, train_reward="none"))


def refit_at(curve: Curve, A: float, options: FitOptions | None = None) -> FitResult:
    """``curve`` refitted with the asymptote fixed to ``A`` (the paper's B comparison)."""
    options = FitOptions() if options is None else options
    return options.fit(curve.compute, curve.reward, fixed_A=A, source=curve.source)


def equal_compute(runs: Sequence[RunFit]) -> dict:
    """Each run's expected reward (and band) at the largest compute every run reached."""
    C = float(min(r.curve.compute.max() for r in runs))
    out = {}
    for r in runs:
        lo, hi = r.unc.band(np.array([C]))
        out[r.name] = (float(r.fit.predict(C)), float(lo[0]), float(hi[0]))
    return {"compute": C, "runs": out}


def _equal_compute_sentence(eq: dict) -> str:
    runs = eq["runs"]
    parts = ", ".join(f"{n} {v:.3f} [{lo:.3f}, {hi:.3f}]" for n, (v, lo, hi) in runs.items())
    best = max(runs, key=lambda n: runs[n][0])
    ahead = all(runs[best][1] > hi for n, (_, _, hi) in runs.items() if n != best)
    verdict = (
        f"{best} is ahead at equal compute (its band lies above the others')"
        if ahead
        else "their bands overlap, so the runs are not distinguishable at equal compute"
    )
    return f"What the data decide: at compute {eq['compute']:.4g} the expected rewards are {parts}; {verdict}."


def _range_warning(runs: Sequence[RunFit]) -> str | None:
    tops = {r.name: float(r.curve.compute.max()) for r in runs}
    ratio = max(tops.values()) / max(min(tops.values()), 1e-300)
    if ratio <= RANGE_RATIO:
        return None
    return (
        f"Warning: the runs' compute ranges differ by {ratio:.1f}x (more than {RANGE_RATIO:g}x), "
        "so their B values are not comparable."
    )


def decide(
    runs: Sequence[RunFit], curves: dict[str, Curve], *, options: FitOptions | None = None
) -> tuple[Verdict, dict[str, FitResult]]:
    """The §1.4 rule over any number of runs, withheld where the data cannot support it
    (module docstring); returns the verdict and the fixed-A refits."""
    options = FitOptions() if options is None else options
    margin = options.margin
    if not runs:
        raise CurveError("there is no run to compare.")
    by_name = {r.name: r for r in runs}
    ranked = sorted(by_name, key=lambda n: by_name[n].fit.A, reverse=True)
    best_A = by_name[ranked[0]].fit.A
    delta_A = best_A - by_name[ranked[1]].fit.A if len(ranked) > 1 else 0.0
    contenders = tuple(n for n in ranked if best_A - by_name[n].fit.A <= margin + A_TOL)
    eq = equal_compute(runs)
    warning = _range_warning(runs)
    extra = (warning,) if warning else ()

    def undecided(why: list[str]) -> tuple[Verdict, dict]:
        reasons = (*why, _equal_compute_sentence(eq), *extra)
        return Verdict(None, "undecided", margin, contenders, delta_A, None, {}, reasons, eq), {}

    unidentified = [n for n in ranked if not by_name[n].identified]
    clear = _clear_asymptote(by_name, ranked, margin) if unidentified else None
    if clear is not None:
        lo = by_name[clear].unc.A_plausible[0]
        why = (
            f"{clear} wins on the asymptote: its ceiling is identified and its whole interval "
            f"(from {lo:.3f}) lies above every other run's plausible A."
        )
        return Verdict(clear, "asymptote", margin, (clear,), delta_A, None, {}, (why, *extra), eq), {}
    if unidentified:
        return undecided([f"No verdict: the ceiling of {n} is not identified ({_why(by_name[n].unc)})." for n in unidentified])
    if len(contenders) == 1:
        why = (
            f"{ranked[0]} wins on the asymptote: its A is higher than every other run's by more "
            f"than the {margin:g} margin (next best is {delta_A:.3f} lower)."
        )
        return Verdict(ranked[0], "asymptote", margin, contenders, delta_A, None, {}, (why, *extra), eq), {}
    shared_A = float(np.mean([by_name[n].fit.A for n in contenders]))
    # the box the runs' own fits searched (a fixed-A refit's box is the point itself)
    lo_box = max(by_name[n].fit.bounds["A"][0] for n in contenders)
    hi_box = min(by_name[n].fit.bounds["A"][1] for n in contenders)
    on_edge = [n for n in contenders if "A" in by_name[n].fit.bounds_hit]
    if on_edge or min(shared_A - lo_box, hi_box - shared_A) <= SHARED_A_EDGE:
        return undecided([
            f"No verdict: the shared A = {shared_A:.3f} sits on a bound of the search box "
            f"[{lo_box:g}, {hi_box:g}]" + (f" ({', '.join(on_edge)} fitted A on it)" if on_edge else "")
            + ", so B refitted there compares curves the box, not the data, shaped."
        ])  # fmt: skip
    refits = {n: refit_at(curves[n], shared_A, options) for n in contenders}
    refit_B = {n: refits[n].B for n in contenders}
    winner = max(contenders, key=lambda n: refit_B[n])
    others = ", ".join(f"{n} {b:.3f}" for n, b in refit_B.items() if n != winner)
    why = (
        f"{winner} wins on efficiency: the A values of {', '.join(contenders)} lie within the "
        f"{margin:g} margin, and refitted at their mean A = {shared_A:.3f} its "
        f"B = {refit_B[winner]:.3f} is the highest (vs {others})."
    )
    verdict = Verdict(winner, "efficiency", margin, contenders, delta_A, shared_A, refit_B, (why, *extra), eq)
    return verdict, refits


def _why(unc: Uncertainty) -> str:
    """Why a ceiling is not identified, in a few words."""
    lo, hi = unc.A_plausible
    if unc.falling:
        return "its curve falls"
    if unc.box_limited and (hi - lo) / 2.0 <= unc.margin:
        return f"{' and '.join(unc.box_limited)} ended on a bound of the search box"
    return f"any A in [{lo:.3f}, {hi:.3f}] fits as well"


def _clear_asymptote(by_name: dict[str, RunFit], ranked: list[str], margin: float) -> str | None:
    """An identified run whose A interval lies above every other run's plausible A, by
    more than the margin at the point estimates, or None."""
    for name in ranked:
        run = by_name[name]
        if not run.identified:
            continue
        lo = run.unc.A_plausible[0]
        others = [by_name[o] for o in ranked if o != name]
        if all(lo > o.unc.A_plausible[1] and run.fit.A - o.fit.A > margin for o in others):
            return name
    return None


def _check_names(curves: Sequence[Curve]) -> None:
    names = [c.name for c in curves]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise CurveError(f"two runs are both named {duplicate!r}; rename one file to compare them.")


def compare_runs(
    curves: Sequence[Curve], *, options: FitOptions | None = None, budget: bool = False,
    fits: dict[str, FitResult] | None = None, forecasts: dict | None = None,
) -> Comparison:
    """Each run's law (``fit_run``): the fit of its ``Forecast`` (``forecasts``' where given, a
    page's; else made here, ``forecast_curve``), or ``fits``' (e.g. a joint fit's); then the
    paper's compare rule (module docstring)."""
    if len(curves) < 2:
        raise CurveError(f"compare needs at least two runs, got {len(curves)}.")
    _check_names(curves)
    made = forecasts if forecasts is not None else {c.name: forecast_curve(c, options) for c in curves}
    runs = [fit_run(c, options=options, budget=budget, fit=None if fits is None else fits[c.name],
                    forecast=made.get(c.name)) for c in curves]  # fmt: skip
    verdict, refits = decide(runs, {c.name: c for c in curves}, options=options)
    return Comparison(runs, verdict, refits)


@dataclass(frozen=True, eq=False)
class LooTable:
    """Fig. 7: per run C_mid, B, A and B refitted at the mean A of all runs."""

    baseline: str
    shared_A: float
    fits: dict[str, FitResult]
    refits: dict[str, FitResult]  # A fixed to shared_A

    def rows(self) -> list[dict]:
        base_B = self.refits[self.baseline].B
        return [
            {
                "run": name,
                "baseline": name == self.baseline,
                "C_mid": fit.C_mid,
                "B": fit.B,
                "A": fit.A,
                "B_at_shared_A": self.refits[name].B,
                "delta_B_vs_baseline": self.refits[name].B - base_B,
            }
            for name, fit in self.fits.items()
        ]

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "shared_A": self.shared_A, "rows": self.rows()}


def loo_table(
    curves: Sequence[Curve], baseline: str | None = None, options: FitOptions | None = None,
    fits: dict[str, FitResult] | None = None,
) -> LooTable:
    """Leave-one-out table; ``baseline`` names the reference run (default: the first);
    ``fits`` (e.g. a joint fit's) replace the runs' own fits."""
    options = FitOptions() if options is None else options
    _check_names(curves)
    names = [c.name for c in curves]
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise CurveError(f"baseline {baseline!r} is not one of the runs: {', '.join(names)}.")
    by_name = {c.name: c for c in curves}
    if fits is None:
        fits = {n: options.fit(c.compute, c.reward, source=c.source) for n, c in by_name.items()}
    fits = {n: fits[n] for n in names}
    shared_A = float(np.mean([f.A for f in fits.values()]))
    refits = {n: refit_at(by_name[n], shared_A, options) for n in names}
    return LooTable(baseline, shared_A, fits, refits)


@dataclass(frozen=True, eq=False)
class LawScore:
    """Held-out errors of one law fitted on the prefix."""

    rmse: float
    max_abs: float
    final_error: float  # prediction minus reward at the last (largest-compute) point
    A: float


@dataclass(frozen=True, eq=False)
class ExtrapolationScore:
    """Sigmoid vs power law, both fitted on compute <= fit_compute, scored beyond it."""

    name: str
    fit_compute: float
    n_fit: int
    n_heldout: int
    sigmoid: LawScore
    power_law: LawScore
    sigmoid_fit: FitResult
    power_law_fit: PowerLawResult

    def to_dict(self) -> dict:
        def law(s: LawScore) -> dict:
            return {"rmse": s.rmse, "max_abs": s.max_abs, "final_error": s.final_error, "A": s.A}

        return {
            "run": self.name,
            "fit_compute": self.fit_compute,
            "n_fit": self.n_fit,
            "n_heldout": self.n_heldout,
            "sigmoid": law(self.sigmoid) | {"binned_from": self.sigmoid_fit.binned_from},
            "power_law": law(self.power_law) | {"binned_from": self.power_law_fit.binned_from},
        }


def _score(predicted: np.ndarray, actual: np.ndarray, A: float) -> LawScore:
    err = predicted - actual
    return LawScore(float(np.sqrt(np.mean(err**2))), float(np.abs(err).max()), float(err[-1]), A)


@dataclass(frozen=True, eq=False)
class LawHoldout:
    """Eq. 1 fitted on a prefix with its calibrated intervals, scored on the held-out rest."""

    fit: FitResult
    unc: Uncertainty
    heldout: Heldout


def holdout_forecast(compute, reward, *, fit_frac: float = 0.5, fit_until: float | None = None,
                     options: FitOptions | None = None, source: str | None = None) -> LawHoldout:
    """App. A.4's check of the law itself: Eq. 1 fitted on the points with ``compute <=
    fit_until`` (default ``fit_frac`` x the last compute: the paper's "fit on half the target
    budget, extrapolate to the target", §1.5) and its own predictive interval, calibrated for
    the ratio it reaches, scored on the rest. A run's forecast is ``Forecast.heldout``."""
    options = FitOptions() if options is None else options
    where = f"{source}: " if source else ""
    c, r = validate_curve(compute, reward, bounded=options.bounded, source=source)
    if fit_until is None:
        if not 0 < fit_frac < 1:
            raise CurveError(f"{where}fit_frac must be between 0 and 1, got {fit_frac}.")
        fit_until = fit_frac * float(c[-1])
    prefix = c <= fit_until
    if prefix.all():
        raise CurveError(f"{where}no point lies beyond fit_until={fit_until:g}, so there is nothing to forecast.")
    fit = options.fit(c[prefix], r[prefix], source=source)
    held_c, held_r = c[~prefix], r[~prefix]
    unc = assess(fit, level=options.level, margin=options.margin, horizon=held_c[-1] / fit_until)
    lo, hi = unc.predictive(held_c)
    return LawHoldout(fit, unc, Heldout(float(fit_until), held_c, held_r, np.asarray(fit.predict(held_c), float),
                                        np.asarray(lo, float), np.asarray(hi, float), options.level))


def extrapolation_errors(
    curve: Curve, *, fit_frac: float = 0.5, options: FitOptions | None = None
) -> ExtrapolationScore:
    """Fit sigmoid and power law on compute <= fit_frac * max compute; score the rest.

    The power law uses the same points with positive compute (it is undefined at C = 0)
    from ``min_compute`` on, i.e. its C0 is the first fitted point's compute (App. A.4),
    binned above ``options.max_points`` as the sigmoid is (``binned_from`` on each fit).
    """
    options = FitOptions() if options is None else options
    law_hold = holdout_forecast(curve.compute, curve.reward, fit_frac=fit_frac, options=options, source=curve.source)
    hold = law_hold.heldout
    prefix = curve.compute <= hold.cut
    c0 = options.min_compute if options.min_compute > 0 else None
    power = fit_power_law(
        curve.compute[prefix],
        curve.reward[prefix],
        c0=c0,
        bounded=options.bounded,
        source=curve.source,
        max_points=options.max_points,
    )
    return ExtrapolationScore(
        curve.name,
        hold.cut,
        law_hold.fit.n_points,
        int(hold.compute.size),
        _score(hold.predicted, hold.reward, law_hold.fit.A),
        _score(power.predict(hold.compute), hold.reward, power.A),
        law_hold.fit,
        power,
    )
