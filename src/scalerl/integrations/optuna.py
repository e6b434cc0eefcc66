"""An Optuna pruner that reads each trial's curve through scalerl's forecast.

    import optuna
    from scalerl.integrations.optuna import ForecastPruner

    study = optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=2000))
    # in the objective: trial.report(val_accuracy, step); if trial.should_prune(): raise optuna.TrialPruned()

A trial reports its validation value (a rate in [0, 1] that rises with training: a pass rate,
an accuracy, a mean reward) with ``trial.report(value, step)``; ``step`` is the x of the law
(compute, samples or optimiser steps: any unit that grows with what a trial costs), and
``budget`` is where the trials are judged, in that unit. At each report the pruner makes the
trial's one ``Forecast`` (``fit.forecast.forecast_of``, as ``scalerl plan`` does) from the
reports so far and reads the draws of its expected curve at the budget, ``mu_j(C_b)``:

    P(beat) = mean_j [ mu_j(C_b) > best ]

where ``best`` is the best finished trial's value at the budget: the mean of its last
``SMOOTH`` reports up to the budget (one evaluation is noisy; their mean estimates the
expected curve the draws are of). A trial is pruned when ``P(beat) < threshold``. It is never
pruned before its forecast has ``MIN_EVALS`` reports, before any trial has finished, or in a
study that minimizes (the law is of a value that rises). Trials arrive one after another, as
Optuna runs them: the first is never pruned, and the bar rises as better trials finish.
"""

from __future__ import annotations

import numpy as np
import optuna

from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.states import MIN_EVALS
from scalerl.fit.options import FitOptions

__all__ = ["PRUNE_BELOW", "SMOOTH", "ForecastPruner"]

PRUNE_BELOW = 0.05
"""The default threshold on P(beating the best finished trial at the budget); its figures
(``bench/pruners.py``, 200 studies of real runs, trials one after another): the winner kept in
94%, 5.8% of the trials pruned although they ended within 0.01 of the best."""

SMOOTH = 3
"""Reports of a finished trial averaged for its value at the budget."""


class ForecastPruner(optuna.pruners.BasePruner):
    """Prune a trial whose forecast gives it P(beating the best finished trial at ``budget``)
    below ``threshold`` (module docstring)."""

    def __init__(self, budget: float, *, threshold: float = PRUNE_BELOW, min_reports: int = MIN_EVALS,
                 level: float = 0.95, options: ForecastOptions | None = None) -> None:  # fmt: skip
        if not np.isfinite(budget) or budget <= 0:
            raise ValueError(f"ForecastPruner: budget must be a positive number in the reports' step unit, got {budget!r}")
        if not 0 < threshold < 1:
            raise ValueError(f"ForecastPruner: threshold must lie in (0, 1), got {threshold!r}")
        self.budget = float(budget)
        self.threshold = float(threshold)
        self.min_reports = max(int(min_reports), MIN_EVALS)
        given = options if options is not None else ForecastOptions(fit=FitOptions(level=level))
        self.options = given.with_(budget=self.budget)  # how each forecast is made: scalerl plan's
        self.last: dict[int, float] = {}  # P(beat) of each trial at its latest report (trial number)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            return False  # the law is of a value that rises: nothing to say about a minimized one
        seen = _reports(trial, self.budget)
        best = self.best(study)
        if best is None or len(seen) < self.min_reports:
            return False
        p = self.p_beat(seen, best, name=f"trial {trial.number}")
        if p is None:
            return False
        self.last[trial.number] = p
        return p < self.threshold

    def best(self, study: optuna.Study) -> float | None:
        """The best finished trial's value at the budget, None before one has finished."""
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        values = [float(np.mean(r[-SMOOTH:, 1])) for t in done if len(r := _reports(t, self.budget))]
        return max(values) if values else None

    def p_beat(self, seen: np.ndarray, best: float, name: str = "trial") -> float | None:
        """P(the expected curve at the budget > ``best``) from ``seen`` (rows: step, value);
        None where the reports cannot be forecast (not increasing steps, values outside [0, 1])."""
        mu = self.draws(seen, name)
        return None if mu is None else float(np.mean(mu > best))

    def draws(self, seen: np.ndarray, name: str = "trial") -> np.ndarray | None:
        """The draws ``mu_j(C_b)`` of the trial's expected curve at the budget, from its one
        ``Forecast``; None where the reports cannot be forecast."""
        try:
            log = RunLog.of(seen[:, 0], seen[:, 1], name=name, budget=self.budget)
            fc = forecast_of(log, options=self.options)
        except (CurveError, ValueError):
            return None
        return None if fc.draws is None else fc.draws.curves(np.array([self.budget]))[:, 0]


def _reports(trial: optuna.trial.FrozenTrial, budget: float) -> np.ndarray:
    """The trial's reports up to the budget as rows (step, value), in step order, finite only."""
    rows = sorted((float(s), float(v)) for s, v in trial.intermediate_values.items()
                  if s <= budget * (1 + 1e-9) and np.isfinite(v))  # fmt: skip
    return np.array(rows, float).reshape(-1, 2)
