"""Reports: tables hold the numbers, the HTML page is self-contained, JSON is strict."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from scalerl.fit import report
from scalerl.fit.compare import compare_runs, extrapolation_errors, loo_table
from scalerl.fit.readers import Curve

from ._files import synthetic_curve


@pytest.fixture(scope="module")
def comparison_parts():
    curves = [
        Curve("base", *synthetic_curve(B=2.0), "base.csv"),
        Curve("<b>var</b>", *synthetic_curve(B=1.6, seed=1), "var.csv"),  # must be escaped
    ]
    comparison = compare_runs(curves)
    loo = loo_table(curves, baseline="base")
    extrapolation = [extrapolation_errors(c) for c in curves]
    return comparison, loo, extrapolation


def test_fmt_rules():
    assert report.fmt(0.61) == "0.610"
    assert report.fmt(12.345) == "12.3"
    assert report.fmt(2542.4) == "2,542"
    assert report.fmt(3.6e21) == "3.600e+21"
    assert report.fmt(None) == "-"


def test_fits_table_rows_carry_the_fitted_numbers(comparison_parts):
    comparison, _, _ = comparison_parts
    table = report.fits_table(comparison.runs, "fits", comparison.verdict.refit_B)
    run = comparison.runs[0]
    lo, hi = run.intervals["A"]
    row = dict(zip(table.header, table.rows[0]))
    assert row["A"] == f"{run.fit.A:.3f} [{lo:.3f}, {hi:.3f}]"
    assert row["n"] == str(run.fit.n_points) and row["flags"] == "ok"
    assert row["B at shared A"] == f"{comparison.verdict.refit_B['base']:.3f}"


def test_html_is_self_contained_with_embedded_png(comparison_parts):
    comparison, loo, extrapolation = comparison_parts
    figures = report.comparison_figures(comparison, loo)
    rep = report.comparison_report(
        comparison, loo=loo, extrapolation=extrapolation, figures=figures
    )
    page = report.to_html(rep)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 2 and all(s.startswith("data:image/png;base64,") for s in sources)
    png = base64.b64decode(sources[0].split(",", 1)[1])
    assert png.startswith(b"\x89PNG") and png == figures[0].png
    assert "&lt;b&gt;var&lt;/b&gt;" in page and "<b>var</b>" not in page
    assert comparison.verdict.winner in page and "Leave-one-out table" in page


def test_markdown_tables_and_figure_links(comparison_parts, tmp_path):
    comparison, loo, _ = comparison_parts
    rep = report.comparison_report(
        comparison, loo=loo, figures=report.comparison_figures(comparison, loo)
    )
    paths = report.write_markdown(tmp_path / "cmp.md", rep)
    text = paths[0].read_text()
    assert "| run | A | B | C_mid |" in text and "| --- |" in text
    assert "![" in text and "(cmp_compare.png)" in text and (tmp_path / "cmp_compare.png").is_file()
    piped = report.Report("t", tables=(report.Table("c", ("run",), (("a|b",),)),))
    assert "| a\\|b |" in report.to_markdown(piped)  # a pipe in a cell must not split it


def test_write_json_is_strict(tmp_path):
    path = report.write_json(tmp_path / "x.json", {"a": np.float64(np.inf), "b": np.arange(2), "c": float("nan")})  # fmt: skip
    assert json.loads(path.read_text()) == {"a": None, "b": [0, 1], "c": None}
