"""The vectorised numerics against plain references: finite differences, scipy's
least_squares, a brute-force scan, and the same work in one-row chunks."""

import numpy as np
import pytest
from scipy.optimize import least_squares

from scalerl.fit import solver


def test_model_is_eq1_and_jacobian_matches_finite_differences():
    lc = np.array([-np.inf, *np.log([0.1, 0.5, 1.0, 3.0])])  # step 0 has log C = -inf
    theta = np.array([0.61, 1.92, np.log(0.4), 0.3])
    pred = solver.model(theta, lc)
    # At C = C_mid (lc = m) the model is halfway: (0.61 + 0.3) / 2
    assert solver.model(theta, np.array([np.log(0.4)]))[0] == pytest.approx(0.455)
    assert pred[0] == 0.3
    J = solver.jacobian(theta, lc)
    h = 1e-7
    for i in range(4):
        step = np.zeros(4)
        step[i] = h
        fd = (solver.model(theta + step, lc) - solver.model(theta - step, lc)) / (2 * h)
        assert J[:, i] == pytest.approx(fd, abs=1e-7)
    assert np.isfinite(J).all()


def test_batched_lm_matches_least_squares_per_problem():
    rng = np.random.default_rng(0)
    lc = np.log(np.linspace(0.02, 1.0, 60))
    truth = np.array([0.61, 1.9, np.log(0.25), 0.3])
    y = solver.model(truth, lc) + rng.normal(0, 0.005, (8, 60))
    free = np.array([True, True, True, False])
    lower, upper = np.array([0, 0.01, -10, 0]), np.array([1, 50, 10, 1.0])
    theta, sse, conv = solver.batched_lm(lc, y, np.tile(truth, (8, 1)), free, lower, upper)
    assert conv.all()
    for k in range(8):
        ref = least_squares(
            lambda x, k=k: solver.model(np.append(x, 0.3), lc) - y[k],
            truth[:3],
            xtol=1e-14,
            ftol=1e-14,
        )
        assert theta[k, :3] == pytest.approx(ref.x, rel=1e-6)
        assert sse[k] == pytest.approx(2 * ref.cost, rel=1e-9)


def test_profile_grid_closed_form_a_is_the_best_a():
    lc = np.log(np.linspace(0.05, 1.0, 40))
    y = solver.model(np.array([0.6, 2.0, np.log(0.3), 0.3]), lc) + 0.01 * np.sin(np.arange(40))
    theta, sse = solver.profile_grid(
        lc, y, np.array([1.5, 2.5]), np.array([np.log(0.2), np.log(0.4)]),
        a_fixed=None, r0_fixed=0.3, a_bounds=(0.0, 1.0), r0_bounds=(0.0, 1.0),
    )  # fmt: skip
    for i, j in np.ndindex(2, 2):
        scan = np.linspace(0.0, 1.0, 100001)
        cand = np.array([[a, theta[i, j, 1], theta[i, j, 2], 0.3] for a in scan[::100]])
        brute = ((solver.model(cand, lc) - y) ** 2).sum(-1)
        assert sse[i, j] <= brute.min() + 1e-12
        assert theta[i, j, 0] == pytest.approx(scan[::100][brute.argmin()], abs=1e-3)


def _grid_case(seed: int = 0, n: int = 120):
    rng = np.random.default_rng(seed)
    lc = np.append(-np.inf, np.log(np.linspace(0.02, 1.0, n)))  # a step-0 point too
    y = solver.model(np.array([0.6, 2.0, np.log(0.3), 0.3]), lc) + rng.normal(0, 0.01, lc.size)
    return lc, y


@pytest.mark.parametrize("a_fixed, r0_fixed", [(None, None), (None, 0.3), (0.6, None), (0.6, 0.3)])
def test_profile_grid_in_one_cell_chunks_equals_the_whole_grid(monkeypatch, a_fixed, r0_fixed):
    lc, y = _grid_case()
    b, m = np.geomspace(0.05, 20.0, 7), np.linspace(-4.0, 2.0, 9)
    kw = dict(a_fixed=a_fixed, r0_fixed=r0_fixed, a_bounds=(0.0, 1.0), r0_bounds=(0.0, 1.0))
    whole = solver.profile_grid(lc, y, b, m, **kw)
    assert solver.chunk_rows(lc.size, solver.GRID_ROW_ARRAYS) >= b.size * m.size  # one chunk
    monkeypatch.setattr(solver, "CHUNK_BYTES", 1)  # one cell per chunk
    assert solver.chunk_rows(lc.size, solver.GRID_ROW_ARRAYS) == 1
    chunked = solver.profile_grid(lc, y, b, m, **kw)
    for w, c in zip(whole, chunked):
        assert w.shape == c.shape and np.allclose(w, c, rtol=0, atol=1e-12)


def test_batched_lm_in_one_problem_chunks_equals_one_batch(monkeypatch):
    lc, y = _grid_case(n=60)
    rng = np.random.default_rng(1)
    Y = y + rng.normal(0, 0.01, (9, lc.size))
    theta0 = np.tile([0.6, 2.0, np.log(0.3), 0.3], (9, 1)) + rng.normal(0, 0.05, (9, 4))
    free = np.array([True, True, True, True])
    lower, upper = np.array([0, 0.01, -10, 0]), np.array([1, 10, 10, 1.0])
    whole = solver.batched_lm(lc, Y, theta0, free, lower, upper)
    monkeypatch.setattr(solver, "CHUNK_BYTES", 1)
    chunked = solver.batched_lm(lc, Y, theta0, free, lower, upper)
    for w, c in zip(whole, chunked):
        assert w.shape == c.shape and np.allclose(w, c, rtol=0, atol=1e-12)
    assert list(solver.chunks(5, 2)) == [slice(0, 2), slice(2, 4), slice(4, 5)]


def test_the_profile_moments_in_one_cell_chunks_equal_the_whole_grid(monkeypatch):
    from scalerl.fit import profile

    lc, y = _grid_case()
    Y = np.stack([y, y[::-1].copy()])  # two curves on one design
    lower, upper = np.array([0, 0.01, -8, 0.0]), np.array([1, 10, 8, 1.0])
    whole = profile._grid_sse(lc, Y, np.linspace(0.5, 0.8, 4), None, lower, upper)
    monkeypatch.setattr(solver, "CHUNK_BYTES", 1)
    chunked = profile._grid_sse(lc, Y, np.linspace(0.5, 0.8, 4), None, lower, upper)
    for w, c in zip(whole, chunked):
        assert np.shape(w) == np.shape(c) and np.allclose(w, c, rtol=0, atol=1e-12)
