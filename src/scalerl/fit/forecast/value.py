"""``Forecast``: the one answer. A frozen value every command, record and page reads.

It is made by one function (``make.forecast_of``) from a run's log, a cut and the options,
and holds what was seen (the log up to the cut), the state of the run (``states``), the
method the draws follow and why, and the draws themselves (``draws``). Every number is read
from those draws, here, so no two surfaces can print two answers to one question:

- :meth:`at`: the value at any compute, the band on the expected curve and the predictive
  interval of one evaluation;
- :meth:`reach`: compute, hours and device-hours to a target, P(reach) within a budget and
  within the horizon, and the crossing conditional on reaching (``reach``);
- :meth:`heldout`: the score against evaluations after the cut (``holdout``).

A forecast with ``too_few_evaluations`` has no draws: its answers are NaN and its
``state.message`` says how many evaluations more it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from scalerl.fit.fitting import FitResult
from scalerl.fit.forecast import states as st
from scalerl.fit.forecast.crossing import Crossing, crossing
from scalerl.fit.forecast.draws import Draws
from scalerl.fit.forecast.holdout import Heldout
from scalerl.fit.forecast.log import RunLog
from scalerl.fit.forecast.options import ForecastOptions
from scalerl.fit.forecast.reach import Reach, already_reached, reach_of
from scalerl.fit.forecast.rise import Rise
from scalerl.fit.time.timing import Clock
from scalerl.fit.uncertainty import Uncertainty

__all__ = ["At", "Forecast"]


class At(NamedTuple):
    """The forecast at a compute (scalars, or arrays for an array of computes): the median of
    the expected curve, the band on it (``lo``, ``hi``) and the predictive interval of one
    evaluation (``pred_lo``, ``pred_hi``)."""

    value: float | np.ndarray
    lo: float | np.ndarray
    hi: float | np.ndarray
    pred_lo: float | np.ndarray
    pred_hi: float | np.ndarray

    def to_dict(self, compute: float) -> dict:
        return {"compute": float(compute), **{k: _num(v) for k, v in self._asdict().items()}}


def _num(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


@dataclass(frozen=True, eq=False)
class Forecast:
    """The one forecast of a run at a cut (module docstring)."""

    log: RunLog  # the log as the forecast saw it (up to the cut)
    options: ForecastOptions
    state: st.State
    method: str  # whose curves the draws follow: "fit", "prior", "training reward", "late risers", "flat", "none"
    why: str  # why that method, and why the ones before it in the order were not used
    draws: Draws | None
    horizon: float
    fit: FitResult | None = None  # the validation's own fit (None where it could not be fitted)
    unc: Uncertainty | None = None
    evidence: Rise | None = None  # the rise the forecast follows (the validation's, or the training reward's)
    weights: dict = field(default_factory=dict)  # method -> weight, where the draws mix methods
    notes: tuple[str, ...] = ()  # one sentence each: the prior's, the late risers', a fallback's
    prior: object = None  # the PriorForecast where the prior was used
    train_prior: object = None  # the training reward's PriorForecast, where the draws follow it and a prior was tried
    uncalibrated: str = ""  # why the intervals' calibration could not be checked, "" where it was (or needs none)

    # --- what was seen ---------------------------------------------------------------------

    @property
    def cut(self) -> float:
        return float(self.log.curve.compute[-1])

    @property
    def n_evaluations(self) -> int:
        return len(self.log.curve)

    @property
    def level(self) -> float:
        return self.options.level

    @property
    def budget(self) -> float | None:
        return self.options.budget

    @property
    def clock(self) -> Clock | None:
        return self.log.clock()

    @property
    def calibrated(self) -> bool:
        """Whether the intervals were checked on held-out data (rolling origin, a prior's runs,
        finished runs' offsets); every surface prints ``uncalibrated`` beside an interval that was not."""
        return not self.uncalibrated

    @property
    def supported(self) -> bool:
        """Whether the state supports a crossing time: a rising run (one whose training reward
        it follows included), and a run not learning whose draws are the corpus's late risers
        (``late``: the share that rose later, and how; its interval is then "[lo, never]", the
        draws that never rise being "never"). A flat band, a decline or a divergence has none."""
        return self.state.name in (st.RISING, st.EARLY) or (self.state.name == st.NOT_LEARNING
                                                             and self.method == "late risers")

    # --- answers ---------------------------------------------------------------------------

    def at(self, C) -> At:
        """The forecast at compute ``C`` (a number or an array)."""
        scalar = np.ndim(C) == 0
        c = np.atleast_1d(np.asarray(C, dtype=float))
        if self.draws is None:
            nan = np.full(c.shape, np.nan)
            parts = (nan,) * 5
        else:
            mid, lo, hi = self.draws.summary(c)
            parts = (mid, lo, hi, *self.draws.predictive(c))
        return At(*(float(p[0]) if scalar else np.asarray(p) for p in parts))

    def median_at(self, C) -> np.ndarray:
        """``at(C).value`` alone, the median of the expected curve at each ``C`` (n,), without
        the bands (a page's hover reads it at every evaluation: the bands there cost 10x more)."""
        c = np.atleast_1d(np.asarray(C, dtype=float))
        if self.draws is None:
            return np.full(c.shape, np.nan)
        return self.draws.median(c)

    def draws_at(self, C: float) -> np.ndarray | None:
        """(n,) the draws of the expected curve at compute ``C``, for the statistics between runs
        (``between``: P(best) in a study, the gap to a baseline, P(beat) in the Optuna pruner);
        None without draws."""
        return None if self.draws is None else self.draws.curves(np.array([float(C)]))[:, 0]

    def crossing(self, target: float, window: int | None = None) -> Crossing | None:
        """Each draw's first read at or above ``target`` (``crossing``), None without draws."""
        if self.draws is None:
            return None
        return crossing(self.draws, target, self.options.window if window is None else window)

    def reach(self, target: float, *, budget_compute: float | None = None, budget_hours: float | None = None,
              window: int | None = None) -> Reach:
        """When the run reaches ``target`` and the chance it does (``reach``); the budget is the
        run's own (``options.budget``) when none is given."""
        window = self.options.window if window is None else window
        if budget_compute is None and budget_hours is None:
            budget_compute = self.budget
        clock = self.clock
        if window:
            done = already_reached(target, self.log.curve.compute, self.log.curve.reward, clock, self.level,
                                   window, self.horizon)  # fmt: skip
            if done is not None:
                return done
        cross = self.crossing(target, window)
        if cross is None:
            nan = (np.nan,) * 3
            return Reach(target, self.level, window, nan, np.nan, self.horizon, False, supported=False,
                         note=self.state.message, budget_compute=budget_compute, budget_hours=budget_hours)  # fmt: skip
        note = "" if self.state.name == st.RISING else self.state.message
        return reach_of(cross, clock, budget_compute=budget_compute, budget_hours=budget_hours,
                        supported=self.supported, note=note)  # fmt: skip

    def p_reach(self, target: float, budget_compute: float | None = None) -> float | None:
        """P(the run's read reaches ``target`` within ``budget_compute``, default its own budget)."""
        return self.reach(target, budget_compute=budget_compute).p_within

    def heldout(self, compute, reward) -> Heldout | None:
        """The score against the evaluations (``compute``, ``reward``) after the cut; None
        where there are none or no draws."""
        c, y = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
        later = c > self.cut * (1 + 1e-12)
        if self.draws is None or not later.any():
            return None
        at = self.at(c[later])
        return Heldout(self.cut, c[later], y[later], np.asarray(at.value), np.asarray(at.pred_lo),
                       np.asarray(at.pred_hi), self.level)  # fmt: skip

    # --- in words and JSON -------------------------------------------------------------------

    @property
    def source_sentence(self) -> str:
        """Whose curves the intervals come from, in words."""
        column = self.log.train.y if self.log.train is not None else ""
        text = {"prior": "the prior learned from finished runs",
                "training reward": f"the training reward's fit ({column}){self._under_prior} and the validation's "
                                   "offset from it",
                "late risers": "the run's flat level and finished runs that looked as flat (late risers)",
                "flat": "the run's flat level", "none": "nothing yet",
                "early": f"the training reward's fit ({column}) and the validation's offset from it, before its "
                         "sixth evaluation"}.get(self.method, "the fit of the validation")  # fmt: skip
        if self.weights:
            text += " (" + ", ".join(f"{m} {w:.0%}" for m, w in self.weights.items()) + ")"
        return text

    @property
    def _under_prior(self) -> str:
        tp = self.train_prior
        return f" under the prior of {tp.n_runs} finished runs' training rewards" if tp is not None and tp.used else ""

    def to_dict(self) -> dict:
        out = {"run": self.log.name, "source": self.log.curve.source, "x": self.log.curve.x, "y": self.log.curve.y,
               "cut": self.cut, "evaluations": self.n_evaluations, "state": self.state.to_dict(),
               "method": self.method, "why": self.why, "weights": dict(self.weights), "notes": list(self.notes),
               "level": self.level, "budget": self.budget, "horizon": self.horizon,
               "calibrated": self.calibrated, "uncalibrated": self.uncalibrated or None,
               "fit": None if self.fit is None else self.fit.to_dict()}  # fmt: skip
        if self.unc is not None:
            lo, hi = self.unc.A_plausible
            out["ceiling"] = {"A_plausible": [lo, hi], "identified": self.unc.identified, "verdict": self.unc.verdict}
        if self.log.train is not None:
            out["train_reward_column"] = self.log.train.y
        if self.train_prior is not None:
            out["train_reward_prior"] = self.train_prior.to_dict()
        return out
