"""One predictive distribution: draws of whole future runs, from which every answer is read.

A forecast is ``N`` draws ``j`` of how the run goes on after its data (``now``):

- **the expected curve** ``mu_j(C)``. For a law's band (:func:`band_draws`),
  ``mu_j(C) = centre(C) + u_j * s(C)``, ``u_j ~ N(0, 1)`` (stratified quantiles, shuffled),
  ``s`` the band's split sd (``(centre - lo) / z`` below the centre, ``(hi - centre) / z``
  above, ``z = Phi^-1((1 + level) / 2)``). The band is the fit's parameter uncertainty
  (``uncertainty.Uncertainty.band``, or the prior's). The rolling-origin conformal factors
  ``k(r)`` (``calibrate``: one per side, by the lead ``r = C / now``) are put on the curve, so
  that curve and noise together give the calibrated predictive interval of one evaluation:
  ``s_k^2 = k^2 (s^2 + sigma^2) - sigma^2``. Other families of curves (the late risers of
  ``late``, a mixture of methods) give ``mu_j`` directly (:func:`curve_draws`).
- **its evaluations** ``y_jt = mu_j(C_t) + e_jt`` on the run's own schedule (every
  ``spacing`` of compute, the median of its last gaps, never finer than ``HORIZON`` times the
  compute so far in ``MAX_EVALS`` steps) from ``now`` to the ``horizon``; the noise is the
  run's AR(1) (``sigma``, ``rho``), continuing from the residual of its last evaluation,
  ``e_j0 = y_n - mu_j(C_n)``. The schedule and the noise of an evaluation do not depend on
  how far the horizon reaches, so one forecast asked about a further budget answers every
  nearer question the same.
- **its range**: a pass rate's expected curves and evaluations are clipped to [0, 1]
  (``bounds``; each evaluation after its noise is added to the unclipped curve): no band or
  interval passes 1, the crossing of a target within the range by the expected curve or by one
  evaluation is unchanged (at or past the target before clipping is at or past it after), and
  a mean of evaluations near 1 reads no higher than a real run's can.
- **its floor**: a rising run's expected curve (the methods that follow a rise: the fit, the
  prior, the training reward) is, from ``now`` on, never below what the run has already shown
  (:func:`shown`: the mean of its last ``SHOWN_WINDOW`` evaluations less one standard error of
  that mean, so that noise alone does not raise it). A run that is rising is not forecast to
  end below where it stands (issue 49: a study's leader had its lower bound at 0.270, below its
  own starting value). Every surface reads the floored draws: ``plan``, ``fit``, the live
  record, ``serve`` and a study's decisions (``fit.choose``).
- **its reads** ``r_jt``: what a user watching the run sees, the mean of the last ``window``
  evaluations, the run's own last evaluations filling the first windows.

Every number is read from the same draws, so none can contradict another:

- the band on the expected curve at ``C``: the ``(1 -/+ level) / 2`` quantiles of
  ``mu_j(C)``; the predictive interval of one evaluation: of ``mu_j(C) + e`` (stationary);
- the crossing ``C*_j``: the first ``C_t`` whose read is at or above the target (``window``
  0: the first compute, before or after the data, where ``mu_j`` is), ``inf`` when none is
  within the horizon;
- P(reach within a budget) ``= mean_j [C*_j <= budget]``, P(reach at all) the same within the
  horizon.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import signal, stats

__all__ = ["HORIZON", "N_DRAWS", "SHOWN_WINDOW", "Draws", "band_draws", "curve_draws", "mixture", "shown",
           "widened"]

N_DRAWS = 2000
HORIZON = 10.0
"""P(reach at all) is P(reach within this multiple of the compute so far), or within the
budget a forecast was made for when that is later: a user asks whether a run gets there in a
run they could afford, not after a thousand times the compute."""
FINE = 2000  # points of the log grid the expected curve's crossing is read on (0.5% apart over 10^4)
MAX_EVALS = 1000  # evaluations up to HORIZON x now at most (a finer schedule is thinned)
FAR_EVALS = 200  # evaluations from HORIZON x now to a later horizon, evenly in log compute
SHOWN_WINDOW = 5  # evaluations a rising run's floor is the mean of (``shown``)

Curves = Callable[[np.ndarray], np.ndarray]  # C (m,) -> mu (n, m)


@dataclass(frozen=True, eq=False)
class Draws:
    """The draws (module docstring). Arrays: ``schedule`` (t,), ``evals`` (n, t)."""

    curves_of: Curves  # C (m,) -> (n, m): the draws' expected curves
    schedule: np.ndarray  # (t,) compute of the future evaluations, increasing, in (now, horizon]
    evals: np.ndarray  # (n, t) the draws' evaluations
    observed: np.ndarray  # the run's own evaluations, in order (reads' first windows)
    sigma: float
    rho: float
    level: float
    now: float
    horizon: float
    bounds: tuple[float, float] | None = None  # a pass rate's (0, 1): no curve or evaluation leaves them

    @property
    def n(self) -> int:
        return int(self.evals.shape[0])

    def curves(self, C) -> np.ndarray:
        """``mu_j(C)``: (n, m) for C (m,)."""
        return self._clip(self.curves_of(np.atleast_1d(np.asarray(C, dtype=float))))

    def _clip(self, x: np.ndarray) -> np.ndarray:
        return x if self.bounds is None else np.clip(x, *self.bounds)

    def summary(self, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(median, lo, hi) of the expected curve at ``C`` (m,): the quantiles of the draws'
        curves, read once (``Forecast.at``)."""
        tail = (1.0 - self.level) / 2.0
        mid, lo, hi = np.quantile(self.curves(C), [0.5, tail, 1.0 - tail], axis=0)
        return mid, lo, hi

    def band(self, C) -> tuple[np.ndarray, np.ndarray]:
        """The band on the expected curve at ``C`` (m,): ``summary``'s ends."""
        _, lo, hi = self.summary(C)
        return lo, hi

    def predictive(self, C) -> tuple[np.ndarray, np.ndarray]:
        """The interval of one evaluation at ``C`` (m,): the curves plus stationary noise (one
        fixed noise draw per curve, so the interval at a compute is the same whatever else is
        asked with it)."""
        mu = self.curves_of(np.atleast_1d(np.asarray(C, dtype=float)))  # unclipped: the noise is about it
        e = np.random.default_rng(1).standard_normal(mu.shape[0])[:, None] * self.sigma
        return _tails(self._clip(mu + e), self.level)

    def median(self, C) -> np.ndarray:
        return np.quantile(self.curves(C), 0.5, axis=0)

    def reads(self, window: int) -> np.ndarray:
        """(n, t): the trailing mean of ``window`` evaluations at each scheduled one."""
        if window <= 1:
            return self.evals
        past = np.broadcast_to(self.observed[-(window - 1):], (self.n, min(window - 1, self.observed.size)))
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
        log grid from ``now / 1000``; ``inf`` where none is within the horizon."""
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


def schedule(observed_compute: np.ndarray, horizon: float) -> np.ndarray:
    """The future evaluations' compute (module docstring): the run's own spacing, from its
    last evaluation to ``horizon``, at most ``MAX_EVALS`` of them up to ``HORIZON`` x now;
    past that, ``FAR_EVALS`` spaced evenly in log compute to the horizon (a budget of 1e9 with
    data to 100 once asked for 390 million evaluations), so the schedule's size never depends
    on how large a compute is asked about, and its near part never on how far."""
    c = np.asarray(observed_compute, dtype=float)
    now = float(c[-1])
    gaps = np.diff(c)[-5:]
    gaps = gaps[gaps > 0]
    spacing = float(np.median(gaps)) if gaps.size else max(now, 1e-12)
    spacing = max(spacing, (HORIZON - 1.0) * now / MAX_EVALS)
    near_end = min(float(horizon), HORIZON * now) if now > 0 else float(horizon)
    n_evals = min(max(int(np.floor((near_end - now) / spacing + 1e-9)), 1), MAX_EVALS)
    near = now + spacing * np.arange(1, n_evals + 1)
    if not horizon > near[-1] * (1 + 1e-9) or not np.isfinite(horizon):
        return near
    far = np.geomspace(near[-1], float(horizon), FAR_EVALS + 1)[1:]
    return np.concatenate([near, far])


def shown(observed: np.ndarray, sigma: float, window: int = SHOWN_WINDOW) -> float:
    """What a run has already shown: the mean of its last ``window`` evaluations, less one
    standard error of that mean (one evaluation's noise ``sigma`` over sqrt(window)), so that
    noise alone does not raise the floor."""
    last = np.asarray(observed, dtype=float)[-window:]
    return float(last.mean() - sigma / np.sqrt(last.size))


def floored(curves_of: Curves, floor: float, now: float) -> Curves:
    """``curves_of`` with every expected curve held at or above ``floor`` from ``now`` on
    (module docstring, its floor); the curves before ``now`` (the fit to the data) unchanged."""

    def held(C: np.ndarray) -> np.ndarray:
        mu = curves_of(C)  # (n, m)
        return np.where(np.asarray(C) >= now, np.maximum(mu, floor), mu)

    return held


def _noise(rng: np.random.Generator, mu: np.ndarray, last: np.ndarray, sigma: float, rho: float) -> np.ndarray:
    """AR(1) evaluation noise (n, t) continuing from each draw's residual ``last`` (n,); drawn
    evaluation by evaluation (t rows of n), so the first evaluations' noise is the same
    however many follow."""
    n, t = mu.shape
    shocks = rng.standard_normal((t, n)).T * sigma * np.sqrt(max(1.0 - rho**2, 0.0))
    shocks[:, 0] += rho * last
    return signal.lfilter([1.0], [1.0, -rho], shocks, axis=1)  # e_t = rho e_{t-1} + shock_t


def curve_draws(curves_of: Curves, *, observed_compute, observed, sigma: float, rho: float, level: float,
                horizon: float, seed: int = 0, bounds: tuple[float, float] | None = None,
                rising: bool = False) -> Draws:
    """The draws of a run seen at ``observed_compute``/``observed`` whose expected curves are
    ``curves_of`` (C (m,) -> (n, m)), its evaluations AR(1) (``sigma``, ``rho``), up to ``horizon``;
    ``bounds`` the metric's range (a pass rate's (0, 1)), which curves and evaluations keep to;
    ``rising``: the curves floored at what the run has shown (module docstring)."""
    c = np.asarray(observed_compute, dtype=float)
    y = np.asarray(observed, dtype=float)
    now = float(c[-1])
    if rising:
        curves_of = floored(curves_of, shown(y, sigma), now)
    times = schedule(c, max(float(horizon), now))
    mu = curves_of(times)  # (n, t)
    last = y[-1] - curves_of(np.array([now]))[:, 0]  # (n,) each draw's residual now
    rng = np.random.default_rng(seed + 7)
    evals = mu + _noise(rng, mu, last, sigma, rho)
    if bounds is not None:  # a pass rate's evaluations: the curve's noise, then the range
        evals = np.clip(evals, *bounds)
    return Draws(curves_of, times, evals, y, float(sigma), float(rho), float(level), now, float(max(horizon, now)),
                 bounds)  # fmt: skip


def widened(centre, band, *, k, sigma: float, level: float, now: float):
    """``C -> (centre, sd below, sd above)`` of a band with the conformal factor ``k`` put on
    the curve (module docstring): ``k`` a number, a (below, above) pair, or a function of the
    lead ``C / now`` giving (below, above) arrays (``Calibration.sides_at``)."""
    z = float(stats.norm.ppf((1.0 + level) / 2.0))
    if callable(k):
        factors = k
    else:
        pair = (float(k), float(k)) if np.isscalar(k) else tuple(float(v) for v in k)
        factors = lambda r: (np.full(np.shape(r), pair[0]), np.full(np.shape(r), pair[1]))  # noqa: E731

    def sds(C: np.ndarray):
        C = np.atleast_1d(np.asarray(C, dtype=float))
        mid = np.asarray(centre(C), dtype=float).reshape(-1)
        lo, hi = (np.asarray(v, dtype=float).reshape(-1) for v in band(C))
        sd = [np.maximum(w, 0.0) / z for w in (mid - lo, hi - mid)]
        f = factors(np.maximum(C, now) / now if now > 0 else np.ones_like(C))
        down, up = (np.sqrt(np.maximum(fi**2 * (s**2 + sigma**2) - sigma**2, s**2)) for fi, s in zip(f, sd))
        return mid, down, up

    return sds


def band_draws(centre, band, *, observed_compute, observed, sigma: float, rho: float, level: float,
               horizon: float, k=1.0, n: int = N_DRAWS, seed: int = 0, bounds: tuple[float, float] | None = None,
               rising: bool = False) -> Draws:
    """The draws of a curve ``centre`` with ``band(C) -> (lo, hi)`` at ``level``; ``k`` the
    conformal factor put on it (:func:`widened`); ``rising`` as :func:`curve_draws`."""
    now = float(np.asarray(observed_compute, dtype=float)[-1])
    sds = widened(centre, band, k=k, sigma=sigma, level=level, now=now)
    rng = np.random.default_rng(seed)
    u = rng.permutation(stats.norm.ppf((np.arange(n) + 0.5) / n))[:, None]  # (n, 1)

    def curves_of(C: np.ndarray) -> np.ndarray:
        mid, down, up = sds(C)
        return mid + u * np.where(u < 0, down, up)

    return curve_draws(curves_of, observed_compute=observed_compute, observed=observed, sigma=sigma, rho=rho,
                       level=level, horizon=horizon, seed=seed, bounds=bounds, rising=rising)  # fmt: skip


def mixture(parts: Sequence[tuple[float, Draws]], *, seed: int = 0) -> Draws:
    """The draws of ``parts`` (weight, draws of one method), each contributing its share of
    the draws (largest remainder), in one random order; noise and reads as each part drew
    them. Every part must share the run's data, level and horizon."""
    weights = np.array([max(float(w), 0.0) for w, _ in parts])
    weights = weights / weights.sum()
    first = parts[0][1]
    n = first.n
    counts = np.floor(weights * n).astype(int)
    counts[np.argsort(-(weights * n - counts))[: n - counts.sum()]] += 1
    order = np.random.default_rng(seed + 3).permutation(n)
    rows = [np.arange(c) for c in counts]

    def curves_of(C: np.ndarray) -> np.ndarray:
        return np.concatenate([d.curves(C)[r] for (_, d), r in zip(parts, rows)], axis=0)[order]

    t = min(d.schedule.size for _, d in parts)
    evals = np.concatenate([d.evals[r, :t] for (_, d), r in zip(parts, rows)], axis=0)[order]
    sigma = float(np.sqrt(np.sum(weights * np.array([d.sigma**2 for _, d in parts]))))
    return Draws(curves_of, first.schedule[:t], evals, first.observed, sigma, first.rho, first.level, first.now,
                 first.horizon, first.bounds)  # fmt: skip
