"""The budget advice (``fit.budget``): how much more compute would pin the ceiling."""

import numpy as np
import pytest

from scalerl.fit import assess, fit_sigmoid
from scalerl.fit.budget import BUDGET_MULTIPLES, block_noise, budget_to_pin_A

from .conftest import make_curve


def test_block_means_of_ar1_noise_by_hand():
    # t = 2, rho = 0.5: Var(mean) = s^2 / 2 (1 + 2 x 0.5 x 0.5) = 0.75 s^2; cov = s^2 0.5 (1.5)^2 / 4
    sd, rho = block_noise(1.0, 0.5, 2)
    assert sd == pytest.approx(np.sqrt(0.75)) and rho == pytest.approx(0.5 * 2.25 / 4 / 0.75)
    assert block_noise(0.3, 0.2, 1) == (0.3, 0.2)


def test_a_pinned_ceiling_needs_nothing_more_and_an_early_cut_needs_a_multiple():
    c, r = make_curve(0.61, 1.92, 2542.0, seed=31)
    unc = assess(fit_sigmoid(c, r))
    assert unc.identified and budget_to_pin_A(unc) == 1.0
    early = assess(fit_sigmoid(c[c <= 3000.0], r[c <= 3000.0]))
    pin = budget_to_pin_A(early, n_sims=4)
    assert pin is None or pin in BUDGET_MULTIPLES
