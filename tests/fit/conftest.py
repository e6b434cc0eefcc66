"""Shared synthetic curves for the fit tests: Table 1 of the paper and a curve maker."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.fit.law import sigmoid
from scalerl.fit.paper import TABLE1 as PAPER_TABLE1

TABLE1 = [tuple(row) for row in PAPER_TABLE1]  # name, C_mid (GPU-hours), B, A
R0_DEFAULT = 0.3  # a plausible post-SFT step-0 pass rate


def make_curve(
    A: float,
    B: float,
    C_mid: float,
    R0: float = R0_DEFAULT,
    *,
    n: int = 80,
    sigma: float = 0.005,
    seed: int = 0,
    c_max: float | None = None,
    noisy_r0: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """An Eq. 1 curve with Gaussian noise, evaluated like the paper (every 100 steps).

    Compute is evenly spaced from 0 (the step-0 evaluation) to ``c_max`` in GPU-hours.
    The default 6 x C_mid matches the paper's leave-one-out runs (16k GPU-hours against
    C_mid ~ 2.5-3k). Every point after step 0 gets N(0, sigma^2) noise, clipped into
    [0, 1]; the step-0 reward is R0 exactly, as the paper treats R0 as known, unless
    ``noisy_r0``. Returns compute (n,), reward (n,).
    """
    c_max = 6.0 * C_mid if c_max is None else c_max
    compute = np.linspace(0.0, c_max, n)
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, sigma, n)
    if not noisy_r0:
        noise[0] = 0.0
    reward = sigmoid(compute, A, B, C_mid, R0) + noise
    return compute, np.clip(reward, 0.0, 1.0)


@pytest.fixture(scope="session")
def table1_curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One noisy curve (sigma=0.005, 80 points) per Table 1 row, seeded by row index."""
    return {name: make_curve(A, B, C_mid, seed=i) for i, (name, C_mid, B, A) in enumerate(TABLE1)}
