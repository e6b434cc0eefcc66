"""Eq. 1, the App. A.4 power law and the Fig. 7 efficiency form, on hand-derived numbers."""

import numpy as np
import pytest

from scalerl.fit.law import (
    compute_for_reward,
    efficiency_transform,
    power_law,
    power_law_d,
    sigmoid,
)


def test_sigmoid_is_halfway_at_c_mid():
    # (C_mid / C)^B = 1 -> R = R0 + (A - R0) / 2 = (A + R0) / 2 = (0.6 + 0.2) / 2 = 0.4
    assert sigmoid(2542.0, 0.6, 1.92, 2542.0, 0.2) == pytest.approx(0.4, abs=1e-15)


def test_sigmoid_hand_values():
    # B=1, C=2 C_mid: (1/2)^1 = 0.5 -> 0.3 + 0.3 / 1.5 = 0.5
    assert sigmoid(200.0, 0.6, 1.0, 100.0, 0.3) == pytest.approx(0.5)
    # B=2, C=C_mid/3: 3^2 = 9 -> 0.3 + 0.3 / 10 = 0.33
    assert sigmoid(100.0 / 3, 0.6, 2.0, 100.0, 0.3) == pytest.approx(0.33)


def test_sigmoid_limits_and_units():
    C = np.array([0.0, 1e30])
    out = sigmoid(C, 0.6, 2.0, 1e21, 0.3)  # FLOP-scale compute does not overflow
    assert out[0] == 0.3  # step 0 is exactly R0, without a divide-by-zero warning
    assert out[1] == pytest.approx(0.6, abs=1e-12)
    # Changing the unit of C and C_mid together changes nothing.
    assert sigmoid(5e3 * 3.6e18, 0.6, 1.5, 2e3 * 3.6e18, 0.3) == pytest.approx(
        sigmoid(5e3, 0.6, 1.5, 2e3, 0.3)
    )


def test_power_law_hand_value_and_sigmoid_limit():
    # 0.7 - 0.8 / 4^0.5 = 0.7 - 0.4 = 0.3
    assert power_law(4.0, 0.7, 0.8, 0.5) == pytest.approx(0.3)
    # D = (A - R0) C_mid^B = 0.3 * 100^2 = 3000
    D = power_law_d(0.6, 2.0, 100.0, 0.3)
    assert D == pytest.approx(3000.0)
    # For C >> C_mid the sigmoid is A - D / C^B up to O(x^2), x = (C_mid / C)^B = 1e-6.
    C = 1e5
    assert sigmoid(C, 0.6, 2.0, 100.0, 0.3) == pytest.approx(power_law(C, 0.6, D, 2.0), abs=1e-12)


def test_efficiency_transform_hand_value():
    # R = 0.4 is half the gain: (A - R0)/(R - R0) - 1 = 0.4/0.2 - 1 = 1 -> log F = 2 log 100
    assert efficiency_transform(0.4, 0.6, 100.0, 2.0, 0.2) == pytest.approx(2 * np.log(100.0))


def test_efficiency_slope_is_b():
    A, B, C_mid, R0 = 0.61, 1.92, 2542.0, 0.3
    C = np.geomspace(200.0, 40000.0, 50)
    logF = efficiency_transform(sigmoid(C, A, B, C_mid, R0), A, C_mid, B, R0)
    slope, intercept = np.polyfit(np.log(C), logF, 1)
    assert slope == pytest.approx(B, rel=1e-9)
    assert intercept == pytest.approx(0.0, abs=1e-7)  # F(R(C)) = C^B exactly


def test_efficiency_transform_is_nan_outside_the_gain():
    out = efficiency_transform(np.array([0.2, 0.6, 0.7, 0.1]), 0.6, 100.0, 2.0, 0.2)
    assert np.isnan(out).all()


def test_compute_for_reward_inverts_eq1():
    A, B, C_mid, R0 = 0.645, 1.89, 11272.0, 0.3
    C = np.array([10.0, 5000.0, 11272.0, 90000.0])
    assert compute_for_reward(sigmoid(C, A, B, C_mid, R0), A, B, C_mid, R0) == pytest.approx(C)
    # B=1: R - R0 = (A - R0)/3 -> (A - R0)/(R - R0) - 1 = 2 -> C = C_mid / 2
    assert compute_for_reward(0.4, 0.6, 1.0, 100.0, 0.3) == pytest.approx(50.0)
    assert compute_for_reward(0.6, 0.6, 1.0, 100.0, 0.3) == np.inf
    assert compute_for_reward(0.25, 0.6, 1.0, 100.0, 0.3) == 0.0
