"""An Optuna pruner that reads each trial's curve through scalerl's forecast.

    import optuna
    from scalerl.integrations.optuna import ForecastPruner

    study = optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=2000))
    # in the objective: trial.report(val_accuracy, step); if trial.should_prune(): raise optuna.TrialPruned()

A trial reports its validation value (a rate in [0, 1] that rises with training: a pass rate,
an accuracy, a mean reward) with ``trial.report(value, step)``; ``step`` is the x of the law
(samples or optimiser steps: any whole number that grows with what a trial costs), and
``budget`` is where the trials are judged, in that unit. Optuna keeps whole steps only (a
report at step 0.5 is stored at 0, and one at 1.5 is dropped as a repeat of 1), so an x that is
not a whole number (compute in device-hours) is reported with :func:`report`: its reports are
stored at steps 0, 1, 2, ... and the true x beside them, which the pruner reads.

**The cadence a pruner needs.** A forecast needs ``MIN_EVALS`` (6) reports, so a trial can be
pruned from its sixth report on: to prune at a quarter of the budget, report at least every
``budget / 24``. At its first reports the pruner says, once per trial, at which step its first
decision can come at the trial's own cadence. ``objective`` trains a ``scalerl train`` run in
this process as a trial, reporting each evaluation as it is made (``eval.schedule``'s plan has
its sixth by step 21) and stopping the run cleanly, checkpointed, on a prune:

    def trial_fn(trial):
        lr = trial.suggest_float("lr", 1e-6, 1e-3, log=True)
        return objective(trial, "scalerl", [f"optim.lr={lr}"], out=f"runs/optuna/{trial.number}")

    optuna.create_study(direction="maximize", pruner=ForecastPruner(budget=400)).optimize(trial_fn, n_trials=4)

(``budget``: the runs' ``train.steps``; the trial reports optimiser steps). At each report the pruner makes the
trial's one ``Forecast`` (``fit.forecast.forecast_of``, as ``scalerl plan`` does) from the
reports so far and reads the draws of its expected curve at the budget, ``mu_j(C_b)``:

    P(beat) = mean_j [ mu_j(C_b) > best ]

where ``best`` is the best finished trial's value at the budget: the mean of its last
``SMOOTH`` reports up to the budget (one evaluation is noisy; their mean estimates the
expected curve the draws are of). A trial is pruned when ``P(beat) < threshold``. It is never
pruned before its forecast has ``MIN_EVALS`` reports, before any trial has finished, or in a
study that minimizes (the law is of a value that rises). A trial that reports a value outside
[0, 1] is not a rate the law describes: it is said in one warning line, never pruned, and never
the bar another trial must beat. Trials arrive one after another, as
Optuna runs them: the first is never pruned, and the bar rises as better trials finish.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import optuna

from scalerl.experiments.trial import (
    SMOOTH,  # a finished trial's value: the mean of its last reports
)
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import ForecastOptions, RunLog, between, forecast_of
from scalerl.fit.forecast.states import MIN_EVALS
from scalerl.fit.options import FitOptions

__all__ = ["PRUNE_BELOW", "SMOOTH", "X_ATTR", "ForecastPruner", "objective", "report"]

X_ATTR = "scalerl_x"
"""The trial's user attribute that holds the true x of each report (:func:`report`)."""
_log = logging.getLogger("optuna.scalerl")

PRUNE_BELOW = 0.05
"""The default threshold on P(beating the best finished trial at the budget); its figures
(``bench/pruners.py``, 200 studies of real runs, trials one after another): the winner kept in
94%, 5.8% of the trials pruned although they ended within 0.01 of the best."""



class ForecastPruner(optuna.pruners.BasePruner):
    """Prune a trial whose forecast gives it P(beating the best finished trial at ``budget``)
    below ``threshold`` (module docstring)."""

    def __init__(self, budget: float, *, threshold: float = PRUNE_BELOW, min_reports: int = MIN_EVALS,
                 level: float = 0.95, options: ForecastOptions | None = None) -> None:  # fmt: skip
        self.budget = _number("budget", budget, "a positive number in the reports' step unit")
        if not self.budget > 0:
            raise ValueError(f"ForecastPruner: budget must be a positive number in the reports' step unit, got {budget!r}")
        self.threshold = _number("threshold", threshold, "a probability in (0, 1)")
        if not 0 < self.threshold < 1:
            raise ValueError(f"ForecastPruner: threshold must lie in (0, 1), got {threshold!r}")
        if isinstance(min_reports, bool) or not isinstance(min_reports, int | np.integer):
            raise ValueError(f"ForecastPruner: min_reports must be a whole number of reports, got {min_reports!r}")
        self.min_reports = max(int(min_reports), MIN_EVALS)
        given = options if options is not None else ForecastOptions(fit=FitOptions(level=_number("level", level,
                                                                                                 "a probability")))
        self.options = given.with_(budget=self.budget)  # how each forecast is made: scalerl plan's
        self.last: dict[int, float] = {}  # P(beat) of each trial at its latest report (trial number)
        self._said: set[tuple[int, str]] = set()  # (trial, what) said once

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if study.direction != optuna.study.StudyDirection.MAXIMIZE:
            return False  # the law is of a value that rises: nothing to say about a minimized one
        seen = _reports(trial, self.budget)
        if not _rates(seen):
            self._say(trial.number, "range", f"ForecastPruner: trial {trial.number} reported a value outside [0, 1], "
                                             "not a rate the law describes: it is never pruned nor the bar for others")
            return False
        self._cadence(trial.number, seen)
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
        values = [float(np.mean(r[-SMOOTH:, 1])) for t in done if len(r := _reports(t, self.budget)) and _rates(r)]
        return max(values) if values else None

    def _cadence(self, number: int, seen: np.ndarray) -> None:
        """Say once, from a trial's first two reports, when its first decision can come."""
        if len(seen) < 2 or (number, "cadence") in self._said:
            return
        gap = float(np.median(np.diff(seen[:, 0])))
        at = float(seen[0, 0] + gap * (self.min_reports - 1))
        share = at / self.budget
        advice = "" if share <= 0.25 else (f"; to decide by a quarter of the budget, report every "
                                           f"{self.budget / (4 * (self.min_reports - 1)):.4g} or less")
        self._say(number, "cadence", f"ForecastPruner: trial {number} reports every {gap:.4g}, so its first decision "
                                     f"can come at its {self.min_reports}th report, about {at:.4g} ({share:.0%} of "
                                     f"the budget {self.budget:g}){advice}")  # fmt: skip

    def _say(self, number: int, what: str, text: str) -> None:
        if (number, what) not in self._said:
            self._said.add((number, what))
            _log.warning(text) if what == "range" else _log.info(text)

    def p_beat(self, seen: np.ndarray, best: float, name: str = "trial") -> float | None:
        """P(the expected curve at the budget > ``best``) from ``seen`` (rows: step, value);
        None where the reports cannot be forecast (not increasing steps, values outside [0, 1])."""
        mu = self.draws(seen, name)
        return None if mu is None else between.p_beat(mu, best)

    def draws(self, seen: np.ndarray, name: str = "trial") -> np.ndarray | None:
        """The draws ``mu_j(C_b)`` of the trial's expected curve at the budget, from its one
        ``Forecast``; None where the reports cannot be forecast."""
        try:
            log = RunLog.of(seen[:, 0], seen[:, 1], name=name, budget=self.budget)
            fc = forecast_of(log, options=self.options)
        except (CurveError, ValueError):
            return None
        return fc.draws_at(self.budget)


def _number(name: str, value, what: str) -> float:
    """``value`` as a finite float; else one sentence naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) or not np.isfinite(value):
        raise ValueError(f"ForecastPruner: {name} must be {what}, got {value!r}")
    return float(value)


def _rates(rows: np.ndarray) -> bool:
    """Whether every reported value is a rate in [0, 1]."""
    return bool(np.all((rows[:, 1] >= 0.0) & (rows[:, 1] <= 1.0))) if len(rows) else True


def report(trial: optuna.trial.Trial, value: float, x: float) -> None:
    """Report ``value`` at ``x`` (compute, device-hours: any number that grows) for the pruner:
    stored at the next whole step (0, 1, 2, ...: Optuna keeps whole steps only) with ``x``
    beside it in the trial's ``X_ATTR``, which :class:`ForecastPruner` reads as the step. The
    budget is then in the unit of ``x``."""
    xs = dict(trial.user_attrs.get(X_ATTR, {}))
    step = len(xs)
    if xs and not float(x) > max(xs.values()):
        raise ValueError(f"scalerl report: x must grow from one report to the next, got {x!r} after {max(xs.values())!r}")
    xs[str(step)] = float(x)
    trial.set_user_attr(X_ATTR, xs)
    trial.report(value, step)


def _reports(trial: optuna.trial.FrozenTrial, budget: float) -> np.ndarray:
    """The trial's reports up to the budget as rows (x, value), in x order, finite only: x is the
    step, or the true x :func:`report` kept beside it."""
    xs = trial.user_attrs.get(X_ATTR) or {}
    rows = sorted((float(xs.get(str(s), s)), float(v)) for s, v in trial.intermediate_values.items()
                  if np.isfinite(v))  # fmt: skip
    return np.array([r for r in rows if r[0] <= budget * (1 + 1e-9)], float).reshape(-1, 2)


def objective(trial: optuna.trial.Trial, recipe: str = "scalerl", sets: Sequence[str] = (), *,
              out: str | Path, log=print) -> float:
    """Train ``recipe`` with ``sets`` (``--set`` strings) into ``out`` as ``trial``: each
    evaluation of ``forecast.metric`` is reported at its optimiser step as soon as it is
    logged, and a prune stops the run there, checkpointed, then raises ``optuna.TrialPruned``.
    Returns the trial's value: the mean of its last ``SMOOTH`` evaluations."""
    from scalerl.experiments.trial import run_trial

    pruned: list[int] = []

    def on_evaluation(step: int, compute: float, value: float) -> str | None:
        trial.report(value, step)
        if trial.should_prune():
            pruned.append(step)
            return f"pruned by Optuna at step {step} (trial {trial.number})"
        return None

    done = run_trial(recipe, sets, out, on_evaluation, log=log)
    if pruned:
        raise optuna.TrialPruned(f"pruned at step {pruned[0]}")
    if done.value is None:
        raise ValueError(f"scalerl objective: {out} logged no evaluation of its metric")
    return done.value
