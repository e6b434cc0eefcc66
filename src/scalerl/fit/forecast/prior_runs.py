"""Find and read the finished runs a prior is learned from (``--prior-runs``,
``forecast.prior_runs``).

``DIR_OR_GLOB`` is a glob pattern, a log file, a TensorBoard folder, or a folder of runs:
every log file beneath it (``readers.FOLDER_SUFFIXES``: every format but ``.json``), every TRL
``trainer_state.json`` (one per run: ``readers.discover``), and every folder holding TensorBoard
event files or a W&B run's local log. A path that does not exist, or a pattern that matches
nothing, is bad input (one sentence naming the flag or field). A file beneath a folder that
holds no curve (a run's ``samples.jsonl``, say) is skipped: a run folder holds more than
its metrics, and the prior counts what it could use. Every file or run left out (that one,
the run being forecast, a copy of it, a run whose shape is not known) is one line of
``Prior.skipped``, naming it and why.

Each run's training reward, where its log has one beside the evaluations (the column
``train`` names, else the first of ``readers.TRAIN_REWARD_COLUMNS``, as a forecast reads the
run's own), gives ``Prior.train``.

A run's forecast is made in several places: the trainer's live record, ``serve``, ``plan``,
``fit``, the end-of-run report, a study's fit-to-half rows and an adaptive study's chooser.
Each asks :func:`run_prior` for its prior (the run-folder readers through :func:`run_options`,
which gives the whole ``ForecastOptions``), so that one run gets one answer: the runs
``--prior-runs`` names where it is given (``none``: no prior), else its folder's own
``forecast.prior_runs``. The run's own folder, anything beneath it and a copy of its curve
are never part of its prior. A prior is kept while the files it reads (their sizes and
modification times) and the run's curve are unchanged, so a command that forecasts several
runs, or asks twice, learns it once.
"""

from __future__ import annotations

import glob
import os
import threading
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
from scalerl.fit.readers import (
    FOLDER_SUFFIXES,
    Columns,
    Curve,
    expand_paths,
    is_tensorboard,
)
from scalerl.fit.readers.discover import trainer_log
from scalerl.runfolder import CONFIG, METRICS, walk

__all__ = ["find_prior_files", "load_prior", "log_prior", "prior_spec", "prior_stamp", "run_options", "run_prior"]

NO_PRIOR = "none"
"""``--prior-runs none``: no prior, even where the run's folder names one."""
KEPT = 16  # priors kept learned (each a few runs' fits), the oldest dropped first


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
    files, folders = _logs_under(path)
    if not files and not folders:
        raise CurveError(f"{what} {spec}: the folder holds no log file ({', '.join(FOLDER_SUFFIXES)}), "
                         "trainer_state.json, TensorBoard events or W&B run.")
    return files + folders


def _logs_under(root: Path) -> tuple[list[Path], list[Path]]:
    """(log files, run folders) under ``root``, one per run: a scalerl run folder's is its
    ``metrics.jsonl`` alone, never its ``tb/`` or ``wandb/`` copies (``runfolder.walk`` passes them
    by) nor ``samples.jsonl``; another trainer's is what ``discover.trainer_log`` picks (TRL's
    ``trainer_state.json``, its newest checkpoint's only where the run has none of its own; a
    TensorBoard or W&B run folder), as ``serve`` lists it. A run read twice would count as two
    runs of the prior, which then claims more runs and less spread than it has."""
    files, folders, newest = [], [], {}
    for folder, names in walk(root):
        if METRICS in names:
            files.append(folder / METRICS)
            continue
        files += [folder / n for n in names if Path(n).suffix.lower() in FOLDER_SUFFIXES]
        if (log := trainer_log(folder, names, newest)) is not None:
            (folders if log == folder else files).append(log)
    return sorted(files), sorted(folders)


def load_prior(
    spec: str, options: FitOptions, columns: Columns | None = None, *,
    exclude: tuple[str, ...] = (), forecast: Sequence[Curve] = (), what: str = "--prior-runs",
    train: str | None = None,
) -> tuple[Prior | None, str, int]:
    """(prior or None, why none, number of runs read) from ``spec``, read with ``columns``
    (default: the readers' column choice; ``bounded`` follows ``options``), the prior of the
    runs' training rewards (``train``: its column, as ``--train-reward`` names it) beside it.

    ``exclude``: paths of the run being forecast (its log, or its folder and all beneath it),
    never part of its own prior;
    ``forecast``: its curves, so that a copy of one under another name (the same points, or
    one a prefix of the other) is left out too, with a :class:`CurveWarning`.
    """
    read: list[RunLog] = []
    kept: list[RunLog] = []
    skip = [Path(e).resolve() for e in exclude]
    excluded, left_out = 0, []
    for path in find_prior_files(spec, what=what):
        if _within(path, skip):
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


def _within(path: Path, folders: Sequence[Path]) -> bool:
    """``path`` is one of ``folders`` (resolved) or lies beneath one."""
    path = path.resolve()
    return any(path == f or f in path.parents for f in folders)


def prior_spec(config: dict, given: str | None = None, folder: Path | None = None) -> tuple[str | None, str]:
    """(the runs a run's prior is learned from, the words that name them in an error):
    ``given`` (``--prior-runs``) where it is, else ``forecast.prior_runs`` of the run folder's
    ``config`` (a relative path read from ``folder``, as the trainer reads it); None: no prior."""
    if given is not None:
        return (None if given == NO_PRIOR else given), "--prior-runs"
    forecast = config.get("forecast") if isinstance(config, dict) else None
    spec = forecast.get("prior_runs") if isinstance(forecast, dict) else None
    where = f"{folder / CONFIG}: forecast.prior_runs" if folder is not None else "forecast.prior_runs"
    if spec is None:
        return None, where
    if not isinstance(spec, str) or not spec:
        raise CurveError(f"{where} is {spec!r}, not a folder, file or glob of finished runs.")
    spec = os.path.expanduser(spec)
    return (spec if folder is None or os.path.isabs(spec) else str(folder / spec)), where


_learned: dict[tuple, tuple] = {}
_lock = threading.Lock()


def run_prior(
    spec: str | None, options: FitOptions, columns: Columns, *, exclude: Sequence[str | Path] = (),
    curves: Sequence[Curve] = (), train: str | None = None, what: str = "forecast.prior_runs",
) -> tuple[Prior | None, str, int] | None:
    """The prior a run's forecast is made under, wherever it is made (module docstring):
    :func:`load_prior` of ``spec`` (None: no prior, and None is returned), ``exclude`` (the
    run's log or folder, and all beneath it) and a copy of one of ``curves`` left out. Kept
    while the files it reads and ``curves`` are unchanged; the run's own files never count."""
    if spec is None:
        return None
    skip = [Path(e).resolve() for e in exclude]
    files = [p for p in find_prior_files(spec, what=what) if not _within(p, skip)]
    seen = tuple((c.compute.tobytes(), c.reward.tobytes()) for c in curves)  # the copy test reads them
    key = (spec, tuple(map(str, skip)), options, columns, train, what, seen, tuple(_stamp(p) for p in files))
    with _lock:  # serve's forecast workers share the learned priors
        if key in _learned:
            return _learned[key]
        learned = load_prior(spec, options, columns, exclude=tuple(map(str, skip)), forecast=curves, what=what,
                             train=train)  # fmt: skip
        _learned[key] = learned
        while len(_learned) > KEPT:
            _learned.pop(next(iter(_learned)))
        return learned


def log_prior(log: RunLog, given: str | None, options: FitOptions, columns: Columns, *, runs: Sequence[str | Path],
              curves: Sequence[Curve], train: str | None = None) -> tuple[Prior | None, str, int] | None:
    """``plan``'s and ``fit``'s prior for ``log``, read from the paths ``runs`` (never part of
    it): ``--prior-runs`` where ``given``, else its run folder's ``forecast.prior_runs``."""
    folder = Path(log.curve.source).parent if log.config else None  # a run folder's log is its metrics
    spec, what = prior_spec(log.config, given, folder)
    return run_prior(spec, options, columns, exclude=expand_paths(runs), curves=curves, train=train, what=what)


def run_options(log: RunLog, folder: str | Path, *, budget: float | None = None, x: str | None = None,
                given: dict | None = None):
    """The ``ForecastOptions`` of a run read from its ``folder``, wherever its forecast is made
    from the folder (``serve``, the end-of-run report, a study's rows, an adaptive study's
    chooser): its ``forecast.*`` settings (``forecast_defaults``, ``given`` on top) and the prior
    of its ``forecast.prior_runs``, which its folder and all beneath it are never part of."""
    from scalerl.fit.forecast.options import ForecastOptions, forecast_defaults

    fit = FitOptions.from_given(forecast_defaults(log.config) | (given or {}))
    spec, what = prior_spec(log.config, None, Path(folder))
    prior = run_prior(spec, fit, Columns(x=x, y=log.curve.y), exclude=(folder,), curves=(log.curve,), what=what)
    return ForecastOptions(fit=fit, budget=budget, prior=prior)


def prior_stamp(config: dict, folder: str | Path) -> tuple:
    """The version of the files a run folder's prior reads (``forecast.prior_runs``, its own
    folder left out): their paths, sizes and modification times; () without a prior, and the
    error's sentence where the setting is bad (its forecast says it). A surface that keeps a
    run's forecast keeps it while this and the run's own files are unchanged, so a finished run
    added beside it reaches its forecast without the run writing anything."""
    try:
        spec, what = prior_spec(config, None, Path(folder))
        if spec is None:
            return ()
        files = find_prior_files(spec, what=what)
    except CurveError as err:
        return (str(err),)
    try:
        return tuple(_stamp(p) for p in files if not _within(p, [Path(folder).resolve()]))
    except OSError as err:  # a file removed between the listing and its stat: the next read sees it
        return (str(err),)


def _stamp(path: Path) -> tuple:
    """(path, size, mtime) of a log file, or of each file of a TensorBoard folder."""
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return tuple((str(p), (st := p.stat()).st_size, st.st_mtime_ns) for p in files)
