"""How much more compute would pin the ceiling: the budget advice of ``scalerl fit`` and the
end-of-run report ("about 3x the compute so far pins A to ±0.02", or "not within 100x").

Continuations of the run are simulated from its fitted curve and AR(1) noise and refitted, as
a real run would be read later (``budget_to_pin_A``). This is advice about the law's ceiling,
not a forecast of the run: the forecast is ``scalerl.fit.forecast.Forecast``.
"""

from __future__ import annotations

import numpy as np

from scalerl.fit.fitting import FitResult, Problem, fit_problem
from scalerl.fit.uncertainty import Uncertainty, model_uncertainty

__all__ = ["BUDGET_MULTIPLES", "block_noise", "budget_to_pin_A"]

BUDGET_MULTIPLES = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 25.0, 40.0, 60.0, 100.0)
MAX_NEW_POINTS = 150  # longer simulated extensions are thinned (block means)


def budget_to_pin_A(unc: Uncertainty, *, n_sims: int = 8, seed: int = 0) -> float | None:
    """Smallest multiple of the compute so far after which A's interval is within
    ``±margin`` in at least half of ``n_sims`` simulated continuations, or None when not
    within 100x.

    Each continuation extends the run at its recent evaluation spacing, draws the new
    evaluations from the fitted curve plus the fitted AR(1) noise, refits everything
    (noise, profile over A) and reads A's interval, exactly as a real run would be read
    later (its C_mid box reaching as far past the longer data as the run's does). Past
    ``MAX_NEW_POINTS`` new evaluations, blocks of ``t`` consecutive ones are drawn as their
    mean, with the sd and correlation block means of that AR(1) noise have
    (``block_noise``), which keeps the cost bounded. Multiples are searched by bisection.
    """
    if unc.identified:
        return 1.0
    rng = np.random.default_rng(seed)
    data = unc.data
    draws = {}

    def pinned(m: float) -> bool:
        if m not in draws:
            widths = [_simulated_half_width(unc, data, m, rng) for _ in range(n_sims)]
            draws[m] = float(np.median(widths)) <= unc.margin
        return draws[m]

    options = list(BUDGET_MULTIPLES)
    if not pinned(options[-1]):
        return None
    lo, hi = -1, len(options) - 1  # options[hi] pins; options[lo] (if any) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pinned(options[mid]):
            hi = mid
        else:
            lo = mid
    return options[hi]


def block_noise(sigma: float, rho: float, t: int) -> tuple[float, float]:
    """Marginal sd and lag-1 correlation of the means of consecutive blocks of ``t`` points
    of an AR(1) series (marginal sd ``sigma``, lag-1 correlation ``rho``).

    ``Var(mean) = sigma^2 / t * (1 + 2 sum_{k<t} (1 - k/t) rho^k)`` and the covariance of
    neighbouring block means is ``sigma^2 rho ((1 - rho^t) / (1 - rho))^2 / t^2``.
    """
    if t <= 1:
        return sigma, rho
    k = np.arange(1, t)
    var = sigma**2 / t * (1.0 + 2.0 * np.sum((1.0 - k / t) * rho**k))
    geo = (1.0 - rho**t) / (1.0 - rho) if rho < 1 else float(t)
    cov = sigma**2 * rho * geo**2 / t**2
    return float(np.sqrt(var)), float(min(cov / var, 0.999))


def _simulated_half_width(unc: Uncertainty, data: FitResult, m: float, rng) -> float:
    C = data.compute
    tail = np.diff(C[-min(10, C.size) :])
    step = float(np.median(tail)) if tail.size and np.median(tail) > 0 else float(C[-1] / C.size)
    new = np.arange(C[-1] + step, m * C[-1] + step / 2, step)
    block = max(1, int(np.ceil(new.size / MAX_NEW_POINTS)))
    new = new[block - 1 :: block]
    sd, rho = block_noise(unc.noise.sigma, unc.noise.rho, block)
    e = np.empty(new.size)
    prev = rng.normal(0.0, sd)
    for i in range(new.size):  # AR(1) with marginal sd ``sd``
        prev = rho * prev + rng.normal(0.0, sd * np.sqrt(1.0 - rho**2))
        e[i] = prev
    y_new = data.predict(new) + e
    if data.bounded:
        y_new = np.clip(y_new, 0.0, 1.0)
    problem = Problem(
        np.concatenate([C, new]), np.concatenate([data.reward, y_new]),
        None if data.r0_fitted else data.R0, None, data.bounded,
    )  # fmt: skip
    bounds = dict(data.bounds)  # a later fit's box reaches as far past its data as this one's
    lo, hi = bounds["C_mid"]
    bounds["C_mid"] = (lo, max(hi, hi * new[-1] / C[-1]))
    sim = model_uncertainty(
        fit_problem(problem, bounds), level=unc.level, margin=unc.margin, cells=False
    )
    lo, hi = sim.A_plausible
    return (hi - lo) / 2.0 if not sim.box_limited else np.inf
