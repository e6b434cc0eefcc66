"""The early forecast (``fit.forecast.early``): before the sixth evaluation, the training reward
with the validation's offset from it; the drift of that offset read from finished runs; and a
run whose training reward shows no rise, or has too few points, still too few evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from scalerl.fit import law
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.companion import population_drift

NO_TABLE = Path("/nonexistent/population.json")


def _log(n_evals: int, *, rising: bool = True, steps: int = 80, seed: int = 0) -> RunLog:
    """Evaluations at the first ``n_evals`` of every 10 steps, the training reward every step:
    one sigmoid (A 0.8, B 1.5, C_mid 0.1), the validation 0.1 below it."""
    rng = np.random.default_rng(seed)
    c = np.linspace(0.005, 0.4, steps)  # compute of each step
    truth = law.sigmoid(c, 0.8, 1.5, 0.1, 0.2) if rising else np.full(c.size, 0.3)
    train = list(zip(c, truth + rng.normal(0, 0.03, c.size)))
    ev = c[::10][:n_evals]
    val = law.sigmoid(ev, 0.8, 1.5, 0.1, 0.2) - 0.1 if rising else np.full(ev.size, 0.2)
    return RunLog.of(ev, val + rng.normal(0, 0.01, ev.size), train=train).upto(float(ev[-1]))


def test_four_evaluations_and_a_rising_training_reward_give_an_early_forecast():
    log = _log(4)
    f = forecast_of(log, options=ForecastOptions(budget=0.4, population=NO_TABLE))
    assert f.state.name == "early" and f.method == "early" and f.supported
    assert f.state.message.startswith("early: from 4 evaluations of val_pass_rate and 31 training rewards")
    assert "2 more" in f.state.message and not f.calibrated  # no finished runs' offsets: said so
    assert "no finished runs' offsets" in f.uncalibrated
    for seed in range(3):  # the run's value at the budget, 2.6x the compute seen, lies in the interval
        at = forecast_of(_log(4, seed=seed), options=ForecastOptions(budget=0.4, population=NO_TABLE)).at(0.4)
        assert at.pred_lo <= law.sigmoid(0.4, 0.8, 1.5, 0.1, 0.2) - 0.1 <= at.pred_hi, (seed, at)
    assert np.isfinite(f.reach(0.5).p_within)


def test_below_what_anything_can_carry_the_state_stays_too_few_evaluations():
    for log, why in ((_log(2), "2 evaluations, below the 3"), (_log(4, rising=False), "no rise detected"),
                     (RunLog.of([0.0, 0.1, 0.2], [0.2, 0.3, 0.35]), "no training reward")):
        f = forecast_of(log, options=ForecastOptions(budget=1.0, population=NO_TABLE))
        assert f.state.name == "too_few_evaluations" and f.draws is None, f.why
        assert why in f.why


def _table(tmp_path, drifts, share=0.3):
    path = tmp_path / f"population-{len(list(tmp_path.iterdir()))}.json"  # a table is read once per path
    path.write_text(json.dumps({"offset_drift": {"cases": [{"family": "f", "run": f"r{i}", "share": share,
                                                            "drift": d} for i, d in enumerate(drifts)]}}))
    return path


def test_the_offsets_drift_from_finished_runs_by_hand(tmp_path):
    drifts = [0.01, 0.03, 0.05, 0.02, 0.04]
    d = population_drift(0.3, _table(tmp_path, drifts), 0.95)
    # equal weights: mean 0.03; sd 0.0158 x sqrt(1 + 1/5) x t_4(0.975) / z(0.975)
    sd = np.std(drifts, ddof=1) * np.sqrt(1.2) * stats.t.ppf(0.975, 4) / stats.norm.ppf(0.975)
    assert d.mean == pytest.approx(0.03) and d.sd == pytest.approx(sd) and d.n == 5
    assert population_drift(0.3, _table(tmp_path, drifts[:2]), 0.95) is None  # below MIN_DRIFTS


def test_the_drift_moves_the_early_forecast_and_widens_it(tmp_path):
    log = _log(4)
    plain = forecast_of(log, options=ForecastOptions(budget=1.0, population=NO_TABLE))
    table = _table(tmp_path, [0.05] * 4 + [0.05 + 1e-9], share=0.12)  # a drift of 0.05, sd about 0
    moved = forecast_of(log, options=ForecastOptions(budget=1.0, population=table))
    # the curve's draws are the same but for the offset: every band moves by the drift
    assert moved.at(0.8).value == pytest.approx(plain.at(0.8).value + 0.05, abs=1e-6)
    assert "moved by +0.050" in moved.state.message
