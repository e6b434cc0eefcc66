"""The held-out check of a forecast: made at a cut, scored on the evaluations after it (the
``Forecast``'s, and the law's own in App. A.4's sigmoid-against-power-law check,
``compare.holdout_forecast``: one score for both).

The paper's extrapolation check (§1.5: fit to half the budget, validate at the end) asked of
the forecast itself, the one every command prints: each held-out evaluation against the
forecast's predictive interval of one evaluation at its compute. A check passed with an
interval that spans half the scale says little, so the interval's width is reported beside
"covered" (``final.width``), and the median width over the held-out points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Heldout"]


@dataclass(frozen=True, eq=False)
class Heldout:
    """A forecast's score on the evaluations after its cut; arrays are (h,)."""

    cut: float
    compute: np.ndarray
    reward: np.ndarray
    predicted: np.ndarray  # the forecast's median of the expected curve
    lo: np.ndarray  # the predictive interval of one evaluation
    hi: np.ndarray
    level: float

    @property
    def errors(self) -> np.ndarray:
        return self.predicted - self.reward

    @property
    def rmse(self) -> float:
        return float(np.sqrt(np.mean(self.errors**2)))

    @property
    def mae(self) -> float:
        return float(np.mean(np.abs(self.errors)))

    @property
    def max_error(self) -> float:
        return float(np.max(np.abs(self.errors)))

    @property
    def final_error(self) -> float:
        return float(self.errors[-1])

    @property
    def inside(self) -> np.ndarray:
        return (self.reward >= self.lo) & (self.reward <= self.hi)

    @property
    def coverage(self) -> float:
        """Share of held-out evaluations inside their predictive interval."""
        return float(np.mean(self.inside))

    @property
    def median_width(self) -> float:
        return float(np.median(self.hi - self.lo))

    @property
    def extrapolation_ratio(self) -> float:
        return float(self.compute[-1] / self.cut)

    @property
    def final(self) -> dict:
        """The last held-out evaluation: observed, predicted, its interval and its width."""
        return {"compute": float(self.compute[-1]), "observed": float(self.reward[-1]),
                "predicted": float(self.predicted[-1]), "pred_lo": float(self.lo[-1]),
                "pred_hi": float(self.hi[-1]), "width": float(self.hi[-1] - self.lo[-1]),
                "covered": bool(self.inside[-1])}  # fmt: skip

    def sentence(self) -> str:
        """"0.757 in [0.641, 0.775] (width 0.134): covered; 93% of 10 held-out evaluations inside"."""
        f = self.final
        verdict = "covered" if f["covered"] else "NOT covered"
        return (f"{f['observed']:.3f} in [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}] (width {f['width']:.3f}): {verdict}; "
                f"{self.coverage:.0%} of {self.compute.size} held-out evaluations inside their {self.level:.0%} "
                f"intervals (median width {self.median_width:.3f})")  # fmt: skip

    def to_dict(self) -> dict:
        return {"fit_until": self.cut, "n_heldout": int(self.compute.size), "rmse": self.rmse, "mae": self.mae,
                "max_error": self.max_error, "final_error": self.final_error, "extrapolation_ratio": self.extrapolation_ratio,
                "coverage": self.coverage, "median_width": self.median_width, "final": self.final}  # fmt: skip
