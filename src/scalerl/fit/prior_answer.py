"""The forecast under a prior as ``scalerl fit`` reports it (issue 29).

A :class:`PriorAnswer` reads a used ``posterior.PriorForecast`` in the terms a prior-free
fit is reported in: the parameters with their intervals, the ceiling verdict, the budget
advice, the forecasts at target compute, the compute to reach a target reward and the
held-out score. Every output of ``scalerl fit --prior-runs`` puts it first, named
:func:`with_prior_label`, and the prior-free fit beside it, named :data:`ALONE`.

The prior's intervals are calibrated for one reach: the run cut where it was, forecast to
the compute the prior was asked for (``budget``). A forecast past that compute keeps its
value and gets no interval; a reach past it says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scalerl.fit.fitting import FitResult
from scalerl.fit.forecast import Forecast, HoldoutForecast, Reach, band_reach, compute_to_reach
from scalerl.fit.posterior import PriorForecast

__all__ = ["ALONE", "PriorAnswer", "prior_answer", "with_prior_label"]

ALONE = "this run alone"
"""The name of the prior-free answer in every output."""


def with_prior_label(n_runs: int) -> str:
    """The name of the prior's answer in every output."""
    return f"with the prior of {n_runs} finished runs"


@dataclass(frozen=True, eq=False)
class PriorAnswer:
    """One run's forecast under a prior, as a fit is reported (module docstring).

    ``fit`` is the posterior mode as an Eq. 1 fit of the run's points (``PriorForecast.as_fit``);
    ``holdout`` scores it on the held-out points with the prior's predictive interval.
    """

    prior: PriorForecast  # used
    fit: FitResult
    margin: float
    holdout: HoldoutForecast | None
    forecasts: list[tuple[float, Forecast]]
    reaches: list[Reach]

    @property
    def label(self) -> str:
        return with_prior_label(self.prior.n_runs)

    @property
    def budget(self) -> float:
        """The compute the prior's intervals are calibrated for."""
        return self.prior.mode.budget

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        return self.prior.intervals()

    @property
    def A_half_width(self) -> float:
        lo, hi = self.intervals["A"]
        return (hi - lo) / 2.0

    @property
    def identified(self) -> bool:
        """A's interval under the prior is within ``±margin``."""
        return self.A_half_width <= self.margin + 1e-12

    @property
    def ceiling(self) -> str:
        """One sentence on the ceiling under the prior."""
        lo, hi = self.intervals["A"]
        where = f"A in [{lo:.3f}, {hi:.3f}] at {self.prior.level:.0%}"
        if self.identified:
            return f"ceiling identified: {where}, within ±{self.margin:g}."
        return f"ceiling not pinned: {where}, wider than ±{self.margin:g}."

    @property
    def ceiling_text(self) -> str:
        """The ceiling verdict in a few words, for a table cell."""
        lo, hi = self.intervals["A"]
        return f"{'identified' if self.identified else 'not pinned'} [{lo:.3f}, {hi:.3f}]"

    @property
    def budget_text(self) -> str:
        """The budget advice under the prior: pinned now, or how far from it A is (the
        compute it would take is simulated for the prior-free fit only)."""
        if self.identified:
            return "pinned now"
        return f"A known to ±{self.A_half_width:.3f} now (more compute is not simulated under the prior)"

    def to_dict(self) -> dict:
        """The top level of a run's JSON when the prior's answer is the headline: the same
        keys as the prior-free answer's (``fit``, ``intervals``, ``uncertainty``,
        ``forecasts``, ``compute_to_reach``, ``holdout``)."""
        holdout = None
        if self.holdout is not None:
            holdout = self.holdout.to_dict()
            holdout["final"] = holdout["final"] | {"from": "prior"}
        return {
            "fit": self.fit.to_dict() | {
                "identified": self.identified, "A_plausible": list(self.intervals["A"]),
                "ceiling": self.ceiling, "budget_to_pin_A": None, "budget_advice": self.budget_text,
                "prior": self.prior.to_dict(),
            },
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "uncertainty": {"level": self.prior.level, "calibration_factor": self.prior.calibration.scale,
                            "calibration": self.prior.factor_sentence, "calibrated_up_to": self.budget},
            "forecasts": [forecast_dict(c, f) for c, f in self.forecasts],
            "compute_to_reach": [vars(r) for r in self.reaches],
            "holdout": holdout,
        }  # fmt: skip


def forecast_dict(compute: float, f: Forecast) -> dict:
    """One forecast of the JSON contract."""
    return {"compute": compute, "reward": f.value, "lo": f.lo, "hi": f.hi, "pred_lo": f.pred_lo,
            "pred_hi": f.pred_hi}  # fmt: skip


def prior_answer(
    prior: PriorForecast, fit: FitResult, *, margin: float, holdout: HoldoutForecast | None = None,
    targets: Sequence[float] = (), rewards: Sequence[float] = (),
) -> PriorAnswer:
    """The answer under a used ``prior`` for the run whose prior-free fit is ``fit``: its
    forecasts at ``targets`` (compute), its reaches of ``rewards`` and, with ``holdout``, its
    score on the held-out points."""
    mode_fit = prior.as_fit(fit)
    scored = None
    if holdout is not None:
        # PriorForecast offers the predictive(C) the hold-out score reads from its unc
        scored = replace(holdout, fit=mode_fit, predicted=mode_fit.predict(holdout.compute), unc=prior)
    forecasts = [(float(c), _forecast(prior, float(c))) for c in targets]
    reaches = [_reach(prior, mode_fit, float(r)) for r in rewards]
    return PriorAnswer(prior, mode_fit, margin, scored, forecasts, reaches)


def _forecast(prior: PriorForecast, C: float) -> Forecast:
    """The prior's value at ``C`` with both intervals; none past its calibrated budget."""
    value = float(np.ravel(prior.predict(C))[0])
    if C > prior.mode.budget * (1 + 1e-9):
        return Forecast(value, np.nan, np.nan)
    (lo, hi), (pred_lo, pred_hi) = prior.band(C), prior.predictive(C)
    return Forecast(value, *(float(np.ravel(v)[0]) for v in (lo, hi, pred_lo, pred_hi)))


def _reach(prior: PriorForecast, fit: FitResult, target: float) -> Reach:
    """Compute to reach ``target`` on the mode's curve; the interval where the prior's band
    reaches it, said to lie past the calibrated budget when it does."""
    reach = compute_to_reach(fit, target)
    lo, hi = band_reach(fit, prior.band, target)
    if reach.reachable:
        lo, hi = min(lo, reach.compute), max(hi, reach.compute)
    reason = reach.reason
    if reach.reachable and reach.compute > prior.mode.budget:
        reason += f"; past {prior.mode.budget:.4g}, the compute the prior's intervals are calibrated for"
    return replace(reach, lo=lo, hi=hi, reason=reason)
