"""One run of ``scalerl fit``: the law fitted to what its forecast saw, the forecast itself, and
the answers the flags asked of it, with their JSON contract (``to_dict``).

Every forecast number in the JSON is read off the one ``Forecast`` (``forecast``): the values at
``--target-compute`` (``forecasts``), the reaches of ``--target-reward`` (``compute_to_reach``) and
``--fit-frac``'s held-out score (``holdout``). ``fit``, ``intervals`` and ``uncertainty`` describe
the law's fit of the same data (A, B and C_mid with their intervals); ``answer`` names whose
curves the forecast follows."""

from __future__ import annotations

from dataclasses import dataclass, field

from scalerl.fit.commands.prior_answer import PriorAnswer
from scalerl.fit.compare import RunFit
from scalerl.fit.forecast import At, Forecast, RunLog
from scalerl.fit.forecast.holdout import Heldout
from scalerl.fit.forecast.reach import Reach

__all__ = ["FitOutcome"]


@dataclass(frozen=True, eq=False)
class FitOutcome:
    """One run of ``scalerl fit`` (module docstring); ``forecast`` None for the pooled fit."""

    log: RunLog  # the whole log, the held-out evaluations included
    forecast: Forecast | None
    run: RunFit | None  # the law's fit of what the forecast saw; None where there was none
    heldout: Heldout | None = None
    targets: list[float] = field(default_factory=list)  # --target-compute
    rewards: list[float] = field(default_factory=list)  # --target-reward
    answer: PriorAnswer | None = None  # the prior's fit, where the forecast follows the prior

    @property
    def name(self) -> str:
        return self.log.name

    @property
    def at(self) -> list[tuple[float, At]]:
        if self.forecast is None:
            return []
        return [(float(c), self.forecast.at(float(c))) for c in self.targets]

    @property
    def reaches(self) -> list[Reach]:
        if self.forecast is None:
            return []
        return [self.forecast.reach(float(r)) for r in self.rewards]

    def to_dict(self) -> dict:
        run, f = self.run, self.forecast
        out = {"run": self.name, "source": self.log.curve.source, "x": self.log.curve.x, "y": self.log.curve.y,
               "answer": "pooled fit" if f is None else f.method,
               "fit": None if run is None else run.fit_dict(),
               "intervals": None if run is None else {k: list(v) for k, v in run.intervals.items()},
               "uncertainty": None if run is None else run.unc.to_dict(),
               "forecast": None if f is None else f.to_dict(),
               "forecasts": [a.to_dict(c) | {"reward": a.to_dict(c)["value"]} for c, a in self.at],
               "forecasts_from": None if f is None else f.source_sentence,
               "compute_to_reach": [r.to_dict() for r in self.reaches],
               "holdout": None if self.heldout is None else self.heldout.to_dict(),
               "prior": None if self.answer is None else self.answer.to_dict()}  # fmt: skip
        if out["fit"] is not None and f is not None and f.prior is not None and self.answer is None:
            out["fit"]["prior"] = f.prior.to_dict()
        return out
