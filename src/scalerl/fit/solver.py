"""Vectorised numerics behind the fast sigmoid fit and the bootstrap.

Internal coordinates: ``theta = (A, B, m, R0)`` with ``m = log(C_mid / scale)``, and the
data enter as ``lc = log(C / scale)`` (``-inf`` for the step-0 point). ``scale`` is a
per-fit compute normaliser, so GPU-hours, FLOPs (~1e21) and steps all look the same to
the optimiser. In these coordinates Eq. 1 is

    R = R0 + (A - R0) * s,    s = expit(B * (lc - m))

which is *linear* in ``(A, R0)`` for fixed ``(B, m)``. ``profile_grid`` uses that to
search (B, m) on a grid with A and R0 in closed form (variable projection), and
``batched_lm`` polishes many problems (grid seeds or bootstrap resamples) at once with a
Levenberg-Marquardt loop whose linear algebra is batched over the leading axis.

Both work in chunks of their leading axis (grid cells, problems) sized by ``CHUNK_BYTES``,
so their memory is bounded by the budget plus O(n), never by n times the grid or the number
of problems. Every cell and problem is computed on its own row, so the chunking changes no
result (tests/fit/test_solver.py forces a one-row chunk and compares).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

A_, B_, M_, R0_ = 0, 1, 2, 3  # positions in theta
N_PARAMS = 4
BOUND_RTOL = 1e-6  # a parameter this close (relative) to a box edge is on it
CHUNK_BYTES = 64 * 2**20
"""Working-set budget of one chunk (64 MB): a chunk holds ``CHUNK_BYTES // row_bytes`` rows.
Read at call time, so a test can shrink it."""
GRID_ROW_ARRAYS = 8  # (n,) float arrays live per grid cell in ``profile_grid``
LM_ROW_ARRAYS = 24  # (n,) float arrays live per problem in ``batched_lm`` (J is (n, 4) twice)


def chunk_rows(n: int, arrays_per_row: int) -> int:
    """Rows per chunk when each row holds ``arrays_per_row`` float64 arrays of length n:
    ``max(1, CHUNK_BYTES // (8 n arrays_per_row))``."""
    return max(1, int(CHUNK_BYTES // max(8 * n * arrays_per_row, 1)))


def chunks(total: int, rows: int):
    """Slices ``[0, rows), [rows, 2 rows), ...`` covering ``range(total)``."""
    return (slice(i, min(i + rows, total)) for i in range(0, total, rows))


def to_internal(compute, bounds: dict, scale: float):
    """Original units -> solver coordinates: lc (n,), lower (4,), upper (4,).

    ``bounds`` maps 'A', 'B', 'C_mid', 'R0' to (lo, hi); ``m = log(C_mid / scale)``.
    """
    with np.errstate(divide="ignore"):
        lc = np.log(np.asarray(compute, dtype=float) / scale)
    lo = [bounds["A"][0], bounds["B"][0], np.log(bounds["C_mid"][0] / scale), bounds["R0"][0]]
    hi = [bounds["A"][1], bounds["B"][1], np.log(bounds["C_mid"][1] / scale), bounds["R0"][1]]
    return lc, np.array(lo, dtype=float), np.array(hi, dtype=float)


def on_bound(theta: np.ndarray, lower: np.ndarray, upper: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Which free parameters sit on a box edge: theta (..., p) -> (..., p) bool."""
    tol = BOUND_RTOL * (1.0 + np.abs(theta))
    return free & ((theta - lower <= tol) | (upper - theta <= tol))


def model(theta: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """Eq. 1 in internal coordinates. theta (..., 4), lc (..., n) -> (..., n)."""
    A, B, m, R0 = (theta[..., i, None] for i in range(N_PARAMS))
    s = expit(B * (lc - m))
    return R0 + (A - R0) * s


def jacobian(theta: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """d model / d theta. theta (..., 4), lc (..., n) -> (..., n, 4).

    ``ds/dB = s(1-s)(lc-m)`` and ``ds/dm = -s(1-s)B``; at the step-0 point (lc = -inf)
    s = 0 exactly, so both are 0 (the product would otherwise read 0 * inf = NaN).
    """
    A, B, m, R0 = (theta[..., i, None] for i in range(N_PARAMS))
    u = lc - m
    s = expit(B * u)
    w = (A - R0) * s * (1.0 - s)
    finite = np.isfinite(u)
    u = np.where(finite, u, 0.0)
    dB = np.where(finite, w * u, 0.0)
    dm = np.where(finite, -w * B, 0.0)
    dA = np.broadcast_to(s, dB.shape)
    dR0 = np.broadcast_to(1.0 - s, dB.shape)
    return np.stack([dA, dB, dm, dR0], axis=-1)


def batched_lm(
    lc: np.ndarray,
    y: np.ndarray,
    theta0: np.ndarray,
    free: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    max_iter: int = 200,
    ftol: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise ``sum((model - y)^2)`` for K problems at once.

    lc (K, n) or (n,), y (K, n), theta0 (K, 4); free (4,) bool marks the fitted
    parameters; lower/upper (4,) are box bounds, enforced by projecting each step.
    Marquardt damping (diagonal of J^T J) is adapted per problem; a problem stops when
    an accepted step lowers the SSE by a relative ``ftol`` or less, or when no damped
    step can lower it any more (a minimum, possibly on a bound).
    The problems are independent, so they are solved in chunks of ``chunk_rows(n,
    LM_ROW_ARRAYS)``: the Jacobian (k, n, 4) of a chunk stays within ``CHUNK_BYTES``.
    Returns theta (K, 4), sse (K,), converged (K,) bool.
    """
    y = np.asarray(y, dtype=float)
    lc = np.broadcast_to(np.asarray(lc, dtype=float), y.shape)
    theta0 = np.asarray(theta0, dtype=float)
    rows = chunk_rows(y.shape[-1], LM_ROW_ARRAYS)
    if y.shape[0] <= rows:
        return _lm(lc, y, theta0, free, lower, upper, max_iter, ftol)
    parts = [_lm(lc[c], y[c], theta0[c], free, lower, upper, max_iter, ftol)
             for c in chunks(y.shape[0], rows)]
    return tuple(np.concatenate(arrays) for arrays in zip(*parts))


def _lm(lc, y, theta0, free, lower, upper, max_iter: int, ftol: float):
    """``batched_lm`` on one chunk: lc, y (k, n), theta0 (k, 4)."""
    theta = np.clip(np.array(theta0, dtype=float), lower, upper)
    idx = np.flatnonzero(free)
    p = idx.size
    resid = model(theta, lc) - y
    sse = np.einsum("kn,kn->k", resid, resid)
    lam = np.full(theta.shape[0], 1e-3)
    done = ~np.isfinite(sse) | (p == 0)
    converged = done & (p == 0)
    eye = np.eye(p)
    for _ in range(max_iter):
        act = np.flatnonzero(~done)
        if act.size == 0:
            break
        th, r, l_a = theta[act], resid[act], lam[act]
        J = jacobian(th, lc[act])[..., idx]  # (k, n, p)
        JTJ = np.einsum("kni,knj->kij", J, J)
        g = np.einsum("kni,kn->ki", J, r)
        diag = np.maximum(np.einsum("kii->ki", JTJ), 1e-12)
        M = JTJ + (l_a[:, None] * diag)[:, :, None] * eye
        step = -np.linalg.solve(M, g[..., None])[..., 0]
        new = th.copy()
        new[:, idx] = np.clip(th[:, idx] + np.nan_to_num(step), lower[idx], upper[idx])
        r_new = model(new, lc[act]) - y[act]
        sse_new = np.einsum("kn,kn->k", r_new, r_new)
        better = sse_new < sse[act]
        gain = (sse[act] - sse_new) / np.maximum(sse[act], 1e-300)
        # Accept improving steps; trust the quadratic model more after success.
        acc = act[better]
        theta[acc], resid[acc], sse[acc] = new[better], r_new[better], sse_new[better]
        lam[act] = np.where(better, np.maximum(l_a / 3.0, 1e-12), l_a * 4.0)
        stop = (better & (gain <= ftol)) | (~better & (lam[act] > 1e10)) | (sse[act] == 0)
        done[act[stop]] = True
        converged[act[stop]] = True
    return theta, sse, converged


def profile_grid(
    lc: np.ndarray,
    y: np.ndarray,
    b_values: np.ndarray,
    m_values: np.ndarray,
    *,
    a_fixed: float | None,
    r0_fixed: float | None,
    a_bounds: tuple[float, float],
    r0_bounds: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray]:
    """SSE over a (B, m) grid with A and/or R0 profiled out in closed form.

    lc, y (n,); b_values (nb,), m_values (nm,). For fixed (B, m) the model is linear in
    A and R0 with basis (s, 1 - s), so their least-squares values are a 1x1 or 2x2 solve;
    they are then clipped into their bounds (exact for one free coefficient, a good seed
    for two). The nb * nm cells are computed in chunks of ``chunk_rows(n,
    GRID_ROW_ARRAYS)``, so no (nb, nm, n) array is ever built.
    Returns theta (nb, nm, 4) and sse (nb, nm).
    """
    B, m = np.meshgrid(b_values, m_values, indexing="ij")  # (nb, nm) each
    b_cells, m_cells = B.ravel(), m.ravel()
    A, R0, sse = (np.empty(b_cells.size) for _ in range(3))
    for c in chunks(b_cells.size, chunk_rows(np.size(lc), GRID_ROW_ARRAYS)):
        A[c], R0[c], sse[c] = _profile_cells(lc, y, b_cells[c], m_cells[c], a_fixed, r0_fixed,
                                             a_bounds, r0_bounds)
    theta = np.stack([A.reshape(B.shape), B, m, R0.reshape(B.shape)], axis=-1)
    return theta, sse.reshape(B.shape)


def _profile_cells(lc, y, b, m, a_fixed, r0_fixed, a_bounds, r0_bounds):
    """Closed-form A, R0 and the SSE of the cells (b[j], m[j]): b, m (k,) -> three (k,)."""
    s = expit(b[:, None] * (lc - m[:, None]))  # (k, n)
    t = 1.0 - s
    if a_fixed is None and r0_fixed is None:
        ss, tt, st = (s * s).sum(-1), (t * t).sum(-1), (s * t).sum(-1)
        sy, ty = (s * y).sum(-1), (t * y).sum(-1)
        det = ss * tt - st * st
        safe = np.abs(det) > 1e-12 * np.maximum(ss * tt, 1e-300)
        det = np.where(safe, det, 1.0)
        A = np.where(safe, (tt * sy - st * ty) / det, y.mean())
        R0 = np.where(safe, (ss * ty - st * sy) / det, y.mean())
    elif a_fixed is None:
        R0 = np.full(b.shape, r0_fixed)
        A = r0_fixed + (s * (y - r0_fixed)).sum(-1) / np.maximum((s * s).sum(-1), 1e-300)
    elif r0_fixed is None:
        A = np.full(b.shape, a_fixed)
        R0 = (t * (y - a_fixed * s)).sum(-1) / np.maximum((t * t).sum(-1), 1e-300)
    else:
        A, R0 = np.full(b.shape, a_fixed), np.full(b.shape, r0_fixed)
    A = np.clip(A, *a_bounds)
    R0 = np.clip(R0, *r0_bounds)
    pred = R0[..., None] + (A - R0)[..., None] * s
    sse = ((pred - y) ** 2).sum(-1)
    return A, R0, sse
