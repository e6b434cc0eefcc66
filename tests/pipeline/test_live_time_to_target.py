"""The live forecast's time to target: hours and P(reach by the run's end) at every evaluation
when ``forecast.target`` is set, read off the run's one forecast, and the early stop on that
probability."""

from __future__ import annotations

import numpy as np
import pytest
from test_live_forecast import _fields

from scalerl.config import ConfigError, load_config
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.law import sigmoid
from scalerl.fit.options import FitOptions
from scalerl.live_forecast import LiveForecast


def _run(n: int = 30):
    """An Eq. 1 curve evaluated every 10 of n*10 steps; 2 devices, 36 s a step."""
    wall = np.arange(0, n * 10 + 1) * 36.0
    compute = 2.0 * wall / 3600.0
    evals = np.arange(0, compute.size, 10)
    rng = np.random.default_rng(0)
    reward = sigmoid(compute[evals], 0.7, 1.5, 2.0, 0.3) + np.r_[0.0, 0.01 * rng.standard_normal(evals.size - 1)]
    return compute[evals], reward, list(zip(compute, wall))


def test_the_fields_bracket_the_median_and_the_budget_sets_p_reach():
    compute, reward, clock = _run()
    cfg = load_config("scalerl", ["forecast.target=0.67"])
    fields = _fields(compute, reward, 20.0, 300, cfg.forecast, "val_pass_rate", clock)
    assert "forecast_error" not in fields, fields
    med, lo, hi = (fields[f"forecast_time_to_target_h{s}"] for s in ("", "_lo", "_hi"))
    assert lo <= med and (hi is None or med <= hi)
    assert med > 3.0  # beyond the 3 h run so far (the true curve reaches 0.67 at 5.3 h)
    assert 0.0 < fields["forecast_p_reach"] <= 1.0  # within 10 h (20 device-hours on 2 devices)
    short = _fields(compute, reward, float(compute[-1]) * 1.01, 300, cfg.forecast, "val_pass_rate", clock)
    assert short["forecast_p_reach"] < fields["forecast_p_reach"]


def test_too_few_timed_records_keep_the_rest_of_the_forecast():
    compute, reward, clock = _run()
    cfg = load_config("scalerl", ["forecast.target=0.67"])
    fields = _fields(compute, reward, 20.0, 300, cfg.forecast, "val_pass_rate", clock[:2])
    assert "forecast_A" in fields and "forecast_p_reach" in fields and "forecast_time_to_target_h" not in fields


def test_the_stop_on_p_reach_fires_below_its_floor_only():
    with pytest.raises(ConfigError, match="stop_if_p_reach_below needs forecast.target"):
        load_config("scalerl", ["train.stop_if_p_reach_below=0.1"])
    cfg = load_config("scalerl", ["forecast.target=0.7", "train.stop_if_p_reach_below=0.1"])
    live = LiveForecast(cfg)
    assert "below train.stop_if_p_reach_below = 0.1" in live.stop_reason({"forecast_p_reach": 0.04})
    assert live.stop_reason({"forecast_p_reach": 0.5}) is None
    assert live.stop_reason({"forecast_p_reach": None}) is None
    live.close()


def test_observe_keeps_every_records_compute_and_wall_time():
    cfg = load_config("scalerl", ["forecast.enabled=false"])
    live = LiveForecast(cfg, past=[{"step": 0, "compute_gpu_hours": 0.0, "wall_s": 0.5, "val_pass_rate": 0.3}])
    live.observe({"step": 1, "compute_gpu_hours": 0.01, "wall_s": 18.0})
    assert live.clock == [(0.0, 0.5), (0.01, 18.0)]
    assert FitOptions().level == cfg.forecast.level
    live.close()


def test_the_training_reward_is_collected_and_followed():
    cfg = load_config("scalerl", ["forecast.enabled=false"])
    live = LiveForecast(cfg, past=[{"step": 1, "compute_gpu_hours": 0.01, "wall_s": 18.0, "reward_mean": 0.25}])
    live.observe({"step": 2, "compute_gpu_hours": 0.02, "wall_s": 36.0, "reward_mean": 0.5})
    live.observe({"step": 3, "compute_gpu_hours": 0.03, "wall_s": 54.0})  # a step that logged no reward
    assert live.trained == [(0.01, 0.25), (0.02, 0.5)]
    live.close()
    # a run whose training reward (dense, GAP above) rises with its evaluations: the hours follow it
    compute, reward, clock = _run()
    trained = [(c, float(sigmoid(c, 0.7, 1.5, 2.0, 0.3)) + 0.05) for c, _ in clock[1:]]
    cfg = load_config("scalerl", ["forecast.target=0.67"])
    fields = _fields(compute, reward, 20.0, 300, cfg.forecast, "val_pass_rate", clock, trained)
    options = ForecastOptions(fit=FitOptions(max_points=200), budget=20.0)
    log = RunLog.of(compute, reward, train=trained, clock=clock)
    want = forecast_of(log, options=options).reach(0.67)
    alone = forecast_of(log, options=options.with_(train_reward="none")).reach(0.67)
    assert fields["forecast_method"] == "training reward"
    assert [fields[k] for k in ("forecast_time_to_target_h", "forecast_time_to_target_h_lo")] == pytest.approx(
        list(want.hours[:2]), rel=1e-12)
    assert fields["forecast_p_reach"] == pytest.approx(want.p_within) and want.hours != alone.hours
