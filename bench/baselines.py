"""The baselines a forecast of a run's final value is scored against (``forecast_real.py``).

Each baseline is one function ``(cut, C) -> (mean, sd)``: from what a run logged up to its cut
(``Cut``: the evaluations' compute ``x`` and value ``y``, their noise ``sigma``, and the
policy entropy at each evaluation where the log has it), the Gaussian predictive distribution
of one evaluation at compute ``C``. Its 95% interval is ``mean -/+ 1.96 sd``. To add a method,
write one such function and register it with ``@baseline("name")``: ``forecast_real.py``
scores every registered one on the same cuts, side by side with the shipped forecast.

The curves (the learning-curve literature's, fitted by least squares with ``scipy``; each
interval is the delta method on the fit's covariance plus one evaluation's noise):

* ``power law``: App. A.4 of the paper, ``R = A - D / C^B`` (``scalerl.fit.fit_power_law``);
* ``POW4``: ``R = c - (a C + b)^(-alpha)`` (Domhan et al. 2015's pow4);
* ``MMF4``: Morgan-Mercer-Flodin, ``R = (alpha beta + gamma C^delta) / (beta + C^delta)``;
* ``entropy law``: ``R = -a exp(H) + b`` (arXiv 2505.22617), where the log has the policy
  entropy ``H``; the entropy at ``C`` is extrapolated from its own trend over the cut's second
  half, ``H = h0 + h1 log C``, and both fits' uncertainties enter the interval;
* ``last value``: no law, the mean of the last 5 evaluations and its noise: Optuna's certified
  pruner's predictor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import approx_fprime, least_squares

from scalerl.fit import fit_power_law
from scalerl.fit.law import power_law

__all__ = ["BASELINES", "Cut", "baseline"]

WINDOW = 5
BASELINES: dict[str, Callable] = {}


@dataclass(frozen=True)
class Cut:
    x: np.ndarray  # (n,) compute of the evaluations up to the cut
    y: np.ndarray  # (n,) their values
    sigma: float  # the noise of one evaluation
    entropy: np.ndarray | None = None  # (n,) the policy entropy at each evaluation (nan: not logged)


def baseline(name: str):
    def register(fn):
        BASELINES[name] = fn
        return fn

    return register


def _delta(model, theta, x, y, C, sigma) -> tuple[float, float]:
    """(mean, sd) of one evaluation at C: the model at the least-squares theta, its delta-method
    variance on the fit's covariance, and the noise."""
    resid = model(x, theta) - y
    J = np.array([approx_fprime(theta, lambda t, i=i: model(x[i:i + 1], t)[0], 1e-7) for i in range(x.size)])
    dof = max(x.size - theta.size, 1)
    cov = float(resid @ resid) / dof * np.linalg.pinv(J.T @ J)
    g = approx_fprime(theta, lambda t: float(model(np.array([C]), t)[0]), 1e-7)
    return float(model(np.array([C]), theta)[0]), float(np.sqrt(max(g @ cov @ g, 0.0) + sigma**2))


def _fit(model, start, lower, upper, x, y):
    done = least_squares(lambda t: model(x, t) - y, start, bounds=(lower, upper), max_nfev=5000)
    if not done.success:
        raise ValueError(done.message)
    return done.x


@baseline("power law")
def power_law_baseline(cut: Cut, C: float) -> tuple[float, float]:
    p = fit_power_law(cut.x, cut.y)
    keep = cut.x >= p.c0
    return _delta(lambda x, t: power_law(x, *t), np.array([p.A, p.D, p.B]), cut.x[keep], cut.y[keep], C, cut.sigma)


def _scaled(cut: Cut):
    """x over its last value (the fits' parameters then live near 1, whatever the unit)."""
    s = float(cut.x[-1])
    return cut.x / s, s


@baseline("POW4")
def pow4(cut: Cut, C: float) -> tuple[float, float]:
    x, s = _scaled(cut)

    def model(x, t):  # c - (a x + b)^(-alpha)
        c, a, b, alpha = t
        return c - np.power(a * x + b, -alpha)

    theta = _fit(model, [min(cut.y.max() + 0.1, 1.0), 5.0, 1.0, 1.0], [0.0, 1e-6, 1e-6, 1e-3], [1.5, 1e4, 1e3, 10.0],
                 x, cut.y)  # fmt: skip
    return _delta(model, theta, x, cut.y, C / s, cut.sigma)


@baseline("MMF4")
def mmf4(cut: Cut, C: float) -> tuple[float, float]:
    x, s = _scaled(cut)

    def model(x, t):  # (alpha beta + gamma x^delta) / (beta + x^delta)
        alpha, beta, gamma, delta = t
        xd = np.power(np.maximum(x, 1e-12), delta)
        return (alpha * beta + gamma * xd) / (beta + xd)

    theta = _fit(model, [float(cut.y[0]), 1.0, min(cut.y.max() + 0.1, 1.0), 1.0], [-0.5, 1e-6, 0.0, 1e-3],
                 [1.5, 1e4, 1.5, 10.0], x, cut.y)  # fmt: skip
    return _delta(model, theta, x, cut.y, C / s, cut.sigma)


@baseline("entropy law")
def entropy_law(cut: Cut, C: float) -> tuple[float, float]:
    """R = -a e^H + b on the cut's (H, R) pairs; H at C from H = h0 + h1 log C over its second half."""
    if cut.entropy is None or np.isfinite(cut.entropy).sum() < 6:
        raise ValueError("the log has no entropy")
    ok = np.isfinite(cut.entropy) & (cut.x > 0)
    h, y, x = cut.entropy[ok], cut.y[ok], cut.x[ok]
    eh = np.exp(h)
    A = np.column_stack([-eh, np.ones_like(eh)])
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    r = y - A @ np.array([a, b])
    cov_ab = float(r @ r) / max(y.size - 2, 1) * np.linalg.pinv(A.T @ A)
    half = x >= np.median(x)
    L = np.column_stack([np.ones(half.sum()), np.log(x[half])])
    (h0, h1), *_ = np.linalg.lstsq(L, h[half], rcond=None)
    rh = h[half] - L @ np.array([h0, h1])
    cov_h = float(rh @ rh) / max(half.sum() - 2, 1) * np.linalg.pinv(L.T @ L)
    hC = h0 + h1 * np.log(C)
    mean = -a * np.exp(hC) + b
    g_ab = np.array([-np.exp(hC), 1.0])  # d mean / d(a, b)
    g_h = -a * np.exp(hC) * np.array([1.0, np.log(C)])  # d mean / d(h0, h1)
    var = g_ab @ cov_ab @ g_ab + g_h @ cov_h @ g_h + cut.sigma**2
    return float(mean), float(np.sqrt(max(var, 0.0)))


@baseline("last value")
def last_value(cut: Cut, C: float) -> tuple[float, float]:
    last = cut.y[-WINDOW:]
    return float(last.mean()), float(cut.sigma * np.sqrt(1.0 + 1.0 / last.size))
