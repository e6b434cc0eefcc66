"""``scalerl sweep --replay RUN... --budget C``: the adaptive policy (``scalerl.fit.choose``)
on finished runs, training nothing.

A point is one run: a file any ``scalerl fit`` reader takes, a run folder (``metrics.jsonl``
or TensorBoard events), or a folder holding several of them (a sweep folder: every
``metrics.jsonl`` below it; or a folder of log files). It is named by its run's folder or
file name, relative to the folder given when it came from one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import RunLog, read_logs
from scalerl.fit.readers import FOLDER_SUFFIXES, Columns
from scalerl.fit.readers import is_tensorboard as _is_tb
from scalerl.runfolder import METRICS as RUN_LOG
from scalerl.runfolder import TENSORBOARD, run_folders


def _is_run(path: Path) -> bool:
    return path.is_file() or (path / RUN_LOG).is_file() or _is_tb(path) or (path / TENSORBOARD).is_dir()


def _one(path: Path, name: str, x: str | None, y: str | None) -> RunLog:
    found = read_logs([path], Columns(x=x, y=y))
    if len(found) != 1:
        raise CurveError(
            f"{path} holds {len(found)} runs; name each run's own file or folder to replay it."
        )
    log = found[0]
    return dataclasses.replace(log, curve=dataclasses.replace(log.curve, name=name))


def replay_logs(paths: Sequence[Path], x: str | None = None, y: str | None = None) -> list[RunLog]:
    """One log per run under ``paths`` (module docstring), named as the points are: its
    validation and the training reward its forecast follows where it has one."""
    curves: list[RunLog] = []
    for path in paths:
        if not path.exists():
            raise CurveError(f"{path} does not exist.")
        if _is_run(path):
            curves.append(_one(path, path.stem if path.is_file() else path.name, x, y))
            continue
        runs = run_folders(path) or sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES
        )
        if not runs:
            raise CurveError(f"{path} holds no runs: no {RUN_LOG} below it and no log file "
                             f"({', '.join(FOLDER_SUFFIXES)}) in it.")  # fmt: skip
        for run in runs:
            rel = run.relative_to(path)
            curves.append(
                _one(run, (rel.with_suffix("") if run.is_file() else rel).as_posix(), x, y)
            )
    names = [c.name for c in curves]  # each a RunLog
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise CurveError(
            f"two runs are both named {twice!r}; give their folders, not the runs, to tell them apart."
        )
    if len(curves) < 2:
        raise CurveError(f"a replay compares at least two runs; got {len(curves)}.")
    return curves


def describe(d: dict) -> list[str]:
    """The decisions as lines a user reads."""
    from scalerl.fit.choose import winner_text

    winner = winner_text(d)
    full = d["full"]
    best = winner_text(full)
    lines = [f"budget {d['budget']:.4g} compute per point; rungs {', '.join(f'{r:.4g}' for r in d['rungs'])}; "
             f"stop below P(best) {d['threshold']:g}; draws paired: {d.get('pairing', 'independent')}"]  # fmt: skip
    lines += [line for r in d["rounds"] for line in r.get("lines", [])]  # one per point and rung
    lines.append(f"winner: {winner}, using {d['compute_used']:.4g} of {d['compute_full']:.4g} compute "
                 f"({100 * d['fraction_used']:.0f}% of the study run to the end)")  # fmt: skip
    lines.append(f"the full runs' winner at the budget: {best}; ranking by the forecast at the budget:")
    lines += [f"  {r['point']}: {r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}], P(best) {r['p_best']:.3f}"
              for r in full["ranking"]]  # fmt: skip
    return lines


def write_json(d: dict, path: Path) -> None:
    """Atomically: a killed replay never leaves half a file where an old one was
    (``fit.report.write``: a folder, or a path through a file, is one sentence)."""
    from scalerl.fit.report import write

    write(path, json.dumps(d, indent=1) + "\n")


def replay_inputs(paths: Sequence[Path]) -> list[Path]:
    """Every file a replay of ``paths`` reads (and the folders given), for ``check_outputs``."""
    out: list[Path] = []
    for path in paths:
        out.append(path)
        if path.is_dir():
            out += [p for p in path.rglob("*") if p.is_file()]
    return out
