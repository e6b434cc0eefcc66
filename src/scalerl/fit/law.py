"""The compute -> performance laws as pure numpy functions.

The ScaleRL sigmoid (paper §1, Eq. 1) models the expected validation reward after
training compute ``C``::

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

``A`` is the asymptote, ``B > 0`` the scaling exponent (compute efficiency), ``C_mid``
the compute at which half of the gain ``A - R0`` is reached, and ``R0`` the reward at
zero RL compute. The curve is a logistic in ``log C``, which is how it is evaluated
here: ``(A - R0) * expit(B * (log C - log C_mid))``. That form is finite for every
``C >= 0`` (``C = 0`` gives exactly ``R0``) and never overflows for huge compute units.

The power law (App. A.4) ``R = A - D / C^B`` for ``C >= C0`` is the high-compute limit
of the sigmoid with ``D = (A - R0) * C_mid^B``. The linearised "efficiency" form
(Fig. 7 caption) rearranges Eq. 1 to ``F(R) = C^B`` so that ``log F(R)`` is a straight
line of slope ``B`` against ``log C``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = [
    "compute_for_reward",
    "efficiency_transform",
    "power_law",
    "power_law_d",
    "sigmoid",
]


def _log_compute(C) -> np.ndarray:
    """log C with log 0 = -inf and no warning (C = 0 is the step-0 evaluation)."""
    C = np.asarray(C, dtype=float)
    with np.errstate(divide="ignore"):
        return np.log(C)


def sigmoid(C, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """Eq. 1: ``R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)``.

    Evaluated as ``R0 + (A - R0) * expit(B * (log C - log C_mid))``, identical for
    ``C > 0`` and equal to ``R0`` at ``C = 0``. ``C`` may be a scalar or any array.
    """
    z = B * (_log_compute(C) - np.log(C_mid))
    return R0 + (A - R0) * expit(z)


def power_law(C, A: float, D: float, B: float) -> np.ndarray:
    """App. A.4 power law: ``R(C) = A - D / C^B`` (meaningful only for ``C >= C0 > 0``)."""
    C = np.asarray(C, dtype=float)
    with np.errstate(divide="ignore"):
        return A - D * np.power(C, -B)


def power_law_d(A: float, B: float, C_mid: float, R0: float) -> float:
    """App. A.4: for ``C >> C_mid`` the sigmoid tends to ``A - D / C^B`` with
    ``D = (A - R0) * C_mid^B``."""
    return (A - R0) * C_mid**B


def efficiency_transform(R, A: float, C_mid: float, B: float, R0: float) -> np.ndarray:
    """Fig. 7 caption: ``log F(R)`` with ``F(R) = C_mid^B / ((A - R0) / (R - R0) - 1)``.

    On a curve that follows Eq. 1 exactly, ``F(R(C)) = C^B``, so ``log F`` against
    ``log C`` is a line of slope ``B`` through the origin. Rewards outside the open
    interval between ``R0`` and ``A`` have no finite transform and give NaN.
    """
    R = np.asarray(R, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (A - R0) / (R - R0) - 1.0
        out = B * np.log(C_mid) - np.log(ratio)
    inside = (R - R0) / (A - R0)
    return np.where((inside > 0) & (inside < 1), out, np.nan)


def compute_for_reward(R, A: float, B: float, C_mid: float, R0: float) -> np.ndarray:
    """Invert Eq. 1: ``C = C_mid * ((A - R0) / (R - R0) - 1)^(-1/B)``.

    Returns 0 for ``R`` at (or on the ``R0`` side of) ``R0`` and ``inf`` for ``R`` at or
    beyond the asymptote ``A``, which no finite compute reaches.
    """
    R = np.asarray(R, dtype=float)
    frac = (R - R0) / (A - R0)  # share of the total gain reached
    with np.errstate(divide="ignore", invalid="ignore"):
        C = C_mid * np.power(1.0 / frac - 1.0, -1.0 / B)
    return np.where(frac <= 0, 0.0, np.where(frac >= 1, np.inf, C))
