"""Paper-style figures of fitted sigmoid curves (matplotlib, imported lazily).

Figures are built on ``matplotlib.figure.Figure`` with the Agg canvas, never ``pyplot``,
so nothing global changes and it works headless. Every figure has the fixed size
``SIZE_PX`` at ``DPI``; :func:`save` writes exactly that many pixels.

- :func:`plot_fit`: one run as in the paper's Fig. 1/2: data points, the fitted Eq. 1
  curve solid over the fitted compute range and dashed beyond it, held-out points (compute
  past the fitted range) as crosses, the asymptote A as a dotted line with its value, x on
  a log scale, an optional bootstrap band.
- :func:`plot_comparison`: several runs on one axes, one colour each.
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

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from scalerl.fit.fitting import FitResult
    from scalerl.fit.io import Curve

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
    ax: Axes | None = None,
    label: str | None = None,
    color=None,
    extend_to: float | None = None,
    annotate_asymptote: bool = True,
) -> Axes:
    """One run: points, Eq. 1 solid over the fitted range and dashed beyond, A dotted.

    ``curve`` points inside the fitted compute range are dots, points past it (and all of
    ``heldout``) are crosses. ``band(C) -> (lo, hi)`` shades a bootstrap prediction band.
    The dashed extrapolation reaches ``extend_to`` (default: the last point shown, or
    ``EXTEND`` times the fitted range when there is none past it).
    """
    ax = ax if ax is not None else new_axes()
    color = color if color is not None else _colour(len(ax.lines) // 3)
    fit_c = fit.compute[fit.compute > 0]
    lo_c, hi_c = float(fit_c.min()), float(fit.compute.max())
    shown = [hi_c]
    if curve is not None:
        c, r = _positive(curve.compute, curve.reward)
        inside = c <= hi_c * (1 + 1e-12)
        ax.scatter(c[inside], r[inside], s=14, color=color, alpha=0.75, zorder=3)
        ax.scatter(c[~inside], r[~inside], s=30, marker="x", color=color, zorder=3)
        shown.append(float(c.max()) if c.size else hi_c)
    if heldout is not None:
        c, r = _positive(heldout.compute, heldout.reward)
        c, r = c[c > hi_c], r[c > hi_c]
        ax.scatter(c, r, s=30, marker="x", color=color, zorder=3)
        shown.append(float(c.max()) if c.size else hi_c)
    end = extend_to if extend_to is not None else max(max(shown), EXTEND * hi_c)
    inner = np.geomspace(lo_c, hi_c, 200)
    outer = np.geomspace(hi_c, max(end, hi_c * 1.0001), 200)
    text = label if label is not None else f"A={fit.A:.3f}, B={fit.B:.2f}, C_mid={fit.C_mid:.4g}"
    ax.plot(inner, fit.predict(inner), "-", color=color, lw=2, label=text)
    ax.plot(outer, fit.predict(outer), "--", color=color, lw=2)
    if band is not None:
        grid = np.concatenate([inner, outer[1:]])
        lo, hi = band(grid)
        ax.fill_between(grid, lo, hi, color=color, alpha=0.18, lw=0)
    ax.axhline(fit.A, ls=":", color=color, lw=1.2)
    if annotate_asymptote:
        ax.annotate(
            f"A = {fit.A:.3f}",
            (lo_c, fit.A),
            xytext=(2, 3),
            textcoords="offset points",
            color=color,
            fontsize=9,
            va="bottom",
        )
    _style(ax, curve)
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, max(top, fit.A + 0.06 * (top - bottom)))  # room for the A label
    ax.legend(fontsize=8, loc="lower right")
    return ax


def _style(ax: Axes, curve: Curve | None = None) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(f"compute ({curve.x})" if curve is not None else "compute")
    ax.set_ylabel(curve.y if curve is not None else "reward (pass rate)")
    ax.grid(True, which="major", alpha=0.3)


def plot_comparison(
    fits: Mapping[str, FitResult],
    curves: Mapping[str, Curve] | None = None,
    *,
    bands: Mapping[str, Band] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    extend_to: float | None = None,
) -> Axes:
    """Several runs on one axes, each in its own colour, labelled with its A and B."""
    ax = ax if ax is not None else new_axes()
    curves, bands = curves or {}, bands or {}
    end = extend_to
    if end is None:
        ends = [float(c.compute.max()) for c in curves.values()]
        ends += [EXTEND * float(f.compute.max()) for f in fits.values()]
        end = max(ends)
    for i, (name, fit) in enumerate(fits.items()):
        plot_fit(
            fit,
            curves.get(name),
            band=bands.get(name),
            ax=ax,
            color=_colour(i),
            label=f"{name}: A={fit.A:.3f}, B={fit.B:.2f}",
            extend_to=end,
            annotate_asymptote=False,
        )
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
