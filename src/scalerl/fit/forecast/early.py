"""The forecast before the sixth evaluation: the training reward, dense from the first step,
with the validation's offset from it (the state ``early``).

A run logs its training reward at every step and evaluates far less often. Before the
validation has the :data:`~scalerl.fit.forecast.states.MIN_EVALS` evaluations its own
forecast needs, a log whose training reward has at least ``MIN_TRAIN`` points (after
``min_compute``) and rises is forecast as

    v(C) = t(C) + g + d,

``t`` the training reward's own sigmoid fit on all its points with its calibrated band
(``calibrate.assess``, as the companion's), ``g`` the mean offset ``v_i - t(C_i)`` of the
validation's ``n`` evaluations (at least ``MIN_EVALS_EARLY``), and ``d`` how such offsets moved
from the same share of the budget to the end on finished runs (``companion.population_drift``,
the corpus's table shipped with the package; none where it has too few cases). With so few
evaluations their spread is a poor estimate of the noise, so the widths take Student's
factor: ``g``'s standard error is ``s_g / sqrt(n)`` and one evaluation's noise ``s_g``, each
times ``t_{n-1}((1 + level) / 2) / z``, ``s_g`` the offsets' spread; the drift's sd adds to
``g``'s in quadrature. The forecast's intervals are calibrated where the training reward's fit
is (rolling origin) and the drift was read from finished runs; else :attr:`Forecast.uncalibrated`
says why, and every surface says so beside the interval.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from scalerl.fit.calibrate import assess
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast.companion import Drift, population_drift
from scalerl.fit.forecast.draws import Draws, band_draws, widened
from scalerl.fit.forecast.rise import Rise, rise

__all__ = ["MIN_EVALS_EARLY", "MIN_TRAIN", "Early", "early"]

MIN_EVALS_EARLY = 3
"""Evaluations below which no offset can be read with a spread (Student's factor at 2 degrees of
freedom is 2.2x the normal's)."""
MIN_TRAIN = 12
"""Training-reward points below which its own fit and rolling-origin calibration cannot be made
(the sigmoid's parameters, a noise estimate and the held-out origins)."""


@dataclass(frozen=True)
class Early:
    """An early forecast's draws and what they rest on (module docstring)."""

    draws: Draws
    evidence: Rise  # the training reward's rise
    n_evals: int
    n_train: int
    uncalibrated: str  # why its intervals could not be calibrated, "" where they are
    drift: Drift | None
    column: str

    def sentence(self, metric: str) -> str:
        how = ("" if self.drift is None else f"; {self.drift.sentence()}")
        cal = f"; not calibrated: {self.uncalibrated}" if self.uncalibrated else ""
        return (f"early: from {self.n_evals} evaluations of {metric} and {self.n_train} training rewards "
                f"({self.column}), following the training reward with the validation's offset from it"
                f"{how}{cal}")  # fmt: skip


def early(seen, options, kw: dict) -> tuple[Early | None, str]:
    """The early forecast of ``seen`` (a ``RunLog``, fewer than ``MIN_EVALS`` evaluations after
    ``min_compute``), or (None, why not). ``kw``: the draws' run as seen (``make``)."""
    c, y = seen.curve.compute, seen.curve.reward
    used = c >= options.fit.min_compute
    n = int(used.sum())
    if n < MIN_EVALS_EARLY:
        return None, f"{n} evaluations, below the {MIN_EVALS_EARLY} an early forecast needs"
    train = seen.train
    if train is None or not options.follows_train_reward:
        return None, "no training reward to follow"
    now = float(c[-1])  # the training reward up to the last evaluation: what the forecast made there saw
    keep = (train.compute >= options.fit.min_compute) & (train.compute <= now * (1 + 1e-12)) & np.isfinite(train.reward)
    tc, tr = train.compute[keep], train.reward[keep]
    if tc.size < MIN_TRAIN:
        return None, f"the training reward has {tc.size} points, below the {MIN_TRAIN} an early forecast needs"
    try:
        tfit = options.fit.fit(tc, tr, source=train.y)
    except (CurveError, ValueError, np.linalg.LinAlgError) as err:
        return None, f"the training reward cannot be fitted ({err})"
    tunc = assess(tfit, level=options.level, margin=options.margin)
    trained = replace(rise(tfit.reward, rho=tunc.noise.rho, level=options.level),
                      of=f"the training reward ({train.y})")  # fmt: skip
    if not trained.detected:
        return None, trained.message
    cal = tunc.calibration
    k = 1.0 if cal is None or not cal.calibrated else cal.sides_at
    sds = widened(tfit.predict, tunc.band, k=k, sigma=tunc.noise.sigma, level=options.level, now=now)
    gaps = y[used] - np.asarray(tfit.predict(c[used]), dtype=float).reshape(-1)  # (n,)
    q = (1.0 + options.level) / 2.0
    z = float(stats.norm.ppf(q))
    student = float(stats.t.ppf(q, n - 1)) / z
    g, s_g = float(gaps.mean()), float(gaps.std(ddof=1)) * student
    se = s_g / np.sqrt(n)
    budget = options.budget if options.budget and options.budget > now else kw["horizon"]
    drift = population_drift(now / budget, options.population, options.level)
    if drift is not None:
        g, se = g + drift.mean, float(np.hypot(se, drift.sd))

    def centre(C):
        return sds(C)[0] + g

    def band(C):
        mid, down, up = sds(C)
        d, u = (np.sqrt(s**2 + se**2) * z for s in (down, up))
        return mid + g - d, mid + g + u

    draws = band_draws(centre, band, sigma=s_g, rho=tunc.noise.rho, rising=True, **kw)
    why = ("no finished runs' offsets to read its drift from" if drift is None else
           "" if cal is not None and cal.calibrated else
           (cal.message.removeprefix("interval not calibrated: ") if cal is not None
            else "the training reward's fit has no held-out check"))
    return Early(draws, trained, n, int(tc.size), why, drift, train.y), ""
