"""Intervals that hold: correlated noise, weak identification and shape error.

``scalerl.fit.calibrate.assess(fit)`` turns one sigmoid fit into every interval the tool
reports: steps 1 and 2 here (``model_uncertainty``), step 3 in ``calibrate``.

1. **Correlated noise** (``scalerl.fit.noise``): residuals are AR(1) in evaluation order;
   the information of smooth directions is divided by the design effect
   ``deff = (1 + rho) / (1 - rho)``.
2. **Weak identification** (``scalerl.fit.profile``): A's interval is the profile-
   likelihood set ``{A : S(A) <= S_min + Delta}`` with ``Delta = F_{1,dof} sigma^2 deff``,
   searched over the whole box (A up to 1 for pass rates), so a flat profile gives the
   whole plausible range instead of a point on a bound. B, C_mid and the expected curve
   get their intervals by projecting the same region.
3. **Shape error** (``scalerl.fit.calibrate``): the law is only approximately right, so
   the predictive interval is widened by a rolling-origin conformal factor: refit on sub-
   prefixes of the same data, forecast ahead by the same extrapolation ratio, and scale
   by the level-quantile of the studentised errors (never narrowed).

Two bands, named everywhere: the **band on the expected curve** (where Eq. 1 itself
lies, if the law holds) and the **predictive interval** for one future evaluation (the
band, plus evaluation noise ``t_dof * sigma`` in quadrature, times the conformal factor).

The ceiling is **identified** when A's interval is no wider than ``±margin`` (the paper's
0.02, §1.4); otherwise every output says so, and names the range.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scalerl.fit import profile as prof
from scalerl.fit import solver
from scalerl.fit.fitting import FitResult, Problem, default_box, fit_problem
from scalerl.fit.noise import Noise, estimate_noise
from scalerl.fit.options import FitOptions

__all__ = ["Uncertainty", "inference_fit", "model_uncertainty"]

_N_COARSE, _N_FINE = 41, 33  # profile grid over the A box, then across the plausible set
_N_CELL_A, _N_CELL_M = 17, 24  # the (A, C_mid) grid across the plausible set


@dataclass(frozen=True, eq=False)
class Uncertainty:
    """All intervals of one fit at one ``level`` (see the module docstring)."""

    fit: FitResult
    level: float
    margin: float
    data: FitResult  # the fit the region is built on (``inference_fit``)
    noise: Noise
    profile: prof.Profile
    delta: float  # SSE rise allowed by the level
    scale: float  # compute normaliser of the internal coordinates
    A_plausible: tuple[float, float]
    cells: prof.Profile | None = None  # fits on an (A, C_mid) grid: every basin of the region
    calibration: Any = None
    """The ``scalerl.fit.calibrate.Calibration`` that ``calibrate.assess`` attaches (not
    imported here: calibrate builds on this module); None: model-based, factor 1."""

    # --- the ceiling ---------------------------------------------------------------

    @property
    def box_limited(self) -> tuple[str, ...]:
        """B or C_mid on a bound of the search box: the best fit is a step (B) or a curve
        whose bend lies far outside the data (C_mid), and the region is cut by the box."""
        hit = set(self.data.bounds_hit)
        if self.fit.method == "fast":  # a paper-grid edge is not the box the region searched
            hit |= set(self.fit.bounds_hit)
        return tuple(n for n in ("B", "C_mid") if n in hit)

    @property
    def falling(self) -> bool:
        """The fitted curve ends more than ``margin`` below its start: the run got worse,
        which the law (a run that improves with compute) does not describe."""
        return self.fit.fixed_A is None and self.fit.A < self.fit.R0 - self.margin

    @property
    def identified(self) -> bool:
        """A's interval is within ``±margin``, not cut by the box, and the curve does not
        fall (True when A was fixed)."""
        if self.fit.fixed_A is not None:
            return True
        lo, hi = self.A_plausible
        return (hi - lo) / 2.0 <= self.margin + 1e-12 and not self.box_limited and not self.falling

    @property
    def verdict(self) -> str:
        """One sentence on the ceiling, for every table and report."""
        lo, hi = self.A_plausible
        pct = f"{self.level:.0%}"
        if self.fit.fixed_A is not None:
            return f"ceiling fixed at A = {self.fit.A:.3f}."
        if self.falling:
            return (
                f"ceiling not identified: the curve falls (A = {self.fit.A:.3f} below R0 = "
                f"{self.fit.R0:.3f}); the run got worse, which the law does not describe, so "
                "its forecasts are not to be trusted."
            )
        if self.identified:
            return f"ceiling identified: A in [{lo:.3f}, {hi:.3f}] at {pct}, within ±{self.margin:g}."
        if self.box_limited and (hi - lo) / 2.0 <= self.margin:
            what = " and ".join(self.box_limited)
            return (
                f"ceiling not identified: A in [{lo:.3f}, {hi:.3f}] only because {what} ended on "
                "a bound of the search box (a step, or a bend far outside the data); forecasts "
                "beyond the data rest on the shape alone."
            )
        return (
            f"ceiling not identified: any A in [{lo:.3f}, {hi:.3f}] fits as well at {pct}; "
            "forecasts beyond the data rest on the shape alone."
        )

    # --- parameters ----------------------------------------------------------------

    @property
    def _free(self) -> np.ndarray:
        return np.array([False, True, True, self.data.r0_fitted])

    @property
    def _lc(self) -> np.ndarray:
        return _log_c(self.data.compute, self.scale)

    @property
    def _box(self) -> tuple[np.ndarray, np.ndarray]:
        """The search box in internal coordinates: lower (4,), upper (4,)."""
        return solver.to_internal(self.data.compute, self.data.bounds, self.scale)[1:]

    def interval(self, name: str) -> tuple[float, float]:
        """Interval of 'A', 'B' or 'C_mid' at ``level`` (projection of the region)."""
        if name == "A":
            return self.A_plausible
        index = {"B": 1, "C_mid": 2}[name]
        lo, hi = (float(v) for v in self._project(None, index))
        box_lo, box_hi = self.data.bounds[name]  # the region never leaves the search box
        if name == "C_mid":
            lo = max(lo, np.log(box_lo / self.scale))
            hi = min(hi, np.log(box_hi / self.scale))
            lo, hi = float(self.scale * np.exp(lo)), float(self.scale * np.exp(hi))
        else:
            lo, hi = float(max(lo, box_lo)), float(min(hi, box_hi))
        point = getattr(self.fit, name)  # the reported estimate always lies in its own interval
        return min(lo, point), max(hi, point)

    @property
    def intervals(self) -> dict[str, tuple[float, float]]:
        names = ("B", "C_mid") if self.fit.fixed_A is not None else ("A", "B", "C_mid")
        return {n: self.interval(n) for n in names}

    # --- curves --------------------------------------------------------------------

    def _clip(self, v):
        return np.clip(v, 0.0, 1.0) if self.fit.bounded else v

    def _project(self, lc_query, target) -> tuple:
        """Range of ``target`` over the region: the A slices and the (A, C_mid) cells."""
        lower, upper = self._box
        lo, hi = prof.project(
            self.profile, self._lc, self.data.reward, lc_query, self.delta,
            free=self._free, target=target, lower=lower, upper=upper,
        )  # fmt: skip
        if self.cells is not None:
            c_lo, c_hi = prof.project(
                self.cells, self._lc, self.data.reward, lc_query, self.delta,
                free=self._free & (np.arange(4) != 2), target=target, lower=lower, upper=upper,
            )  # fmt: skip
            lo, hi = np.minimum(lo, c_lo), np.maximum(hi, c_hi)
        return lo, hi

    def _projected(self, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The fit at ``C`` and the region's range there (unclipped), each shaped like C."""
        C = np.asarray(C, dtype=float)
        lo, hi = self._project(_log_c(C.ravel(), self.scale), "curve")
        centre = self.fit.predict(C.ravel())
        lo, hi = np.minimum(lo, centre), np.maximum(hi, centre)
        return centre.reshape(C.shape), lo.reshape(C.shape), hi.reshape(C.shape)

    def band(self, C) -> tuple[np.ndarray, np.ndarray]:
        """Band on the expected curve: where Eq. 1 lies at ``C`` if the law holds."""
        _, lo, hi = self._projected(C)
        return self._clip(lo), self._clip(hi)

    def half_widths(self, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Centre, lower and upper half-widths of the uncalibrated predictive interval."""
        centre, lo, hi = self._projected(C)
        noise = self.noise.z(self.level) * self.noise.sigma
        down = np.sqrt((centre - lo) ** 2 + noise**2)
        up = np.sqrt((hi - centre) ** 2 + noise**2)
        return centre, down, up

    def predictive(self, C) -> tuple[np.ndarray, np.ndarray]:
        """Predictive interval for one future evaluation at ``C`` (calibrated)."""
        centre, down, up = self.half_widths(C)
        k = 1.0 if self.calibration is None else self.calibration.scale
        return self._clip(centre - k * down), self._clip(centre + k * up)

    def to_dict(self) -> dict:
        return {
            "level": self.level,
            "margin": self.margin,
            "identified": self.identified,
            "A_plausible": list(self.A_plausible),
            "verdict": self.verdict,
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "noise": self.noise.to_dict(),
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
        }


def _log_c(C, scale: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(C, dtype=float) / scale)


def inference_fit(fit: FitResult) -> FitResult:
    """The fit the intervals are built on.

    When R0 was read from an evaluation (the step-0 point), that evaluation is as noisy as
    any other: fixing R0 to it exactly would let one noisy point decide whether a flat
    start can still rise later. The intervals therefore put the point back as data and fit
    R0 with the rest; the reported point estimate keeps the paper's fixed R0.

    A paper-mode fit searched A only on 0.450..0.800; its region is searched over the
    whole fast-mode box (A up to 1 for pass rates), or the grid would hide how far A can go.
    """
    paper = fit.method == "paper"
    if (fit.r0_point is None or fit.r0_fitted) and not paper:
        return fit
    compute, reward, r0 = fit.compute, fit.reward, None if fit.r0_fitted else fit.R0
    if fit.r0_point is not None and not fit.r0_fitted:
        compute, reward, r0 = np.insert(compute, 0, fit.r0_point), np.insert(reward, 0, fit.R0), None
    problem = Problem(compute, reward, r0, fit.fixed_A, fit.bounded)
    bounds = default_box(problem) if paper else fit.bounds
    return fit_problem(problem, bounds)


def model_uncertainty(
    fit: FitResult, *, level: float = FitOptions.level, margin: float = FitOptions.margin,
    noise: Noise | None = None,
    cells: bool = True,
) -> Uncertainty:
    """Steps 1 and 2 of the module docstring (no shape-error calibration).

    ``noise`` overrides the noise model read from the residuals (the rolling-origin check
    passes the whole curve's, a better estimate than a short prefix's). ``cells=False``
    skips the (A, C_mid) grid, which only the bands need (A's interval does not).
    """
    data = inference_fit(fit)
    scale = float(data.compute.max())
    lc, lower, upper = solver.to_internal(data.compute, data.bounds, scale)
    r0 = None if data.r0_fitted else data.R0
    p = 2 + data.r0_fitted + (data.fixed_A is None)
    if noise is None:
        noise = estimate_noise(data.residuals, p, data.reward)
    else:
        noise = replace(noise, n=data.n_points, p=p)
    delta = noise.threshold(level)
    theta_fit = np.array([data.A, data.B, np.log(data.C_mid / scale), data.R0])
    if fit.fixed_A is not None:
        a_values = np.array([fit.A])
    else:
        a_values = prof.a_grid(*_a_range(data, lower, upper), _N_COARSE)
    theta, sse = prof.profile_fits(lc, data.reward, a_values, r0=r0, lower=lower, upper=upper)
    profile = _merge(a_values, theta[0], sse[0], theta_fit, data.sse)
    if fit.fixed_A is None:  # resolve the plausible set's edges on a finer grid
        lo, hi = profile.interval(delta)
        step = (a_values[-1] - a_values[0]) / max(a_values.size - 1, 1)
        fine = prof.a_grid(max(lower[0], lo - step), min(upper[0], hi + step), _N_FINE)
        theta, sse = prof.profile_fits(lc, data.reward, fine, r0=r0, lower=lower, upper=upper)
        profile = _merge(
            np.concatenate([profile.a_values, fine]),
            np.concatenate([profile.theta, theta[0]]),
            np.concatenate([profile.sse, sse[0]]),
            theta_fit, data.sse,
        )  # fmt: skip
    A_plausible = profile.interval(delta) if fit.fixed_A is None else (fit.A, fit.A)
    if fit.fixed_A is None:  # the reported estimate always lies in its own interval
        A_plausible = (min(A_plausible[0], fit.A), max(A_plausible[1], fit.A))
    grid = _cells(lc, data.reward, A_plausible, profile, r0, lower, upper) if cells else None
    return Uncertainty(fit, level, margin, data, noise, profile, delta, scale, A_plausible, grid)


def _cells(lc, y, A_plausible, profile: prof.Profile, r0, lower, upper) -> prof.Profile:
    """(A, C_mid) grid fits across A's plausible range and the whole C_mid box."""
    a_values = prof.a_grid(*A_plausible, _N_CELL_A)
    m_values = np.linspace(lower[2], upper[2], _N_CELL_M)
    theta, sse = prof.cell_fits(lc, y, a_values, m_values, r0=r0, lower=lower, upper=upper)
    return prof.Profile(theta[:, 0], theta, sse, min(profile.sse_min, float(sse.min())))


def _a_range(fit: FitResult, lower: np.ndarray, upper: np.ndarray) -> tuple[float, float]:
    """The A values worth profiling: from the lowest observed reward (a rising curve's
    ceiling is never below it by more than noise) to the top of the box."""
    y = np.append(fit.reward, fit.R0)
    lo = max(lower[0], float(y.min()))
    hi = upper[0] if np.isfinite(upper[0]) else float(y.max() + 2.0 * np.ptp(y) + 1e-6)
    lo = min(lo, fit.A)
    return lo, max(hi, fit.A)


def _merge(a_values, theta, sse, theta_fit, sse_fit) -> prof.Profile:
    """Grid slices plus the unconstrained fit, sorted by A."""
    a = np.append(a_values, theta_fit[0])
    th = np.vstack([theta, theta_fit[None]])
    s = np.append(sse, sse_fit)
    order = np.argsort(a, kind="stable")
    return prof.Profile(a[order], th[order], s[order], float(min(s.min(), sse_fit)))
