"""CSV / TSV logs and W&B chart exports as curves (``READERS`` maps .csv and .tsv here).

A plain table has one row per evaluation under a header row (``#`` comment lines before it
are skipped); a ``run`` / ``run_name`` column splits it into one curve per run. A W&B chart
export has ``<run> - <metric>`` columns (with ``__MIN`` / ``__MAX`` companions, ignored) and
gives one curve per run. Nothing is dropped silently: a column named twice, or a row that
does not split into the header's columns (a ``;`` row among ``,`` rows looked like a sparse
row with an empty reward, and half a file vanished), is one sentence naming the file and line.
"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.readers.cache import parsed
from scalerl.fit.readers.core import (
    REWARD_COLUMNS,
    RUN_COLUMNS,
    Columns,
    Curve,
    build,
    find_column,
    run_name,
)
from scalerl.fit.readers.text import read_text

__all__ = ["read_csv"]

_WANDB_COLUMN = re.compile(r"^(?P<run>.+) - (?P<metric>.+?)(?P<suffix>__MIN|__MAX)?$")


def _read_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, cells) rows; '#' comment lines before the header skipped;
    parsed once per version of the file (``cache``)."""
    return parsed(path, "csv", lambda: _parse_csv_rows(path))


def _parse_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    text = read_text(path)
    lines = text.splitlines()
    start = 0
    while start < len(lines) and (lines[start].startswith("#") or not lines[start].strip()):
        start += 1
    if start == len(lines):
        raise CurveError(f"{path} is empty.")
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.reader(lines[start:], delimiter=delimiter)
    try:
        header = [h.strip() for h in next(reader)]
        rows = [(start + 1 + i + 1, row) for i, row in enumerate(reader) if any(c.strip() for c in row)]
    except csv.Error as err:
        raise CurveError(f"{path} line {start + reader.line_num} is not a table row ({err}).") from None
    if not rows:
        raise CurveError(f"{path} has a header but no data rows.")
    _unique_header(path, header)
    if not text.endswith(("\n", "\r")):
        rows = _without_torn_tail(path, header, rows)
    _rows_fit_header(path, header, rows, delimiter)
    return header, rows


def _without_torn_tail(path: Path, header: Sequence[str], rows):
    """A short last row of a file with no final line end is a row still being written (a live
    log read mid-append): dropped, and said, rather than refused as a malformed row."""
    line, last = rows[-1]
    if len(rows) > 1 and len(last) < len(header):
        warnings.warn(f"{path} line {line} is cut short with no line end (still being written?); "
                      "it was left out.", CurveWarning, stacklevel=2)
        return rows[:-1]
    return rows


def _unique_header(path: Path, header: Sequence[str]) -> None:
    """Two columns of one name: which one holds the curve is a guess, so it is an error."""
    first: dict[str, int] = {}
    for i, name in enumerate(header):
        if name and name in first:
            raise CurveError(
                f"{path}: the header names the column '{name}' twice (columns {first[name] + 1} "
                f"and {i + 1}); rename one so that it is clear which to read."
            )
        first.setdefault(name, i)


def _rows_fit_header(path: Path, header: Sequence[str], rows, delimiter: str) -> None:
    """Every row must split into the header's columns: a row written with another delimiter
    (``;`` among ``,`` rows) is one cell whose reward looks empty, so it would be dropped
    silently as a sparse row. Trailing empty cells (a trailing comma) are allowed, and so is
    a row that stops before the header's unnamed trailing columns."""
    named = max((i + 1 for i, h in enumerate(header) if h), default=0)
    for line, row in rows:
        extra = row[len(header):]
        if len(row) >= named and not any(c.strip() for c in extra):
            continue
        text = delimiter.join(row)
        other = next((d for d in (";", "\t", ",", "|") if d != delimiter and d in text), None)
        seems = f"; the row seems split on {other!r}" if other else ""
        raise CurveError(
            f"{path} line {line} has {len(row)} cell(s), but the header has {named} columns split on "
            f"{delimiter!r}{seems} (every row must use the header's delimiter and columns)."
        )


def _cell(row: list[str], index: int) -> str:
    return row[index] if index < len(row) else ""


def _is_wandb(header: Sequence[str]) -> bool:
    return any(_WANDB_COLUMN.match(h) for h in header) and any(
        not _WANDB_COLUMN.match(h) for h in header
    )


def read_csv(path: Path, columns: Columns) -> list[Curve]:
    """Curves from a plain CSV or TSV (one per ``run`` value) or a W&B chart export (one per run)."""
    header, rows = _read_csv_rows(path)
    if _is_wandb(header):
        return _read_wandb(path, header, rows, columns)
    choice = columns.choose(header, str(path))
    xi, yi = header.index(choice.x), header.index(choice.y)
    run_col = find_column(header, RUN_COLUMNS)
    groups: dict[str, list[tuple[int, list[str]]]] = {}
    for line, row in rows:
        key = _cell(row, header.index(run_col)) if run_col else run_name(path)
        groups.setdefault(key, []).append((line, row))
    curves = []
    for run, members in groups.items():
        source = f"{path} [{run}]" if run_col else str(path)
        points = ((str(path), ln, _cell(r, xi), _cell(r, yi)) for ln, r in members)
        curves.append(build(run, source, choice, points))
    return curves


def _read_wandb(path, header, rows, wanted: Columns) -> list[Curve]:
    """W&B chart export: ``<run> - <metric>`` columns, one curve per run."""
    shared = [h for h in header if not _WANDB_COLUMN.match(h)]
    per_run: dict[str, dict[str, str]] = {}  # run -> metric -> column
    for h in header:
        m = _WANDB_COLUMN.match(h)
        if m and not m.group("suffix"):
            per_run.setdefault(m.group("run"), {})[m.group("metric")] = h
    metrics = sorted({metric for cols in per_run.values() for metric in cols})
    curves = []
    for run, cols in per_run.items():
        # the x column may be the shared one (Step, or the chart's x metric) or a per-run metric
        columns = shared + list(cols)
        try:
            choice = wanted.choose(columns, str(path))
        except CurveError:
            if find_column(list(cols), wanted.y if wanted.y is not None else REWARD_COLUMNS) is None:
                continue  # this run has other metrics only
            raise
        xcol = cols.get(choice.x, choice.x)
        xi, yi = header.index(xcol), header.index(cols[choice.y])
        points = ((str(path), ln, _cell(r, xi), _cell(r, yi)) for ln, r in rows)
        curves.append(build(run, f"{path} [{run}]", choice, points))
    if not curves:
        y = f"'{wanted.y}'" if wanted.y else "(" + ", ".join(REWARD_COLUMNS) + ")"
        raise CurveError(
            f"{path} (a W&B export) has no run with the reward metric {y}; its metrics "
            f"are: {', '.join(metrics)} (choose one with --y)."
        )
    return curves
