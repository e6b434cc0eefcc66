"""The sweep's comparison report: one pooled curve per recipe, compared as ``scalerl compare``.

Seeds of one recipe are pooled the way the paper pools repeated runs (digest §1.4): all their
(compute, pass rate) evaluation points form one curve, and Eq. 1 is fitted to it. The curves
then go through the fit package unchanged: :func:`~scalerl.fit.compare.compare_runs` (the
A-margin rule), :func:`~scalerl.fit.compare.loo_table` (Fig. 7, with ``scalerl`` as the
baseline when it is in the sweep) and the Markdown / HTML / JSON writers of
:mod:`scalerl.fit.report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scalerl.fit.compare import compare_runs, loo_table
from scalerl.fit.options import MARGIN, FitOptions
from scalerl.fit.readers import Curve, read_jsonl
from scalerl.runfolder import METRICS, REPORT


def pooled_curve(name: str, metrics_files: Sequence[Path], *, x: str | None = None, y: str | None = None) -> Curve:
    """All seeds' evaluation points of one recipe as one curve, sorted by compute.

    Points at equal compute (e.g. two seeds' step 0 when ``x`` is a step-based axis) are
    averaged, so the compute axis stays strictly increasing as the fitter expects.
    """
    curves = [c for path in metrics_files for c in read_jsonl(Path(path), x=x, y=y)]
    compute = np.concatenate([c.compute for c in curves])  # (M,)
    reward = np.concatenate([c.reward for c in curves])  # (M,)
    unique, inverse = np.unique(compute, return_inverse=True)
    mean_reward = np.bincount(inverse, weights=reward) / np.bincount(inverse)
    source = ", ".join(str(p) for p in metrics_files)
    return Curve(name, unique, mean_reward, source, curves[0].x, curves[0].y)


def write_report(runs: dict[str, list[Path]], out: Path, *, x: str | None = None,
                 margin: float = MARGIN, baseline: str | None = "scalerl") -> list[Path]:
    """Compare the recipes in ``runs`` (name -> its seeds' run dirs); write
    ``out/report.md`` (+ figures), ``out/report.html`` and ``out/comparison.json``.

    Raises :class:`~scalerl.fit.errors.CurveError` (one sentence) when a curve cannot be
    fitted, e.g. a run too short to have enough evaluations.
    """
    from dataclasses import replace

    from scalerl.experiments.decisions_report import decisions_section
    from scalerl.fit import report

    curves = [pooled_curve(name, [Path(d) / METRICS for d in dirs], x=x) for name, dirs in runs.items()]
    comparison = compare_runs(curves, options=FitOptions(margin=margin))
    base = baseline if baseline in runs else None
    loo = loo_table(curves, baseline=base) if base else None
    figures = report.comparison_figures(comparison, loo if loo is not None else loo_table(curves))
    rep = replace(report.comparison_report(comparison, loo=loo), title="scalerl sweep", figures=tuple(figures))
    if section := decisions_section(out, x):  # an adaptive study's decisions come first
        rep = replace(rep, paragraphs=(section[0], *rep.paragraphs), tables=(*section[1], *rep.tables),
                      figures=(section[2], *rep.figures))
    written = report.write_markdown(out / REPORT, rep)
    written.append(report.write(out / "report.html", report.to_html(rep)))
    data = comparison.to_dict() | ({"loo": loo.to_dict()} if loo is not None else {})
    written.append(report.write_json(out / "comparison.json", data))
    return written
