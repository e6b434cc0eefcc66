"""A run's log as a forecast reads it: the validation curve, the training reward beside it,
the clock, and the run's own budget, read from the file once (``readers.cache``).

A ``RunLog`` comes from a file or run folder (:func:`read_logs`: any log ``scalerl fit``
reads; a file with a ``run`` column gives one per run), or from values a live run holds in
memory (:meth:`RunLog.of`: the trainer's forecast thread, ``serve``). ``upto`` cuts it where a
forecast is made: everything after the cut is what the forecast is about, never what it sees.

- **training reward**: the column ``--train-reward`` names, or the first of
  ``readers.TRAIN_REWARD_COLUMNS`` the log has that is not the validation's own, as logged
  (every step, or every evaluation); ``companion`` bins it to the evaluations.
- **clock**: the records' (compute, ``wall_s``) pairs, or a speeds file's clock for a log
  without wall time (``time.timing``).
- **budget**: the compute the run will have spent at its end, where its folder says: its
  newest record's ``forecast_budget`` (the trainer's own estimate), else ``train.max_compute``,
  else its compute per step times ``train.steps``; a TRL (Hugging Face) ``trainer_state.json``
  logged in steps, its ``max_steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from scalerl import runfolder as rf
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast.companion import Companion
from scalerl.fit.forecast.schedule import EvalPlan, from_config
from scalerl.fit.readers import (
    Columns,
    Curve,
    expand_paths,
    is_tensorboard,
    read_curves,
    suffixes,
    unique_names,
)
from scalerl.fit.readers.core import TRAIN_REWARD_COLUMNS, find_column
from scalerl.fit.readers.jsonl import (
    curves_from_records,
    jsonl_records,
    read_jsonl,
    trainer_state_budget,
)
from scalerl.fit.readers.trainers import TRAINERS
from scalerl.fit.time.timing import Clock, clock_from_points

__all__ = ["RunLog", "log_from_records", "read_log_file", "read_logs", "run_budget"]


@dataclass(frozen=True, eq=False)
class RunLog:
    """One run's log (module docstring)."""

    curve: Curve  # the validation: compute -> the fitted metric
    train: Curve | None = None  # the training reward as logged (unbounded)
    clock_points: tuple[np.ndarray, np.ndarray] = field(default_factory=lambda: (np.empty(0), np.empty(0)))
    speeds: Clock | None = None  # a speeds file's clock, for a log without wall time
    steps: np.ndarray | None = None  # (n,) the evaluations' steps, where the log has them
    budget: float | None = None  # the run's planned end in compute, where known
    records: tuple[dict, ...] = ()  # a run folder's records (plan's role times)
    config: dict = field(default_factory=dict)  # a run folder's config.yaml
    plan: EvalPlan | None = None  # the steps the run validates at, where it says (``schedule``)

    @classmethod
    def of(cls, compute, reward, *, train=(), clock=(), steps=None, budget=None, name="live",
           metric: str = rf.VAL_PASS_RATE, plan: EvalPlan | None = None) -> RunLog:
        """From values in memory: evaluations (compute, reward), ``train`` (compute, training
        reward) pairs and ``clock`` (compute, wall seconds) pairs."""
        curve = Curve(name, np.asarray(compute, float), np.asarray(reward, float), name, rf.COMPUTE, metric)
        tr = None
        if len(train):
            tc, tv = (np.asarray(v, float) for v in zip(*train))
            tr = Curve(name, tc, tv, name, rf.COMPUTE, rf.TRAIN_REWARD)
        cp = tuple(np.asarray(v, float) for v in zip(*clock)) if len(clock) else (np.empty(0), np.empty(0))
        return cls(curve, tr, cp, steps=None if steps is None else np.asarray(steps, float), budget=budget,
                   plan=plan)

    @property
    def name(self) -> str:
        return self.curve.name

    @property
    def eval_plan(self) -> EvalPlan | None:
        """The steps the run validates at: given, or its folder's config's (``schedule``)."""
        return self.plan if self.plan is not None else from_config(self.config)

    @property
    def target(self) -> float | None:
        """The run's own ``forecast.target``, where its folder's config sets one."""
        return rf.number(rf.section(self.config, "forecast"), "target")

    @property
    def metric(self) -> str:
        return self.curve.y

    def upto(self, compute: float) -> RunLog:
        """What the run had logged by ``compute``: its evaluations, training reward and clock."""
        keep = self.curve.compute <= compute * (1 + 1e-12)
        tr = self.train
        if tr is not None:
            tk = tr.compute <= compute * (1 + 1e-12)
            tr = Curve(tr.name, tr.compute[tk], tr.reward[tk], tr.source, tr.x, tr.y)
        c, w = self.clock_points
        ck = c <= compute * (1 + 1e-12)
        steps = None if self.steps is None else self.steps[keep]
        return replace(self, curve=self.curve.head(compute), train=tr, clock_points=(c[ck], w[ck]), steps=steps)

    def clock(self) -> Clock | None:
        """The run's clock from its own records, else the speeds file's; None without either."""
        if self.clock_points[0].size:
            try:
                return clock_from_points(*self.clock_points, self.curve.source)
            except CurveError:
                if self.speeds is None:
                    return None
        return self.speeds

    def clock_error(self) -> str:
        """Why :meth:`clock` is None, in one sentence."""
        if self.clock_points[0].size:
            try:
                clock_from_points(*self.clock_points, self.curve.source)
            except CurveError as err:
                return str(err)
        return (f"{self.curve.source} has no wall time ({rf.WALL}) to turn compute into hours; give its speeds with "
                "--speeds FILE (see scalerl plan --help).")  # fmt: skip

    def companion(self) -> Companion | None:
        """The training reward binned to the evaluations (``companion``), None without one."""
        if self.train is None or not len(self.train):
            return None
        return Companion.of(self.curve.compute, self.curve.reward, self.train.compute, self.train.reward,
                            self.train.y)  # fmt: skip


def run_budget(records: list[dict], cfg: dict) -> float | None:
    """The run's planned end in compute (module docstring), None where nothing says."""
    for r in reversed(records):
        if (b := rf.number(r, rf.Forecast.BUDGET)) is not None and b > 0:
            return b
    if (m := rf.setting(cfg, "train", "max_compute")) is not None and m > 0:
        return m
    steps = rf.setting(cfg, "train", "steps")
    last = next((r for r in reversed(records) if rf.number(r, rf.COMPUTE) and rf.number(r, rf.STEP)), None)
    if steps and last is not None:
        return rf.number(last, rf.COMPUTE) * steps / rf.number(last, rf.STEP)
    return None


def _folder(path: Path) -> tuple[Path, dict]:
    """The log of ``path`` (a run folder's metrics, else itself) and the folder's config."""
    if path.is_dir() and rf.is_run(path):
        try:
            return path / rf.METRICS, rf.read_config(path)
        except rf.BadRunFile as err:
            raise CurveError(str(err)) from None
    return path, {}


def _metric(columns: Columns, cfg: dict) -> Columns:
    """A run folder whose config forecasts the mean reward (``forecast.metric: reward_mean``) is
    read on ``val_reward_mean``, unbounded, unless ``--y`` names another column."""
    if columns.y is None and rf.section(cfg, "forecast").get("metric") == "reward_mean":
        return replace(columns, y=rf.VAL_REWARD_MEAN, bounded=False)
    return columns


def _train_column(log: Path, curve: Curve, columns: Columns, train: str | None) -> list[str]:
    if train is not None and train.lower() == "none":
        return []
    if train:
        return [train]
    names = [*TRAIN_REWARD_COLUMNS, *(t for n in TRAINERS.values() for t in n.train)]  # other trainers' too
    return [c for c in dict.fromkeys(names) if find_column([curve.y], c) is None]


def _train_curve(log: Path, curve: Curve, columns: Columns, train: str | None) -> Curve | None:
    """The training reward beside ``curve`` in ``log``; a column named that is not there is one sentence."""
    for name in _train_column(log, curve, columns, train):
        try:
            found = read_curves(log, Columns(x=columns.x, y=name, step_to_compute=columns.step_to_compute,
                                             bounded=False))  # fmt: skip
        except CurveError as err:
            if train:
                raise CurveError(f"--train-reward {train}: {err}") from None
            continue
        match = [c for c in found if c.name == curve.name] or (found if len(found) == 1 else [])
        if match:
            return match[0]
    return None


def _x_of(curve: Curve) -> tuple[str, float]:
    """The compute column of ``curve`` and its factor (``--step-to-compute``: "step x 2.1")."""
    name, sep, factor = curve.x.rpartition(" x ")
    return (name, float(factor)) if sep else (curve.x, 1.0)


def _jsonl_extras(numbered: list[tuple[int, dict]], curve: Curve
                  ) -> tuple[tuple, tuple[np.ndarray, np.ndarray], np.ndarray | None]:
    """A JSONL log's records, clock points (on the curve's compute) and the evaluations' steps."""
    records = tuple(r for _, r in numbered)
    x, factor = _x_of(curve)
    timed = [(rf.number(r, x), rf.number(r, rf.WALL)) for r in records]
    timed = [(c * factor, w) for c, w in timed if c is not None and w is not None]
    clock = tuple(np.asarray(v, float) for v in zip(*timed)) if timed else (np.empty(0), np.empty(0))
    by_line = {n: rf.number(r, rf.STEP) for n, r in numbered}
    steps = None
    if curve.lines and all(by_line.get(n) is not None for n in curve.lines):
        steps = np.array([by_line[n] for n in curve.lines], dtype=float)
    return records, clock, steps


def log_from_records(numbered: list[tuple[int, dict]], path: Path, cfg: dict, columns: Columns | None = None,
                     name: str | None = None) -> RunLog:
    """A run folder's log from its (line, record) pairs and config, as :func:`read_logs` reads
    it (``serve`` reads the records through its own guard): the same curve, training reward,
    clock and budget."""
    columns = _metric(Columns() if columns is None else columns, cfg)
    (curve, *more) = curves_from_records(numbered, path, columns)
    if more:
        raise CurveError(f"{path} holds {1 + len(more)} runs; a run folder holds one.")
    if name is not None:
        curve = replace(curve, name=name)
    records, clock, steps = _jsonl_extras(numbered, curve)
    train = None
    for column in _train_column(path, curve, columns, None):
        if any(rf.number(r, column) is not None for r in records):
            train = _train_from_records(numbered, path, columns, column, curve.name)
            if train is not None:
                break
    return RunLog(curve, train, clock, None, steps, run_budget(list(records), cfg), records, cfg)


def _train_from_records(numbered, path: Path, columns: Columns, column: str, name: str) -> Curve | None:
    try:
        (train, *_) = curves_from_records(numbered, path, replace(columns, y=column, bounded=False))
    except CurveError:
        return None
    return replace(train, name=name)


def read_logs(paths, columns: Columns | None = None, *, train: str | None = None, speeds: Clock | None = None
              ) -> list[RunLog]:
    """Every run in the given files, folders and globs (module docstring), each file read once."""
    columns = Columns() if columns is None else columns
    found = [f for path in expand_paths(paths) for f in _found(Path(path), columns)]
    return _logs(found, columns, train, speeds)


def read_log_file(path: Path, columns: Columns | None = None, *, train: str | None = None) -> list[RunLog]:
    """Every run in one file or folder, as :func:`read_logs` reads it, its name never read as
    a glob (a prior's finished runs, found once by ``forecast.prior_runs``)."""
    columns = Columns() if columns is None else columns
    return _logs(_found(Path(path), columns), columns, train, None)


def _found(path: Path, columns: Columns) -> list[tuple[Path, dict, Curve]]:
    log, cfg = _folder(path)
    return [(log, cfg, curve) for curve in read_curves(log, _metric(columns, cfg))]


def _logs(found: list[tuple[Path, dict, Curve]], columns: Columns, train: str | None, speeds: Clock | None
          ) -> list[RunLog]:
    names = unique_names([curve for _, _, curve in found])
    out = []
    for (log, cfg, curve), unique in zip(found, names):
        records, clock, steps = (), (np.empty(0), np.empty(0)), None
        if log.is_file() and not is_tensorboard(log) and log.suffix.lower() in suffixes(read_jsonl):
            records, clock, steps = _jsonl_extras(jsonl_records(log), curve)
        budget = run_budget(list(records), cfg) if cfg else None
        if budget is None and curve.x == "step":  # a Hugging Face trainer's state: its max_steps
            budget = trainer_state_budget(log)
        trained = _train_curve(log, curve, columns, train)
        out.append(RunLog(unique, trained, clock, speeds, steps, budget, records, cfg))
    return out
