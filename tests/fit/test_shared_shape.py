"""scalerl.fit.shared_shape: the one shape fitted to a study's points, and the pairing it gives
``choose.p_best``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from scalerl.fit import law
from scalerl.fit.choose import Standing, p_best, replay, shape_pairing
from scalerl.fit.forecast import RunLog
from scalerl.fit.shared_shape import (
    B_GRID,
    MAX_BINS,
    MID_POINTS,
    MID_SPAN,
    ONE_SHAPE_P,
    REPLICATES,
    fit_shared_shape,
    ranks,
)


def _points(budget: float, cut: float, n: int, heads: list[tuple[float, float]], b: float, mid: float,
            sd: float, seed: int = 0):  # fmt: skip
    rng = np.random.default_rng(seed)
    c = np.linspace(cut / n, cut, n)
    return [(c, law.sigmoid(c, a, b, mid, r0) + rng.normal(0, sd, n)) for a, r0 in heads]


def test_the_shared_shape_is_found_within_one_step_of_its_grid():
    # Three points of one shape (B 1.5, C_mid 300) with their own start and ceiling, seen to
    # past the midpoint: the grid's steps are 10**(log10(50)/39) = 1.105 for B and
    # (MID_SPAN[1] / MID_SPAN[0]) ** (1 / 47) = 1.158 for C_mid.
    curves = _points(1000.0, 800.0, 60, [(0.8, 0.1), (0.6, 0.2), (0.5, 0.05)], 1.5, 300.0, 0.005)
    fit = fit_shared_shape(curves, 1000.0, replicates=50)
    b_step = B_GRID[1] / B_GRID[0]
    mid_step = (MID_SPAN[1] / MID_SPAN[0]) ** (1 / (MID_POINTS - 1))
    assert 1.5 / b_step <= fit.b <= 1.5 * b_step
    assert 300 / mid_step <= fit.c_mid <= 300 * mid_step
    # each point's line: R0_i and A_i - R0_i, to the noise over 60 points and the grid's step
    assert fit.lines == pytest.approx(np.array([[0.1, 0.7], [0.2, 0.4], [0.05, 0.45]]), abs=0.05)
    assert fit.at_budget.shape == (50, 3)


def test_points_of_one_shape_seen_before_its_midpoint_move_together():
    # Cut at a third of the midpoint, the shape is unsure; every replicate draws one shape for
    # all three points, so their values at the budget rise and fall together.
    curves = _points(1000.0, 100.0, 40, [(0.8, 0.1), (0.7, 0.1), (0.6, 0.1)], 1.5, 300.0, 0.01)
    q = ranks(fit_shared_shape(curves, 1000.0))
    corr = np.corrcoef(q.T)[np.triu_indices(3, 1)]
    assert corr.min() > 0.5
    assert q.min() > 0 and q.max() < 1
    assert np.allclose(np.sort(q[:, 0]), (np.arange(q.shape[0]) + 0.5) / q.shape[0])  # a rank is a quantile


def test_a_long_curve_is_fitted_from_its_consecutive_means():
    curves = _points(1000.0, 800.0, 5 * MAX_BINS, [(0.8, 0.1), (0.6, 0.2)], 1.5, 300.0, 0.005)
    fit = fit_shared_shape(curves, 1000.0, replicates=20)
    assert fit.lines == pytest.approx(np.array([[0.1, 0.7], [0.2, 0.4]]), abs=0.05)
    # the same fit as from the means of 5 consecutive evaluations, given as the curve: the two
    # ways of taking a mean of 5 float64 terms differ by a few ulps (~1e-16 on values <= 1), and
    # a least-squares line through 100 points with g in [0, 1] amplifies that far less than 1e6x
    means = [(c.reshape(MAX_BINS, 5).mean(axis=1), y.reshape(MAX_BINS, 5).mean(axis=1)) for c, y in curves]
    binned = fit_shared_shape(means, 1000.0, replicates=20)
    assert (fit.b, fit.c_mid) == (binned.b, binned.c_mid)
    assert fit.lines == pytest.approx(binned.lines, abs=1e-10)
    assert fit.at_budget == pytest.approx(binned.at_budget, abs=1e-10)


def test_p_best_with_a_pairing_compares_the_points_at_the_same_quantile():
    # X ~ N(0.5, 0.1) and Y = X + 0.01 in distribution. Independent, P(X > Y) =
    # Phi(-0.01 / (0.1 sqrt 2)) = Phi(-0.0707) = 0.472. Paired at equal quantiles (the joint
    # fit says they move together), Y's draw is always the larger: P(X best) = 0.
    n = 4000
    u = stats.norm.ppf((np.arange(n) + 0.5) / n)
    x, y = Standing("x", 1.0, 0.5 + 0.1 * u, "fit"), Standing("y", 1.0, 0.51 + 0.1 * u, "fit")
    assert p_best([x, y])["x"] == pytest.approx(0.472, abs=0.02)
    same = np.tile(((np.arange(400) + 0.5) / 400)[:, None], (1, 2))
    assert p_best([x, y], pairing=same) == {"x": 0.0, "y": 1.0}
    # paired in opposite orders, the lower point wins whenever its quantile is the higher
    # by more than the gap: x's draw at q against y's at 1 - q, 0.1 (u_q - u_{1-q}) > 0.01
    # for q > Phi(0.05) = 0.520: P(x best) = 0.480.
    opposite = np.column_stack([same[:, 0], 1 - same[:, 0]])
    assert p_best([x, y], pairing=opposite)["x"] == pytest.approx(0.48, abs=0.01)


def test_a_shared_shape_replay_records_its_pairing_and_keeps_the_papers_late_winner():
    # Table 1's batch sizes (digest §5): bs512 leads early, bs2048 wins at the budget. The joint
    # pairing must not stop the late winner.
    from scalerl.fit.paper import TABLE1

    fits = {p.name: p for p in TABLE1}
    c = np.linspace(1e5 / 48, 1e5, 48)
    rng = np.random.default_rng(0)
    logs = [RunLog.of(c, np.clip(law.sigmoid(c, fits[k].A, fits[k].B, fits[k].C_mid, 0.0) + rng.normal(0, 0.01, 48),
                                 0, 1), name=k) for k in ("ScaleRL-bs512", "ScaleRL-bs2048")]  # fmt: skip
    out = replay(logs, 1e5, pairing="shared-shape")
    assert out.to_dict()["pairing"] == "shared-shape"
    assert "ScaleRL-bs2048" not in {s["point"] for s in out.stopped}


def test_points_of_two_shapes_are_told_apart_and_paired_independently():
    # One point bends at C_mid 100, the other at 1000 (Table 1's bs512 against bs2048 is 4x):
    # no one shape fits both to their noise, and the study pairs them independently.
    c = np.linspace(20.0, 2000.0, 40)
    rng = np.random.default_rng(1)
    early = law.sigmoid(c, 0.6, 1.5, 100.0, 0.0) + rng.normal(0, 0.01, c.size)
    late = law.sigmoid(c, 0.65, 1.5, 1000.0, 0.0) + rng.normal(0, 0.01, c.size)
    assert fit_shared_shape([(c, early), (c, late)], 4000.0, replicates=20).p_one < ONE_SHAPE_P
    assert shape_pairing([RunLog.of(c, early, name="a"), RunLog.of(c, late, name="b")], 4000.0) is None
    # three points of one shape pass the test (its p-value is about uniform under one shape;
    # these draws give 0.75, far from the level), and get a pairing
    same = _points(1000.0, 800.0, 60, [(0.8, 0.1), (0.6, 0.2), (0.5, 0.05)], 1.5, 300.0, 0.01, seed=0)
    assert fit_shared_shape(same, 1000.0, replicates=20).p_one > 4 * ONE_SHAPE_P
    logs = [RunLog.of(c_, y_, name=str(i)) for i, (c_, y_) in enumerate(same)]
    assert shape_pairing(logs, 1000.0).shape == (REPLICATES, 3)
