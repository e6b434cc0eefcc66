"""Statistics between runs' forecasts (``fit.forecast.between``), by hand."""

import numpy as np
import pytest
from scipy import stats

from scalerl.fit.forecast.between import gap, p_beat, p_best


def _normal(mean, sd, n=4000):
    return mean + sd * stats.norm.ppf((np.arange(n) + 0.5) / n)


def test_the_gap_of_two_runs_is_the_difference_of_independent_draws():
    # N(0.6, 0.03) - N(0.5, 0.04) = N(0.1, 0.05): median 0.1, 95% interval 0.1 -/+ 1.96 x 0.05, P(> 0) = Phi(2)
    g = gap(_normal(0.6, 0.03), _normal(0.5, 0.04), 0.95)
    assert g["median"] == pytest.approx(0.1, abs=0.004) and g["p_above"] == pytest.approx(stats.norm.cdf(2.0), abs=0.01)
    assert g["lo"] == pytest.approx(0.1 - 1.96 * 0.05, abs=0.006)


def test_p_best_and_p_beat_by_hand():
    assert p_best([np.array([0.5])]) == [1.0]
    a, b = np.array([0.2, 0.2, 0.6, 0.6]), np.array([0.4, 0.4, 0.4, 0.4])  # a best in half its draws
    p = p_best([a, b], pairing=np.array([[0.0, 0.0], [0.3, 0.3], [0.6, 0.6], [0.9, 0.9]]))
    assert p == pytest.approx([0.5, 0.5])
    tie = p_best([np.full(4, 0.3), np.full(4, 0.3)])
    assert tie == pytest.approx([0.5, 0.5])  # ties shared
    assert p_beat(np.array([0.1, 0.5, 0.7, 0.9]), 0.6) == 0.5
