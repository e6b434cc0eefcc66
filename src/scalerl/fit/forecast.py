"""Use a fitted sigmoid: reward at a budget, compute to reach a target, and the paper's
extrapolation check (fit on a prefix, score the rest; §1.5: fit to 8k GPU-hours, validate
at 16k; fit to 50k, validate at 100k)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scalerl.fit import law
from scalerl.fit.errors import CurveError, validate_curve
from scalerl.fit.fitting import FitResult, fit_sigmoid
from scalerl.fit.resample import BootstrapResult

__all__ = [
    "Forecast",
    "HoldoutForecast",
    "Reach",
    "compute_to_reach",
    "holdout_forecast",
    "predict_at",
]


class Forecast(NamedTuple):
    """Predicted reward and its bootstrap interval (NaN when no bootstrap was given)."""

    value: float | np.ndarray
    lo: float | np.ndarray
    hi: float | np.ndarray


def predict_at(result: FitResult, budget, boot: BootstrapResult | None = None) -> Forecast:
    """Eq. 1 at ``budget`` (scalar or array), with the bootstrap band when ``boot`` is set."""
    value = result.predict(budget)
    if boot is None:
        nan = np.full(np.shape(value), np.nan)
        lo = hi = nan
    else:
        lo, hi = boot.band(budget)
    if np.ndim(value) == 0:
        return Forecast(float(value), float(lo), float(hi))
    return Forecast(value, lo, hi)


@dataclass(frozen=True)
class Reach:
    """Compute needed to reach ``target`` on the fitted curve.

    ``reachable`` is False when ``target`` is at or beyond the asymptote A; ``compute``
    is then ``inf``. ``lo``/``hi`` come from the bootstrap (``inf`` where resamples put
    the target beyond their own A; ``p_unreachable`` is that share), NaN without one.
    """

    target: float
    reachable: bool
    compute: float
    lo: float = np.nan
    hi: float = np.nan
    p_unreachable: float = np.nan
    reason: str = ""


def compute_to_reach(
    result: FitResult, target: float, boot: BootstrapResult | None = None
) -> Reach:
    """Invert Eq. 1: ``C = C_mid * ((A - R0) / (target - R0) - 1)^(-1/B)``."""
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
    if boot is not None:
        A, B, C_mid, R0 = boot.samples.T
        per_sample = law.compute_for_reward(target, A, B, C_mid, R0)  # (n_ok,)
        q = [(1 - boot.level) / 2, (1 + boot.level) / 2]
        # inverted_cdf never interpolates between a finite value and inf (which gives NaN).
        lo, hi = (float(v) for v in np.quantile(per_sample, q, method="inverted_cdf"))
        p_unreachable = float(np.mean(np.isinf(per_sample)))
    return Reach(float(target), bool(np.isfinite(C)), C, lo, hi, p_unreachable, reason)


@dataclass(frozen=True, eq=False)
class HoldoutForecast:
    """A fit on the prefix ``compute <= fit_until`` scored on the held-out rest.

    Errors are ``predicted - observed``: ``rmse``, ``mae``, ``max_error`` (largest
    absolute) over the held-out points and ``final_error`` (signed) at the last point.
    """

    fit: FitResult
    fit_until: float
    compute: np.ndarray  # (h,) held-out compute
    reward: np.ndarray  # (h,) held-out observed reward
    predicted: np.ndarray  # (h,)

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
        }


def holdout_forecast(
    compute,
    reward,
    *,
    fit_frac: float = 0.5,
    fit_until: float | None = None,
    **fit_kwargs,
) -> HoldoutForecast:
    """Fit on the points with ``compute <= fit_until`` and forecast the rest.

    ``fit_until`` defaults to ``fit_frac`` x the last compute: 0.5 is the paper's
    "fit on half the target budget, extrapolate to the target" (§1.5). Remaining
    keyword arguments go to ``fit_sigmoid`` (R0 rule, min_compute, method, ...).
    """
    source = fit_kwargs.get("source")
    where = f"{source}: " if source else ""
    bounded = fit_kwargs.get("bounded", True)
    c, r = validate_curve(compute, reward, bounded=bounded, source=source)
    if fit_until is None:
        if not 0 < fit_frac < 1:
            raise CurveError(f"{where}fit_frac must be between 0 and 1, got {fit_frac}.")
        fit_until = fit_frac * float(c[-1])
    prefix = c <= fit_until
    if prefix.all():
        raise CurveError(
            f"{where}no point lies beyond fit_until={fit_until:g}, so there is nothing to forecast."
        )
    fit = fit_sigmoid(c[prefix], r[prefix], **fit_kwargs)
    held_c, held_r = c[~prefix], r[~prefix]
    return HoldoutForecast(fit, float(fit_until), held_c, held_r, fit.predict(held_c))
