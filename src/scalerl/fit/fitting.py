"""Fit the ScaleRL sigmoid (Eq. 1) to one compute -> reward curve.

Two methods share one entry point, ``fit_sigmoid``:

* ``method="paper"`` reproduces App. A.5 exactly: A on the grid 0.450..0.800 (step
  0.005, 71 values), C_mid on 100 linearly spaced values over [100, 40000], B fitted by
  ``scipy.optimize.curve_fit`` with its default initialisation for each (A, C_mid) pair,
  R0 fixed; the pair with the lowest sum of squared residuals wins (7100 fits).
* ``method="fast"`` (default) minimises the same SSE over a *continuous* box that
  contains the paper grid. It searches (B, log C_mid) on a vectorised grid with A (and
  R0) solved in closed form, polishes the best seeds together with a batched
  Levenberg-Marquardt loop, and finishes with one bounded ``scipy.optimize.least_squares``.
  Because the box contains the paper grid and the polish only ever lowers the SSE, it
  reaches an SSE no larger than paper mode's (checked in the tests) in ~1/100 the time.

R0 (reward at zero RL compute) rule, the same for both methods:

* ``r0=None`` (default): if the curve has a point at compute 0 (the step-0 evaluation),
  R0 is fixed to its reward; otherwise R0 is fitted.
* ``r0="first"``: R0 is fixed to the first point's reward, whatever its compute.
* ``r0=<float>``: R0 is fixed to that value.   ``r0="fit"``: R0 is a free parameter.

When R0 is taken from a point, that point is not a fit point: its residual would be
zero by construction and it would only inflate ``n_points``. ``min_compute`` (the
paper drops the first ~1.5k GPU-hours, §1.3) keeps the points with compute >= it; R0 is
read before the cut, so a cut curve can still use its step-0 reward.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.ndimage import minimum_filter
from scipy.optimize import OptimizeWarning, curve_fit, least_squares

from scalerl.fit import law, solver
from scalerl.fit.errors import CurveError, validate_curve

__all__ = [
    "PAPER_A_GRID",
    "PAPER_C_MID_GRID",
    "FitResult",
    "Problem",
    "fit_points",
    "fit_problem",
    "fit_sigmoid",
]

PAPER_A_GRID = np.array([round(0.450 + 0.005 * i, 3) for i in range(71)])  # App. A.5: 0.450..0.800
PAPER_C_MID_GRID = np.linspace(100.0, 40000.0, 100)  # App. A.5: GPU-hours
NAMES = ("A", "B", "C_mid", "R0")
FLAT_TOL = 1e-6  # a curve whose rewards span less than this carries no shape
_N_B, _N_M, _N_SEEDS = 25, 60, 8  # fast-mode grid size and number of polished seeds
MAX_POINTS = 2000
"""Curves with more fit points are binned (``bin_points``): the fit's cost and memory grow
with n times its grids, and a per-step or per-sample log carries no more shape than 2000
consecutive means of it do."""
B_BOUNDS = (0.01, 10.0)
"""Default box for B. At B = 10 the curve climbs from 10% to 90% of its gain within a
factor exp(4.4 / B) = 1.55 of compute: beyond that a "sigmoid" is a step, which no RL curve
of the paper shows (its B values lie in 1.2-2.5) and which, fitted to one noisy jump, would
claim a ceiling reached the moment the data end."""


@dataclass(frozen=True, eq=False)
class FitResult:
    """A fitted Eq. 1 curve, with what it was fitted on and how the fit went.

    ``residuals`` are ``reward - predict(compute)`` on the ``n_points`` fit points
    (``compute``, ``reward``). ``bounds_hit`` names every parameter that ended on a bound
    of the search box (fast) or on a grid edge (paper): the true optimum may lie outside,
    so such a fit is a limit, not an estimate. ``converged`` is False when the optimiser
    stopped on its iteration limit; ``message`` says so in words.
    """

    A: float
    B: float
    C_mid: float
    R0: float
    method: str
    n_points: int
    sse: float
    residuals: np.ndarray  # (n_points,)
    converged: bool
    bounds_hit: tuple[str, ...]
    r0_fitted: bool
    fixed_A: float | None
    compute: np.ndarray  # (n_points,)
    reward: np.ndarray  # (n_points,)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    message: str = ""
    bounded: bool = True  # rewards are pass rates in [0, 1]
    r0_point: float | None = None  # compute of the evaluation R0 was read from, if any
    binned_from: int | None = None  # the number of fit points before binning, if binned

    def predict(self, C) -> np.ndarray:
        """Eq. 1 with the fitted parameters at compute ``C`` (scalar or array)."""
        return law.sigmoid(C, self.A, self.B, self.C_mid, self.R0)

    @property
    def rmse(self) -> float:
        return float(np.sqrt(self.sse / max(self.n_points, 1)))

    def to_dict(self) -> dict:
        """JSON-ready summary (scalars and lists only)."""
        return {
            "A": self.A,
            "B": self.B,
            "C_mid": self.C_mid,
            "R0": self.R0,
            "method": self.method,
            "n_points": self.n_points,
            "sse": self.sse,
            "rmse": self.rmse,
            "converged": self.converged,
            "bounds_hit": list(self.bounds_hit),
            "r0_fitted": self.r0_fitted,
            "fixed_A": self.fixed_A,
            "min_compute": float(self.compute.min()),
            "max_compute": float(self.compute.max()),
            "bounds": {k: [float(lo), float(hi)] for k, (lo, hi) in self.bounds.items()},
            "message": self.message,
            "binned_from": self.binned_from,
        }


@dataclass(frozen=True)
class Problem:
    """Validated fit points and the fixed/free status of R0 and A: what ``fit_problem``
    fits. ``fit_sigmoid`` builds one from a curve and the R0 rule; the intervals, their
    calibration and the budget advice build their own (refits of prefixes, of simulated
    continuations, with R0 put back as data) and fit them in the same box."""

    compute: np.ndarray  # (n,)
    reward: np.ndarray  # (n,)
    r0: float | None  # None: fitted
    fixed_A: float | None
    bounded: bool
    r0_point: float | None = None  # compute of the evaluation R0 was read from
    binned_from: int | None = None  # fit points before ``bin_points``

    @property
    def n_free(self) -> int:
        return 2 + (self.r0 is None) + (self.fixed_A is None)


def fit_sigmoid(
    compute,
    reward,
    *,
    r0: float | str | None = None,
    min_compute: float = 0.0,
    method: str = "fast",
    a_grid=None,
    c_mid_grid=None,
    fixed_A: float | None = None,
    bounded: bool = True,
    a_bounds: tuple[float, float] | None = None,
    b_bounds: tuple[float, float] = B_BOUNDS,
    c_mid_bounds: tuple[float, float] | None = None,
    source: str | None = None,
    max_points: int | None = MAX_POINTS,
) -> FitResult:
    """Fit ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)`` (Eq. 1) by least squares.

    compute, reward: (n,) the curve, compute strictly increasing, in any unit (GPU-hours
    as in the paper, FLOPs, tokens, steps). ``a_grid`` / ``c_mid_grid`` are the paper
    grids (defaults: App. A.5, in GPU-hours); pass your own for other units.
    ``fixed_A`` fixes the asymptote (the paper's compare rule refits with A fixed to the
    mean, §1.4). ``bounded`` means rewards are pass rates in [0, 1].

    Fast-mode search box (every bound is also overridable):
    A in ``a_bounds`` (default [0, 1] when bounded, unbounded otherwise, widened to
    contain ``a_grid``); B in ``b_bounds``; C_mid in ``c_mid_bounds``, by default from
    1/100 of the smallest positive fit compute to 100x the largest, widened to contain
    ``c_mid_grid`` when that grid was given or when the default GPU-hour grid overlaps
    the data's compute span (so it is ignored for FLOPs or tokens).
    More than ``max_points`` fit points (after the R0 rule and the cut) are binned into
    that many means of consecutive points (``bin_points``; None never bins); the result
    says so in ``binned_from`` and ``message``.
    Raises ``CurveError`` for a curve that cannot be fitted (see ``validate_curve``).
    """
    if method not in ("fast", "paper"):
        where = f"{source}: " if source else ""
        raise CurveError(f"{where}unknown fit method {method!r}; use 'fast' or 'paper'.")
    c, r = validate_curve(compute, reward, bounded=bounded, source=source)
    problem = _binned(_select_points(c, r, r0, min_compute, fixed_A, bounded, source), max_points)
    return _fit(problem, method, a_grid, c_mid_grid, a_bounds, b_bounds, c_mid_bounds)


def _binned(problem: Problem, max_points: int | None) -> Problem:
    """The problem on at most ``max_points`` means of consecutive points (``bin_points``),
    with ``binned_from`` set, when it has more; else unchanged (None never bins)."""
    if max_points is None or problem.compute.size <= max_points:
        return problem
    bc, br = bin_points(problem.compute, problem.reward, max_points)
    return replace(problem, compute=bc, reward=br, binned_from=int(problem.compute.size))


def bin_points(compute, reward, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Means of consecutive groups of points, at most ``max_points`` of them: (m,), (m,).

    Groups hold ``ceil(n / max_points)`` points each (the last may hold fewer), so the
    evaluation cadence, and with it the AR(1) structure the intervals model, is kept.
    """
    if max_points < 1:
        raise CurveError(f"max_points must be 1 or more, got {max_points}.")
    c, r = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    size = int(np.ceil(c.size / max_points))
    starts = np.arange(0, c.size, size)
    counts = np.diff(np.append(starts, c.size))
    return np.add.reduceat(c, starts) / counts, np.add.reduceat(r, starts) / counts


def fit_points(
    compute,
    reward,
    *,
    r0: float | None,
    fixed_A: float | None = None,
    bounded: bool = True,
    method: str = "fast",
    a_grid=None,
    c_mid_grid=None,
    a_bounds: tuple[float, float] | None = None,
    b_bounds: tuple[float, float] = B_BOUNDS,
    c_mid_bounds: tuple[float, float] | None = None,
    max_points: int | None = None,
) -> FitResult:
    """Fit Eq. 1 to these points, with R0 fixed (float) or fitted (None).

    No R0 rule and no ``min_compute`` cut; compute may repeat (pooled seeds) but must
    not decrease. Every point is fitted unless ``max_points`` is given and exceeded: then,
    as in ``fit_sigmoid``, that many means of consecutive points are (``binned_from`` and
    ``message`` say so); the pooled fit of many long seeds passes its options' limit.
    Arguments otherwise as in ``fit_sigmoid``.
    """
    c, r = validate_curve(compute, reward, bounded=bounded, strict=False)
    problem = Problem(c, r, None if r0 is None else float(r0), fixed_A, bounded)
    if c.size < problem.n_free:
        raise CurveError(f"{c.size} point(s) are fewer than the {problem.n_free} free parameters.")
    problem = _binned(problem, max_points)
    return _fit(problem, method, a_grid, c_mid_grid, a_bounds, b_bounds, c_mid_bounds)


def _fit(problem, method, a_grid, c_mid_grid, a_bounds, b_bounds, c_mid_bounds) -> FitResult:
    a_grid = PAPER_A_GRID if a_grid is None else np.sort(np.asarray(a_grid, dtype=float))
    user_grid = c_mid_grid is not None
    c_grid = PAPER_C_MID_GRID if not user_grid else np.sort(np.asarray(c_mid_grid, dtype=float))
    if method == "paper":
        return _fit_paper(problem, a_grid, c_grid)
    if method != "fast":
        raise CurveError(f"unknown fit method {method!r}; use 'fast' or 'paper'.")
    bounds = _fast_bounds(problem, a_grid, c_grid, user_grid, a_bounds, b_bounds, c_mid_bounds)
    return fit_problem(problem, bounds)


def _select_points(c, r, r0, min_compute, fixed_A, bounded, source) -> Problem:
    """Apply the R0 rule and the ``min_compute`` cut (module docstring)."""
    where = f"{source}: " if source else ""
    keep = np.ones(c.size, dtype=bool)
    if r0 is None:
        r0_value = float(r[0]) if c[0] == 0 else None
        keep[0] = c[0] != 0
        r0_point = 0.0 if c[0] == 0 else None
    elif isinstance(r0, str):
        if r0 not in ("first", "fit"):
            raise CurveError(f"{where}r0 must be a number, 'first', 'fit' or None, not {r0!r}.")
        r0_value = float(r[0]) if r0 == "first" else None
        keep[0] = r0 == "fit"
        r0_point = float(c[0]) if r0 == "first" else None
    else:
        r0_value, r0_point = float(r0), None
        if not np.isfinite(r0_value) or (bounded and not 0 <= r0_value <= 1):
            raise CurveError(f"{where}r0={r0_value:g} is not a finite pass rate in [0, 1].")
    if fixed_A is not None and not np.isfinite(fixed_A):
        raise CurveError(f"{where}fixed_A={fixed_A} is not a finite number.")
    keep &= c >= min_compute
    problem = Problem(c[keep], r[keep], r0_value, fixed_A, bounded, r0_point)
    n = problem.compute.size
    if n < problem.n_free:
        raise CurveError(
            f"{where}only {n} point(s) remain after the R0 point and the min_compute={min_compute:g} "
            f"cut, fewer than the {problem.n_free} free parameters."
        )
    span = np.ptp(np.append(problem.reward, [] if r0_value is None else [r0_value]))
    if span < FLAT_TOL:
        raise CurveError(
            f"{where}the reward column is flat (all values within {FLAT_TOL:g}), so it has no "
            "sigmoid to fit."
        )
    return problem


def default_box(problem: Problem) -> dict:
    """The fast-mode search box ``fit_sigmoid`` uses when no bound is given."""
    return _fast_bounds(problem, PAPER_A_GRID, PAPER_C_MID_GRID, False, None, B_BOUNDS, None)


def _fast_bounds(problem, a_grid, c_grid, user_grid, a_bounds, b_bounds, c_mid_bounds):
    """Search box in original units, name -> (lo, hi); see ``fit_sigmoid``."""
    if a_bounds is None:
        lo, hi = (0.0, 1.0) if problem.bounded else (-np.inf, np.inf)
        a_bounds = (min(lo, a_grid[0]), max(hi, a_grid[-1]))
    if c_mid_bounds is None:
        pos = problem.compute[problem.compute > 0]
        lo, hi = pos.min() / 100.0, pos.max() * 100.0
        overlaps = c_grid[0] <= pos.max() and c_grid[-1] >= pos.min()
        if user_grid or overlaps:
            lo, hi = min(lo, c_grid[0]), max(hi, c_grid[-1])
        c_mid_bounds = (lo, hi)
    r0_bounds = (0.0, 1.0) if problem.bounded else (-np.inf, np.inf)
    return {
        "A": tuple(a_bounds),
        "B": tuple(b_bounds),
        "C_mid": tuple(c_mid_bounds),
        "R0": r0_bounds,
    }


def fit_problem(problem: Problem, bounds: dict) -> FitResult:
    """Fast mode on validated points: grid seeds -> batched LM -> least_squares polish."""
    scale = float(problem.compute.max())
    lc, lower, upper = solver.to_internal(problem.compute, bounds, scale)
    y = problem.reward
    free = np.array([problem.fixed_A is None, True, True, problem.r0 is None])
    b_lo, b_hi = max(lower[1], 0.05), min(upper[1], 20.0)
    b_values = np.geomspace(b_lo, max(b_hi, b_lo), _N_B)
    m_values = np.linspace(lower[2], upper[2], _N_M)
    theta_grid, sse_grid = solver.profile_grid(
        lc, y, b_values, m_values,
        a_fixed=problem.fixed_A, r0_fixed=problem.r0,
        a_bounds=(lower[0], upper[0]), r0_bounds=(lower[3], upper[3]),
    )  # fmt: skip
    seeds = theta_grid.reshape(-1, 4)[_seed_indices(sse_grid)]
    theta, sse, conv = solver.batched_lm(
        lc, np.broadcast_to(y, (len(seeds), y.size)), seeds, free, lower, upper
    )
    best = int(np.argmin(sse))
    theta_best, sse_best, converged = theta[best], float(sse[best]), bool(conv[best])
    theta_ls, sse_ls, ok = _least_squares_polish(lc, y, theta_best, free, lower, upper)
    if sse_ls <= sse_best:
        theta_best, sse_best, converged = theta_ls, sse_ls, ok or converged
    return _result(problem, theta_best, scale, "fast", converged, free, lower, upper, bounds)


def _seed_indices(sse_grid: np.ndarray) -> np.ndarray:
    """The lowest grid cells plus the lowest local minima, so distinct basins get a seed."""
    flat = sse_grid.ravel()
    order = np.argsort(flat)
    local = np.flatnonzero(flat <= minimum_filter(sse_grid, size=3, mode="nearest").ravel())
    local = local[np.argsort(flat[local])][:_N_SEEDS]
    return np.unique(np.concatenate([order[:_N_SEEDS], local]))


def _least_squares_polish(lc, y, theta0, free, lower, upper):
    """One bounded trust-region least_squares on the free parameters."""
    idx = np.flatnonzero(free)
    eps = 1e-12 * (1 + np.abs(theta0[idx]))  # least_squares wants x0 strictly inside
    x0 = np.clip(theta0[idx], lower[idx] + eps, upper[idx] - eps)

    def full(x):
        th = theta0.copy()
        th[idx] = x
        return th

    sol = least_squares(
        lambda x: solver.model(full(x), lc) - y,
        x0,
        jac=lambda x: solver.jacobian(full(x), lc)[:, idx],
        bounds=(lower[idx], upper[idx]),
        method="trf",
        x_scale="jac",
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
    )
    return full(sol.x), float(2.0 * sol.cost), bool(sol.status > 0)


def _result(
    problem, theta, scale, method, converged, free, lower, upper, bounds, C_mid=None
) -> FitResult:
    """Build the FitResult from internal coordinates, flagging parameters on a bound."""
    on_bound = solver.on_bound(theta, lower, upper, free)
    hit = tuple(name for name, h in zip(NAMES, on_bound) if h)
    A, B, m, R0 = (float(v) for v in theta)
    # Paper mode passes C_mid itself so that it stays exactly a grid value.
    C_mid = float(scale * np.exp(m)) if C_mid is None else float(C_mid)
    pred = law.sigmoid(problem.compute, A, B, C_mid, R0)
    residuals = problem.reward - pred
    notes, box = [], "grid" if method == "paper" else "search box"
    if problem.binned_from is not None:
        notes.append(f"fitted on {problem.compute.size} means of consecutive points of the "
                     f"{problem.binned_from} given")
    if not converged:
        notes.append(f"{method} fit stopped before converging")
    physical = problem.bounded and "A" in hit and A in (bounds["A"][0], bounds["A"][1]) and A in (0.0, 1.0)
    if physical:  # a pass rate cannot pass 1: the box is not what stops the fit
        notes.append(f"A ended on {A:g}, a limit of any pass rate, so the data do not bound the ceiling")
    box_hit = [name for name in hit if not (physical and name == "A")]
    if box_hit:
        where = "a grid edge" if method == "paper" else "a bound of the search box"
        notes.append(f"{', '.join(box_hit)} ended on {where}, so the optimum may lie outside it")
    return FitResult(
        A=A, B=B, C_mid=C_mid, R0=R0, method=method, n_points=int(problem.compute.size),
        sse=float(residuals @ residuals), residuals=residuals, converged=converged,
        bounds_hit=hit, r0_fitted=problem.r0 is None, fixed_A=problem.fixed_A,
        compute=problem.compute, reward=problem.reward, bounds=dict(bounds),
        message="; ".join(notes) + "." if notes else f"converged inside the {box}.",
        bounded=problem.bounded, r0_point=problem.r0_point, binned_from=problem.binned_from,
    )  # fmt: skip


def _fit_paper(problem: Problem, a_grid: np.ndarray, c_grid: np.ndarray) -> FitResult:
    """App. A.5 verbatim: curve_fit of B (default p0) per (A, C_mid) grid pair.

    Extension beyond the paper, which fixes R0: when R0 is fitted, curve_fit fits
    (B, R0) per pair, starting R0 at the first fit point's reward.
    """
    C, y = problem.compute, problem.reward
    a_values = a_grid if problem.fixed_A is None else np.array([problem.fixed_A])
    best_sse, best = np.inf, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for A in a_values:
            for C_mid in c_grid:
                params = _paper_pair(C, y, float(A), float(C_mid), problem.r0)
                if params is None:
                    continue
                res = y - law.sigmoid(C, *params)
                sse = float(res @ res)
                if sse < best_sse:
                    best_sse, best = sse, params
    if best is None:
        raise CurveError("paper-mode fit failed: curve_fit did not converge at any grid point.")
    A, B, C_mid, R0 = best
    scale = float(C.max())
    bounds = {
        "A": (float(a_values[0]), float(a_values[-1])),
        "B": (-np.inf, np.inf),
        "C_mid": (float(c_grid[0]), float(c_grid[-1])),
        "R0": (0.0, 1.0) if problem.bounded else (-np.inf, np.inf),
    }
    _, lower, upper = solver.to_internal(C, bounds, scale)
    # Grid edges count as bounds only where the grid has more than one value.
    free = np.array([a_values.size > 1, False, c_grid.size > 1, False])
    theta = np.array([A, B, np.log(C_mid / scale), R0])
    return _result(problem, theta, scale, "paper", True, free, lower, upper, bounds, C_mid)


def _paper_pair(C, y, A: float, C_mid: float, r0: float | None):
    """curve_fit of B (and R0 when it is fitted) for one (A, C_mid) grid pair.

    The closures take exactly the fitted parameters, because curve_fit counts the
    parameters from the function signature. Returns (A, B, C_mid, R0) or None when
    curve_fit gives up (its maxfev limit).
    """
    try:
        if r0 is None:

            def f(C, B, R0):
                return law.sigmoid(C, A, B, C_mid, R0)

            (B, R0), _ = curve_fit(f, C, y, p0=[1.0, y[0]])
        else:

            def f(C, B):
                return law.sigmoid(C, A, B, C_mid, r0)

            (B,), _ = curve_fit(f, C, y)  # default p0 = 1, as in App. A.5
            R0 = r0
    except RuntimeError:
        return None
    return A, float(B), C_mid, float(R0)
