"""The law under a prior as ``scalerl fit`` reports it, where the forecast follows the prior.

A :class:`PriorAnswer` reads a used ``prior.posterior.PriorForecast`` in the terms a prior-free
fit is reported in: the parameters with their intervals, the ceiling verdict and the budget
advice. The fits table puts it first, named :func:`with_prior_label`, and the run's own fit
beside it, named :data:`ALONE`; the forecasts themselves are the one ``Forecast``'s.

The prior's intervals are calibrated for one reach: the run cut where it was, forecast to
the compute the prior was asked for (``budget``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.fit.fitting import FitResult
from scalerl.fit.prior.posterior import PriorForecast

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
        """The prior's law: its mode as a fit, A's interval and verdict, the calibration."""
        return {
            "label": self.label,
            "fit": self.fit.to_dict() | {
                "identified": self.identified, "A_plausible": list(self.intervals["A"]),
                "ceiling": self.ceiling, "budget_advice": self.budget_text, "prior": self.prior.to_dict(),
            },
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "uncertainty": {"level": self.prior.level, "calibration_factor": self.prior.calibration.scale,
                            "calibration": self.prior.factor_sentence, "calibrated_up_to": self.budget},
        }  # fmt: skip


def prior_answer(prior: PriorForecast, fit: FitResult, *, margin: float) -> PriorAnswer:
    """The law under a used ``prior`` for the run whose prior-free fit is ``fit``."""
    return PriorAnswer(prior, prior.as_fit(fit), margin)
