"""Bootstrap intervals (residual and case), their batching, chunking and coverage, and
pooled seeds."""

import numpy as np
import pytest

from scalerl.fit import (
    CurveError,
    FitOptions,
    bootstrap,
    fit_points,
    fit_sigmoid,
    pooled_fit,
    solver,
)

from .conftest import make_curve

TRUE = {"A": 0.61, "B": 1.92, "C_mid": 2542.0}


@pytest.fixture(scope="module")
def curve():
    return make_curve(TRUE["A"], TRUE["B"], TRUE["C_mid"], seed=11)


@pytest.fixture(scope="module")
def fit(curve):
    return fit_sigmoid(*curve)


@pytest.mark.parametrize("kind", ["residual", "case"])
def test_intervals_contain_truth_and_estimate(fit, kind):
    boot = bootstrap(fit, 1000, kind=kind, seed=1)
    assert boot.n_failed == 0 and boot.n_unconverged == 0 and boot.on_bound == {}
    assert set(boot.intervals) == {"A", "B", "C_mid"}  # R0 was fixed from step 0
    for name, (lo, hi) in boot.intervals.items():
        assert lo <= TRUE[name] <= hi and lo <= getattr(fit, name) <= hi
    assert boot.interval("A", level=0.5)[1] - boot.interval("A", level=0.5)[0] < (
        boot.intervals["A"][1] - boot.intervals["A"][0]
    )
    C = np.array([500.0, 2542.0, 15000.0, 30000.0])
    lo, hi = boot.band(C)
    assert lo.shape == C.shape and (lo <= fit.predict(C)).all() and (fit.predict(C) <= hi).all()


def test_bootstrap_accepts_data_and_is_seeded(curve):
    a = bootstrap(curve, 50, seed=3, kind="case")
    b = bootstrap(curve, 50, seed=3, kind="case")
    assert np.array_equal(a.samples, b.samples) and a.samples.shape == (50, 4)
    assert not np.array_equal(a.samples, bootstrap(curve, 50, seed=4, kind="case").samples)


def test_residual_refits_match_a_full_refit_of_each_resample(fit):
    # Reference: regenerate the same resamples and fit each from scratch with the full
    # fast fitter (grid + polish); the warm-started batched refits must land on the same fit.
    n, m = 20, fit.n_points
    boot = bootstrap(fit, n, kind="residual", seed=5)
    idx = np.random.default_rng(5).integers(0, m, size=(n, m))
    res = (fit.residuals - fit.residuals.mean()) * np.sqrt(m / (m - 3))
    for i in range(n):
        ref = fit_points(fit.compute, fit.predict(fit.compute) + res[idx[i]], r0=fit.R0)
        assert boot.samples[i, :3] == pytest.approx([ref.A, ref.B, ref.C_mid], rel=1e-5)


def test_1000_resamples_are_refitted_in_one_batched_solve(fit, monkeypatch):
    # The work, not the time: the resamples share one batched LM loop (chunked only past
    # solver.CHUNK_BYTES), not a fit each. How long 1000 take (~0.03 s) is a speed figure a
    # busy machine stretches; bench/fit_speed.py measures it.
    sizes, real = [], solver.batched_lm

    def spy(lc, y, *args, **kwargs):
        sizes.append(len(y))
        return real(lc, y, *args, **kwargs)

    monkeypatch.setattr(solver, "batched_lm", spy)
    for kind in ("residual", "case"):
        sizes.clear()
        assert bootstrap(fit, 1000, kind=kind, seed=0).n == 1000
        assert sizes == [1000]


@pytest.mark.parametrize("kind", ["residual", "case"])
def test_bootstrap_in_one_resample_chunks_equals_one_batch(fit, monkeypatch, kind):
    whole = bootstrap(fit, 40, kind=kind, seed=2)
    monkeypatch.setattr(solver, "CHUNK_BYTES", 1)  # one resample per chunk
    chunked = bootstrap(fit, 40, kind=kind, seed=2)
    assert chunked.samples.shape == whole.samples.shape
    assert np.allclose(chunked.samples, whole.samples, rtol=0, atol=1e-12)
    assert (chunked.n_failed, chunked.n_unconverged, chunked.on_bound) == (
        whole.n_failed, whole.n_unconverged, whole.on_bound)


def test_fitted_r0_and_fixed_a_change_the_reported_intervals(curve):
    c, r = curve
    with_r0 = bootstrap(fit_sigmoid(c, r, r0="fit"), 200, seed=0)
    assert set(with_r0.intervals) == {"A", "B", "C_mid", "R0"}
    lo, hi = with_r0.intervals["R0"]
    assert lo <= 0.3 <= hi
    fixed = bootstrap(fit_sigmoid(c, r, fixed_A=0.61), 200, seed=0)
    assert "A" not in fixed.intervals and np.all(fixed.samples[:, 0] == 0.61)


def test_bootstrap_rejects_bad_arguments(fit):
    with pytest.raises(CurveError, match="unknown bootstrap kind"):
        bootstrap(fit, 10, kind="jackknife")
    with pytest.raises(CurveError, match="0 < level < 1"):
        bootstrap(fit, 10, level=95)


def test_pooled_fit_reports_across_seed_spread():
    seeds = [make_curve(0.61, 1.92, 2542.0, seed=s) for s in (21, 22, 23)]
    pooled = pooled_fit(seeds)
    assert len(pooled.per_seed) == 3 and pooled.fit.n_points == 3 * 79
    assert pooled.fit.R0 == pytest.approx(0.3) and not pooled.fit.r0_fitted
    As = [f.A for f in pooled.per_seed]
    assert pooled.spread["A"] == pytest.approx((max(As) - min(As)) / 2)
    assert pooled.std["A"] == pytest.approx(np.std(As, ddof=1))
    assert pooled.spread["A"] < 0.02  # the paper's margin came out at +-0.015 (§1.4)
    assert abs(pooled.fit.A - 0.61) < 0.005 and set(pooled.to_dict()) >= {"pooled", "spread"}
    with pytest.raises(CurveError, match="at least 2 seeds"):
        pooled_fit(seeds[:1])


def test_a_pooled_fit_of_long_seeds_is_binned_and_says_so():
    seeds = [make_curve(0.61, 1.92, 2542.0, seed=s, n=3001, sigma=0.02) for s in (31, 32, 33)]
    pooled = pooled_fit(seeds, FitOptions(max_points=1500))
    # each seed: 3000 fit points in 1500 means of 2; pooled: 3 x 1500 in 1500 means of 3
    assert [f.binned_from for f in pooled.per_seed] == [3000] * 3
    assert pooled.fit.binned_from == 4500 and pooled.fit.n_points == 1500
    assert "1500 means of consecutive points of the 4500 given" in pooled.fit.message
    assert pooled.to_dict()["pooled"]["binned_from"] == 4500
    assert abs(pooled.fit.A - 0.61) < 0.01
    unbinned = pooled_fit(seeds, FitOptions(max_points=None))
    assert unbinned.fit.binned_from is None and unbinned.fit.n_points == 9000


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["residual", "case"])
def test_nominal_95_interval_covers_true_a_in_90_of_100_repeats(kind):
    covered = 0
    for rep in range(100):
        c, r = make_curve(0.61, 1.92, 2542.0, seed=1000 + rep)
        lo, hi = bootstrap((c, r), 1000, kind=kind, seed=rep).intervals["A"]
        covered += lo <= 0.61 <= hi
    assert covered >= 90
