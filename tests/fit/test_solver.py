"""The vectorised numerics against plain references: finite differences, scipy's
least_squares, and a brute-force scan."""

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
