"""The training reward as the validation curve's companion: the default forecast where a log
has both (``docs/design/fit.md``, "Which forecast is the default").

A run logs its training reward at every step (``reward_mean``: P x G scored samples each),
and evaluates far less often. The two share the curve's shape, so the dense one pins that
shape down where a few evaluations cannot. The companion is the training reward binned to
the evaluations: ``t_i`` = the mean of the training rewards logged at compute in
``(C_{i-1}, C_i]`` (``C_0``'s bin from the start), ``nan`` where none was.

The forecast of the validation (``fit.forecast.make``) is then

    v(C) = t(C) + g,     g = mean_i (v_i - t(C_i)) over the last third of the evaluations,

``t`` the training reward's own sigmoid fit with its calibrated band (the prior-free draws of
``fit.forecast.make`` on the companion), ``g`` the validation's offset from it, whose standard
error ``s_g / sqrt(m)`` widens the band, and ``s_g`` (the spread of the offsets: validation
noise and the two curves' mismatch) is the noise of one evaluation around it. Measured on the
corpus of real runs (``bench/forecast_real.py``), this is the one method that covers the final
value at 95% from half a run, where the validation curve alone reads climbing runs low.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MIN_POINTS", "Companion", "Drift", "align", "offset_drift", "population_drift"]

MIN_POINTS = 6
"""Evaluations with a training reward below which the companion is not used (the sigmoid's
four parameters and a residual)."""
TAIL = 1.0 / 3.0
"""The share of the evaluations (the latest) whose offsets give ``g``: the offset drifts as a
run learns, and the forecast is of what follows the data."""


def align(eval_compute, train_compute, train_reward) -> np.ndarray:
    """(n,) the mean training reward in each evaluation's bin ``(C_{i-1}, C_i]`` (module
    docstring); ``nan`` for a bin where none was logged. Rewards after the last evaluation
    wait for the next one."""
    c = np.asarray(eval_compute, dtype=float)  # (n,)
    tc, tr = np.asarray(train_compute, dtype=float), np.asarray(train_reward, dtype=float)  # (m,)
    ok = np.isfinite(tc) & np.isfinite(tr)
    tc, tr = tc[ok], tr[ok]
    idx = np.searchsorted(c, tc, side="left")  # (m,): the first evaluation at or after each reward
    keep = idx < c.size
    sums = np.bincount(idx[keep], weights=tr[keep], minlength=c.size)
    counts = np.bincount(idx[keep], minlength=c.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


@dataclass(frozen=True)
class Drift:
    """How the validation's offset from the training reward moved from a cut to the end, on
    ``n`` finished runs: ``mean`` and the predictive sd of a new run's (:func:`offset_drift`)."""

    mean: float
    sd: float
    n: int

    def sentence(self) -> str:
        return (f"the validation's offset from it moved by {self.mean:+.3f} (sd {self.sd:.3f}) from the cut to "
                f"the end on {self.n} of them")  # fmt: skip


MIN_DRIFTS = 3
"""Finished runs below which the offset's drift is not read: the Student factor of two is 4.3."""


def tail(n: int) -> int:
    """How many of ``n`` evaluations (the latest) give the offset: ``TAIL`` of them, at least 3."""
    return max(int(np.ceil(n * TAIL)), 3)


def _tail_offset(gaps: np.ndarray) -> float:
    return float(gaps[-tail(gaps.size):].mean())


def offset_drift(runs, frac: float, level: float) -> Drift | None:
    """The drift of the offset ``g`` on finished runs whose curves are training rewards with
    their validation beside them (``FinishedRun.val``): ``d_j = g_j(end) - g_j(cut)``, each ``g``
    the mean of ``v - t`` over the last ``TAIL`` of the evaluations up to the cut (at ``frac``
    of the run's budget, with at least ``MIN_POINTS`` of them) or to the end. The sd is the
    Student prediction of one more run's ``d``: ``s_d sqrt(1 + 1/n) t_{n-1}((1 + level) / 2) / z``,
    ``z`` the normal quantile, so that ``z sd`` is the prediction bound. None below ``MIN_DRIFTS``."""
    drifts = []
    for run in runs:
        if run.val is None:
            continue
        cut = run.compute <= frac * run.budget
        if cut.sum() < MIN_POINTS or cut.all():
            continue
        gaps = run.val - run.reward  # (n,)
        drifts.append(_tail_offset(gaps) - _tail_offset(gaps[cut]))
    n = len(drifts)
    if n < MIN_DRIFTS:
        return None
    q = (1.0 + level) / 2.0
    d = np.array(drifts)
    sd = float(d.std(ddof=1) * np.sqrt(1.0 + 1.0 / n) * stats.t.ppf(q, n - 1) / stats.norm.ppf(q))
    return Drift(float(d.mean()), sd, n)


def population_drift(share: float, path, level: float) -> Drift | None:
    """How the validation's offset from the training reward moved from ``share`` of the budget
    to the end on the finished runs of the population table (``late``'s file, its
    ``offset_drift`` cases: ``d`` = the offset over the last ``TAIL`` of the evaluations at the
    end less the offset over every evaluation up to the cut), weighted by share as the late
    risers are (``late.BANDWIDTH``): the weighted mean, and the sd of one more run's with the
    Student factor of the effective count. None below ``MIN_DRIFTS`` effective cases."""
    from scalerl.fit.forecast.late import BANDWIDTH, table

    cases = table(path).get("offset_drift", {}).get("cases", [])
    if not cases or not share > 0:
        return None
    shares = np.array([c["share"] for c in cases], dtype=float)
    d = np.array([c["drift"] for c in cases], dtype=float)
    share = float(np.clip(share, shares.min(), shares.max()))
    w = np.exp(-(np.log(shares / share) ** 2) / (2.0 * BANDWIDTH**2))
    if not w.sum() > 0:
        return None
    w = w / w.sum()
    n = float(1.0 / np.sum(w**2))
    if n < MIN_DRIFTS:
        return None
    mean = float(np.sum(w * d))
    sd = float(np.sqrt(np.sum(w * (d - mean) ** 2) * n / max(n - 1.0, 1.0)))
    q = (1.0 + level) / 2.0
    return Drift(mean, sd * np.sqrt(1.0 + 1.0 / n) * float(stats.t.ppf(q, n - 1.0) / stats.norm.ppf(q)), int(round(n)))


@dataclass(frozen=True, eq=False)
class Companion:
    """A validation curve's training reward, binned to its evaluations (module docstring)."""

    compute: np.ndarray  # (m,) the evaluations that have a training reward
    train: np.ndarray  # (m,) their bins' mean training reward
    val: np.ndarray  # (m,) the validation at those evaluations
    column: str  # the training reward's column in the log

    @classmethod
    def of(cls, eval_compute, val, train_compute, train_reward, column: str) -> Companion:
        t = align(eval_compute, train_compute, train_reward)
        ok = np.isfinite(t)
        return cls(
            np.asarray(eval_compute, dtype=float)[ok],
            t[ok],
            np.asarray(val, dtype=float)[ok],
            column,
        )

    @classmethod
    def from_points(cls, eval_compute, val, points, column: str) -> Companion | None:
        """From (compute, training reward) pairs as a live run collects them; None for none."""
        return cls.of(eval_compute, val, *zip(*points), column) if points else None

    def __len__(self) -> int:
        return int(self.compute.size)

    def upto(self, compute: float) -> Companion:
        """The evaluations up to ``compute`` (a cut at a budget, as the validation's)."""
        k = self.compute <= compute
        return Companion(self.compute[k], self.train[k], self.val[k], self.column)

    def offsets(self, centre) -> np.ndarray:
        """``v_i - t(C_i)`` over the latest ``TAIL`` of the evaluations (at least 3), ``centre``
        the training reward's expected curve."""
        n = tail(len(self))
        c, v = self.compute[-n:], self.val[-n:]
        return v - np.asarray(centre(c), dtype=float).reshape(-1)
