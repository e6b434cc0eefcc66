"""Runs that look flat may rise later (``fit.forecast.late``): the cases weigh by the share of
the budget and by how long the run has been flat, and a log flat for its whole length is read
as the finished runs flat for as long (reliability probe, case 13)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.late import BANDWIDTH, late_risers


def _table(tmp_path, cases):
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps({"late_risers": {"cases": cases}}))
    return path


def test_the_cases_weigh_by_how_long_the_run_has_been_flat_by_hand(tmp_path):
    rose = {"share": 0.3, "evals": 5, "level": 0.1, "path": [[1.5, 0.2]]}
    stayed = {"share": 0.3, "evals": 20, "level": 0.1, "path": [[1.5, 0.0]]}
    path = _table(tmp_path, [rose] * 5 + [stayed] * 5)
    lr = late_risers(None, path, evals=20)  # no budget: only the flat length weighs
    # each weight exp(-ln(e_case / 20)^2 / (2 x 0.35^2)): ln 4 = 1.386 -> exp(-7.85) for the risers
    w_rose = np.exp(-np.log(5 / 20) ** 2 / (2 * BANDWIDTH**2))
    assert lr.p_rise == pytest.approx(5 * w_rose / (5 * w_rose + 5))
    assert late_risers(None, path, evals=5).p_rise == pytest.approx(5 / (5 + 5 * w_rose))
    assert late_risers(0.3, path).p_rise == pytest.approx(0.5)  # the share alone: no length


def test_a_log_flat_for_its_whole_length_is_read_as_the_runs_flat_for_as_long():
    """A validation at 0.125 for 900 steps (19 evaluations), no budget: P(reach 0.2) was 0.50,
    read as a run flat at a tenth of its horizon beside cases that rose from there."""
    rng = np.random.default_rng(0)
    c, y = np.linspace(0.001, 0.3, 19), 0.125 + rng.normal(0, 0.008, 19)
    long = forecast_of(RunLog.of(c, y), options=ForecastOptions())
    short = forecast_of(RunLog.of(c[:6], y[:6]), options=ForecastOptions())
    assert long.state.name == short.state.name == "not_learning" and long.method == "late risers"
    p_long, p_short = long.reach(0.2).p_at_all, short.reach(0.2).p_at_all
    assert p_long < p_short and p_long < 0.5  # 0.20 against 0.34 on the shipped table
