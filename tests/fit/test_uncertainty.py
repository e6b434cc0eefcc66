"""Honest intervals: the identifiability verdict, the profile against plain refits, the
noise model, calibration, coverage on synthetic curves and budget advice."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.fit import FitOptions, assess, fit_sigmoid, sigmoid
from scalerl.fit.budget import budget_to_pin_A
from scalerl.fit.calibrate import rolling_origin
from scalerl.fit.noise import RHO_MIN, estimate_noise
from scalerl.fit.uncertainty import inference_fit, model_uncertainty

GRID = np.arange(0.0, 16001.0, 200.0)  # an evaluation every 200 GPU-hours, as the paper


def curve(A=0.61, B=1.9, C_mid=2500.0, R0=0.3, sigma=0.01, seed=0, upto=16000.0):
    rng = np.random.default_rng(seed)
    c = GRID[GRID <= upto]
    return c, np.clip(sigmoid(c, A, B, C_mid, R0) + rng.normal(0, sigma, c.size), 0, 1)


def test_a_ceiling_out_of_reach_of_the_data_is_not_identified():
    c, r = curve(A=0.65, C_mid=40000.0, seed=1)  # the data end at 40% of C_mid
    unc = assess(fit_sigmoid(c, r))
    lo, hi = unc.A_plausible
    assert not unc.identified and hi == pytest.approx(1.0) and hi - lo > 0.2
    assert unc.verdict.startswith("ceiling not identified: any A in [")
    assert "rest on the shape alone" in unc.verdict


def test_a_well_covered_curve_is_identified_and_its_interval_holds_the_true_A():
    c, r = curve(A=0.61, C_mid=1500.0, sigma=0.005, seed=2)  # the data reach ~10 x C_mid
    unc = assess(fit_sigmoid(c, r))
    lo, hi = unc.A_plausible
    assert unc.identified and lo <= 0.61 <= hi and hi - lo <= 0.04
    assert unc.verdict.startswith("ceiling identified")
    assert unc.to_dict()["identified"] is True


def test_profile_interval_agrees_with_plain_fixed_A_refits():
    """The batched profile against fit_sigmoid(fixed_A=...) on the same points: inside the
    interval a refit is within the threshold, a little outside it is not."""
    c, r = curve(seed=3, upto=8000.0)
    unc = model_uncertainty(fit_sigmoid(c, r))
    data = unc.data  # the step-0 point back as data, R0 free
    lo, hi = unc.A_plausible
    limit = unc.profile.sse_min + unc.delta

    def sse_at(A):
        return fit_sigmoid(data.compute, data.reward, r0="fit", fixed_A=A).sse

    for A in np.linspace(lo, hi, 5)[1:-1]:
        assert sse_at(A) <= limit * (1 + 1e-6)
    step = 0.01
    if lo - step > r.min():
        assert sse_at(lo - step) > limit
    if hi + step < 1.0:
        assert sse_at(hi + step) > limit


def test_band_holds_the_fit_and_the_predictive_interval_holds_the_band():
    c, r = curve(seed=4, upto=8000.0)
    fit = fit_sigmoid(c, r)
    unc = assess(fit)
    C = np.array([4000.0, 8000.0, 16000.0])
    lo, hi = unc.band(C)
    plo, phi = unc.predictive(C)
    assert (lo <= fit.predict(C)).all() and (fit.predict(C) <= hi).all()
    assert (plo <= lo + 1e-12).all() and (hi <= phi + 1e-12).all()
    assert (hi - lo)[0] < (hi - lo)[2]  # wider where it extrapolates


def test_the_step0_evaluation_enters_the_intervals_as_data():
    c, r = curve(seed=5, upto=8000.0)
    fit = fit_sigmoid(c, r)
    assert not fit.r0_fitted and fit.r0_point == 0.0 and fit.n_points == c.size - 1
    data = inference_fit(fit)
    assert data.r0_fitted and data.n_points == c.size and data.compute[0] == 0.0
    given = fit_sigmoid(c, r, r0=0.3)  # a number the user knows: stays fixed
    assert inference_fit(given) is given


def test_noise_model_reads_ar1_correlation_and_never_claims_less_than_the_scatter():
    rng = np.random.default_rng(0)
    e = np.zeros(400)
    for i in range(1, e.size):
        e[i] = 0.7 * e[i - 1] + rng.normal(0, 0.01)
    noise = estimate_noise(e, p=3)
    assert noise.rho == pytest.approx(0.7, abs=0.08)
    assert noise.deff == pytest.approx((1 + noise.rho) / (1 - noise.rho))
    white = rng.normal(0, 0.02, 400)
    assert estimate_noise(white[:40], p=3).rho == RHO_MIN  # white noise reads the floor
    # residuals of an over-flexible fit are tiny; the evaluations' own scatter is not
    floor = estimate_noise(white * 0.01, p=3, reward=0.5 + white)
    assert floor.sigma == pytest.approx(0.02, rel=0.15)


def test_a_curve_too_short_to_calibrate_still_fits_and_says_why():
    c, r = curve(seed=6, upto=1400.0)  # 8 evaluations
    fit = fit_sigmoid(c, r)
    unc = assess(fit)
    assert not unc.calibration.calibrated and unc.calibration.scale == 1.0
    assert "not calibrated" in unc.calibration.message and "too few" in unc.calibration.message
    lo, hi = unc.predictive(np.array([16000.0]))
    assert lo[0] < hi[0]


def test_calibration_widens_and_never_narrows():
    c, r = curve(seed=7, upto=8000.0)
    fit = fit_sigmoid(c, r)
    unc = model_uncertainty(fit)
    cal = rolling_origin(fit, noise=unc.noise, horizon=2.0, level=0.95)
    assert cal.calibrated and cal.scale >= 1.0 and cal.n_origins >= 2 and cal.n_scores >= 4


def test_predictive_intervals_cover_held_out_points_on_synthetic_curves():
    """A small version of bench/forecast_calibration.py: fit on half, score the rest."""
    covered = []
    for seed in range(10):
        c, r = curve(A=0.55 + 0.02 * seed, B=1.5 + 0.1 * seed, sigma=0.015, seed=100 + seed)
        k = c <= 8000.0
        unc = assess(fit_sigmoid(c[k], r[k]), horizon=2.0)
        lo, hi = unc.predictive(c[~k])
        covered.append((r[~k] >= lo) & (r[~k] <= hi))
    assert np.mean(np.concatenate(covered)) >= 0.88  # nominal 0.95


def test_budget_advice():
    c, r = curve(A=0.61, C_mid=1500.0, sigma=0.005, seed=2)
    assert budget_to_pin_A(assess(fit_sigmoid(c, r))) == 1.0  # already pinned
    k = c <= 4000.0
    partial = assess(fit_sigmoid(c[k], r[k]))
    assert not partial.identified
    multiple = budget_to_pin_A(partial, n_sims=4)
    assert multiple is not None and 1.0 < multiple <= 16.0
    c, r = curve(A=0.65, C_mid=400000.0, sigma=0.02, seed=1, upto=2000.0)  # a ceiling far away
    assert budget_to_pin_A(assess(fit_sigmoid(c, r)), n_sims=2) is None


def test_options_validate_their_values():
    with pytest.raises(ValueError, match="level must lie in"):
        FitOptions(level=95)
    with pytest.raises(ValueError, match="margin must be 0 or more"):
        FitOptions(margin=-0.1)


def test_a_falling_curve_is_never_an_identified_ceiling():
    c, r = curve(A=0.20, R0=0.45, C_mid=1500.0, sigma=0.005, seed=8)  # a collapsing run
    unc = assess(fit_sigmoid(c, r))
    assert unc.falling and not unc.identified
    assert "the curve falls" in unc.verdict


def test_every_interval_holds_its_own_estimate_even_for_a_paper_grid_fit():
    c, r = curve(A=0.9, C_mid=2500.0, sigma=0.005, seed=9)  # A beyond the paper grid's 0.80
    fit = fit_sigmoid(c, r, method="paper")
    unc = assess(fit)
    for name in ("A", "B", "C_mid"):
        lo, hi = unc.interval(name)
        assert lo <= getattr(fit, name) <= hi, name
    assert unc.A_plausible[1] > 0.8  # the region searched the whole box, not the grid


def test_the_forecasts_crossing_interval_holds_its_median():
    """The compute to a target is the ``Forecast``'s crossing (``forecast.reach``), whose
    interval holds its own median: the law's band has no second reading of it."""
    from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of

    c, r = curve(seed=10, upto=8000.0)
    f = forecast_of(RunLog.of(c, r), options=ForecastOptions(window=0))
    mid = f.reach(0.5 * (float(r[0]) + f.fit.A))
    med, lo, hi = mid.compute
    assert lo <= med <= hi
