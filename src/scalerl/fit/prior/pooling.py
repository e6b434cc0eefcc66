"""Runs of one study fitted jointly: partial pooling of B and C_mid, A per run (issue 21).

The runs of a sweep share a task, a model and a compute unit; their recipes differ mostly in
the ceiling they reach (A) and less in how fast they bend (B, C_mid). Each run alone fits
its ``(log B, log C_mid)`` poorly when its curve is short or noisy; fitted jointly, a run
borrows strength from the others (a hierarchical model, fitted by empirical Bayes):

    (log B_i, log C_mid_i) ~ N(mu, diag(tau^2)),     A_i, R0_i free per run,

and each run's fit minimises ``SSE_i / sigma_i^2 + sum_k (theta_ik - mu_k)^2 / tau_k^2``.
``mu`` is the mean of the runs' own fits and ``tau^2`` their variance less the mean of their
estimation variances (method of moments, Efron & Morris 1973), floored at ``TAU_FLOOR^2``
so a population of identical runs still lets each run move. One pass: the shrunk fits are
what the comparison, its leave-one-out table and its figures read. A run whose own fit is
precise keeps it; an imprecise one moves toward the study's shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from scalerl.fit import law
from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import B_BOUNDS, FitResult
from scalerl.fit.noise import estimate_noise
from scalerl.fit.options import FitOptions

__all__ = ["JointFit", "joint_fit"]

TAU_FLOOR = 0.05  # log units: 5% in B or C_mid is the least between-run spread assumed
MIN_RUNS = 3  # fewer runs give no usable between-run variance


@dataclass(frozen=True, eq=False)
class JointFit:
    """The runs' partially pooled fits, their own fits, and the pooled shape's population."""

    fits: dict[str, FitResult]  # pooled: what the comparison reads
    alone: dict[str, FitResult]  # each run fitted alone
    mu: np.ndarray  # (2,) mean of (log B, log C_mid)
    tau: np.ndarray  # (2,) between-run sd of (log B, log C_mid)

    def to_dict(self) -> dict:
        return {
            "B_median": float(np.exp(self.mu[0])), "B_log_sd": float(self.tau[0]),
            "C_mid_median": float(np.exp(self.mu[1])), "C_mid_log_sd": float(self.tau[1]),
            "runs": {n: {"alone": {"A": a.A, "B": a.B, "C_mid": a.C_mid},
                         "pooled": {"A": p.A, "B": p.B, "C_mid": p.C_mid}}
                     for (n, a), p in zip(self.alone.items(), self.fits.values())},
        }  # fmt: skip


def _shape_variance(fit: FitResult, sigma: float) -> np.ndarray:
    """Gauss-Newton variances of (log B, log C_mid) in the run's own fit: (2,)."""
    eps = 1e-6
    x = np.array([fit.A, np.log(fit.B), np.log(fit.C_mid), fit.R0])
    free = [0, 1, 2] + ([3] if fit.r0_fitted else [])
    J = np.empty((fit.n_points, len(free)))
    for col, j in enumerate(free):  # central differences of Eq. 1 in these coordinates
        up, down = x.copy(), x.copy()
        up[j] += eps
        down[j] -= eps
        f_up = law.sigmoid(fit.compute, up[0], np.exp(up[1]), np.exp(up[2]), up[3])
        f_down = law.sigmoid(fit.compute, down[0], np.exp(down[1]), np.exp(down[2]), down[3])
        J[:, col] = (f_up - f_down) / (2 * eps)
    cov = np.linalg.pinv(J.T @ J) * sigma**2
    return np.clip(np.diag(cov)[1:3], 0.0, 1e6)


def _pooled_fit(fit: FitResult, sigma: float, mu: np.ndarray, tau: np.ndarray) -> FitResult:
    """The run's MAP with the shape prior N(mu, diag(tau^2)) on (log B, log C_mid)."""
    r0 = None if fit.r0_fitted else fit.R0

    def unpack(x):
        return x[0], np.exp(x[1]), np.exp(x[2]), (x[3] if r0 is None else r0)

    def residuals(x):
        data = (fit.reward - law.sigmoid(fit.compute, *unpack(x))) / sigma
        return np.concatenate([data, (x[1:3] - mu) / tau])

    lo_a, hi_a = fit.bounds.get("A", (-np.inf, np.inf))
    lo_c, hi_c = fit.bounds["C_mid"]
    lo = [lo_a, np.log(B_BOUNDS[0]), np.log(lo_c)] + ([0.0 if fit.bounded else -np.inf] if r0 is None else [])
    hi = [hi_a, np.log(B_BOUNDS[1]), np.log(hi_c)] + ([1.0 if fit.bounded else np.inf] if r0 is None else [])
    x0 = np.array([fit.A, np.log(fit.B), np.log(fit.C_mid)] + ([fit.R0] if r0 is None else []))
    x0 = np.clip(x0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)
    sol = least_squares(residuals, x0, bounds=(lo, hi), method="trf", x_scale="jac")
    A, B, C_mid, R0 = (float(v) for v in unpack(sol.x))
    res = fit.reward - law.sigmoid(fit.compute, A, B, C_mid, R0)
    note = f"partially pooled with the study's shape (B, C_mid); alone: B={fit.B:.3g}, C_mid={fit.C_mid:.4g}."
    return replace(fit, A=A, B=B, C_mid=C_mid, R0=R0, residuals=res, sse=float(res @ res),
                   converged=bool(sol.status > 0), bounds_hit=(), message=note)  # fmt: skip


def joint_fit(curves, options: FitOptions | None = None) -> JointFit:
    """Fit ``curves`` (objects with ``name``, ``compute``, ``reward``, ``source``) jointly."""
    options = FitOptions() if options is None else options
    if len(curves) < MIN_RUNS:
        raise CurveError(f"a pooled fit needs at least {MIN_RUNS} runs, got {len(curves)}.")
    alone = {c.name: options.fit(c.compute, c.reward, source=c.source) for c in curves}
    sigmas = {}
    for name, fit in alone.items():
        p = 2 + fit.r0_fitted + (fit.fixed_A is None)
        sigmas[name] = max(estimate_noise(fit.residuals, p, fit.reward).sigma, 1e-6)
    theta = np.array([[np.log(f.B), np.log(f.C_mid)] for f in alone.values()])  # (n, 2)
    est_var = np.array([_shape_variance(f, sigmas[n]) for n, f in alone.items()])  # (n, 2)
    mu = theta.mean(axis=0)
    tau2 = np.maximum(theta.var(axis=0, ddof=1) - est_var.mean(axis=0), TAU_FLOOR**2)
    tau = np.sqrt(tau2)
    fits = {name: _pooled_fit(fit, sigmas[name], mu, tau) for name, fit in alone.items()}
    return JointFit(fits, alone, mu, tau)
