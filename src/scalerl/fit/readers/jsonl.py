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

__all__ = ["curves_from_records", "jsonl_records", "read_jsonl", "trainer_state_budget"]


TRAINER_STATE = "trainer_state.json"
"""A Hugging Face ``Trainer``'s state (TRL's too): its ``log_history`` is the log, one record an entry."""


def jsonl_records(path: Path) -> list[tuple[int, dict]]:
    """(line, record) of every record of a JSON-lines log, read by the run folder's one reader
    (``runfolder.read_numbered``: a torn last line skipped, any other bad line one sentence),
    parsed once per version of the file (``cache``). A ``trainer_state.json`` is read as its
    ``log_history`` (entry numbers for lines); verl's ``{"step": N, "data": {...}}`` lines as
    their step and data side by side."""
    path = Path(path)
    try:
        if path.name == TRAINER_STATE:
            return parsed(path, "trainer_state", lambda: _log_history(path))
        return parsed(path, "jsonl", lambda: [(n, _flat(r)) for n, r in read_numbered(path)])
    except BadRunFile as err:
        raise CurveError(str(err)) from None


def _flat(record: dict) -> dict:
    """verl's line ``{"step": N, "data": {metrics}}`` as ``{"step": N, **metrics}``; others as they are."""
    data = record.get("data")
    if isinstance(data, dict) and "step" in record and len(record) == 2:
        return {"step": record["step"], **data}
    return record


def _trainer_state(path: Path) -> dict:
    import json

    from scalerl.runfolder import MAX_LINE

    size = path.stat().st_size
    if size > 256 * MAX_LINE:
        raise BadRunFile(f"{path} is {size:,} bytes, more than a trainer's state holds.")
    try:
        state = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise BadRunFile(f"{path} is not a trainer's state ({getattr(err, 'msg', None) or type(err).__name__}).") from None
    return state if isinstance(state, dict) else {}


def trainer_state_budget(path: Path) -> float | None:
    """A ``trainer_state.json``'s ``max_steps`` (the trainer's own end, in the steps its log is
    in), the budget a forecast of it is judged at; None for any other log or a bad value."""
    path = Path(path)
    if path.name != TRAINER_STATE:
        return None
    try:
        steps = parsed(path, "trainer_state_budget", lambda: _trainer_state(path).get("max_steps"))
    except (BadRunFile, OSError):
        return None
    ok = isinstance(steps, int) and not isinstance(steps, bool) and steps > 0
    return float(steps) if ok else None


def _log_history(path: Path) -> list[tuple[int, dict]]:
    """A ``trainer_state.json``'s ``log_history``: every entry, numbered from 1."""
    state = _trainer_state(path)
    history = state.get("log_history")
    if not isinstance(history, list):
        raise BadRunFile(f"{path} has no log_history list: not a Hugging Face trainer's state.")
    return [(i, r) for i, r in enumerate(history, 1) if isinstance(r, dict)]


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
