"""Statistics between runs' forecasts, read from their draws (``Forecast.draws_at``): which is
best at a budget, the chance one beats a bar, and the difference of two. They are the cross-run
questions a study (``fit.choose``), a page's "vs baseline" (``fit.versus``) and the Optuna pruner
ask; every reduction of draws to a quantile or a probability is made here or in ``value``.

Each run's draws are its own; pairing them in independent random orders (each shuffled by its own
generator) treats the runs' futures as independent, which they are unless a joint fit pairs them
(``pairing``: the quantile each run takes in each joint draw).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["gap", "p_beat", "p_best"]


def p_best(samples: Sequence[np.ndarray], seed: int = 0, pairing: np.ndarray | None = None) -> list[float]:
    """P(each run is the best at the budget) from its draws there (``samples``, each (n,)): in
    independent random orders, or, given ``pairing`` (R, k), the quantile each run's draw takes
    in each of R joint draws. Ties between draws (two flat runs at one value) are shared."""
    if len(samples) == 1:
        return [1.0]
    if pairing is None:
        rng = np.random.default_rng(seed)
        n = min(s.size for s in samples)
        joint = np.stack([rng.permutation(s)[:n] for s in samples])  # (runs, n)
    else:
        joint = np.stack([np.sort(s)[np.minimum((q * s.size).astype(int), s.size - 1)]
                          for s, q in zip(samples, pairing.T)])  # (runs, R)  # fmt: skip
    top = joint == joint.max(axis=0, keepdims=True)
    share = top / top.sum(axis=0, keepdims=True)
    return [float(p) for p in share.mean(axis=1)]


def p_beat(sample: np.ndarray, bar: float) -> float:
    """P(the expected curve's draw exceeds ``bar``): the share of ``sample`` (n,) above it."""
    return float(np.mean(np.asarray(sample) > bar))


def gap(a: np.ndarray, b: np.ndarray, level: float, seed: int = 0) -> dict:
    """The difference of two runs' draws at one compute, ``a - b`` in independent random orders:
    its median, its ``level`` interval and P(a above b)."""
    rng = np.random.default_rng(seed)
    x, y = rng.permutation(a), rng.permutation(b)
    n = min(x.size, y.size)
    d = x[:n] - y[:n]  # (n,)
    tail = (1.0 - level) / 2.0
    lo, mid, hi = np.quantile(d, [tail, 0.5, 1.0 - tail])
    return {"median": float(mid), "lo": float(lo), "hi": float(hi), "p_above": float(np.mean(d > 0))}
