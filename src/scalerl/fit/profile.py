"""The profile of the sum of squares over the asymptote A, and what it implies.

For each A on a grid the other parameters (B, m = log C_mid / scale, and R0 when fitted)
are refitted with A held fixed:

    S(A) = min_{B, m, R0} sum_i (y_i - R(C_i; A, B, m, R0))^2.

The A values whose ``S(A)`` rises at most ``Delta`` above the minimum (``Noise.threshold``)
fit the data as well as the best fit at the stated level: that set is the profile-
likelihood interval of A. A flat profile up to the bound A = 1 is the data's way of saying
that the ceiling is not identified.

Any other quantity ``g(theta)`` (the expected reward at a budget, B, C_mid) gets its
interval by projecting the same region ``{theta : S(theta) <= S_min + Delta}``: in the slice
at each grid A the region is, to second order, the ellipsoid
``delta' J'J delta <= Delta - (S(A) - S_min)`` around the slice's best fit (Gauss-Newton
Hessian of the sum of squares), whose extreme in ``g`` lies at
``+- sqrt(budget / grad' (J'J)^-1 grad) (J'J)^-1 grad``. That step is only a proposal: it is
clipped into the box and kept only if its real sum of squares is within the threshold
(stepping back otherwise), so every extreme reported is a curve that truly fits. Slices
at fixed A are also taken at fixed C_mid on a grid (``cell_fits``), because a curve flat over
the data that bends just past them is another basin of the same A. The union over all
slices is the interval. Everything is batched: many A values (and many simulated curves)
share one Levenberg-Marquardt loop (``scalerl.fit.solver``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from scalerl.fit import solver

__all__ = ["Profile", "a_grid", "profile_fits", "project"]

_N_B, _N_M = 12, 30  # seed grid per A value
_RIDGE = 1e-10  # keeps J'J invertible where a slice is flat in one direction


@dataclass(frozen=True, eq=False)
class Profile:
    """``S(A)`` on a grid, with the slice fits.

    a_values (K,); theta (K, 4) internal coordinates of each slice's best fit; sse (K,);
    ``sse_min`` is the smallest SSE found, by the unconstrained fit or on the grid.
    """

    a_values: np.ndarray  # (K,)
    theta: np.ndarray  # (K, 4)
    sse: np.ndarray  # (K,)
    sse_min: float

    def plausible(self, delta: float) -> np.ndarray:
        """Mask (K,) of the grid A values within ``delta`` of the minimum."""
        return self.sse <= self.sse_min + delta

    def interval(self, delta: float) -> tuple[float, float]:
        """The A range within ``delta``, interpolated at the threshold crossings."""
        ok = self.plausible(delta)
        if not ok.any():  # grid coarser than a very sharp minimum: the best grid point
            k = int(np.argmin(self.sse))
            return float(self.a_values[k]), float(self.a_values[k])
        level = self.sse_min + delta
        first, last = np.flatnonzero(ok)[[0, -1]]
        return self._cross(first, first - 1, level), self._cross(last, last + 1, level)

    def _cross(self, inside: int, outside: int, level: float) -> float:
        a, s = self.a_values, self.sse
        if outside < 0 or outside >= a.size:
            return float(a[inside])  # the set reaches the end of the grid (a bound)
        t = (level - s[inside]) / max(s[outside] - s[inside], 1e-300)
        return float(a[inside] + np.clip(t, 0.0, 1.0) * (a[outside] - a[inside]))


def a_grid(lo: float, hi: float, n: int) -> np.ndarray:
    return np.linspace(lo, hi, n) if hi > lo else np.array([lo])


def profile_fits(lc, y, a_values, *, r0, lower, upper) -> tuple[np.ndarray, np.ndarray]:
    """Slice fits at fixed A for one or many curves on the same design.

    lc (n,) log(C / scale); y (n,) or (R, n); a_values (K,); ``r0`` a float (fixed) or
    None (fitted); lower/upper (4,) the box in internal coordinates.
    Returns theta (R, K, 4) and sse (R, K) (R = 1 for a single curve).
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))  # (R, n)
    a_values = np.asarray(a_values, dtype=float)
    R, K = y.shape[0], a_values.size
    seeds = _seeds(lc, y, a_values, r0, lower, upper).reshape(R * K, 4)
    free = np.array([False, True, True, r0 is None])
    # (R*K, n): a view for one curve (no copy of n x K), repeated rows for several
    y_rep = np.broadcast_to(y, (K, y.shape[1])) if R == 1 else np.repeat(y, K, axis=0)
    theta, sse, _ = solver.batched_lm(lc, y_rep, seeds, free, lower, upper, max_iter=100)
    return theta.reshape(R, K, 4), sse.reshape(R, K)


def cell_fits(lc, y, a_values, m_values, *, r0, lower, upper) -> tuple[np.ndarray, np.ndarray]:
    """Fits with A and m = log(C_mid / scale) both held, on an (A, m) grid: theta (K*M, 4)
    and sse (K*M,) for one curve y (n,).

    Slices at fixed A alone are refitted near their own best m; a curve that is flat over
    the data and bends just past them (an unreached ceiling) is another basin of the same
    slice. Holding m on a grid over the whole box visits every basin.
    """
    y = np.atleast_2d(np.asarray(y, dtype=float))
    sse, R0, b_values, m_values = _grid_sse(lc, y, a_values, r0, lower, upper, m_values)
    K, M = np.size(a_values), np.size(m_values)
    flat = sse[0]  # (K, nb, M)
    bi = np.argmin(flat, axis=1)  # (K, M)
    r0_best = np.take_along_axis(np.broadcast_to(R0[0], flat.shape), bi[:, None, :], 1)[:, 0]
    seeds = np.empty((K, M, 4))
    seeds[..., 0] = np.asarray(a_values)[:, None]
    seeds[..., 1] = b_values[bi]
    seeds[..., 2] = m_values[None, :]
    seeds[..., 3] = r0_best
    seeds = seeds.reshape(K * M, 4)
    free = np.array([False, True, False, r0 is None])
    y_rep = np.broadcast_to(y, (K * M, y.shape[1]))
    theta, sse_fit, _ = solver.batched_lm(lc, y_rep, seeds, free, lower, upper, max_iter=60)
    return theta, sse_fit


def _grid_sse(lc, y, a_values, r0, lower, upper, m_values=None):
    """SSE of every (curve, A, B, m) on a grid, R0 in closed form when fitted.

    For fixed (B, m) the model is ``R0 t + A s`` with ``s = expit(B (lc - m))`` and
    ``t = 1 - s``, so the SSE follows from a few moments of s, t and y, without forming
    the (R, K, nb, nm, n) predictions. Returns sse and R0 (R, K, nb, nm), b_values, m_values.
    """
    b_lo, b_hi = max(lower[1], 0.05), min(upper[1], 20.0)
    b_values = np.geomspace(b_lo, max(b_hi, b_lo), _N_B)
    if m_values is None:
        m_values = np.linspace(lower[2], upper[2], _N_M)
    ss, tt, ts, sy, ty = _moments(lc, y, b_values, m_values)  # (nb, nm) x 3, (R, 1, nb, nm) x 2
    yy = (y * y).sum(-1)[:, None, None, None]  # (R, 1, 1, 1)
    A = np.asarray(a_values, dtype=float)[None, :, None, None]  # (1, K, 1, 1)
    if r0 is None:
        R0 = np.clip((ty - A * ts) / np.maximum(tt, 1e-300), lower[3], upper[3])
    else:
        R0 = np.full(np.broadcast_shapes(sy.shape, A.shape), float(r0))
    sse = R0**2 * tt + A**2 * ss + yy + 2 * R0 * A * ts - 2 * R0 * ty - 2 * A * sy
    return sse, np.broadcast_to(R0, sse.shape), b_values, m_values


def _moments(lc, y, b_values, m_values):
    """Sums over the points of ``s = expit(B (lc - m))`` and ``t = 1 - s`` on the (B, m) grid:
    ``ss, tt, ts`` (nb, nm) and ``sy, ty`` (R, 1, nb, nm) for curves y (R, n).

    The nb * nm cells are taken in chunks of ``solver.chunk_rows(n, GRID_ROW_ARRAYS)``, so
    no (nb, nm, n) array is built and memory stays within ``solver.CHUNK_BYTES`` + O(R n).
    """
    B, M = np.meshgrid(b_values, m_values, indexing="ij")  # (nb, nm)
    b, m = B.ravel(), M.ravel()
    ss, tt, ts = (np.empty(b.size) for _ in range(3))
    sy, ty = np.empty((y.shape[0], b.size)), np.empty((y.shape[0], b.size))
    for c in solver.chunks(b.size, solver.chunk_rows(np.size(lc), solver.GRID_ROW_ARRAYS)):
        s = expit(b[c, None] * (lc - m[c, None]))  # (k, n)
        t = 1.0 - s
        ss[c], tt[c], ts[c] = (s * s).sum(-1), (t * t).sum(-1), (t * s).sum(-1)
        sy[:, c], ty[:, c] = np.einsum("kn,rn->rk", s, y), np.einsum("kn,rn->rk", t, y)
    grid = (y.shape[0], 1, *B.shape)
    ss, tt, ts = (v.reshape(B.shape) for v in (ss, tt, ts))
    return ss, tt, ts, sy.reshape(grid), ty.reshape(grid)


def _seeds(lc, y, a_values, r0, lower, upper) -> np.ndarray:
    """Best (B, m) seed per (curve, A) from the grid (``_grid_sse``): (R, K, 4)."""
    sse, R0, b_values, m_values = _grid_sse(lc, y, a_values, r0, lower, upper)
    R, K = sse.shape[:2]
    flat = sse.reshape(R, K, -1)
    best = np.argmin(flat, axis=-1)  # (R, K)
    bi, mi = np.unravel_index(best, sse.shape[2:])
    r0_best = np.take_along_axis(R0.reshape(R, K, -1), best[..., None], -1)[..., 0]
    theta = np.empty((R, K, 4))
    theta[..., 0] = np.asarray(a_values)[None, :]
    theta[..., 1] = b_values[bi]
    theta[..., 2] = m_values[mi]
    theta[..., 3] = r0_best
    return theta


_CHUNK = 2_000_000  # candidate-by-point elements per step of ``project`` (memory bound)


def project(
    profile: Profile, lc_data, y, lc_query, delta: float, *, free: np.ndarray, target, lower, upper
) -> tuple[np.ndarray, np.ndarray]:
    """Range of a function of theta over the region (``_project_chunk``), query points taken
    in chunks so that long curves and dense plot grids stay within a bounded memory."""
    if not isinstance(target, str):
        return _project_chunk(profile, lc_data, y, None, delta, free, target, lower, upper)
    lq = np.atleast_1d(np.asarray(lc_query, dtype=float))
    k = max(int(profile.plausible(delta).sum()), 1)
    step = max(1, _CHUNK // (k * max(np.size(lc_data), 1)))
    parts = [
        _project_chunk(profile, lc_data, y, lq[i : i + step], delta, free, target, lower, upper)
        for i in range(0, lq.size, step)
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _project_chunk(profile, lc_data, y, lc_query, delta, free, target, lower, upper):
    """Range of a function of theta over the region ``S <= S_min + delta`` (module doc).

    lc_data, y (n,) the fit points; lc_query (q,) where ``target`` is evaluated; ``free``
    (4,) the slice parameters (B, m and R0 when fitted; never A); lower/upper (4,) the box.
    ``target`` is ``"curve"`` (the expected reward at lc_query) or a parameter index
    (1 = B, 2 = m). Returns lo, hi with shape (q,) for the curve, or scalars for a parameter.

    The second-order step ``delta* = +-sqrt(budget / g'H^-1 g) H^-1 g`` to each slice's
    extreme is only a proposal: it is clipped into the box and its real sum of squares is
    checked, stepping back (x2 .. x1/8, else the slice's own fit) until it lies in the
    region. Every reported extreme is thus a curve that fits as well as the level allows,
    even where a slice is flat in some direction and the quadratic model would run off.
    """
    ok = profile.plausible(delta)
    if not ok.any():
        ok = profile.sse <= profile.sse.min()
    th = profile.theta[ok]  # (k, 4)
    limit = profile.sse_min + delta
    budget = np.maximum(limit - profile.sse[ok], 0.0)  # (k,)
    idx = np.flatnonzero(free)
    J = solver.jacobian(th, np.broadcast_to(lc_data, (th.shape[0], np.size(lc_data))))[..., idx]
    H = np.einsum("kni,knj->kij", J, J)
    H = H + _RIDGE * np.maximum(np.einsum("kii->k", H), 1e-12)[:, None, None] * np.eye(idx.size)
    curve = isinstance(target, str)
    lq = np.atleast_1d(np.asarray(lc_query, dtype=float)) if curve else np.zeros(1)
    if curve:
        g = solver.jacobian(th, np.broadcast_to(lq, (th.shape[0], lq.size)))[..., idx]  # (k, q, p)
    else:
        g = np.zeros((th.shape[0], 1, idx.size))
        if target in idx:  # else the target is held in these slices: their own values
            g[..., list(idx).index(target)] = 1.0
    Hinv_g = np.linalg.solve(H[:, None], g[..., None])[..., 0]  # (k, q, p)
    var = np.maximum(np.einsum("kqp,kqp->kq", g, Hinv_g), 1e-300)
    step = Hinv_g * np.sqrt(budget[:, None] / var)[..., None]  # (k, q, p)

    def value(theta):  # theta (k, q, 4) -> the target at each candidate's own query point
        if not curve:
            return theta[..., target]
        A, B, m, R0 = (theta[..., i] for i in range(4))
        return R0 + (A - R0) * expit(B * (lq[None, :] - m))

    base = np.broadcast_to(th[:, None, :], step.shape[:2] + (4,))
    centre = value(base)
    lo, hi = centre.min(axis=0), centre.max(axis=0)
    for sign in (1.0, -1.0):
        best = centre.copy()
        found = np.zeros(centre.shape, dtype=bool)
        for t in (2.0, 1.0, 0.5, 0.25, 0.125):
            cand = base.copy()
            cand[..., idx] = np.clip(base[..., idx] + sign * t * step, lower[idx], upper[idx])
            resid = solver.model(cand, lc_data) - y  # (k, q, n)
            inside = (np.einsum("kqn,kqn->kq", resid, resid) <= limit) & ~found
            best = np.where(inside, value(cand), best)
            found |= inside
        lo, hi = np.minimum(lo, best.min(axis=0)), np.maximum(hi, best.max(axis=0))
    if not curve:
        return float(lo[0]), float(hi[0])
    return lo, hi
