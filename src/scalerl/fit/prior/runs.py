"""Find and read the finished runs a prior is learned from (``--prior-runs``,
``forecast.prior_runs``).

``DIR_OR_GLOB`` is a glob pattern, a log file, a TensorBoard folder, or a folder of runs:
every log file beneath it (``readers.FOLDER_SUFFIXES``: every format but ``.json``) and every folder
holding TensorBoard event files. A path that does not exist, or a pattern that matches
nothing, is bad input (one sentence naming the flag or field). A file beneath a folder that
holds no curve (a run's ``samples.jsonl``, say) is skipped: a run folder holds more than
its metrics, and the prior counts what it could use. Every file or run left out (that one,
the run being forecast, a copy of it, a run whose shape is not known) is one line of
``Prior.skipped``, naming it and why.

Each run's training reward, where its log has one beside the evaluations (the column
``train`` names, else the first of ``readers.TRAIN_REWARD_COLUMNS``, as a forecast reads the
run's own), gives ``Prior.train``.
"""

from __future__ import annotations

import glob
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.forecast.companion import MIN_POINTS
from scalerl.fit.forecast.log import RunLog, read_log_file
from scalerl.fit.options import FitOptions
from scalerl.fit.prior.learn import Prior, learn_prior, learn_train_prior
from scalerl.fit.readers import FOLDER_SUFFIXES, TENSORBOARD, Columns, Curve, is_tensorboard

__all__ = ["find_prior_files", "load_prior"]


def find_prior_files(spec: str, *, what: str = "--prior-runs") -> list[Path]:
    """The log files and TensorBoard folders ``spec`` names, sorted."""
    if glob.has_magic(spec):
        found = [Path(p) for p in sorted(glob.glob(spec, recursive=True))]
        if not found:
            raise CurveError(f"{what} {spec}: no file matches it.")
        return found
    path = Path(spec)
    if not path.exists():
        raise CurveError(f"{what} {spec}: no such file or folder.")
    if path.is_file() or is_tensorboard(path):
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES)
    folders = sorted({p.parent for p in path.rglob(f"*{TENSORBOARD}*") if p.is_file()})
    if not files and not folders:
        raise CurveError(f"{what} {spec}: the folder holds no log file ({', '.join(FOLDER_SUFFIXES)}) or "
                         "TensorBoard events.")
    return files + folders


def load_prior(
    spec: str, options: FitOptions, columns: Columns | None = None, *,
    exclude: tuple[str, ...] = (), forecast: Sequence[Curve] = (), what: str = "--prior-runs",
    train: str | None = None,
) -> tuple[Prior | None, str, int]:
    """(prior or None, why none, number of runs read) from ``spec``, read with ``columns``
    (default: the readers' column choice; ``bounded`` follows ``options``), the prior of the
    runs' training rewards (``train``: its column, as ``--train-reward`` names it) beside it.

    ``exclude``: resolved paths of the run being forecast, never part of its own prior;
    ``forecast``: its curves, so that a copy of one under another name (the same points, or
    one a prefix of the other) is left out too, with a :class:`CurveWarning`.
    """
    read: list[RunLog] = []
    kept: list[RunLog] = []
    skip = {str(Path(e).resolve()) for e in exclude}
    excluded, left_out = 0, []
    for path in find_prior_files(spec, what=what):
        if str(path.resolve()) in skip:
            excluded += 1
            left_out.append(f"{path}: the run being forecast, never part of its own prior")
            continue
        try:
            logs = read_log_file(path, replace(columns or Columns(), bounded=options.bounded), train=train)
        except CurveError as err:
            # a file with no curve in a run folder (see the module docstring)
            left_out.append(f"no curve read: {str(err).rstrip('.')}")
            continue
        read += logs
        for log in logs:
            if (copy_of := _copy_of_forecast(log.curve, forecast, what)) is None:
                kept.append(log)
            else:
                left_out.append(f"{log.curve.source}: the same curve as {copy_of}, the run being forecast")
    prior, why = learn_prior([(g.curve.source, g.curve.compute, g.curve.reward) for g in kept], options)
    if prior is not None:
        trained, train_why = _train_prior(kept, options)
        prior = replace(prior, skipped=(*left_out, *prior.skipped), train=trained, train_why=train_why)
    if not kept and (excluded or read):
        why = (f"{what} {spec}: it holds only the run being forecast{' (or copies of it)' if read else ''}, "
               "which is never part of its own prior, so the fit is prior-free")
    elif not kept:
        why = f"{what} {spec}: no curve could be read there, so the fit is prior-free"
    return prior, why, len(kept)


def _train_prior(logs: Sequence[RunLog], options: FitOptions) -> tuple[Prior | None, str]:
    """The prior of the runs' training rewards, each binned to its own evaluations as a
    forecast bins the run's (``forecast.companion``), or (None, why)."""
    comps = [(log.curve.source, comp) for log in logs if (comp := log.companion()) is not None and len(comp) >= MIN_POINTS]
    return learn_train_prior([(name, c.compute, c.train) for name, c in comps], [c.val for _, c in comps], options)


def _copy_of_forecast(curve: Curve, forecast: Sequence[Curve], what: str) -> str | None:
    """The source of the forecast curve whose points ``curve`` holds (at least two, one
    curve a prefix of the other: a copy, or a copy cut elsewhere), said as a
    ``CurveWarning``; None when it holds none."""
    for other in forecast:
        n = min(len(curve), len(other))
        if n >= 2 and np.array_equal(curve.compute[:n], other.compute[:n]) and np.array_equal(
                curve.reward[:n], other.reward[:n]):
            warnings.warn(CurveWarning(f"{what}: {curve.source} holds the same curve as {other.source}, the run "
                                       "being forecast, so it is left out of the prior (a run's own future "
                                       "would otherwise inform its forecast)."), stacklevel=3)
            return other.source
    return None
