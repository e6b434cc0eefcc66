"""Read validation curves (compute -> pass rate) from training logs: one module per format
behind ``READERS``, a table from file suffix to reader; ``core`` holds the ``Curve``, the
``Columns`` a caller asks for and the column choice.

Formats, picked by file name:

- ``*.csv`` (comma-separated) and ``*.tsv`` (tab-separated; ``scalerl.fit.readers.csvlog``): one row per evaluation, a header
  row; leading lines starting with ``#`` are comments. Rows whose reward cell is empty are skipped (sparse logs that mix training
  and evaluation rows). A ``run`` / ``run_name`` column splits the file into one curve per run.
- W&B chart exports (``*.csv`` whose columns look like ``<run> - <metric>``, with
  ``__MIN`` / ``__MAX`` companions): one curve per run; the ``__MIN`` / ``__MAX`` columns
  (W&B's bucketing envelope) are ignored; the x column is the unprefixed one (``Step`` or
  the chart's x metric).
- ``*.jsonl`` / ``*.ndjson`` / ``*.json`` (``jsonl``): one JSON object per line, as ``scalerl train`` writes them
  (``{"step": 10, "compute_gpu_hours": 0.01, "flops": ..., "val_pass_rate": 0.31}``).
  Records without the reward field (training-step records) are skipped.
- a ``scalerl train`` run folder: its ``metrics.jsonl`` (its ``tb/`` mirrors the same records).
- a W&B run's local folder (``wandb_local``: ``wandb/run-*``, ``wandb/offline-run-*``,
  ``wandb/latest-run``, or its ``.wandb`` file), read by the ``wandb`` package's own reader;
- another trainer's log (``trainers``: TRL's ``trainer_state.json``, verl's and prime-rl's
  JSONL, NeMo-RL's and OpenRLHF's TensorBoard), its names found without naming a column;
- TensorBoard event files (``tensorboard``; a file named ``*tfevents*`` or a
  directory holding them, several files of one run merged by step, the later file winning):
  scalar tags are the columns; the x tag is joined to the reward tag by step (linear
  interpolation in step where the x tag was logged at other steps).

Column choice: ``core``.

Every problem raises :class:`~scalerl.fit.errors.CurveError` with one sentence naming the
file and the field or line, unreadable files included (binary or not UTF-8, a symbolic link
loop, a CSV cell over ``csv.field_size_limit()``, JSON nested past the parser's depth), and
so is a CSV that would lose data silently: a column named twice in the header, or a row
that does not split into the header's columns (another delimiter, extra cells). A missing
value (a blank, ``NaN``, ``null``: ``core.MISSING``) skips its row in every format. Checks done
here need the line: unparsable or infinite values,
negative or non-increasing compute, reward outside [0, 1]. Point-count and flat-curve
checks belong to the fitter (``fit_sigmoid``); callers prefix its message with
:attr:`Curve.source`.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Sequence
from pathlib import Path

from scalerl.fit.errors import CurveError
from scalerl.fit.readers.core import (
    COMPUTE_COLUMNS,
    REWARD_COLUMNS,
    STEP_COLUMNS,
    TRAIN_REWARD_COLUMNS,
    Columns,
    Curve,
)
from scalerl.fit.readers.csvlog import read_csv
from scalerl.fit.readers.jsonl import read_jsonl
from scalerl.fit.readers.tensorboard import read_tensorboard
from scalerl.fit.readers.wandb_local import is_wandb, read_wandb
from scalerl.runfolder import METRICS
from scalerl.runfolder import TENSORBOARD as TENSORBOARD_FOLDER

__all__ = ["COMPUTE_COLUMNS", "FOLDER_SUFFIXES", "FORMATS", "READERS", "REWARD_COLUMNS", "RUN_LOG", "STEP_COLUMNS", "TRAIN_REWARD_COLUMNS",
           "Columns", "Curve", "expand_paths", "is_tensorboard", "load_runs", "read_curves", "read_jsonl",
           "suffixes", "unique_names"]  # fmt: skip

READERS: dict[str, Callable[[Path, Columns], list[Curve]]] = {
    ".csv": read_csv,
    ".tsv": read_csv,
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".json": read_jsonl,
}
"""File suffix (lower case) -> reader: the one list of log formats. TensorBoard logs go by
name (``*tfevents*``, or a folder holding such files), not by suffix. Every other list of
formats (the messages below, ``--prior-runs``' folder walk, ``scalerl plan``'s step records,
``scalerl fit``'s help) is derived from it."""
RUN_LOG = METRICS
"""A run folder (``scalerl train --out``) is read from this log, as ``scalerl plan`` reads it."""
TENSORBOARD = "tfevents"
"""What a TensorBoard event file's name holds."""


def suffixes(reader: Callable | None = None) -> tuple[str, ...]:
    """The suffixes :data:`READERS` sends to ``reader`` (every suffix when None)."""
    return tuple(s for s, r in READERS.items() if reader is None or r is reader)


FOLDER_SUFFIXES = tuple(s for s in READERS if s != ".json")
"""The files a walk through a folder of runs reads (``--prior-runs DIR``): every format but
``.json``, which beside a run's logs names what is no log (``plan.json``, a ``--json``
output); a ``.json`` log named on its own is read."""
FORMATS = (f"a log file ({', '.join(READERS)}; a .csv may be a W&B chart export), a scalerl run folder "
           f"({RUN_LOG}), or TensorBoard event files (*{TENSORBOARD}*, or a folder of them)")
"""The formats :func:`read_curves` reads, in words, for a help text or a message."""


def is_tensorboard(path: Path) -> bool:
    """A TensorBoard event file, or a folder holding one."""
    path = Path(path)
    if path.is_dir():
        return any(TENSORBOARD in p.name for p in path.iterdir())
    return TENSORBOARD in path.name


def read_curves(path: str | Path, columns: Columns | None = None, **fields) -> list[Curve]:
    """All curves in one file (or TensorBoard directory); the format follows the name
    (``READERS``). ``fields`` are shorthand for ``Columns(**fields)``."""
    columns = Columns(**fields) if columns is None else columns
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise CurveError(f"{path} is a symbolic link that leads nowhere (a loop, or a missing target).")
        raise CurveError(f"{path} does not exist.")
    if path.is_dir() and (path / RUN_LOG).is_file():  # a run folder: its tb/ mirrors this log
        return read_jsonl(path / RUN_LOG, columns)
    if is_wandb(path):  # a W&B run's local folder (wandb/run-*, offline-run-*, latest-run) or its .wandb
        return read_wandb(path, columns)
    if path.is_dir() and not is_tensorboard(path) and (path / TENSORBOARD_FOLDER).is_dir() and \
            is_tensorboard(path / TENSORBOARD_FOLDER):
        path = path / TENSORBOARD_FOLDER
    if is_tensorboard(path):
        return read_tensorboard(path, columns)
    if path.is_dir():
        raise CurveError(f"{path} is a directory without {RUN_LOG} (a scalerl run folder) or TensorBoard event files.")
    if path.stat().st_size == 0:
        raise CurveError(f"{path} is empty.")
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise CurveError(f"{path} has an unknown format; use {FORMATS}.")
    return reader(path, columns)


def unique_names(curves: list[Curve]) -> list[Curve]:
    """Equal run names get the shortest folder path that tells them apart
    (``a/x/run.jsonl`` and ``b/x/run.jsonl`` become ``a/x/run`` and ``b/x/run``)."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(curves):
        groups.setdefault(c.name, []).append(i)
    names = [c.name for c in curves]
    for name, members in groups.items():
        if len(members) < 2:
            continue
        folders = [curves[i].log.resolve().parent.parts for i in members]
        for depth in range(1, max(len(f) for f in folders) + 1):
            labels = ["/".join(f[-depth:] + (name,)) for f in folders]
            if len(set(labels)) == len(labels):
                break
        for i, label in zip(members, labels):
            names[i] = label
    return [
        c if n == c.name else Curve(n, c.compute, c.reward, c.source, c.x, c.y, c.lines)
        for c, n in zip(curves, names)
    ]


def expand_paths(paths_or_globs: str | Path | Sequence[str | Path]) -> list[Path]:
    """Paths in the given order; glob patterns expand (sorted); a pattern matching nothing
    fails; a file named twice (say by a glob and by name) is read once."""
    items = [paths_or_globs] if isinstance(paths_or_globs, str | Path) else list(paths_or_globs)
    out: list[Path] = []
    for item in items:
        text = str(item)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise CurveError(f"no file matches {text}.")
            out.extend(Path(m) for m in matches)
        else:
            out.append(Path(text))
    seen: set[Path] = set()
    unique = []
    for path in out:
        try:
            key = path.resolve()
        except (OSError, RuntimeError):  # a symbolic link loop: read_curves names it
            key = path.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def load_runs(
    paths_or_globs: str | Path | Sequence[str | Path], columns: Columns | None = None, **fields
) -> list[Curve]:
    """Every curve in the given files, directories and glob patterns, in order."""
    columns = Columns(**fields) if columns is None else columns
    curves: list[Curve] = []
    for path in expand_paths(paths_or_globs):
        curves.extend(read_curves(path, columns))
    return unique_names(curves)
