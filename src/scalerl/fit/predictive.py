"""One predictive distribution: draws of whole future runs, from which every answer is read.

A forecast is ``N`` draws ``j`` of how the run goes on after its data (``now``):

- **the expected curve** ``mu_j(C) = centre(C) + u_j * s(C)``, ``u_j ~ N(0, 1)`` (stratified
  quantiles, shuffled), ``s`` the band's split sd (``(centre - lo) / z`` below the centre,
  ``(hi - centre) / z`` above, ``z = Phi^-1((1 + level) / 2)``). The band is the fit's
  parameter uncertainty (``uncertainty.Uncertainty.band``, or the prior's,
  ``posterior.PriorForecast.band``). The prior-free fit's rolling-origin conformal factor
  ``k`` (``calibrate``) is put on the curve, so that curve and noise together give the
  calibrated predictive interval of one evaluation: ``s_k^2 = k^2 (s^2 + sigma^2) -
  sigma^2``. Shape error is a property of the curve, not of the evaluations: the run's own
  noise stays what its residuals say.
- **its evaluations** ``y_jt = mu_j(C_t) + e_jt`` on the run's own schedule (every
  ``spacing`` of compute, the median of its last gaps) from ``now`` to the ``horizon``; the
  noise is the run's AR(1) (``noise``: ``sigma``, ``rho``), continuing from the residual of
  its last evaluation, ``e_j0 = y_n - mu_j(C_n)``.
- **its reads** ``r_jt``: what a user watching the run sees, the mean of the last ``window``
  evaluations, the run's own last evaluations filling the first windows.

Every number is read from the same draws, so none can contradict another:

- the band on the expected curve at ``C``: the ``(1 -/+ level) / 2`` quantiles of
  ``mu_j(C)``; the predictive interval of one evaluation: of ``mu_j(C) + e`` (stationary);
- the crossing ``C*_j``: the first ``C_t`` whose read is at or above the target (``window``
  0: the first compute, before or after the data, where ``mu_j`` is), ``inf`` when none is
  within the horizon;
- P(reach within a budget) ``= mean_j [C*_j <= budget]`` and P(reach at all) the same
  within the horizon. The horizon is never below a budget asked about, so P(within a
  budget) <= P(at all), and P(within) never falls as the budget grows.

A run whose validation shows no rise (``rise.no_rise``) gets the flat centre: the mean of its
recent evaluations, with that mean's own uncertainty as the band.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal, stats

__all__ = ["HORIZON", "N_DRAWS", "Predictive", "draw"]

N_DRAWS = 2000
HORIZON = 10.0
"""P(reach at all) is P(reach within this multiple of the compute so far), or within the
budget asked about when that is later: a user asks whether a run gets there in a run they
could afford, not after a thousand times the compute."""
FINE = 2000  # points of the log grid the expected curve's crossing is read on (0.5% apart over 10^4)
MAX_EVALS = 1000  # a longer schedule is thinned to this many evaluations (fewer lucky reads)


@dataclass(frozen=True, eq=False)
class Predictive:
    """The draws (module docstring). Arrays: ``u`` (n,), ``schedule`` (t,), ``evals`` (n, t)."""

    edges: object  # C -> (centre, lower edge, upper edge) of the band at ``level`` (conformal factor applied)
    u: np.ndarray  # (n,) the draws' place in the curve family
    schedule: np.ndarray  # (t,) compute of the future evaluations, increasing, in (now, horizon]
    evals: np.ndarray  # (n, t) the draws' evaluations
    observed: np.ndarray  # the run's own evaluations, in order (reads' first windows)
    sigma: float
    rho: float
    level: float
    now: float
    horizon: float

    def curves(self, C) -> np.ndarray:
        """``mu_j(C)``: (n, m) for C (m,)."""
        C = np.atleast_1d(np.asarray(C, dtype=float))
        mid, lo, hi = self.edges(C)
        z = float(stats.norm.ppf((1.0 + self.level) / 2.0))
        down, up = np.maximum(mid - lo, 0.0) / z, np.maximum(hi - mid, 0.0) / z
        u = self.u[:, None]
        return mid + u * np.where(u < 0, down, up)

    def band(self, C) -> tuple[np.ndarray, np.ndarray]:
        """The band on the expected curve at ``C`` (m,): quantiles of the draws' curves."""
        return _tails(self.curves(C), self.level)

    def predictive(self, C) -> tuple[np.ndarray, np.ndarray]:
        """The interval of one evaluation at ``C`` (m,): the curves plus stationary noise."""
        mu = self.curves(C)
        e = np.random.default_rng(1).standard_normal(mu.shape) * self.sigma
        return _tails(mu + e, self.level)

    def median(self, C) -> np.ndarray:
        return np.median(self.curves(C), axis=0)

    def reads(self, window: int) -> np.ndarray:
        """(n, t): the trailing mean of ``window`` evaluations at each scheduled one."""
        if window <= 1:
            return self.evals
        past = np.broadcast_to(self.observed[-(window - 1):], (self.evals.shape[0], min(window - 1, self.observed.size)))
        full = np.concatenate([past, self.evals], axis=1)
        csum = np.cumsum(np.pad(full, ((0, 0), (1, 0))), axis=1)
        idx = np.arange(past.shape[1], full.shape[1])
        start = np.maximum(idx + 1 - window, 0)
        return (csum[:, idx + 1] - csum[:, start]) / (idx + 1 - start)

    def grid(self, window: int) -> np.ndarray:
        """The compute a crossing is read at: the schedule, or for ``window`` 0 the fine grid."""
        if window != 0:
            return self.schedule
        return np.unique(np.concatenate([np.geomspace(self.now / 1000.0, self.horizon, FINE), self.schedule]))

    def first_crossing(self, target: float, window: int) -> np.ndarray:
        """``C*_j`` (n,): the first scheduled compute whose read is at or above ``target``;
        ``window`` 0: the first compute where the draw's expected curve is, read on a fine
        log grid from ``now / 1000`` (the curve is defined before the data as well as after
        it); ``inf`` where none is within the horizon."""
        grid = self.grid(window)
        seen = self.curves(grid) if window == 0 else self.reads(window)
        hit = seen >= target
        out = np.full(hit.shape[0], np.inf)
        ok = hit.any(axis=1)
        out[ok] = grid[np.argmax(hit[ok], axis=1)]
        return out


def _tails(x: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(x, [tail, 1.0 - tail], axis=0)
    return lo, hi


def draw(centre, band, *, observed_compute, observed, sigma: float, rho: float, level: float,
         horizon: float, k: float | tuple[float, float] = 1.0, n: int = N_DRAWS, seed: int = 0) -> Predictive:
    """The draws of a run seen at ``observed_compute``/``observed`` (its evaluations, in
    order), whose expected curve is ``centre`` with ``band(C) -> (lo, hi)`` at ``level``,
    its evaluations AR(1) (``sigma``, ``rho``), up to ``horizon`` compute; ``k`` is the
    conformal factor put on the curve (module docstring), or one per side (below, above)."""
    c = np.asarray(observed_compute, dtype=float)
    y = np.asarray(observed, dtype=float)
    now = float(c[-1])
    z = float(stats.norm.ppf((1.0 + level) / 2.0))

    ks = (float(k), float(k)) if np.isscalar(k) else tuple(float(v) for v in k)

    def widened(C):
        mid = np.asarray(centre(C), dtype=float).reshape(-1)
        lo, hi = (np.asarray(v, dtype=float).reshape(-1) for v in band(C))
        if ks == (1.0, 1.0):
            return mid, lo, hi
        sd = [np.maximum(w, 0.0) / z for w in (mid - lo, hi - mid)]
        wide = [np.sqrt(np.maximum(f**2 * (s**2 + sigma**2) - sigma**2, s**2)) for f, s in zip(ks, sd)]
        return mid, mid - z * wide[0], mid + z * wide[1]

    gaps = np.diff(c)[-5:]
    gaps = gaps[gaps > 0]
    spacing = float(np.median(gaps)) if gaps.size else max(now, 1e-12)
    n_evals = int(np.floor((horizon - now) / spacing))
    if n_evals > MAX_EVALS:
        spacing, n_evals = (horizon - now) / MAX_EVALS, MAX_EVALS
    schedule = now + spacing * np.arange(1, max(n_evals, 1) + 1)
    rng = np.random.default_rng(seed)
    u = rng.permutation(stats.norm.ppf((np.arange(n) + 0.5) / n))
    pred = Predictive(widened, u, schedule,
                      np.empty((n, 0)), y, float(sigma), float(rho), float(level), now, float(horizon))  # fmt: skip
    mu = pred.curves(schedule)  # (n, t)
    last = y[-1] - pred.curves(np.array([now]))[:, 0]  # (n,) each draw's residual now
    shocks = rng.standard_normal(mu.shape) * sigma * np.sqrt(max(1.0 - rho**2, 0.0))
    shocks[:, 0] += rho * last
    noise = signal.lfilter([1.0], [1.0, -rho], shocks, axis=1)  # e_t = rho e_{t-1} + shock_t
    return Predictive(widened, u, schedule, mu + noise, y, float(sigma), float(rho),
                      float(level), now, float(horizon))  # fmt: skip
