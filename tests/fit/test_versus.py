"""scalerl.fit.versus: a run against a baseline, by hand.

The parameters' gaps: Δ = v - b with the half-widths added in quadrature, each side from the
matching sides of the two intervals; the forecasts' gap: quantiles of the difference of
independently paired draws."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from scalerl.fit.versus import forecast_gap, parameter_gaps


@dataclass
class _Fit:  # the two attributes parameter_gaps reads of a RunFit
    fit: SimpleNamespace
    intervals: dict
    identified: bool = True


def test_the_parameter_gaps_add_the_half_widths_in_quadrature():
    run = _Fit(SimpleNamespace(A=0.70, B=1.6, C_mid=2.0), {"A": (0.66, 0.72), "B": (1.2, 2.2), "C_mid": (1.5, 3.0)})
    base = _Fit(SimpleNamespace(A=0.60, B=1.5, C_mid=1.0), {"A": (0.57, 0.64), "B": (1.1, 1.8), "C_mid": (0.8, 1.3)})
    g = parameter_gaps(run, base)
    # ΔA = 0.10; lower: 0.10 - hypot(0.70 - 0.66, 0.64 - 0.60) = 0.10 - hypot(0.04, 0.04); upper: 0.10 + hypot(0.02, 0.03)
    assert g["A"]["value"] == pytest.approx(0.10)
    assert g["A"]["lo"] == pytest.approx(0.10 - math.sqrt(0.04**2 + 0.04**2))
    assert g["A"]["hi"] == pytest.approx(0.10 + math.sqrt(0.02**2 + 0.03**2))
    assert g["C_mid"]["lo"] == pytest.approx(1.0 - math.hypot(0.5, 0.3)) and g["C_mid"]["hi"] == pytest.approx(1.0 + math.hypot(1.0, 0.2))


def test_a_ceiling_either_run_cannot_pin_gives_no_interval_for_its_gap():
    run = _Fit(SimpleNamespace(A=0.70, B=1.6, C_mid=2.0), {"A": (0.6, 1.0), "B": (1.2, 2.2), "C_mid": (1.5, 3.0)},
               identified=False)  # fmt: skip
    base = _Fit(SimpleNamespace(A=0.60, B=1.5, C_mid=1.0), {"A": (0.57, 0.64), "B": (1.1, 1.8), "C_mid": (0.8, 1.3)})
    g = parameter_gaps(run, base)
    assert g["A"]["lo"] is None and g["A"]["hi"] is None and "cannot pin" in g["A"]["why"]
    assert g["B"]["lo"] is not None  # the other parameters keep theirs


def _forecast(mean: float, sd: float, n: int = 4000):
    """A forecast whose draws at any compute are N(mean, sd), as stratified quantiles in order."""
    q = mean + sd * stats.norm.ppf((np.arange(n) + 0.5) / n)
    return SimpleNamespace(draws_at=lambda C: q)


def test_the_forecasts_gap_is_the_difference_of_independent_draws():
    # N(0.6, 0.03) - N(0.5, 0.04) = N(0.1, 0.05): median 0.1, 95% interval 0.1 -/+ 1.96 x 0.05, P(> 0) = Phi(2)
    g = forecast_gap(_forecast(0.6, 0.03), _forecast(0.5, 0.04), at=1.0, level=0.95)
    assert g["median"] == pytest.approx(0.1, abs=0.004)
    assert g["lo"] == pytest.approx(0.1 - 1.96 * 0.05, abs=0.006) and g["hi"] == pytest.approx(0.1 + 1.96 * 0.05, abs=0.006)
    assert g["p_above"] == pytest.approx(stats.norm.cdf(2.0), abs=0.01)
    assert forecast_gap(SimpleNamespace(draws_at=lambda C: None), _forecast(0.5, 0.04), at=1.0, level=0.95) is None
