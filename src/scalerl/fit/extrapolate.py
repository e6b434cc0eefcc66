"""Eq. 1's own curve put to use: reward at a budget, compute to reach a target, the paper's
extrapolation check (fit on a prefix, score the rest; §1.5: fit to 8k GPU-hours, validate
at 16k; fit to 50k, validate at 100k), and how much more compute would pin the ceiling.

These read one fitted law with its ``Uncertainty`` (``compare``'s law-against-law scores, the
library's API). A run's forecast, the one answer every command prints, is
``scalerl.fit.forecast.Forecast``.

Intervals come from an ``Uncertainty`` (``scalerl.fit.uncertainty``: the band on the
expected curve and the predictive interval for one future evaluation) or, for the band
only, from a ``BootstrapResult``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scalerl.fit import law
from scalerl.fit.calibrate import assess
from scalerl.fit.errors import CurveError, validate_curve
from scalerl.fit.fitting import FitResult, Problem, fit_problem
from scalerl.fit.options import FitOptions
from scalerl.fit.resample import BootstrapResult
from scalerl.fit.uncertainty import Uncertainty, model_uncertainty

__all__ = [
    "HoldoutForecast",
    "Point",
    "Reach",
    "budget_to_pin_A",
    "compute_to_reach",
    "holdout_forecast",
    "horizon_for",
    "predict_at",
]


class Point(NamedTuple):
    """Predicted reward; ``lo``/``hi`` bound the expected curve, ``pred_lo``/``pred_hi``
    one future evaluation (NaN where no interval source was given)."""

    value: float | np.ndarray
    lo: float | np.ndarray
    hi: float | np.ndarray
    pred_lo: float | np.ndarray = np.nan
    pred_hi: float | np.ndarray = np.nan


def predict_at(
    result: FitResult, budget, unc: Uncertainty | BootstrapResult | None = None
) -> Point:
    """Eq. 1 at ``budget`` (scalar or array), with the intervals ``unc`` gives."""
    value = np.asarray(result.predict(budget), dtype=float)
    nan = np.full(value.shape, np.nan)
    lo = hi = pred_lo = pred_hi = nan
    if unc is not None:
        lo, hi = unc.band(budget)
    if isinstance(unc, Uncertainty):
        pred_lo, pred_hi = unc.predictive(budget)
    parts = (value, lo, hi, pred_lo, pred_hi)
    if value.ndim == 0:
        return Point(*(float(np.asarray(v)) for v in parts))
    return Point(*(np.asarray(v, dtype=float) for v in parts))


@dataclass(frozen=True)
class Reach:
    """Compute needed to reach ``target`` on the fitted curve.

    ``reachable`` is False when ``target`` is at or beyond the asymptote A; ``compute``
    is then ``inf``. ``lo``/``hi`` come from the band on the expected curve (``inf``
    where it never reaches the target) or from a bootstrap (``p_unreachable`` is then the
    share of resamples whose own A lies below the target); NaN without either.
    """

    target: float
    reachable: bool
    compute: float
    lo: float = np.nan
    hi: float = np.nan
    p_unreachable: float = np.nan
    reason: str = ""


def compute_to_reach(
    result: FitResult, target: float, boot: Uncertainty | BootstrapResult | None = None
) -> Reach:
    """Invert Eq. 1: ``C = C_mid * ((A - R0) / (target - R0) - 1)^(-1/B)``.

    With an ``Uncertainty`` the interval is where the band on the expected curve first
    reaches the target: its upper edge gives ``lo``, its lower edge ``hi`` (``inf`` when
    the lower edge stays below the target up to 1000x the data).
    """
    C = float(law.compute_for_reward(target, result.A, result.B, result.C_mid, result.R0))
    if np.isinf(C):
        reason = (
            f"target {target:g} is at or beyond the fitted asymptote A={result.A:.4g}, "
            "so no finite compute reaches it"
        )
    elif C == 0:
        reason = f"target {target:g} is already met at zero compute (R0={result.R0:.4g})"
    else:
        reason = f"target {target:g} is reached at compute {C:.4g}"
    lo = hi = p_unreachable = np.nan
    if isinstance(boot, Uncertainty):
        lo, hi = _reach_interval(boot, target)
        if np.isfinite(C):  # the estimate always lies in its own interval
            lo, hi = min(lo, C), max(hi, C)
        a_lo, a_hi = boot.A_plausible
        if target > a_hi:
            reason += f"; above A's whole interval [{a_lo:.3g}, {a_hi:.3g}], so unreachable"
        elif target > a_lo:
            reason += f"; A's interval [{a_lo:.3g}, {a_hi:.3g}] holds it, so it may never be reached"
    elif boot is not None:
        A, B, C_mid, R0 = boot.samples.T
        per_sample = law.compute_for_reward(target, A, B, C_mid, R0)  # (n_ok,)
        q = [(1 - boot.level) / 2, (1 + boot.level) / 2]
        # inverted_cdf never interpolates between a finite value and inf (which gives NaN).
        lo, hi = (float(v) for v in np.quantile(per_sample, q, method="inverted_cdf"))
        p_unreachable = float(np.mean(np.isinf(per_sample)))
    return Reach(float(target), bool(np.isfinite(C)), C, lo, hi, p_unreachable, reason)


def _reach_interval(unc: Uncertainty, target: float) -> tuple[float, float]:
    """Where the band's upper and lower edges first reach ``target`` (inf: never)."""
    return band_reach(unc.fit, unc.band, target)


def band_reach(fit: FitResult, band, target: float) -> tuple[float, float]:
    """Where ``band(C) -> (lo, hi)`` around ``fit``'s curve first reaches ``target``, up to
    1000x the fitted compute: (the upper edge's compute, the lower edge's), inf where an edge
    never does (swapped for a falling curve)."""
    pos = fit.compute[fit.compute > 0]
    grid = np.geomspace(pos.min(), pos.max() * 1000.0, 600)
    lo_b, hi_b = band(grid)
    rising = fit.A >= fit.R0

    def first(edge):
        hit = edge >= target if rising else edge <= target
        return float(grid[np.argmax(hit)]) if hit.any() else np.inf

    return (first(hi_b), first(lo_b)) if rising else (first(lo_b), first(hi_b))


@dataclass(frozen=True, eq=False)
class HoldoutForecast:
    """A fit on the prefix ``compute <= fit_until`` scored on the held-out rest.

    Errors are ``predicted - observed``: ``rmse``, ``mae``, ``max_error`` (largest
    absolute) over the held-out points and ``final_error`` (signed) at the last point.
    ``unc`` holds the prefix fit's intervals, calibrated for the held-out ratio;
    ``pred_lo``/``pred_hi`` are its predictive interval at each held-out point.
    """

    fit: FitResult
    fit_until: float
    compute: np.ndarray  # (h,) held-out compute
    reward: np.ndarray  # (h,) held-out observed reward
    predicted: np.ndarray  # (h,)
    unc: Uncertainty

    @property
    def errors(self) -> np.ndarray:
        return self.predicted - self.reward

    @property
    def rmse(self) -> float:
        return float(np.sqrt(np.mean(self.errors**2)))

    @property
    def mae(self) -> float:
        return float(np.mean(np.abs(self.errors)))

    @property
    def max_error(self) -> float:
        return float(np.max(np.abs(self.errors)))

    @property
    def final_error(self) -> float:
        return float(self.errors[-1])

    @property
    def extrapolation_ratio(self) -> float:
        """How far the forecast reaches: last held-out compute / fit_until."""
        return float(self.compute[-1] / self.fit_until)

    @property
    def predictive(self) -> tuple[np.ndarray, np.ndarray]:
        return self.unc.predictive(self.compute)

    @property
    def coverage(self) -> float:
        """Share of held-out points inside their predictive interval."""
        lo, hi = self.predictive
        return float(np.mean((self.reward >= lo) & (self.reward <= hi)))

    @property
    def final(self) -> dict:
        """The last held-out point: observed, predicted and its predictive interval."""
        lo, hi = self.predictive
        obs = float(self.reward[-1])
        return {
            "compute": float(self.compute[-1]),
            "observed": obs,
            "predicted": float(self.predicted[-1]),
            "pred_lo": float(lo[-1]),
            "pred_hi": float(hi[-1]),
            "covered": bool(lo[-1] <= obs <= hi[-1]),
        }

    def to_dict(self) -> dict:
        return {
            "fit": self.fit.to_dict(),
            "fit_until": self.fit_until,
            "n_heldout": int(self.compute.size),
            "rmse": self.rmse,
            "mae": self.mae,
            "max_error": self.max_error,
            "final_error": self.final_error,
            "extrapolation_ratio": self.extrapolation_ratio,
            "coverage": self.coverage,
            "final": self.final,
        }


def holdout_forecast(
    compute,
    reward,
    *,
    fit_frac: float = 0.5,
    fit_until: float | None = None,
    options: FitOptions | None = None,
    source: str | None = None,
) -> HoldoutForecast:
    """Fit on the points with ``compute <= fit_until`` and forecast the rest.

    ``fit_until`` defaults to ``fit_frac`` x the last compute: 0.5 is the paper's
    "fit on half the target budget, extrapolate to the target" (§1.5). The intervals are
    calibrated for the ratio the forecast reaches (last compute / fit_until).
    """
    options = FitOptions() if options is None else options
    where = f"{source}: " if source else ""
    c, r = validate_curve(compute, reward, bounded=options.bounded, source=source)
    if fit_until is None:
        if not 0 < fit_frac < 1:
            raise CurveError(f"{where}fit_frac must be between 0 and 1, got {fit_frac}.")
        fit_until = fit_frac * float(c[-1])
    prefix = c <= fit_until
    if prefix.all():
        raise CurveError(
            f"{where}no point lies beyond fit_until={fit_until:g}, so there is nothing to forecast."
        )
    fit = options.fit(c[prefix], r[prefix], source=source)
    held_c, held_r = c[~prefix], r[~prefix]
    unc = assess(fit, level=options.level, margin=options.margin, horizon=held_c[-1] / fit_until)
    return HoldoutForecast(fit, float(fit_until), held_c, held_r, fit.predict(held_c), unc)


# --- budget advice ------------------------------------------------------------------

BUDGET_MULTIPLES = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 25.0, 40.0, 60.0, 100.0)
MAX_NEW_POINTS = 150  # longer simulated extensions are thinned (block means)


def budget_to_pin_A(unc: Uncertainty, *, n_sims: int = 8, seed: int = 0) -> float | None:
    """Smallest multiple of the compute so far after which A's interval is within
    ``±margin`` in at least half of ``n_sims`` simulated continuations, or None when not
    within 100x.

    Each continuation extends the run at its recent evaluation spacing, draws the new
    evaluations from the fitted curve plus the fitted AR(1) noise, refits everything
    (noise, profile over A) and reads A's interval, exactly as a real run would be read
    later (its C_mid box reaching as far past the longer data as the run's does). Past
    ``MAX_NEW_POINTS`` new evaluations, blocks of ``t`` consecutive ones are drawn as their
    mean, with the sd and correlation block means of that AR(1) noise have
    (``block_noise``), which keeps the cost bounded. Multiples are searched by bisection.
    """
    if unc.identified:
        return 1.0
    rng = np.random.default_rng(seed)
    data = unc.data
    draws = {}

    def pinned(m: float) -> bool:
        if m not in draws:
            widths = [_simulated_half_width(unc, data, m, rng) for _ in range(n_sims)]
            draws[m] = float(np.median(widths)) <= unc.margin
        return draws[m]

    options = list(BUDGET_MULTIPLES)
    if not pinned(options[-1]):
        return None
    lo, hi = -1, len(options) - 1  # options[hi] pins; options[lo] (if any) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pinned(options[mid]):
            hi = mid
        else:
            lo = mid
    return options[hi]


def block_noise(sigma: float, rho: float, t: int) -> tuple[float, float]:
    """Marginal sd and lag-1 correlation of the means of consecutive blocks of ``t`` points
    of an AR(1) series (marginal sd ``sigma``, lag-1 correlation ``rho``).

    ``Var(mean) = sigma^2 / t * (1 + 2 sum_{k<t} (1 - k/t) rho^k)`` and the covariance of
    neighbouring block means is ``sigma^2 rho ((1 - rho^t) / (1 - rho))^2 / t^2``.
    """
    if t <= 1:
        return sigma, rho
    k = np.arange(1, t)
    var = sigma**2 / t * (1.0 + 2.0 * np.sum((1.0 - k / t) * rho**k))
    geo = (1.0 - rho**t) / (1.0 - rho) if rho < 1 else float(t)
    cov = sigma**2 * rho * geo**2 / t**2
    return float(np.sqrt(var)), float(min(cov / var, 0.999))


def _simulated_half_width(unc: Uncertainty, data: FitResult, m: float, rng) -> float:
    C = data.compute
    tail = np.diff(C[-min(10, C.size) :])
    step = float(np.median(tail)) if tail.size and np.median(tail) > 0 else float(C[-1] / C.size)
    new = np.arange(C[-1] + step, m * C[-1] + step / 2, step)
    block = max(1, int(np.ceil(new.size / MAX_NEW_POINTS)))
    new = new[block - 1 :: block]
    sd, rho = block_noise(unc.noise.sigma, unc.noise.rho, block)
    e = np.empty(new.size)
    prev = rng.normal(0.0, sd)
    for i in range(new.size):  # AR(1) with marginal sd ``sd``
        prev = rho * prev + rng.normal(0.0, sd * np.sqrt(1.0 - rho**2))
        e[i] = prev
    y_new = data.predict(new) + e
    if data.bounded:
        y_new = np.clip(y_new, 0.0, 1.0)
    problem = Problem(
        np.concatenate([C, new]), np.concatenate([data.reward, y_new]),
        None if data.r0_fitted else data.R0, None, data.bounded,
    )  # fmt: skip
    bounds = dict(data.bounds)  # a later fit's box reaches as far past its data as this one's
    lo, hi = bounds["C_mid"]
    bounds["C_mid"] = (lo, max(hi, hi * new[-1] / C[-1]))
    sim = model_uncertainty(
        fit_problem(problem, bounds), level=unc.level, margin=unc.margin, cells=False
    )
    lo, hi = sim.A_plausible
    return (hi - lo) / 2.0 if not sim.box_limited else np.inf


# --- the extrapolation ratio ----------------------------------------------------------


def horizon_for(last_compute: float, targets=(), default: float = 2.0) -> float:
    """Extrapolation ratio to calibrate for: the farthest target over the last fitted
    compute, and at least ``default`` (the paper's half-budget forecast)."""
    targets = [float(t) for t in targets]
    if not targets or last_compute <= 0:
        return default
    return max(default, max(targets) / last_compute)
