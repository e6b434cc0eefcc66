"""Runs that look flat may still rise: the not-learning forecast, read from finished runs that
looked the same at the same share of their budget.

A run whose validation shows no rise at its cut gets no law (there is no rise to fit), but it
is not certain to stay flat: runs of the corpus flat at a quarter of their budget rose by 0.1
to 0.3 later (``bench/README.md``). The shipped table (``fit/forecast/population.json``, learned
by ``bench/population.py`` from ``bench/corpus``) keeps, for each finished run flat (``rise``)
when cut at a share ``s`` of its budget, its later path: ``d(r)``, the trailing 5-evaluation
mean minus its level at the cut, at each later evaluation's ratio ``r = C / cut``.

The forecast of a flat run cut at share ``s`` of its budget (a share outside the table's is
read as its nearest), after ``e`` evaluations flat, draws cases with weights

    w ∝ exp(-(ln(s_case / s))^2 / (2 BANDWIDTH^2)) x exp(-(ln(e_case / e))^2 / (2 BANDWIDTH^2)),

the second factor how long the case had been flat (its evaluations at the cut); with no budget
known the share is not, and only how long it has been flat weighs (a log flat at 0.125 for 900
steps was read as flat at 10% of a horizon, beside cases that rose from there). Draw ``j`` is the
run's own level plus its case's path, ``mu_j(C) = level + d_j(C / cut)`` (0 before the first
later evaluation, the last value after the case's end, within [0, 1] for a pass rate). The
run's own noise is added as for every forecast (``draws``). P(rise later) is the weight of
the cases whose path rose past ``RISE`` at any point. With fewer than ``MIN_CASES`` cases of
weight (effective count), the run is forecast at its flat level (``rise.flat_band``) alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

__all__ = ["BANDWIDTH", "LateRisers", "late_risers", "table"]

TABLE = Path(__file__).with_name("population.json")
BANDWIDTH = 0.35  # in ln(share): cases within about 1.4x of the share weigh most
MIN_CASES = 5.0  # effective number of cases a late-riser forecast needs
RISE = 0.05  # a path that rose this much past its level rose later


@dataclass(frozen=True, eq=False)
class LateRisers:
    """The cases near one share: their paths and weights, and what they say."""

    share: float
    ratios: tuple[np.ndarray, ...]  # per case: (k,) C / cut of its later evaluations
    deltas: tuple[np.ndarray, ...]  # per case: (k,) its later path minus its level at the cut
    weights: np.ndarray  # (cases,) summing to 1
    n_effective: float

    @property
    def p_rise(self) -> float:
        """The weight of the cases that rose later by at least ``RISE``."""
        rose = np.array([float(d.max(initial=0.0)) >= RISE for d in self.deltas])
        return float(np.sum(self.weights[rose]))

    def curves(self, levels: np.ndarray, cut: float, *, bounded: bool, seed: int = 0):
        """``C -> (n, m)``: a draw per entry of ``levels`` (n,) (the run's level, drawn within
        its own uncertainty), each following a case drawn by weight (module docstring)."""
        pick = np.random.default_rng(seed + 11).choice(len(self.deltas), size=levels.size, p=self.weights)

        def curves_of(C: np.ndarray) -> np.ndarray:
            r = np.asarray(C, dtype=float) / cut
            paths = np.stack([np.interp(r, x, d, left=0.0, right=d[-1]) for x, d in zip(self.ratios, self.deltas)])
            mu = levels[:, None] + paths[pick]
            return np.clip(mu, 0.0, 1.0) if bounded else mu

        return curves_of

    def sentence(self) -> str:
        return (f"{self.p_rise:.0%} of {self.n_effective:.0f} finished runs that looked as flat, for as long, at "
                f"{self.share:.0%} of their budget rose later")  # fmt: skip


@cache
def table(path: Path = TABLE) -> dict:
    """The population table at ``path`` ({} where it cannot be read)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def late_risers(share: float | None, path: Path = TABLE, evals: int | None = None) -> LateRisers | None:
    """The cases for a run flat at ``share`` of its budget (None: no budget known) after
    ``evals`` evaluations (None: not weighed); None where the table has too few."""
    cases = table(path).get("late_risers", {}).get("cases", [])
    if not cases or (share is not None and not 0.0 < share) or (share is None and not evals):
        return None
    w = np.ones(len(cases))
    shares = np.array([c["share"] for c in cases])
    if share is not None:
        share = float(np.clip(share, shares.min(), shares.max()))  # an earlier share reads the earliest cases
        w *= np.exp(-(np.log(shares / share) ** 2) / (2.0 * BANDWIDTH**2))
    if evals:
        flat = np.array([c.get("evals", evals) for c in cases], dtype=float)  # a table without it: no weight
        at = float(np.clip(evals, flat.min(), flat.max()))
        w *= np.exp(-(np.log(flat / at) ** 2) / (2.0 * BANDWIDTH**2))
    if w.sum() <= 0:
        return None
    n_eff = float(w.sum() ** 2 / np.sum(w**2))
    if n_eff < MIN_CASES:
        return None
    ratios = tuple(np.asarray([p[0] for p in c["path"]], dtype=float) for c in cases)
    deltas = tuple(np.asarray([p[1] for p in c["path"]], dtype=float) for c in cases)
    return LateRisers(float(np.sum(w * shares) / np.sum(w)) if share is None else share, ratios, deltas,
                      w / w.sum(), n_eff)
