"""``scalerl report DIR``: the study report of a sweep, or of any folder of runs.

Every ``metrics.jsonl`` under DIR is a run (``_base``/``base_model`` folders are skipped).
Runs in folders named ``seed<k>`` are seeds of one *point*, named by the folder above, and
pooled into one curve as the paper pools repeated runs (digest §1.4); a point's folder names
``axis=value`` pairs (``scalerl sweep SPEC.yaml`` writes ``<recipe>/<axis>=<v>,.../seed<k>``),
which the per-axis tables read back. The report holds:

- every point's curve with its fit, its extrapolation to 2× and its predictive band;
- the table of A, B and C_mid with intervals and the identifiability verdict, and (when a
  ``scalerl`` point is present, or otherwise against the first) the leave-one-out table;
- the efficiency plot (log F(R) against log C at the shared A, slope B);
- per axis with two or more values, A and B against the axis value;
- the fit-to-half check of every run: its forecast from the first half of its compute
  (``fit.forecast``, as ``scalerl fit --fit-frac 0.5``), at the end with the predictive
  interval and its width, and whether the observed value fell inside.

Markdown (figures as PNG files beside it) and one self-contained HTML file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalerl.experiments.decisions_report import decisions_section
from scalerl.experiments.report import pooled_curve
from scalerl.fit import plot, report
from scalerl.fit.commands.outputs import check_outputs
from scalerl.fit.compare import RunFit, compare_runs, fit_run, forecast_curve, loo_table
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import forecast_of, read_logs
from scalerl.fit.forecast.prior_runs import run_options
from scalerl.fit.options import FitOptions
from scalerl.fit.prior.pooling import joint_fit
from scalerl.fit.readers import Columns
from scalerl.runfolder import METRICS, STUDY, is_run, run_folders

_SEED = re.compile(r"seed\d+")


class StudyError(ValueError):
    """The folder cannot make a report; one sentence."""


@dataclass(frozen=True)
class Point:
    name: str
    runs: tuple[Path, ...]  # run directories (its seeds)
    values: dict  # axis -> value, parsed from the folder names

    @property
    def metrics(self) -> list[Path]:
        return [r / METRICS for r in self.runs]


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def discover(root: Path) -> list[Point]:
    """The points under ``root``, each with its seeds' run directories, in sorted order."""
    if not root.is_dir():
        raise StudyError(f"{root} is not a folder")
    runs = [r for r in run_folders(root) if r != root or not is_run(root)]
    if not runs:
        raise StudyError(f"{root} holds no run directories (no metrics.jsonl under it)")
    points: dict[str, list[Path]] = {}
    for run in runs:
        rel = run.relative_to(root)
        key = rel.parent if _SEED.fullmatch(run.name) else rel
        points.setdefault(str(key) if str(key) != "." else root.name, []).append(run)
    out = []
    for name, dirs in points.items():
        values = dict(pair.split("=", 1) for part in Path(name).parts for pair in part.split(",") if "=" in pair)
        out.append(Point(name, tuple(dirs), {k: _value(v) for k, v in values.items()}))
    return out


def _fit_points(points: Sequence[Point], options: FitOptions, x: str | None, y: str | None):
    """Every point's pooled curve, its one ``Forecast`` (``compare.forecast_curve``) and the law
    of it (its fit); points that cannot be fitted are listed why."""
    fitted, failed = [], []
    for p in points:
        try:
            curve = pooled_curve(p.name, p.metrics, x=x, y=y)
            forecast = forecast_curve(curve, options)
            if forecast.fit is None:
                raise CurveError(forecast.state.message)
            fitted.append((p, fit_run(curve, options=options, forecast=forecast)))
        except CurveError as err:
            failed.append(f"{p.name}: not fitted ({err})")
    return fitted, failed


def _half_rows(points: Sequence[Point], options: FitOptions, x: str | None, y: str | None) -> list[tuple[str, ...]]:
    rows = []
    for p in points:
        for run in p.runs:
            name = f"{p.name}/{run.name}" if len(p.runs) > 1 or run.name != p.name else p.name
            try:
                (log,) = read_logs([run], Columns(x=x, y=y))  # the run folder: its config.yaml with it
                end = float(log.curve.compute[-1])
                fc = forecast_of(log, cut=0.5 * end, options=run_options(log, run, budget=end, x=x,
                                                                         given={"r0": options.r0}))  # fmt: skip
                held = fc.heldout(log.curve.compute, log.curve.reward)
                if held is None:
                    raise CurveError(fc.state.message)
                f = held.final
            except CurveError as err:
                why = str(err).removeprefix(f"{run / METRICS}: ")
                rows.append((name, "-", "-", "-", f"not possible: {why}"))
                continue
            verdict = ("covered" if f["covered"] else "NOT covered") + f" (width {f['width']:.3f}; {fc.method})"
            rows.append((name, report.fmt(f["predicted"]), report.interval_text(f["pred_lo"], f["pred_hi"]),
                         report.fmt(f["observed"]), verdict))
    return rows


def _order(value) -> tuple:
    """Sort key of an axis value: numbers by size (4 before 16), then strings, then none."""
    if isinstance(value, int | float):
        return (0, value, "")
    return (1, 0, str(value)) if value is not None else (2, 0, "")


def _axis_tables(fitted: Sequence[tuple[Point, RunFit]]) -> list[report.Table]:
    """Per axis with ≥ 2 values: A and B (with intervals) of every point, by axis value."""
    tables = []
    axes = sorted({k for p, _ in fitted for k in p.values})
    for axis in axes:
        values = {p.values.get(axis) for p, _ in fitted} - {None}
        if len(values) < 2:
            continue
        rows = []
        for p, run in sorted(fitted, key=lambda t: (_order(t[0].values.get(axis)), t[0].name)):
            others = ",".join(f"{k}={v}" for k, v in p.values.items() if k != axis) or "-"
            iv = run.intervals
            rows.append((str(p.values.get(axis, "-")), p.name.split("/")[0], others,
                         report.with_interval(run.fit.A, iv.get("A")), report.with_interval(run.fit.B, iv.get("B")),
                         "identified" if run.identified else "NOT identified"))
        tables.append(report.Table(f"Axis '{axis}': fitted A and B against the axis value",
                                   (axis, "recipe", "other axes", "A", "B", "ceiling"), tuple(rows)))
    return tables


def _axis_figure(fitted, axis: str) -> report.Figure:
    """A and B against the axis value, one line per (recipe, other axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6))  # never pyplot: no global figure registry to leak into
    FigureCanvasAgg(fig)
    ax_a, ax_b = fig.subplots(1, 2)
    lines: dict[str, list] = {}
    for p, run in fitted:
        if axis in p.values:
            key = ",".join([p.name.split("/")[0], *(f"{k}={v}" for k, v in p.values.items() if k != axis)])
            lines.setdefault(key, []).append((p.values[axis], run))
    for key, items in lines.items():
        items.sort(key=lambda t: _order(t[0]))
        xs = [str(v) for v, _ in items]
        for ax, param in ((ax_a, "A"), (ax_b, "B")):
            mid = np.array([getattr(r.fit, param) for _, r in items])
            iv = np.array([r.intervals.get(param, (np.nan, np.nan)) for _, r in items], dtype=float)
            err = np.abs(np.vstack([mid - iv[:, 0], iv[:, 1] - mid]))
            ax.errorbar(xs, mid, yerr=np.nan_to_num(err), marker="o", capsize=3, label=key)
            ax.set_xlabel(axis)
            ax.set_ylabel(param)
    ax_a.set_title("ceiling A (interval)")
    ax_b.set_title("efficiency B (interval)")
    ax_b.legend(fontsize=7)
    fig.tight_layout()
    return report.Figure(f"A and B against '{axis}'", plot.png_bytes(fig), f"axis_{axis}.png")


def study_report(root: Path, x: str | None = None, y: str | None = None, pooled: bool = False) -> report.Report:
    """Fit, compare and check every point and run under ``root`` (``y``: the reward column,
    default ``val_pass_rate``; ``downstream_pass_rate`` for the harder variant). ``pooled``:
    the comparison and the leave-one-out table read a joint fit of the points
    (``scalerl.fit.prior.pooling``: B and C_mid partially pooled, A per point)."""
    options = FitOptions()
    points = discover(root)
    fitted, failed = _fit_points(points, options, x, y)
    if not fitted:
        raise StudyError(f"no run under {root} could be fitted: {'; '.join(failed)}")
    tables, figures, paragraphs = [], [], list(failed)
    for p, run in fitted:
        ax = plot.plot_forecast(run.forecast, run.curve, extend_to=2.0 * float(run.curve.compute.max()),
                                title=f"{p.name}: its fit and its forecast to 2x (the forecast's band)")  # fmt: skip
        figures.append(report.Figure(p.name, plot.png_bytes(ax), f"curve_{re.sub(r'[^A-Za-z0-9=.-]+', '_', p.name)}.png"))
    if len(fitted) >= 2:
        curves = [run.curve for _, run in fitted]
        names = [c.name for c in curves]
        base = next((n for n in names if n.split("/")[0] == "scalerl" and "=" not in n), names[0])
        joint = joint_fit(curves, options) if pooled else None
        fits = None if joint is None else joint.fits
        comparison = compare_runs(curves, options=options, fits=fits)
        loo = loo_table(curves, baseline=base, options=options, fits=fits)
        if joint is not None:
            paragraphs.append(f"Joint fit of {len(curves)} points: B and C_mid partially pooled (B ~ "
                              f"{np.exp(joint.mu[0]):.3g}, C_mid ~ {np.exp(joint.mu[1]):.4g}), A per point; "
                              "the comparison and the leave-one-out table read it.")  # fmt: skip
        rep = report.comparison_report(comparison, loo=loo)
        tables.extend(rep.tables)
        paragraphs.extend(rep.paragraphs)
        figures.extend(report.comparison_figures(comparison, loo))
    else:
        run = fitted[0][1]
        tables.append(report.fits_table([run], "Sigmoid fit (Eq. 1)"))
        paragraphs.append(run.unc.verdict)
    axis_tables = _axis_tables(fitted)
    tables.extend(axis_tables)
    for t in axis_tables:
        figures.append(_axis_figure(fitted, t.header[0]))
    half = _half_rows(points, options, x, y)
    tables.append(report.Table("Fit-to-half check (paper §1.5): fit the first half of each run's compute, "
                               "forecast its end", ("run", "forecast at the end", "predictive interval",
                                                    "observed", "verdict"), tuple(half)))
    covered = sum(r[-1] == "covered" for r in half)
    checked = sum(r[-1] in ("covered", "NOT covered") for r in half)
    paragraphs.insert(0, f"{len(points)} point(s), {sum(len(p.runs) for p in points)} run(s) under {root}. "
                         f"Fit-to-half: {covered} of {checked} checkable run(s) covered by their predictive "
                         f"interval ({len(half) - checked} too short to check).")
    if section := decisions_section(root, x):  # an adaptive study's decisions come first
        paragraphs.insert(0, section[0])
        tables[0:0] = section[1]
        figures.insert(0, section[2])
    return report.Report(f"scalerl report: {root.name}", tuple(paragraphs), tuple(tables), tuple(figures))


def write_study(root: Path, *, html: Path | None = None, markdown: Path | None = None,
                x: str | None = None, y: str | None = None, pooled: bool = False) -> list[Path]:
    """Write the Markdown (figures beside it) and the self-contained HTML report."""
    root = Path(root)
    html = html or root / "study.html"
    markdown = markdown or root / STUDY
    try:
        # an output that is a run's log (or the other output) is refused before any is written
        check_outputs([m for p in discover(root) for m in p.metrics], {"--html": html, "--markdown": markdown})
        rep = study_report(root, x, y, pooled)
        written = report.write_markdown(markdown, rep)
        written.append(report.write(html, report.to_html(rep)))
    except CurveError as err:  # a curve that cannot be fitted, or an output that cannot be written
        raise StudyError(str(err)) from None
    return written
