"""Tables and reports of fits and comparisons: plain tables, Markdown, self-contained HTML.

A :class:`Report` is a title, paragraphs, tables (:class:`Table`: caption, header, rows
of strings) and PNG figures. :func:`to_markdown` links figures by file name;
:func:`to_html` inlines them as base64 ``data:`` URIs with inline CSS, so the one HTML file
opens anywhere with nothing else beside it. :func:`rich_table` renders the same tables in
the terminal; :func:`write_json` writes strict JSON (NaN and inf become null).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from scalerl.fit import plot
from scalerl.fit.compare import Comparison, ExtrapolationScore, LooTable, RunFit
from scalerl.fit.errors import CurveError
from scalerl.fit.options import LEVEL


@dataclass(frozen=True)
class Table:
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    caption: str
    png: bytes
    filename: str  # how Markdown links it


@dataclass(frozen=True)
class Report:
    title: str
    paragraphs: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = field(default=(), repr=False)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for a table: 3 decimals below 10, whole numbers with separators up to
    1e6 (compute in GPU-hours), scientific beyond (FLOPs); an infinite compute or hour is
    "never" (a crossing no draw reaches), never "inf"; NaN is "-"."""
    if value is None or value != value:
        return "-"
    if value == float("inf"):
        return "never"
    size = abs(value)
    if size >= 1e6 and size != float("inf"):
        return f"{value:.3e}"
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}f}"


def fmt_compute(value: float | None) -> str:
    """A compute value (C_mid, a budget): as :func:`fmt`, but 4 significant digits below 0.1,
    where device-hours of small runs live (0.00046, not 0.000)."""
    if value is None or value == 0 or abs(value) >= 0.1 or value != value:
        return fmt(value)
    return f"{value:.4g}"


def with_interval(value: float, interval: Sequence[float] | None, number=fmt) -> str:
    return number(value) if not interval else f"{number(value)} [{number(interval[0])}, {number(interval[1])}]"


def flags(run: RunFit) -> str:
    """Fit-quality warnings: parameters on a bound of the search, no convergence."""
    out = [f"{p} at bound" for p in run.fit.bounds_hit]
    if not run.fit.converged:
        out.append("not converged")
    if run.fit.binned_from is not None:
        out.append(f"binned {run.fit.binned_from:,} -> {run.fit.n_points:,}")
    return ", ".join(out) or "ok"


def ceiling_text(run: RunFit) -> str:
    """The identification verdict in a few words, for a table cell."""
    lo, hi = run.unc.A_plausible
    if run.fit.fixed_A is not None:
        return "fixed"
    if run.identified:
        return f"identified [{lo:.3f}, {hi:.3f}]"
    return f"NOT identified: any A in [{lo:.3f}, {hi:.3f}]"


def fits_table(runs: Sequence[RunFit], caption: str, refit_B: dict[str, float] | None = None):
    """A, B, C_mid with intervals, R0, points, the ceiling verdict, budget advice, flags;
    optionally the shared-A B."""
    header = ["run", "A", "B", "C_mid", "R0", "n", "ceiling", "to pin A", "flags"]
    if refit_B:
        header.insert(6, "B at shared A")
    rows = []
    for r in runs:
        iv = r.intervals
        row = [
            r.name,
            with_interval(r.fit.A, iv.get("A")),
            with_interval(r.fit.B, iv.get("B")),
            with_interval(r.fit.C_mid, iv.get("C_mid"), fmt_compute),
            fmt(r.fit.R0),
            str(r.fit.n_points),
            ceiling_text(r),
            r.budget_text,
            flags(r),
        ]
        if refit_B:
            row.insert(6, fmt(refit_B.get(r.name)))
        rows.append(tuple(row))
    return Table(caption, tuple(header), tuple(rows))


def ceiling_sentences(runs: Sequence[RunFit]) -> tuple[str, ...]:
    """One sentence per run whose ceiling is not identified, and each calibration note."""
    out = [f"{r.name}: {r.unc.verdict}" for r in runs if not r.identified]
    out += [f"{r.name}: {r.unc.calibration.message}." for r in runs if not r.unc.calibration.calibrated]
    return tuple(out)


BANDS = (
    f"Intervals are at {LEVEL:.0%} unless stated: A's is the profile-likelihood range that fits as well as "
    "the best fit (AR(1) evaluation noise); the band on the expected curve is where Eq. 1 lies if "
    "the law holds; the predictive interval holds one future evaluation, calibrated on the run's "
    "own earlier forecasts."
)


def loo_rows_table(loo: LooTable) -> Table:
    header = ("run", "C_mid", "B", "A", f"B at A={loo.shared_A:.3f}", "ΔB vs baseline")
    rows = tuple(
        (
            row["run"] + (" (baseline)" if row["baseline"] else ""),
            fmt_compute(row["C_mid"]),
            fmt(row["B"]),
            fmt(row["A"]),
            fmt(row["B_at_shared_A"]),
            f"{row['delta_B_vs_baseline']:+.3f}",
        )
        for row in loo.rows()
    )
    return Table("Leave-one-out table (paper Fig. 7): B refitted at the mean A", header, rows)


def extrapolation_table(scores: Sequence[ExtrapolationScore]) -> Table:
    header = (
        "run",
        "fit up to",
        "held-out n",
        "sigmoid RMSE",
        "power-law RMSE",
        "sigmoid A",
        "power-law A",
    )
    rows = tuple(
        (
            s.name,
            fmt(s.fit_compute),
            str(s.n_heldout),
            f"{s.sigmoid.rmse:.4f}",
            f"{s.power_law.rmse:.4f}",
            fmt(s.sigmoid.A),
            fmt(s.power_law.A),
        )
        for s in scores
    )
    caption = "Extrapolation: both laws fitted on the same prefix, scored on the rest (App. A.4)"
    binned = [note for note in map(_binning, scores) if note]
    if binned:
        caption += "; " + "; ".join(binned)
    return Table(caption, header, rows)


def _binning(score: ExtrapolationScore) -> str | None:
    """``"run: sigmoid binned 400,000 -> 2,000, power law binned ..."``, or None if neither was."""
    parts = [f"{law} binned {fit.binned_from:,} -> {fit.n_points:,}"
             for law, fit in (("sigmoid", score.sigmoid_fit), ("power law", score.power_law_fit))
             if fit.binned_from is not None]
    return f"{score.name}: {', '.join(parts)}" if parts else None


def comparison_report(
    comparison: Comparison,
    *,
    loo: LooTable | None = None,
    extrapolation: Sequence[ExtrapolationScore] = (),
    figures: Sequence[Figure] = (),
    title: str = "scalerl compare",
) -> Report:
    """The comparison table, the verdict, and optionally the LOO and extrapolation tables."""
    verdict = comparison.verdict
    refit_B = verdict.refit_B if verdict.decided_by == "efficiency" else None
    tables = [fits_table(comparison.runs, "Sigmoid fits (Eq. 1)", refit_B)]
    eq = verdict.equal_compute
    if eq:
        rows = tuple((n, fmt_compute(eq["compute"]), fmt(v), interval_text(lo, hi)) for n, (v, lo, hi) in eq["runs"].items())
        header = ("run", "compute", "expected reward", "band")
        tables.append(Table("Reward at equal compute (largest compute all runs reached)", header, rows))
    if loo is not None:
        tables.append(loo_rows_table(loo))
    if extrapolation:
        tables.append(extrapolation_table(extrapolation))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    paragraphs = (
        f"Verdict ({verdict.decided_by}): {verdict.sentence}",
        *ceiling_sentences(comparison.runs),
        "Rule (paper §1.4): the runs whose A lies within the margin of the best A are "
        "refitted with A fixed to their mean A, and the highest B (efficiency) wins; if no "
        "other run is within the margin, the highest A wins. No verdict is drawn from a "
        f"ceiling the data do not identify. {BANDS} Generated {stamp}.",
    )
    return Report(title, paragraphs, tuple(tables), tuple(figures))


def _md_table(table: Table) -> str:
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"**{table.caption}**", "", line(table.header), line(["---"] * len(table.header))]
    out += [line(row) for row in table.rows]
    return "\n".join(out)


def to_markdown(report: Report) -> str:
    """Markdown; figures are linked by their ``filename`` (write them beside the file)."""
    parts = [f"# {report.title}", *report.paragraphs]
    parts += [_md_table(t) for t in report.tables]
    parts += [f"![{f.caption}]({f.filename})" for f in report.figures]
    return "\n\n".join(parts) + "\n"


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; }
figcaption { font-size: 0.9em; color: #555; }
"""


def _html_table(table: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in table.header)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    return (
        f"<table><caption>{esc(table.caption)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def to_html(report: Report) -> str:
    """One self-contained HTML page: inline CSS, figures as base64 PNG, no external links."""
    esc = html.escape
    parts = [f"<h1>{esc(report.title)}</h1>"]
    parts += [f"<p>{esc(p)}</p>" for p in report.paragraphs]
    parts += [_html_table(t) for t in report.tables]
    for fig in report.figures:
        data = base64.b64encode(fig.png).decode("ascii")
        parts.append(
            f'<figure><img alt="{esc(fig.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(report.title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


# --- rendering and writing -----------------------------------------------------------


def console():
    """A rich console wide enough that the tables do not wrap."""
    from rich.console import Console

    return Console(soft_wrap=False, width=160)


def rich_table(table: Table):
    """The same table for the terminal (``rich``)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    out = RichTable(title=Text(table.caption), title_justify="left")
    for i, name in enumerate(table.header):
        out.add_column(Text(name), justify="left" if i == 0 else "right", overflow="fold")
    for row in table.rows:
        out.add_row(*(Text(cell) for cell in row))  # Text: run names are not rich markup
    return out


def write(path: Path, data: str | bytes) -> Path:
    """Write text or bytes atomically (a file beside it, renamed over it: a killed command never
    leaves half a file where an old one was), creating parent folders; failures name the output
    file in one sentence, and leave nothing behind."""
    import os
    import stat

    path = Path(path)
    try:  # never over a folder, a device or a pipe: the rename would replace it with a file
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise CurveError(f"cannot write {path}: it is not a regular file (a folder, device or pipe); name a file.")
    except (OSError, ValueError):  # absent, or unreachable: the write below says why
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True) if tmp.parent.is_dir() else None
        reason = err.strerror or str(err)
        if isinstance(err, FileExistsError | NotADirectoryError):
            reason = "a file stands where its folder should be"
        raise CurveError(f"cannot write {path}: {reason}.") from None
    return path


def json_safe(value):
    """JSON-safe: numpy scalars/arrays to Python, NaN and inf to None (strict JSON), and a string
    holding bytes that are not UTF-8 (a file name read with ``surrogateescape``) with each such
    byte as U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def write_json(path: Path, data: dict) -> Path:
    return write(path, json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")


def interval_text(lo: float, hi: float) -> str:
    return "-" if np.isnan(lo) else f"[{fmt(lo)}, {fmt(hi)}]"


def comparison_figures(comparison: Comparison, loo: LooTable) -> list[Figure]:
    """The runs with their fits, and the Fig. 7 efficiency plot at the shared A."""
    runs = comparison.runs
    ax = plot.plot_comparison(
        {r.name: r.forecast for r in runs if r.forecast is not None},
        {r.name: r.curve for r in runs},
        title="Runs, their sigmoid fits and their forecasts (dashed, with the forecast's band)",
    )
    eff = plot.plot_efficiency(
        loo.refits,
        {r.name: r.curve for r in runs},
        title=f"Efficiency at the shared A = {loo.shared_A:.3f} (slope = B)",
    )
    return [
        Figure("Runs, fits (solid) and forecasts (dashed, each with its forecast's band)", plot.png_bytes(ax),
               "compare.png"),
        Figure(
            "log F(R) against log C; slope = B at the shared A",
            plot.png_bytes(eff),
            "efficiency.png",
        ),
    ]


def write_markdown(path: Path, rep: Report) -> list[Path]:
    """The Markdown file and its figures beside it (``<stem>_<figure>.png``)."""
    figures = [replace(f, filename=f"{path.stem}_{f.filename}") for f in rep.figures]
    out = [write(path, to_markdown(replace(rep, figures=tuple(figures))))]
    return out + [write(path.parent / f.filename, f.png) for f in figures]
