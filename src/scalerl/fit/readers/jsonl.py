"""JSON-lines logs as curves: one JSON object per line, as ``scalerl train`` writes them
(``{"step": 10, "compute_gpu_hours": 0.01, "flops": ..., "val_pass_rate": 0.31}``).
Records without the reward field (training-step records) are skipped; a ``run`` /
``run_name`` field splits the file into one curve per run.
"""

from __future__ import annotations

from pathlib import Path

from scalerl.fit.errors import CurveError
from scalerl.fit.readers.cache import parsed
from scalerl.fit.readers.core import (
    RUN_COLUMNS,
    Columns,
    Curve,
    build,
    empty,
    find_column,
    run_name,
)
from scalerl.runfolder import BadRunFile, read_numbered

__all__ = ["curves_from_records", "jsonl_records", "read_jsonl"]


def jsonl_records(path: Path) -> list[tuple[int, dict]]:
    """(line, record) of every record of a JSON-lines log, read by the run folder's one reader
    (``runfolder.read_numbered``: a torn last line skipped, any other bad line one sentence),
    parsed once per version of the file (``cache``)."""
    try:
        return parsed(Path(path), "jsonl", lambda: read_numbered(path))
    except BadRunFile as err:
        raise CurveError(str(err)) from None


def read_jsonl(path: Path, columns: Columns | None = None, **fields) -> list[Curve]:
    """One curve per ``run`` value (or one for the file) from JSON-lines records.

    A last line without its newline that does not parse is a record still being written
    by a live run (the file is read while training appends to it): it is skipped.
    ``fields`` are shorthand for ``Columns(**fields)`` when ``columns`` is not given.
    """
    columns = Columns(**fields) if columns is None else columns
    return curves_from_records(jsonl_records(path), Path(path), columns)


def curves_from_records(records: list[tuple[int, dict]], path: Path, columns: Columns) -> list[Curve]:
    """The curves of (line, record) pairs read from ``path`` (:func:`read_jsonl`; ``serve``
    reads the records through its own guard and builds the same curves here)."""
    if not records:
        raise CurveError(f"{path} is empty.")
    names = list(dict.fromkeys(k for _, rec in records for k in rec))
    choice = columns.choose(names, str(path))
    run_col = find_column(names, RUN_COLUMNS)
    groups: dict[str, list[tuple[int, dict]]] = {}
    default = run_name(path)  # once: a path's name per record was a third of a 2000-record read
    for number, rec in records:
        key = str(rec.get(run_col, default)) if run_col else default
        groups.setdefault(key, []).append((number, rec))
    curves = []
    for run, members in groups.items():
        source = f"{path} [{run}]" if run_col else str(path)
        points = ((str(path), n, r.get(choice.x), r.get(choice.y)) for n, r in members)
        try:
            curves.append(build(run, source, choice, points))
        except CurveError:
            if run_col and all(empty(r.get(choice.y)) for _, r in members):
                continue  # a run (e.g. a trainer-only stream) without evaluations
            raise
    if not curves:
        raise CurveError(f"{path} has no records with a '{choice.y}' value.")
    return curves
