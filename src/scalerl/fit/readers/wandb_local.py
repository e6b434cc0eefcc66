"""A W&B run's local folder as a curve, read with no network by the ``wandb`` package's own reader.

Every W&B run keeps a local copy of what it logs: ``wandb/run-<date>-<id>/run-<id>.wandb``
(``offline-run-...`` offline; ``wandb/latest-run`` links to the newest), in W&B's transaction
log format. The package's own reader of it is ``wandb leet inspect --json FILE`` (the Python
``DataStore`` of wandb 0.29 and older is gone; the reader now lives in the package's ``wandb-core``
binary, which this runs, offline): one JSON record per line, the ``history`` records holding what
was logged at each step, keys as logged (``eval/accuracy``, nested dicts flattened with ``.``).

A metric is named as the user logged it (``--y eval/accuracy``); another trainer's names are
found as in its other logs (``trainers``); the x is a compute column where one was logged, else
W&B's own step (``_step``). A file cut short (a live or killed run) is read up to its last whole
record; a damaged one is one sentence with the reader's own words.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from scalerl.fit.errors import CurveError
from scalerl.fit.readers.cache import parsed
from scalerl.fit.readers.core import COMPUTE_COLUMNS, Columns, Curve, find_column

__all__ = ["is_wandb", "read_wandb", "wandb_file"]

TIMEOUT_S = 300.0


def wandb_file(path: Path) -> Path | None:
    """The ``.wandb`` file of ``path``: itself, the one in a run folder, or the latest run's in a
    ``wandb/`` folder; None where there is none."""
    path = Path(path)
    if path.is_file():
        return path if path.suffix == ".wandb" else None
    if not path.is_dir():
        return None
    if (path / "latest-run").is_dir():
        path = path / "latest-run"
    found = sorted(path.glob("run-*.wandb"))
    return found[-1] if found else None


def is_wandb(path: Path) -> bool:
    return wandb_file(path) is not None


def _reader() -> list[str]:
    beside = Path(sys.executable).with_name("wandb")
    cli = str(beside) if beside.is_file() else shutil.which("wandb")
    if cli is None:
        raise CurveError("reading a W&B run folder needs the wandb package (pip install 'scalerl[wandb]').")
    return [cli, "leet", "inspect", "--json"]


def _records(file: Path) -> list[tuple[int, dict]]:
    """(record number, the history's items and its step) of every ``history`` record."""
    try:
        done = subprocess.run([*_reader(), str(file)], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CurveError(f"{file}: W&B's reader did not finish within {TIMEOUT_S:.0f} s.") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1].removeprefix("Error: ")
        raise CurveError(f"{file} is not a W&B run's log W&B can read ({said}).")
    out = []
    for line in done.stdout.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        hist = rec.get("history") if isinstance(rec, dict) and rec.get("type") == "history" else None
        if isinstance(hist, dict) and isinstance(hist.get("item"), dict):
            out.append((int(rec.get("num", len(out) + 1)), dict(hist["item"])))
    if not out:
        raise CurveError(f"{file} holds no logged history (the run logged nothing yet).")
    return out


def read_wandb(path: Path, columns: Columns) -> list[Curve]:
    """One curve from a W&B run folder or its ``.wandb`` file (module docstring)."""
    from scalerl.fit.readers.jsonl import curves_from_records

    file = wandb_file(path)
    if file is None:
        raise CurveError(f"{path} holds no W&B run (no run-*.wandb file).")
    records = parsed(file, "wandb", lambda: _records(file))
    names = list(dict.fromkeys(k for _, r in records for k in r))
    if columns.x is None and columns.step_to_compute is None and find_column(names, COMPUTE_COLUMNS) is None:
        columns = replace(columns, x="_step")  # W&B's own step, where nothing else measures the compute
    curves = curves_from_records(records, file, columns)
    name = file.parent.name.split("-")[-1] if file.parent.name.count("-") >= 2 else file.stem
    return [replace(c, name=name) for c in curves]
