"""Paper-style figures of fitted sigmoid curves (matplotlib, imported lazily).

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas, never ``pyplot``,
so nothing global changes and it works headless. Every figure has the fixed size
``SIZE_PX`` at ``DPI``; :func:`save` writes exactly that many pixels.

- :func:`plot_fit`: one run as in the paper's Fig. 1/2: data points, the fitted Eq. 1
  curve solid over the fitted compute range and dashed beyond it, held-out points (compute
  past the fitted range) as crosses, the asymptote A as a dotted line with its value, x on
  a log scale, an optional bootstrap band.
- :func:`plot_forecast`: one run's forecast (``fit.forecast.Forecast``), read off its draws.
- :func:`plot_comparison`: several runs' forecasts on one axes, one colour each.
- :func:`plot_efficiency`: the Fig. 7 leave-one-out plot, ``log F(R)`` against ``log C``
  (``F(R) = C_mid^B / ((A - R0)/(R - R0) - 1)``), where each run is a line of slope B.
"""

from __future__ import annotations

import io as _bytes_io
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scalerl.fit import law
from scalerl.fit.options import LEVEL

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from scalerl.fit.fitting import FitResult
    from scalerl.fit.readers import Curve
    from scalerl.fit.uncertainty import Uncertainty

DPI = 100
SIZE_PX = (900, 560)  # width, height in pixels
EXTEND = 2.0  # draw the extrapolation to this multiple of the fitted range by default

Band = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # C (n,) -> (lo (n,), hi (n,))


def new_axes(size_px: tuple[int, int] = SIZE_PX) -> Axes:
    """A fresh single-axes Figure on the Agg canvas, ``size_px`` pixels at ``DPI``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def _colour(i: int):
    from matplotlib import colormaps

    return colormaps["tab10"](i % 10)


def _positive(compute, reward):
    """Points drawable on a log axis (the step-0 point has compute 0)."""
    compute, reward = np.asarray(compute, float), np.asarray(reward, float)
    keep = compute > 0
    return compute[keep], reward[keep]


def plot_fit(
    fit: FitResult,
    curve: Curve | None = None,
    *,
    heldout: Curve | None = None,
    band: Band | None = None,
    unc: Uncertainty | None = None,
    ax: Axes | None = None,
    label: str | None = None,
    color=None,
    extend_to: float | None = None,
    annotate_asymptote: bool = True,
    legend_extras: bool = True,
    predictive: Band | None = None,
    level: float = LEVEL,
    weight: float = 1.0,
) -> Axes:
    """One run: points, Eq. 1 solid over the fitted range and dashed beyond, A dotted.

    ``curve`` points inside the fitted compute range are dots ("fitted points"), points
    past it (and all of ``heldout``) are crosses ("held-out points"); a vertical line marks
    the fit cut-off when any point lies past it. ``unc`` shades the band on the expected
    curve and, lighter, the predictive interval, over the fitted range only (beyond the data a
    run's band is its ``Forecast``'s: ``plot_forecast``), and marks a ceiling that is not identified
    or that sits on a bound; ``band(C) -> (lo, hi)`` (e.g. a bootstrap's) shades a band
    when no ``unc`` is given, and ``predictive`` (at ``level``) the predictive interval. The
    dashed extrapolation reaches ``extend_to`` (default: the last point shown, or ``EXTEND``
    times the fitted range when there is none past it). ``legend_extras=False`` keeps only
    the curve's label in the legend (comparisons); ``weight`` scales the line widths and
    shades (below 1: a curve drawn beside a more prominent one).
    """
    ax = ax if ax is not None else new_axes()

    def named(text: str) -> str:
        return text if legend_extras else f"_{text}"  # matplotlib skips "_" labels

    color = color if color is not None else _colour(len(ax.lines) // 3)
    fit_c = fit.compute[fit.compute > 0]
    lo_c, hi_c = float(fit_c.min()), float(fit.compute.max())
    shown, past = [hi_c], []
    if curve is not None:
        c, r = _positive(curve.compute, curve.reward)
        inside = c <= hi_c * (1 + 1e-12)
        ax.scatter(c[inside], r[inside], s=14, color=color, alpha=0.75, zorder=3, label=named("fitted points"))
        past.append((c[~inside], r[~inside]))
        shown.append(float(c.max()) if c.size else hi_c)
    if heldout is not None:
        c, r = _positive(heldout.compute, heldout.reward)
        past.append((c[c > hi_c], r[c > hi_c]))
        shown.append(float(c.max()) if c.size else hi_c)
    held_c = np.concatenate([c for c, _ in past]) if past else np.empty(0)
    if held_c.size:
        held_r = np.concatenate([r for _, r in past])
        ax.scatter(held_c, held_r, s=30, marker="x", color=color, zorder=3, label=named("held-out points"))
    end = extend_to if extend_to is not None else max(max(shown), EXTEND * hi_c)
    inner = np.geomspace(lo_c, hi_c, 200)
    outer = np.geomspace(hi_c, max(end, hi_c * 1.0001), 200)
    text = label if label is not None else f"A={fit.A:.3f}, B={fit.B:.2f}, C_mid={fit.C_mid:.4g}"
    ax.plot(inner, fit.predict(inner), "-", color=color, lw=2 * weight, label=text)
    ax.plot(outer, fit.predict(outer), "--", color=color, lw=2 * weight)
    grid = inner  # the law's own band over its data only: beyond it, a run's band is its Forecast's
    if unc is not None:
        predictive, level, band = unc.predictive, unc.level, unc.band
    if predictive is not None:
        lo, hi = predictive(grid)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.10 * weight, lw=0, label=named(f"predictive interval ({level:.0%})"))
    if band is not None:
        lo, hi = band(grid)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.22 * weight, lw=0, label=named("band on the expected curve"))
    _asymptote(ax, fit, unc, color, lo_c, annotate_asymptote)
    if held_c.size:
        ax.axvline(hi_c, color="0.5", lw=0.8, ls="-.", label=named(f"fit cut-off ({hi_c:.4g})"))
    _style(ax, curve)
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, max(top, min(fit.A, 1.02) + 0.06 * (top - bottom)))  # room for the A label
    ax.legend(fontsize=8, loc="lower right")
    return ax


def _asymptote(ax, fit, unc, color, x: float, annotate: bool) -> None:
    """The dotted A line, labelled; "not identified" / "on a bound" when it is."""
    identified = unc is None or unc.identified
    ax.axhline(fit.A, ls=":" if identified else (0, (1, 4)), color=color, lw=1.2)
    if not annotate:
        return
    text = f"A = {fit.A:.3f}"
    if unc is not None and not identified:
        lo, hi = unc.A_plausible
        text += f" (NOT identified: any A in [{lo:.2f}, {hi:.2f}])"
        ax.axhspan(lo, min(hi, 1.0), color=color, alpha=0.05, lw=0)
    elif "A" in fit.bounds_hit:
        text += " (on a bound)"
    ax.annotate(text, (x, fit.A), xytext=(2, 3), textcoords="offset points", color=color, fontsize=9, va="bottom")


def _style(ax: Axes, curve: Curve | None = None) -> None:
    """Log compute axis, grid, and axis names: the curve's columns, else generic ones where
    the axes has none yet (a fit drawn beside another keeps the first one's names)."""
    ax.set_xscale("log")
    if curve is not None or not ax.get_xlabel():
        ax.set_xlabel(f"compute ({curve.x})" if curve is not None else "compute")
    if curve is not None or not ax.get_ylabel():
        ax.set_ylabel(curve.y if curve is not None else "reward (pass rate)")
    ax.grid(True, which="major", alpha=0.3)


def plot_forecast(forecast, curve: Curve | None = None, *, targets: Sequence[float] = (), ax: Axes | None = None,
                  title: str | None = None, extend_to: float | None = None, color=None) -> Axes:
    """One run's ``Forecast`` (``fit.forecast``): the evaluations it saw (dots) and those after
    its cut (crosses), the law's fit over the data where there is one (thin), and from the
    cut on the forecast's median (dashed), its band on the expected curve and, lighter, the
    predictive interval of one evaluation, read off the forecast's draws; each target compute
    with its value and predictive interval; A's plausible range where the ceiling is not
    identified. The x axis is log compute in the log's own unit."""
    ax = ax if ax is not None else new_axes()
    color = color if color is not None else _colour(0)
    seen = forecast.log.curve
    cut = forecast.cut
    shown = curve if curve is not None else seen
    c, r = _positive(shown.compute, shown.reward)
    inside = c <= cut * (1 + 1e-12)
    ax.scatter(c[inside], r[inside], s=14, color=color, alpha=0.75, zorder=3, label="evaluations seen")
    if (~inside).any():
        ax.scatter(c[~inside], r[~inside], s=30, marker="x", color=color, zorder=3, label="evaluations after the cut")
        ax.axvline(cut, color="0.5", lw=0.8, ls="-.", label=f"cut ({cut:.4g})")
    lo_c = float(c.min()) if c.size else cut / 10.0
    end = extend_to or max([float(c.max()) if c.size else cut, 2.0 * cut, forecast.budget or 0.0, *targets])
    if forecast.fit is not None:
        inner = np.geomspace(lo_c, cut, 100)
        fit = forecast.fit
        ax.plot(inner, fit.predict(inner), "-", color=color, lw=1.2, alpha=0.7,
                label=f"the law's fit: A={fit.A:.3f}, B={fit.B:.2f}, C_mid={fit.C_mid:.4g}")  # fmt: skip
    if forecast.draws is not None:
        grid = np.geomspace(cut, end, 120)
        at = forecast.at(grid)
        ax.plot(grid, at.value, "--", color=color, lw=2, label=f"forecast ({forecast.method})")
        ax.fill_between(grid, at.pred_lo, at.pred_hi, color=color, alpha=0.10, lw=0,
                        label=f"predictive interval ({forecast.level:.0%})")  # fmt: skip
        ax.fill_between(grid, at.lo, at.hi, color=color, alpha=0.22, lw=0, label="band on the expected curve")
        for t in targets:
            a = forecast.at(float(t))
            ax.errorbar([t], [a.value], yerr=[[a.value - a.pred_lo], [a.pred_hi - a.value]], fmt="D", color="C3",
                        capsize=4, label=f"at {t:.4g}: {a.value:.3f} [{a.pred_lo:.3f}, {a.pred_hi:.3f}]")  # fmt: skip
    if forecast.unc is not None and not forecast.unc.identified:
        a_lo, a_hi = forecast.unc.A_plausible
        ax.axhspan(a_lo, min(a_hi, 1.0), color=color, alpha=0.05, lw=0,
                   label=f"ceiling not identified: any A in [{a_lo:.2f}, {a_hi:.2f}]")  # fmt: skip
    _style(ax, seen)
    ax.set_title(title or f"{seen.name}: {forecast.state.name}, forecast follows {forecast.method}")
    ax.legend(fontsize=8, loc="lower right")
    return ax


def plot_comparison(
    forecasts: Mapping[str, object],
    curves: Mapping[str, Curve] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    extend_to: float | None = None,
) -> Axes:
    """Several runs on one axes, each in its own colour: its evaluations, its law's fit over
    its data (solid, labelled with its A and B), and from its cut on its ``Forecast``'s median
    (dashed) and band on the expected curve, read off the forecast's draws (``Forecast.at``):
    the band ``plan``, ``fit a`` and the pages show for it, never the law's own."""
    ax = ax if ax is not None else new_axes()
    curves = curves or {}
    end = extend_to
    if end is None:
        end = max([float(c.compute.max()) for c in curves.values()]
                  + [EXTEND * f.cut for f in forecasts.values()])  # fmt: skip
    for i, (name, f) in enumerate(forecasts.items()):
        color = _colour(i)
        curve = curves.get(name, f.log.curve)
        c, r = _positive(curve.compute, curve.reward)
        ax.scatter(c, r, s=12, color=color, alpha=0.7, zorder=3)
        label = name if f.fit is None else f"{name}: A={f.fit.A:.3f}, B={f.fit.B:.2f}"
        if f.fit is not None:
            inner = np.geomspace(float(c.min()) if c.size else f.cut / 10.0, f.cut, 100)
            ax.plot(inner, f.fit.predict(inner), "-", color=color, lw=2, label=label)
            label = None
        if f.draws is not None and end > f.cut:
            grid = np.geomspace(f.cut, end, 120)
            at = f.at(grid)
            ax.plot(grid, at.value, "--", color=color, lw=2, label=label)
            ax.fill_between(grid, at.lo, at.hi, color=color, alpha=0.18, lw=0)
    _style(ax, next(iter(curves.values()), None))
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title)
    return ax


def plot_efficiency(
    fits: Mapping[str, FitResult],
    curves: Mapping[str, Curve],
    *,
    ax: Axes | None = None,
    title: str | None = "Efficiency at a shared A (slope = B)",
) -> Axes:
    """Fig. 7: ``log F(R)`` against ``log C`` for each run; each fit is a line of slope B.

    ``fits`` are normally the refits with A fixed to the runs' mean (the paper's rule,
    §1.4), so the slopes compare efficiency at one asymptote. Points whose reward is not
    strictly between R0 and A have no finite ``log F`` and are left out.
    """
    ax = ax if ax is not None else new_axes()
    for i, (name, fit) in enumerate(fits.items()):
        color = _colour(i)
        c, r = _positive(curves[name].compute, curves[name].reward)
        log_f = law.efficiency_transform(r, fit.A, fit.C_mid, fit.B, fit.R0)
        ok = np.isfinite(log_f)
        ax.scatter(np.log(c[ok]), log_f[ok], s=10, color=color, alpha=0.6)
        x = np.log(np.array([c.min(), c.max()])) if c.size else np.log([1.0, 10.0])
        ax.plot(x, fit.B * x, "-", color=color, lw=2, label=f"{name}: B={fit.B:.2f}")
    ax.set_xlabel("log C")
    ax.set_ylabel("log F(R)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return ax


def _figure(fig_or_ax) -> Figure:
    from matplotlib.figure import Figure

    return fig_or_ax if isinstance(fig_or_ax, Figure) else fig_or_ax.figure


def png_bytes(fig_or_ax, size_px: tuple[int, int] = SIZE_PX) -> bytes:
    """The figure as PNG bytes, exactly ``size_px`` pixels."""
    fig = _figure(fig_or_ax)
    fig.set_size_inches(size_px[0] / DPI, size_px[1] / DPI)
    buffer = _bytes_io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)  # no bbox_inches="tight": it changes the size
    return buffer.getvalue()


def save(fig_or_ax, path: str | Path, size_px: Sequence[int] = SIZE_PX) -> Path:
    """Write a PNG of exactly ``size_px`` pixels; parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig_or_ax, (int(size_px[0]), int(size_px[1]))))
    return path
