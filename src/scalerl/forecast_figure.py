"""The live forecast as a picture, for where users already look (TensorBoard's Images tab, W&B).

After each evaluation the live forecast (``live_forecast``) adds ``forecast_*`` fields to a
record; :class:`ForecastFigure` keeps the run's evaluations as the records pass and draws,
on each record that carries a forecast, the validation so far, the forecast of the final
value at the run's budget with its 95% predictive interval, and the plausible range of the
ceiling A. Drawn with matplotlib's Agg canvas (never pyplot), small, once per forecast.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from scalerl.runfolder import COMPUTE, VAL_PASS_RATE
from scalerl.runfolder import Forecast as K


class ForecastFigure:
    """Evaluations in, a PNG out for every record that carries a forecast."""

    def __init__(self, metric: str = VAL_PASS_RATE) -> None:
        self.metric = metric
        self.points: list[tuple[float, float]] = []

    def observe(self, record: dict[str, Any]) -> bytes | None:
        """Keep the record's evaluation; the figure's PNG when the record has a forecast."""
        if isinstance(record.get(self.metric), int | float) and isinstance(record.get(COMPUTE), int | float):
            self.points.append((float(record[COMPUTE]), float(record[self.metric])))
        needed = (K.FINAL, K.FINAL_LO, K.FINAL_HI, K.BUDGET)
        if not self.points or not all(isinstance(record.get(k), int | float) for k in needed):
            return None
        try:
            return self._draw(record)
        except ImportError:  # matplotlib is the `plots` extra: a run without it logs its scalars, no picture
            return None

    def _draw(self, r: dict[str, Any]) -> bytes:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(5.0, 3.2), dpi=80)
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        c, y = zip(*self.points)
        ax.plot(c, y, "o-", ms=3, lw=1, label=self.metric)
        mid, lo, hi, budget = r[K.FINAL], r[K.FINAL_LO], r[K.FINAL_HI], r[K.BUDGET]
        ax.plot([c[-1], budget], [y[-1], mid], "--", color="C1", lw=1)
        ax.errorbar([budget], [mid], yerr=[[mid - lo], [hi - mid]], fmt="s", color="C1", capsize=4,
                    label=f"forecast at the budget (95%; {r.get(K.METHOD, 'fit')})")  # fmt: skip
        if isinstance(r.get(K.A_LO), int | float) and isinstance(r.get(K.A_HI), int | float):
            ax.axhspan(r[K.A_LO], r[K.A_HI], color="C2", alpha=0.15, label="ceiling A, plausible")
        ax.set_xlabel(COMPUTE)
        ax.set_ylabel(self.metric)
        ax.set_title(f"step {r.get(K.STEP, r.get('step'))}: {mid:.3f} [{lo:.3f}, {hi:.3f}] at {budget:.3g}",
                     fontsize=9)  # fmt: skip
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        out = io.BytesIO()
        fig.savefig(out, format="png")
        return out.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    return struct.unpack(">II", png[16:24])
