"""The App. A.4 power law ``R = A - D / C^B`` for ``C >= C0``, fitted like the sigmoid.

The paper prefers the sigmoid (§1.6): power laws need a threshold C0, fit A = 1.0 on the
8B run where the sigmoid gives 0.645, and recover the asymptote only when fitted purely at
high compute. The forecasting benchmarks use it as the baseline a sigmoid must beat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from scalerl.fit import law, solver
from scalerl.fit.errors import CurveError, validate_curve
from scalerl.fit.fitting import MAX_POINTS, bin_points

__all__ = ["PowerLawResult", "fit_power_law"]


@dataclass(frozen=True, eq=False)
class PowerLawResult:
    """A fitted App. A.4 power law ``R = A - D / C^B`` on the points with ``C >= c0``."""

    A: float
    D: float
    B: float
    c0: float
    n_points: int
    sse: float
    residuals: np.ndarray  # (n_points,)
    converged: bool
    bounds_hit: tuple[str, ...]
    compute: np.ndarray  # (n_points,)
    reward: np.ndarray  # (n_points,)
    binned_from: int | None = None  # points with C >= c0 before binning, if binned

    def predict(self, C) -> np.ndarray:
        return law.power_law(C, self.A, self.D, self.B)

    @property
    def message(self) -> str:
        """How the points were used, in words: binning, as the sigmoid fit says it."""
        if self.binned_from is None:
            return f"fitted on the {self.n_points} points with compute >= c0."
        return (f"fitted on {self.n_points} means of consecutive points of the "
                f"{self.binned_from} with compute >= c0.")

    def to_dict(self) -> dict:
        keys = ("A", "D", "B", "c0", "n_points", "sse", "converged", "binned_from", "message")
        return {k: getattr(self, k) for k in keys} | {"bounds_hit": list(self.bounds_hit)}


def fit_power_law(
    compute,
    reward,
    *,
    c0: float | None = None,
    bounded: bool = True,
    b_bounds: tuple[float, float] = (1e-3, 10.0),
    source: str | None = None,
    max_points: int | None = MAX_POINTS,
) -> PowerLawResult:
    """Least-squares fit of ``R = A - D / C^B`` for ``C >= c0`` (App. A.4).

    ``c0=None`` uses every point with positive compute (the law is undefined at 0).
    A is bounded to [0, 1] when ``bounded`` (the paper's 1.5k-50k power-law fit reads
    A = 1.0, i.e. it hits that bound), D >= 0, B in ``b_bounds``. Like the fast sigmoid
    fit: for fixed B the law is linear in (A, D), so B is searched on a grid with (A, D)
    in closed form, then (A, D, B) are polished together by ``least_squares``.
    More than ``max_points`` points with ``C >= c0`` are binned into that many means of
    consecutive points, as ``fit_sigmoid`` bins (``bin_points``; None never bins), and the
    result says so in ``binned_from`` and ``message``. The B grid is walked one value at a
    time, so memory is O(n) for any n, never (grid, n).
    """
    c, r = validate_curve(compute, reward, bounded=bounded, source=source)
    c0 = float(c[c > 0].min()) if c0 is None and np.any(c > 0) else float(c0 or 0.0)
    keep = (c >= c0) & (c > 0)
    C, y = c[keep], r[keep]
    if C.size < 3:
        where = f"{source}: " if source else ""
        raise CurveError(
            f"{where}only {C.size} point(s) have compute >= c0={c0:g}; the power law needs 3."
        )
    binned_from = None
    if max_points is not None and C.size > max_points:
        binned_from = int(C.size)
        C, y = bin_points(C, y, max_points)
    scale = float(C.max())
    x = C / scale  # D' = D / scale^B in these units
    a_lo, a_hi = (0.0, 1.0) if bounded else (-np.inf, np.inf)
    lower, upper = np.array([a_lo, 0.0, b_bounds[0]]), np.array([a_hi, np.inf, b_bounds[1]])
    seeds, sse = [], []
    for B in np.geomspace(*b_bounds, 80):  # one (n,) basis at a time: no (80, n) array
        u = np.power(x, -B)
        (A, D), *_ = np.linalg.lstsq(np.stack([np.ones_like(u), -u], 1), y, rcond=None)
        seed = [np.clip(A, a_lo, a_hi), max(D, 0.0), B]
        seeds.append(seed)
        sse.append(float(np.sum((seed[0] - seed[1] * x ** -seed[2] - y) ** 2)))
    seeds = np.array(seeds)
    p0 = np.clip(seeds[int(np.argmin(sse))], lower + 1e-12, upper - 1e-12)

    def jac(p):
        u = x ** -p[2]
        return np.stack([np.ones_like(u), -u, p[1] * u * np.log(x)], 1)

    sol = least_squares(
        lambda p: p[0] - p[1] * x ** -p[2] - y, p0, jac=jac, bounds=(lower, upper),
        method="trf", x_scale="jac", ftol=1e-12, xtol=1e-12, gtol=1e-12,
    )  # fmt: skip
    A, Dn, B = sol.x
    on_bound = solver.on_bound(sol.x, lower, upper, np.ones(3, dtype=bool))
    hit = tuple(n for n, h in zip(("A", "D", "B"), on_bound) if h)
    D = float(Dn * scale**B)
    residuals = y - law.power_law(C, A, D, B)
    return PowerLawResult(
        A=float(A), D=D, B=float(B), c0=c0, n_points=int(C.size), sse=float(residuals @ residuals),
        residuals=residuals, converged=bool(sol.status > 0), bounds_hit=hit, compute=C, reward=y,
        binned_from=binned_from,
    )  # fmt: skip
