"""Forecasts from a fit: reward at a budget, compute to reach a target, hold-out scoring."""

import json

import numpy as np
import pytest

from scalerl.fit import (
    CurveError,
    FitOptions,
    bootstrap,
    compute_to_reach,
    fit_sigmoid,
    holdout_forecast,
    predict_at,
    sigmoid,
)

from .conftest import make_curve


@pytest.fixture(scope="module")
def fit_and_boot():
    fit = fit_sigmoid(*make_curve(0.61, 1.92, 2542.0, seed=31))
    return fit, bootstrap(fit, 500, seed=0)


def test_predict_at_with_and_without_bootstrap(fit_and_boot):
    fit, boot = fit_and_boot
    value, lo, hi, pred_lo, pred_hi = predict_at(fit, 16000.0)
    assert value == pytest.approx(float(fit.predict(16000.0))) and np.isnan(lo) and np.isnan(hi)
    value, lo, hi, pred_lo, pred_hi = predict_at(fit, 16000.0, boot)
    assert lo < value < hi and hi - lo < 0.02 and np.isnan(pred_lo)  # a bootstrap has no predictive
    values, los, his, *_ = predict_at(fit, np.array([8000.0, 16000.0]), boot)
    assert values.shape == (2,) and (los < values).all() and (values < his).all()


def test_compute_to_reach_inverts_the_fit(fit_and_boot):
    fit, boot = fit_and_boot
    reach = compute_to_reach(fit, 0.55, boot)
    assert reach.reachable and fit.predict(reach.compute) == pytest.approx(0.55)
    assert reach.lo <= reach.compute <= reach.hi and reach.p_unreachable == 0.0


def test_target_at_or_above_a_is_unreachable_not_an_error(fit_and_boot):
    fit, boot = fit_and_boot
    reach = compute_to_reach(fit, fit.A + 0.01)
    assert not reach.reachable and reach.compute == np.inf and "asymptote" in reach.reason
    near = compute_to_reach(fit, fit.A - 1e-4, boot)  # some resamples have a lower A
    assert near.reachable and 0 < near.p_unreachable < 1 and near.hi == np.inf
    start = compute_to_reach(fit, fit.R0 - 0.01)
    assert start.reachable and start.compute == 0.0 and "zero compute" in start.reason


def test_holdout_forecast_on_an_exact_curve_has_no_error():
    C = np.linspace(0.0, 16000.0, 81)
    R = sigmoid(C, 0.61, 1.92, 2542.0, 0.3)
    hold = holdout_forecast(C, R)  # fit on <= 8k, forecast 8k..16k, as the LOO runs (§1.5)
    assert hold.fit_until == 8000.0 and hold.fit.compute.max() <= 8000.0
    assert hold.compute.size == 40 and hold.compute.min() > 8000.0
    assert hold.rmse < 1e-6 and hold.max_error < 1e-6 and abs(hold.final_error) < 1e-6
    assert hold.extrapolation_ratio == pytest.approx(2.0)


def test_holdout_forecast_scores_a_noisy_curve():
    C, R = make_curve(0.645, 1.70, 10909.0, seed=32)
    hold = holdout_forecast(C, R, fit_until=30000.0, options=FitOptions(min_compute=1500.0))
    assert hold.fit.compute.min() >= 1500.0 and hold.fit_until == 30000.0
    err = hold.predicted - hold.reward
    assert hold.rmse == pytest.approx(np.sqrt(np.mean(err**2)))
    assert hold.mae == pytest.approx(np.mean(np.abs(err)))
    assert hold.max_error == pytest.approx(np.abs(err).max()) and hold.final_error == err[-1]
    assert hold.rmse < 0.01  # noise is 0.005
    json.dumps(hold.to_dict())


def test_holdout_forecast_needs_points_to_forecast():
    C, R = make_curve(0.61, 1.92, 2542.0, seed=33)
    with pytest.raises(CurveError, match="nothing to forecast"):
        holdout_forecast(C, R, fit_until=C[-1], source="runs/a.csv")
    with pytest.raises(CurveError, match="fit_frac"):
        holdout_forecast(C, R, fit_frac=1.5)
