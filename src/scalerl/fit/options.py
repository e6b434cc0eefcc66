"""``FitOptions``: how a curve is fitted, as one typed value.

Every entry point that fits (``compare``, ``forecast``, ``uncertainty``, the CLI, the
trainer's live forecast) takes one ``FitOptions`` instead of threading untyped keyword
arguments, so the R0 rule, the early-window cut and the search box are the same for a
run's fit, its sub-prefix refits and its fixed-A refits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import B_BOUNDS, MAX_POINTS, FitResult, fit_sigmoid

__all__ = ["LEVEL", "MARGIN", "FitOptions"]

LEVEL = 0.95
"""The coverage every interval claims, unless asked otherwise: the one default of ``level``
(``FitOptions``, the plots, the prior's forecast, the rise test; the config's
``forecast.level`` mirrors it, which a test holds, as the config imports nothing of ``fit``)."""
MARGIN = 0.02
"""The half-width within which a ceiling counts as identified and two ceilings as equal (the
paper's ±0.02 from three ScaleRL seeds, §1.4): the one default of ``margin`` (mirrored by the
config's ``forecast.margin``, held by the same test)."""


@dataclass(frozen=True)
class FitOptions:
    """Arguments of ``fit_sigmoid`` (see it for each one's meaning) plus the reporting
    level and margin.

    ``level`` is the coverage every interval claims (:data:`LEVEL`). ``margin`` is the
    half-width within which a ceiling counts as identified and two ceilings count as equal
    (:data:`MARGIN`).
    """

    r0: float | str | None = None
    min_compute: float = 0.0
    method: str = "fast"
    bounded: bool = True
    a_grid: tuple[float, ...] | None = None
    c_mid_grid: tuple[float, ...] | None = None
    a_bounds: tuple[float, float] | None = None
    b_bounds: tuple[float, float] = B_BOUNDS
    c_mid_bounds: tuple[float, float] | None = None
    max_points: int | None = MAX_POINTS
    level: float = LEVEL
    margin: float = MARGIN

    def __post_init__(self) -> None:
        for name in ("r0", "level", "margin", "min_compute", "max_points"):
            _check(name, getattr(self, name), name, self.bounded)

    @classmethod
    def from_given(cls, given: Mapping[str, object], labels: Mapping[str, str] | None = None) -> FitOptions:
        """Options from the values a caller was given, None meaning "this class's default"
        (the CLI's flags default to None, so every default lives here). A bad value is one
        sentence naming it as ``labels`` does (the CLI: ``{"level": "--level"}``)."""
        values = {k: v for k, v in given.items() if v is not None}
        bounded = bool(values.get("bounded", True))
        for name, value in values.items():
            _check(name, value, (labels or {}).get(name, name), bounded)
        return cls(**values)

    def fit(self, compute, reward, *, source: str | None = None, fixed_A: float | None = None) -> FitResult:
        """``fit_sigmoid`` with these options (and optionally the asymptote fixed)."""
        return fit_sigmoid(
            compute, reward, r0=self.r0, min_compute=self.min_compute, method=self.method,
            a_grid=self.a_grid, c_mid_grid=self.c_mid_grid, fixed_A=fixed_A,
            bounded=self.bounded, a_bounds=self.a_bounds, b_bounds=self.b_bounds,
            c_mid_bounds=self.c_mid_bounds, source=source, max_points=self.max_points,
        )  # fmt: skip

    def with_(self, **changes) -> FitOptions:
        return replace(self, **changes)


def _check(name: str, value, label: str, bounded: bool) -> None:
    """Every check of a ``FitOptions`` field, one sentence naming it ``label`` (NaN fails)."""
    if name == "r0" and isinstance(value, int | float) and not isinstance(value, bool):
        if not np.isfinite(value) or (bounded and not 0.0 <= value <= 1.0):
            raise CurveError(f"{label} must be a pass rate in [0, 1], 'first' or 'fit', got {value:g}.")
    elif name == "level" and not 0.0 < value < 1.0:
        raise CurveError(f"{label} must lie in (0, 1), got {value:g}.")
    elif name in ("margin", "min_compute") and not value >= 0.0:
        raise CurveError(f"{label} must be 0 or more, got {value:g}.")
    elif name == "max_points" and value is not None and value < 10:
        raise CurveError(f"{label} must be 10 or more (or None), got {value}.")
