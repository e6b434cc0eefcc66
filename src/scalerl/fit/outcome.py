"""One run of ``scalerl fit``: its fit, hold-out score, forecasts, reaches and the forecast
under a prior, and their JSON contract (``to_dict``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.fit.compare import RunFit
from scalerl.fit.forecast import Forecast, HoldoutForecast, Reach
from scalerl.fit.posterior import PriorForecast

__all__ = ["FitOutcome"]


@dataclass(frozen=True, eq=False)
class FitOutcome:
    """One run of ``scalerl fit``: its fit, hold-out score, forecasts and reaches."""

    run: RunFit
    holdout: HoldoutForecast | None
    forecasts: list[tuple[float, Forecast]]
    reaches: list[Reach]
    prior: PriorForecast | None = None  # the forecast under --prior-runs (None: not asked)

    def _holdout_dict(self) -> dict | None:
        """``holdout``; ``final`` is the prior's interval when one is used and
        ``final_prior_free`` always the prior-free one (issue 21's JSON contract)."""
        if self.holdout is None:
            return None
        out = self.holdout.to_dict()
        out["final"] = out["final"] | {"from": "prior-free fit"}
        out["final_prior_free"] = out["final"]
        if self.prior is not None and self.prior.used:
            C, obs = float(self.holdout.compute[-1]), float(self.holdout.reward[-1])
            lo, hi = (float(np.ravel(v)[0]) for v in self.prior.predictive(C))
            out["final"] = {
                "compute": C, "observed": obs, "predicted": float(np.ravel(self.prior.predict(C))[0]),
                "pred_lo": lo, "pred_hi": hi, "covered": bool(lo <= obs <= hi), "from": "prior",
            }  # fmt: skip
        return out

    def to_dict(self) -> dict:
        run = self.run
        return {
            "run": run.name,
            "source": run.curve.source,
            "x": run.curve.x,
            "y": run.curve.y,
            "fit": run.fit_dict() | {"prior": None if self.prior is None else self.prior.to_dict()},
            "intervals": {k: list(v) for k, v in run.intervals.items()},
            "uncertainty": run.unc.to_dict(),
            "forecasts": [
                {"compute": c, "reward": f.value, "lo": f.lo, "hi": f.hi,
                 "pred_lo": f.pred_lo, "pred_hi": f.pred_hi}
                for c, f in self.forecasts
            ],  # fmt: skip
            "compute_to_reach": [vars(r) for r in self.reaches],
            "holdout": self._holdout_dict(),
        }
