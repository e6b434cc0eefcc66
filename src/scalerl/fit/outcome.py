"""One run of ``scalerl fit``: its fit, hold-out score, forecasts and reaches, the forecast
under a prior, and their JSON contract (``to_dict``).

With a prior that was used (``answer``), the JSON's top level is the prior's answer and the
prior-free one sits under ``without_prior``; ``answer`` names which one the top level is.
Each ``holdout.final`` is its own answer's, so it says what the held-out table's row of the
same answer says."""

from __future__ import annotations

from dataclasses import dataclass

from scalerl.fit.compare import RunFit
from scalerl.fit.forecast import Forecast, HoldoutForecast, Reach
from scalerl.fit.posterior import PriorForecast
from scalerl.fit.prior_answer import ALONE, PriorAnswer, forecast_dict

__all__ = ["FitOutcome"]


@dataclass(frozen=True, eq=False)
class FitOutcome:
    """One run of ``scalerl fit``: its fit, hold-out score, forecasts and reaches."""

    run: RunFit
    holdout: HoldoutForecast | None
    forecasts: list[tuple[float, Forecast]]
    reaches: list[Reach]
    prior: PriorForecast | None = None  # the forecast under --prior-runs (None: not asked)
    answer: PriorAnswer | None = None  # that forecast as reported, when the prior was used
    forecasts_from: str = ""  # the training reward's column the forecasts follow (fit.companion); "": Eq. 1's fit

    def _alone_dict(self) -> dict:
        """The prior-free answer: fit, intervals, forecasts, reaches, hold-out score."""
        run, holdout = self.run, None
        if self.holdout is not None:
            holdout = self.holdout.to_dict()
            holdout["final"] = holdout["final"] | {"from": "prior-free fit"}
        return {
            "fit": run.fit_dict(),
            "intervals": {k: list(v) for k, v in run.intervals.items()},
            "uncertainty": run.unc.to_dict(),
            "forecasts": [forecast_dict(c, f) for c, f in self.forecasts],
            "forecasts_from": f"training reward ({self.forecasts_from})" if self.forecasts_from else "fit",
            "compute_to_reach": [vars(r) for r in self.reaches],
            "holdout": holdout,
        }

    def to_dict(self) -> dict:
        run = self.run
        head = {"run": run.name, "source": run.curve.source, "x": run.curve.x, "y": run.curve.y}
        alone = self._alone_dict()
        if self.answer is None:
            alone["fit"]["prior"] = None if self.prior is None else self.prior.to_dict()
            return head | {"answer": ALONE} | alone | {"without_prior": None}
        return head | {"answer": self.answer.label} | self.answer.to_dict() | {"without_prior": {"answer": ALONE} | alone}
