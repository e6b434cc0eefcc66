"""``ForecastOptions``: everything a forecast is made with besides the run's log and its cut.

One value, so that every surface that asks the same question of the same log with the same
options gets the same numbers: ``scalerl fit`` and ``plan`` build it from their flags
(``commands.flags``), the trainer from its config (``forecast.*``), ``serve`` from the run's
``config.yaml``, a study from its spec. Every default lives here (or in ``FitOptions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from scalerl.fit.forecast.crossing import WINDOW
from scalerl.fit.forecast.late import TABLE
from scalerl.fit.options import FitOptions
from scalerl.runfolder import number, section

__all__ = ["MAX_POINTS", "ForecastOptions", "forecast_defaults"]

MAX_POINTS = 200
"""A forecast fits its curves from at most this many evaluations (consecutive means,
``fit_sigmoid``'s binning): it needs the shape, not every point, and a 1000-evaluation fit took
15 s where 200 take under one. Every curve of the forecast corpus has fewer."""
RUN_SETTINGS = ("level", "margin", "min_compute")
"""The ``forecast.*`` settings of a run folder's config that are ``FitOptions`` fields."""


def forecast_defaults(config: dict | None = None) -> dict:
    """The ``FitOptions`` a forecast is made with unless a flag says otherwise: ``MAX_POINTS``,
    and a run folder's own ``forecast.level``, ``margin`` and ``min_compute`` where its config
    sets them, by the trainer, ``serve``, ``plan`` and ``fit`` alike."""
    forecast = section(config or {}, "forecast")
    out = {"max_points": MAX_POINTS} | {k: v for k in RUN_SETTINGS if (v := number(forecast, k)) is not None}
    if forecast.get("metric") == "reward_mean":  # a mean reward is not a pass rate in [0, 1]
        out["bounded"] = False
    return out


@dataclass(frozen=True)
class ForecastOptions:
    """How a forecast is made (module docstring).

    ``fit``: how the law is fitted, and the level and margin of every interval; ``budget``:
    the compute the run will have spent at its end, where known (the horizon of every
    probability is the later of it and ``draws.HORIZON`` x the compute so far, and a prior is
    calibrated at it); ``window``: the evaluations a read averages (a run reaches a target
    when the mean of its last ``window`` evaluations does; 0: its expected curve);
    ``train_reward``: the training reward's column to follow where the log has it (None: the
    first of ``readers.TRAIN_REWARD_COLUMNS``; ``"none"``: never); ``prior``: a learned prior
    (``forecast.prior_runs.load_prior``'s (prior, why none, n)) or None; ``population``: the table of
    finished runs the not-learning forecast reads (``late``).
    """

    fit: FitOptions = field(default_factory=lambda: FitOptions(max_points=MAX_POINTS))
    budget: float | None = None
    window: int = WINDOW
    train_reward: str | None = None
    prior: tuple | None = None
    population: Path = TABLE

    @property
    def level(self) -> float:
        return self.fit.level

    @property
    def margin(self) -> float:
        return self.fit.margin

    @property
    def follows_train_reward(self) -> bool:
        return not (self.train_reward is not None and self.train_reward.lower() == "none")

    def with_(self, **changes) -> ForecastOptions:
        return replace(self, **changes)
