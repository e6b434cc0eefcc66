"""Figures: what is drawn (artists) and what is written (PNG size, not blank)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from scalerl.fit import plot
from scalerl.fit.compare import loo_table
from scalerl.fit.fitting import fit_sigmoid
from scalerl.fit.readers import Curve
from scalerl.fit.resample import bootstrap

from ._files import synthetic_curve


@pytest.fixture(scope="module")
def half_fit():
    """A run fitted on its first 8k of 16k GPU-hours, and the full run."""
    c, r = synthetic_curve(n=41)
    full = Curve("run", c, r, "run.csv", "gpu_hours", "val_pass_rate")
    return fit_sigmoid(c[c <= 8000], r[c <= 8000]), full


def assert_png(path, size):
    image = Image.open(path)
    assert image.size == size
    colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 20  # not a blank, one-colour canvas


def test_plot_fit_solid_inside_dashed_beyond_crosses_and_asymptote(tmp_path, half_fit):
    fit, full = half_fit
    boot = bootstrap(fit, n=20, seed=0)
    ax = plot.plot_fit(fit, full, band=boot.band)
    solid, dashed, asymptote = ax.lines[:3]
    assert solid.get_linestyle() == "-" and solid.get_xdata().max() == pytest.approx(8000)
    assert dashed.get_linestyle() == "--" and dashed.get_xdata().min() == pytest.approx(8000)
    assert dashed.get_xdata().max() == pytest.approx(16000)  # reaches the last held-out point
    assert asymptote.get_linestyle() == ":" and list(asymptote.get_ydata()) == [fit.A, fit.A]
    dots, crosses = ax.collections[:2]
    assert len(dots.get_offsets()) == 20  # 1..8k; the compute-0 point has no log-x position
    assert len(crosses.get_offsets()) == 20  # past 8k, drawn as crosses
    assert len(ax.collections) == 3  # plus the bootstrap band
    assert ax.get_xscale() == "log" and any("A = " in t.get_text() for t in ax.texts)
    assert_png(plot.save(ax, tmp_path / "fit.png"), plot.SIZE_PX)
    assert_png(plot.save(ax.figure, tmp_path / "small.png", (400, 300)), (400, 300))


def test_plot_fit_draws_into_a_given_axes(half_fit):
    fit, full = half_fit
    ax = plot.new_axes()
    assert plot.plot_fit(fit, full, ax=ax) is ax


def test_comparison_and_efficiency_figures(tmp_path):
    from scalerl.fit.compare import forecast_curve

    curves, forecasts = {}, {}
    for i, B in enumerate((1.6, 2.2)):
        c, r = synthetic_curve(B=B, seed=i)
        curves[f"B{B}"] = Curve(f"B{B}", c, r, "x.csv")
        forecasts[f"B{B}"] = forecast_curve(curves[f"B{B}"])
    ax = plot.plot_comparison(forecasts, curves, title="two runs")
    assert [t.get_text() for t in ax.get_legend().get_texts()][0].startswith("B1.6: A=")
    # past its data each run shades its Forecast's band: the same as plot_forecast's for it
    grid = np.geomspace(forecasts["B1.6"].cut, 2 * forecasts["B1.6"].cut, 120)
    shaded = ax.collections[1].get_paths()[0].vertices  # the first run's band (after its points)
    assert np.nanmax(shaded[:, 1]) == pytest.approx(float(np.max(forecasts["B1.6"].at(grid).hi)), abs=1e-9)
    assert_png(plot.save(ax, tmp_path / "compare.png"), plot.SIZE_PX)

    table = loo_table(list(curves.values()))
    eff = plot.plot_efficiency(table.refits, curves)
    for line, name in zip(eff.lines, curves):
        x, y = line.get_xdata(), line.get_ydata()
        slope = (y[1] - y[0]) / (x[1] - x[0])
        assert slope == pytest.approx(table.refits[name].B)  # Fig. 7: the slope is B
    # on the curve itself log F(R(C)) = B log C (law.efficiency_transform); points sit near it
    points = np.asarray(eff.collections[0].get_offsets())
    assert np.median(np.abs(points[:, 1] - table.refits["B1.6"].B * points[:, 0])) < 0.5
    assert_png(plot.save(eff, tmp_path / "eff.png"), plot.SIZE_PX)


def test_plot_fit_marks_an_unidentified_ceiling_the_cutoff_and_both_bands(half_fit):
    from scalerl.fit.calibrate import assess

    _, full = half_fit
    early = full.compute <= 2000  # a quarter-way prefix: the ceiling is not identified
    fit = fit_sigmoid(full.compute[early], full.reward[early])
    unc = assess(fit)
    assert not unc.identified
    ax = plot.plot_fit(fit, full, unc=unc)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for wanted in ("fitted points", "held-out points", "band on the expected curve"):
        assert wanted in labels
    assert any(t.startswith("predictive interval") for t in labels)
    assert any(t.startswith("fit cut-off") for t in labels)
    assert any("NOT identified" in t.get_text() for t in ax.texts)
    cut = [ln for ln in ax.lines if ln.get_label().startswith("fit cut-off")]
    assert cut and list(cut[0].get_xdata()) == [2000.0, 2000.0]


def test_plot_fit_marks_a_ceiling_on_its_bound():
    c, r = synthetic_curve(n=41)
    fit = fit_sigmoid(c, r, a_bounds=(0.0, 0.5))  # the box stops A below the data's ceiling
    assert "A" in fit.bounds_hit
    ax = plot.plot_fit(fit, Curve("run", c, r, "run.csv"))
    assert any("(on a bound)" in t.get_text() for t in ax.texts)
