"""What a run is doing, in one word, before anything is read off a law: a forecast's state.

- ``too_few_evaluations``: fewer than :data:`MIN_EVALS` evaluations (after ``min_compute``)
  and nothing that can carry a forecast before them: no forecast yet; the state says how many
  more are needed and about when they arrive.
- ``early``: fewer than :data:`MIN_EVALS` evaluations, forecast from the training reward with
  the validation's offset from it (``early``); its sentence says on how many evaluations it rests.
- ``declining``: the last third of the evaluations reads below an earlier third by more than
  the margin and by more than its noise allows (two comparisons, so each at
  ``1 - (1 - level) / 4``): a run getting worse, which Eq. 1 does not describe.
- ``diverging``: the validation shows no rise while the training reward rose and the
  validation's offset from it fell by more than its noise allows: the validation did not
  follow, so the training reward is not used.
- ``not_learning``: no rise in the validation (``rise``), and none in a training reward it
  could follow.
- ``rising``: the rest.

Each state is one plain sentence (:attr:`State.message`); a forecast in any state answers
every question (``Forecast``), with no crossing time where none is supported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from scalerl.fit.forecast.rise import MIN_POINTS, Rise, rise

__all__ = ["DECLINING", "DIVERGING", "EARLY", "MIN_EVALS", "NOT_LEARNING", "RISING", "STATES", "TOO_FEW", "State",
           "declining", "diverging", "too_few"]  # fmt: skip

RISING, NOT_LEARNING, TOO_FEW, DECLINING, DIVERGING, EARLY = (
    "rising", "not_learning", "too_few_evaluations", "declining", "diverging", "early")
STATES = (RISING, NOT_LEARNING, TOO_FEW, DECLINING, DIVERGING, EARLY)
MIN_EVALS = MIN_POINTS
"""Evaluations a forecast needs: the law's parameters and a noise estimate (``rise``'s own
minimum; the live forecast's ``forecast.min_points`` counts those after step 0)."""


@dataclass(frozen=True)
class State:
    """The state's name and its sentence; for ``too_few_evaluations``, how many more
    evaluations are needed and at about which compute (and step) the last of them comes."""

    name: str
    message: str
    more: int = 0
    at_compute: float | None = None
    at_step: int | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "message": self.message, "more": self.more, "at_compute": self.at_compute,
                "at_step": self.at_step}  # fmt: skip


def too_few(compute: np.ndarray, steps: np.ndarray | None, metric: str, plan=None) -> State:
    """``too_few_evaluations`` for evaluations at ``compute`` (and ``steps`` where known): how
    many more, and when the last of them comes: at the run's planned steps (``plan``, a
    ``schedule.EvalPlan``) where known, else at the evaluations' own spacing so far."""
    n = int(compute.size)
    more = MIN_EVALS - n
    at_c = at_s = None
    if n >= 2:
        at_c = float(compute[-1] + more * np.median(np.diff(compute)))
    if steps is not None and steps.size and plan is not None:
        later = plan.planned[plan.planned > steps[-1]]
        at_s = int(later[more - 1]) if later.size >= more else None
    elif steps is not None and steps.size >= 2:
        at_s = int(round(float(steps[-1] + more * np.median(np.diff(steps)))))
    when = f" (about step {at_s})" if at_s is not None else f" (about compute {at_c:.4g})" if at_c else ""
    return State(TOO_FEW, f"too few evaluations of {metric} for a forecast: {n} of the {MIN_EVALS} it needs, "
                          f"{more} more{when}", more, at_c, at_s)  # fmt: skip


def declining(reward: np.ndarray, *, rho: float, level: float, margin: float) -> str | None:
    """The sentence of a run whose last third reads significantly below an earlier third
    (module docstring), else None."""
    y = np.asarray(reward, dtype=float)
    if y.size < MIN_EVALS:
        return None
    m = max(y.size // 3, 1)
    thirds = (y[:m].mean(), y[m:-m].mean() if y.size > 2 * m else y[:m].mean(), y[-m:].mean())
    best = int(np.argmax(thirds[:2]))
    drop = float(thirds[best] - thirds[2])
    sigma = _sigma(y, rho)
    se = sigma * np.sqrt((1.0 + rho) / (1.0 - rho) * 2.0 / m)
    z = drop / se if se > 0 else (np.inf if drop > 0 else 0.0)
    if drop <= margin or z <= float(stats.norm.ppf(1.0 - (1.0 - level) / 4.0)):
        return None
    which = ("first", "middle")[best]
    return (f"declining: the last third of the evaluations reads {thirds[2]:.3f}, {drop:.3f} below the {which} "
            f"third's {thirds[best]:.3f} ({z:.1f} sd of their noise); the law describes a run that improves, so "
            "the forecast holds the recent level")  # fmt: skip


def diverging(val: np.ndarray, train: np.ndarray, *, rho: float, level: float, column: str) -> str | None:
    """The sentence of a validation that did not follow its rising training reward: the
    offsets ``val - train`` fell significantly (``rise`` of their negation), else None."""
    if val.size < MIN_EVALS:
        return None
    fell = rise(-(np.asarray(val, float) - np.asarray(train, float)), rho=rho, level=level)
    trained = rise(np.asarray(train, float), rho=rho, level=level)
    if not (fell.detected and trained.detected):
        return None
    return (f"diverging: the training reward ({column}) rose {trained.first:.3f} -> {trained.last:.3f} while the "
            f"validation did not follow (its offset from it fell by {fell.last - fell.first:.3f}, {fell.z:.1f} sd "
            "of noise), so the forecast does not follow the training reward")  # fmt: skip


def _sigma(y: np.ndarray, rho: float) -> float:
    diffs = np.diff(y)
    return float(np.std(diffs, ddof=1) / np.sqrt(2.0 * (1.0 - rho))) if diffs.size > 1 else 0.0


def from_rise(evidence: Rise) -> State:
    """``rising`` or ``not_learning`` from the evidence a forecast follows."""
    return State(RISING if evidence.detected else NOT_LEARNING, evidence.message)
