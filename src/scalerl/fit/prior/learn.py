"""A prior for Eq. 1 learned from a lab's finished runs (empirical Bayes, issue 21).

A quarter of a run's budget cannot pin its ceiling A or its exponent B: the curve before
its midpoint fits a whole ridge of sigmoids. A lab's other finished runs can. Each finished
run is fitted alone (``FitOptions.fit``) and summarised by what carries over between runs
of related recipes, in coordinates where a Gaussian is a fair description:

    z = (A - R0,  log B,  log(C_mid / budget))

the gain, the log exponent (Eq. 1's B is a positive scale exponent) and the midpoint
relative to the run's compute budget (its last compute; a new run's is the budget it is
forecast to). The population is ``z ~ N(mean, cov)`` with the sample mean and covariance
of the runs' z (empirical Bayes, Efron & Morris 1973). The covariance of fitted z is the
population's plus each run's estimation error, so the prior is slightly wider than the
population: it errs on the honest side. The evaluation noise carries over as the median
of the runs' residual variances, the centre a short prefix's own noise estimate is
shrunk toward (``posterior``).

The same runs' training rewards, each binned to its evaluations as a forecast bins the run's
own (``forecast.companion``), give a second population of the same form, ``Prior.train``: the
shape of the curve the default forecast follows where a log has a training reward (issue 48,
item 1). The validation's offset from it is the run's own, read from its latest evaluations,
moved on as the finished runs' offsets moved (``FinishedRun.val``, ``companion.offset_drift``).

A run is *usable* when its fit converged inside the search box on B and C_mid: a step, or
a bend outside the data, has no z to contribute. Fewer than ``MIN_RUNS`` usable runs make
no prior (``learn_prior`` returns None and says why). The others are still kept
(``Prior.unshaped``): they have no z, but their forecasts are scored when the prior's
intervals are calibrated (``posterior.calibrate``), since a new run may turn out like them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import FitResult
from scalerl.fit.noise import estimate_noise
from scalerl.fit.options import FitOptions

__all__ = ["MIN_RUNS", "FinishedRun", "Prior", "PriorRun", "learn_prior", "learn_train_prior", "prior_run"]

MIN_RUNS = 5
"""Fewer usable finished runs than this give no prior: five points cannot estimate a 3x3
covariance with any stability, and the leave-one-run-out calibration of its intervals
(``posterior``) would rest on fewer scores than a 95% interval needs."""
_RIDGE = np.array([1e-4, 1e-3, 1e-3])  # variance floor per coordinate: identical runs still give a proper prior


@dataclass(frozen=True, eq=False)
class FinishedRun:
    """A finished run's curve. Every one is scored when the prior's intervals are calibrated;
    one whose curve gives no z (no fit, or a shape on the search box) is only that.

    ``prefix_fits`` caches the prior-free fits of its prefixes by cut fraction: the
    calibration of every forecast refits the same prefixes. ``val``: where the curve is a
    training reward (``Prior.train``), the run's validation at the same computes, whose offset
    from it a forecast that follows the training reward carries (``forecast.companion``).
    """

    name: str
    compute: np.ndarray  # (n,) the whole curve, as read
    reward: np.ndarray  # (n,)
    prefix_fits: dict = field(default_factory=dict, repr=False, kw_only=True)
    val: np.ndarray | None = field(default=None, repr=False, kw_only=True)  # (n,)

    @property
    def budget(self) -> float:
        return float(self.compute[-1])


@dataclass(frozen=True, eq=False)
class PriorRun(FinishedRun):
    """A finished run of the population: also its own fit and its coordinates ``z``
    (module docstring)."""

    fit: FitResult
    z: np.ndarray  # (3,) gain, log B, log(C_mid / budget)
    sigma2: float  # residual variance of its fit


def coordinates(A: float, B: float, C_mid: float, R0: float, budget: float) -> np.ndarray:
    """``z = (A - R0, log B, log(C_mid / budget))`` of one Eq. 1 curve: (3,)."""
    return np.array([A - R0, np.log(B), np.log(C_mid / budget)])


def prior_run(name: str, compute, reward, options: FitOptions, val=None) -> tuple[PriorRun | None, str]:
    """Fit one finished run alone; ``(None, why)`` when it gives no usable z."""
    c, r = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    val = None if val is None else np.asarray(val, dtype=float)
    try:
        fit = options.fit(c, r, source=name)
    except CurveError as err:
        return None, str(err)
    box = [n for n in ("B", "C_mid") if n in fit.bounds_hit]
    if box:
        return None, f"{name}: {' and '.join(box)} ended on the search box, so its shape is not known"
    if not fit.converged:
        return None, f"{name}: its fit did not converge"
    p = 2 + fit.r0_fitted + (fit.fixed_A is None)
    noise = estimate_noise(fit.residuals, p, fit.reward)
    z = coordinates(fit.A, fit.B, fit.C_mid, fit.R0, float(c[-1]))
    return PriorRun(name, c, r, fit, z, noise.sigma**2, val=val), ""


@dataclass(frozen=True, eq=False)
class Prior:
    """The population of finished runs: ``z ~ N(mean, cov)`` and a noise centre."""

    runs: tuple[PriorRun, ...]
    mean: np.ndarray  # (3,)
    cov: np.ndarray  # (3, 3)
    sigma2: float  # median residual variance of the runs
    skipped: tuple[str, ...] = ()  # "name: why" of each run (or file) left out, one line each
    unshaped: tuple[FinishedRun, ...] = ()  # those runs, scored by the calibration only
    train: Prior | None = None  # the same runs' training rewards (module docstring); None: too few
    train_why: str = ""  # why ``train`` is None, one sentence

    @property
    def n_runs(self) -> int:
        return len(self.runs)

    @property
    def chol(self) -> np.ndarray:
        """Lower Cholesky factor L of ``cov`` (``cov = L L^T``): prior residuals are
        ``L^-1 (z - mean)``, whose squared norm is the Mahalanobis distance."""
        return np.linalg.cholesky(self.cov)

    def without(self, index: int) -> Prior:
        """The validation's prior learned from every run but ``index`` (leave-one-run-out, as
        the calibration scores each run; ``train`` is not carried)."""
        runs = self.runs[:index] + self.runs[index + 1 :]
        return _from_runs(runs, self.skipped, self.unshaped)

    def leaving_out(self, name: str) -> Prior:
        """The prior without the run called ``name``, shaped or not, in both populations
        (itself if none is)."""
        names = [r.name for r in self.runs]
        unshaped = tuple(r for r in self.unshaped if r.name != name)
        if name in names:
            out = self.without(names.index(name))
        elif len(unshaped) < len(self.unshaped):
            out = _from_runs(self.runs, self.skipped, unshaped)
        else:
            out = self
        train = None if self.train is None else self.train.leaving_out(name)
        return replace(out, train=train, train_why=self.train_why)

    def to_dict(self) -> dict:
        sd = np.sqrt(np.diag(self.cov))
        return {
            "n_runs": self.n_runs,
            "gain": {"mean": float(self.mean[0]), "sd": float(sd[0])},
            "B": {"median": float(np.exp(self.mean[1])), "log_sd": float(sd[1])},
            "C_mid_over_budget": {"median": float(np.exp(self.mean[2])), "log_sd": float(sd[2])},
            "sigma": float(np.sqrt(self.sigma2)),
            "skipped": list(self.skipped),
            "train_reward": None if self.train is None else self.train.to_dict(),
        }


def _from_runs(runs: tuple[PriorRun, ...], skipped: tuple[str, ...],
               unshaped: tuple[FinishedRun, ...] = ()) -> Prior:
    z = np.array([r.z for r in runs])  # (k, 3)
    cov = np.cov(z, rowvar=False) + np.diag(_RIDGE)
    sigma2 = float(np.median([r.sigma2 for r in runs]))
    return Prior(runs, z.mean(axis=0), cov, sigma2, skipped, unshaped)


def learn_prior(curves, options: FitOptions, *, what: str = "prior runs", vals=None) -> tuple[Prior | None, str]:
    """The prior from ``curves`` (name, compute, reward), or ``(None, one sentence)`` when
    fewer than ``MIN_RUNS`` of them are usable; ``what`` the curves, as that sentence names them;
    ``vals`` each curve's validation where the curves are training rewards (``FinishedRun.val``)."""
    runs, skipped, unshaped = [], [], []
    for (name, compute, reward), val in zip(curves, vals if vals is not None else [None] * len(curves)):
        run, why = prior_run(name, compute, reward, options, val)
        if run is None:
            skipped.append(why)
            unshaped.append(FinishedRun(name, np.asarray(compute, dtype=float), np.asarray(reward, dtype=float),
                                        val=None if val is None else np.asarray(val, dtype=float)))  # fmt: skip
        else:
            runs.append(run)
    if len(runs) < MIN_RUNS:
        return None, (
            f"only {len(runs)} of the {len(runs) + len(skipped)} {what} could be fitted with a "
            f"known shape, fewer than the {MIN_RUNS} a prior needs, so the fit is prior-free"
        )
    return _from_runs(tuple(runs), tuple(skipped), tuple(unshaped)), ""


def learn_train_prior(curves, vals, options: FitOptions) -> tuple[Prior | None, str]:
    """``Prior.train``: the prior of finished runs' training rewards ``curves`` (name, compute,
    training reward binned to the evaluations), each with its validation ``vals`` at the same
    computes; ``(None, one sentence)`` as ``learn_prior``."""
    if not curves:
        return None, "no prior run logs a training reward beside its evaluations"
    return learn_prior(curves, options, what="prior runs' training rewards", vals=vals)
