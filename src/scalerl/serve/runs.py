"""What ``scalerl serve`` shows, read from what runs already write (no torch, no web server).

A **run** is a folder with ``metrics.jsonl`` (``scalerl train --out``), or another trainer's
log (``foreign``: TRL's ``trainer_state.json``, TensorBoard, a W&B run folder); a **study** is a
folder holding runs (a sweep folder: ``sweep.yaml``, and ``decisions.json`` when adaptive).
:class:`Served` owns everything a server keeps: the served folders (every read goes through
``files.Files``, never outside them), the discovery of runs (cached, checkpoints and models
skipped), each run's files read once per change, and each run's one ``Forecast``
(``forecasts``), made as ``scalerl plan`` makes it: the header, the chart's band, the
crossing and P(reach) of a page are all read from that one forecast.

A run's **state** is ``runfolder.run_state``'s; a run whose files cannot be read, parsed or
typed is ``unreadable``, with the reason in one sentence, and every other run still serves.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from scalerl import runfolder as rf
from scalerl.fit.readers.discover import trainer_log
from scalerl.serve.files import MAX_SMALL, Files
from scalerl.serve.forecasts import Background, Made
from scalerl.serve.foreign import log_records, log_stamp, log_state

__all__ = ["Drawn", "Found", "Served"]

TRAINING = (rf.TRAIN_REWARD, "pass_rate", "completion_len", "truncation_rate", "entropy", "staleness_mean",
            "mismatch_kl", "loss", "grad_norm")  # fmt: skip
"""The training curves a run page draws (those its records have), besides each reward function's."""
NOT_FUNCTIONS = (rf.TRAIN_REWARD, "reward_none", "reward_errors")
GRID = 60  # the band's compute points ahead of the data
DISCOVER_S = 2.0  # a discovery of the served folders is reused this long
READ_WAIT = 2.0  # seconds a request waits for a run's files to be read the first time, before "being read"
READ_AGAIN = 0.15  # ... and for a newer version of them, before it answers the one before (the next poll has it)
MAX_FITS = 60  # runs a study's table fits the law of; more are listed, said, and left out
MAX_RUNS = 5000  # runs a served folder may hold; more are left out, and said
PAGE_WAIT = 0.5  # seconds a run's page waits for its first forecast before it is answered "being made"


@dataclass(frozen=True)
class Found:
    """A run or a study under one of the served folders; ``id`` is its URL path, relative to
    the folder it was found in (prefixed by that folder's name when several are served)."""

    id: str
    path: Path
    kind: str  # "run" or "study"
    log: Path | None = None  # another trainer's log a run is read from (``foreign``); None: a scalerl run


@dataclass(frozen=True, eq=False)
class RunView:
    """One version of a run's files, read and typed, or the sentence why they cannot be."""

    records: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    state: rf.RunState = rf.RunState("paused")
    log: Any = None  # the RunLog its forecast reads; None where there is none to read
    error: str | None = None
    stamp: tuple | None = None  # the (size, mtime) of metrics.jsonl and config.yaml this version was read at
    evals: list[dict] = field(default_factory=list)  # its evaluations (``_evaluations``), filtered once per read


def _evaluations(records: list[dict], y: str) -> list[dict]:
    """The records that are evaluations: a number in the forecast metric's column ``y`` and in
    the compute column (the one filter of the list, the page and the reader)."""
    return [r for r in records if _number(r.get(y)) is not None and _number(r.get(rf.COMPUTE)) is not None]


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


class Served:
    """The served folders and everything read from them (module docstring)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = [Path(r).resolve() for r in roots]
        self.files = Files(self.roots)
        self.forecasts = Background("forecast")
        self.reads = Background("read", workers=2)
        self._found: tuple[float, list[Found]] | None = None
        self._units: dict[str, tuple] = {}  # run id -> (plan.json's stamp, its compute unit)
        self.truncated = False

    # --- discovery -------------------------------------------------------------------------

    def discover(self) -> list[Found]:
        """Every run and study under the served folders (cached ``DISCOVER_S`` seconds)."""
        now = time.monotonic()
        if self._found is not None and now - self._found[0] < DISCOVER_S:
            return self._found[1]
        out: list[Found] = []
        for root in self.roots:
            prefix = f"{root.name}/" if len(self.roots) > 1 else ""
            out += self._discover(root, prefix)
        self._found = (now, out)
        return out

    def _discover(self, root: Path, prefix: str) -> list[Found]:
        if rf.is_run(root):
            return [Found(prefix.rstrip("/") or root.name, root, "run")]
        runs, studies, logs, newest = [], [], {}, {}
        for folder, files in rf.walk(root):
            if rf.METRICS in files:
                runs.append(folder)
            elif (log := trainer_log(folder, files, newest)) is not None:
                runs.append(folder)
                logs[folder] = log
            if rf.SWEEP in files:
                studies.append(folder)
            if len(runs) >= MAX_RUNS:
                self.truncated = True
                break
        studies += [p for p in {r.parent for r in runs} if p != root and p not in studies and _has_runs(p, runs)]

        def rel(p: Path) -> str:
            text = (prefix + p.relative_to(root).as_posix()) if p != root else (prefix.rstrip("/") or root.name)
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")  # a name that is not UTF-8

        out = [Found(rel(r), r, "run", logs.get(r)) for r in sorted(runs)]
        return out + [Found(rel(s), s, "study") for s in sorted(set(studies))]

    # --- one run's files -------------------------------------------------------------------

    def view(self, found: Found, wait: float = READ_AGAIN, first_wait: float | None = READ_WAIT) -> RunView:
        """The run's files as they are now, read once per change of them in a background thread
        (a huge log is marked "being read", never waited on past ``first_wait``; a newer version
        past ``wait``, the one before answered meanwhile); its state is read every time (a run
        stops being "running" when its files stop changing)."""
        made = self.reads.get(found.id, self._stamp(found), lambda: self._read(found), wait, first_wait)
        view = made.forecast
        if view is None:  # being read, or the read itself failed
            return RunView(state=rf.RunState("reading" if made.pending else "unreadable", made.error or
                                             "its files are being read"), error=made.error or "being read")  # fmt: skip
        if view.state.state == "unreadable":
            return view
        if found.log is not None:
            return RunView(view.records, view.config, log_state(found.log), view.log, view.error, view.stamp, view.evals)
        state = rf.run_state(found.path, view.records, view.config, read=self.files.tail)
        return RunView(view.records, view.config, state, view.log, view.error, view.stamp, view.evals)

    def prefetch(self, runs: Sequence[Found]) -> None:
        """Start reading every run's newest files at once (a list's rows then wait on reads
        already under way, in the read workers, rather than one after another)."""
        for found in runs:
            self.view(found, wait=0.0, first_wait=0.0)

    def _read(self, found: Found) -> RunView:
        from scalerl.fit.errors import CurveError
        from scalerl.fit.forecast.log import log_from_records

        if found.log is not None:
            return self._read_foreign(found)
        stamp = self._stamp(found)  # before reading: a write meanwhile is read again at the next poll
        try:
            numbered = self._numbered(found.path / rf.METRICS)
            records = [r for _, r in numbered]
            config = self.files.config(found.path)
        except (rf.BadRunFile, OSError) as err:
            return RunView(state=rf.RunState("unreadable", str(err)), error=str(err), stamp=stamp)
        state = rf.RunState("paused")
        log, why = None, None
        evals = _evaluations(records, self.metric(config))
        try:
            if evals:
                log = log_from_records(numbered, found.path / rf.METRICS, config, name=found.id)
        except (CurveError, ValueError) as err:
            why = str(err).rstrip(".")
        return RunView(records, config, state, log, why, stamp, evals)

    def _read_foreign(self, found: Found) -> RunView:
        """Another trainer's log, read as ``plan`` reads it (``foreign``)."""
        from scalerl.fit.errors import CurveError
        from scalerl.fit.forecast.log import read_log_file

        stamp = self._stamp(found)
        try:
            self.files.inside(found.log)  # never a link out of the served folders
            logs = read_log_file(found.log)
        except (CurveError, rf.BadRunFile, OSError, ValueError) as err:
            return RunView(state=rf.RunState("unreadable", str(err)), error=str(err), stamp=stamp)
        log = logs[0]
        records = log_records(log)
        return RunView(records, {}, rf.RunState("paused"), log, None, stamp, _evaluations(records, rf.VAL_PASS_RATE))

    def _stamp(self, found: Found) -> tuple:
        if found.log is not None:
            return (log_stamp(found.log), None)  # no config.yaml beside it
        return tuple(self.files.stamp(found.path / n) for n in (rf.METRICS, rf.CONFIG))

    def _numbered(self, path: Path) -> list[tuple[int, dict]]:
        from scalerl.serve.files import MAX_LOG

        try:
            data = self.files.read(path, MAX_LOG)
        except FileNotFoundError:
            return []
        return rf.parse_records(data, path)

    @staticmethod
    def metric(config: dict) -> str:
        """The run's forecast metric's column (``forecast.metric``)."""
        return rf.VAL_REWARD_MEAN if rf.section(config, "forecast").get("metric") == "reward_mean" else rf.VAL_PASS_RATE

    def unit(self, found: Found) -> str:
        """The run's compute unit (``runfolder.compute_unit`` of its ``plan.json``), read once per
        change of that file; another trainer's log: its own x, as ``plan`` names it)."""
        if found.log is not None:
            log = self.view(found).log
            return "step" if log is None else log.curve.x
        stamp = self.files.stamp(found.path / rf.PLACEMENT)
        hit = self._units.get(found.id)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        try:
            plan = _json_or_none(self.files.text(found.path / rf.PLACEMENT))
        except (rf.BadRunFile, OSError):
            plan = None
        unit = rf.compute_unit(plan)
        self._units[found.id] = (stamp, unit)
        return unit

    # --- its forecast ------------------------------------------------------------------------

    def forecast(self, found: Found, view: RunView, wait: float = 0.0, first_wait: float | None = None) -> Made:
        """The run's one forecast (``forecasts``), made as ``scalerl plan RUN`` makes it."""
        if view.log is None:
            return Made(error=view.error or "no evaluation yet")
        from scalerl.fit.forecast.prior_runs import prior_stamp

        # keyed by what the forecast reads (``forecast_of``: the log up to its last evaluation, the
        # run's budget and config) and by the version of its prior's finished runs: the training
        # steps between evaluations make no new forecast, so a new evaluation is forecast at once
        # rather than behind the forecasts of every step before it (the newcomer saw ~30 s)
        curve = view.log.curve
        read = (view.stamp[1], len(curve), float(curve.compute[-1]), float(curve.reward[-1]), view.log.budget)
        stamp = (read, prior_stamp(view.config, found.path))
        return self.forecasts.get(found.id, stamp, lambda: _forecast_of(view.log, found.path), wait, first_wait,
                                  urgent=bool(first_wait))  # a page waiting on its first forecast

    # --- what the pages read -------------------------------------------------------------------

    def summary(self, found: Found, wait: float = 0.0, first_wait: float | None = None,
                view: RunView | None = None) -> dict:
        """One row of the runs list: the run's state and progress, and its forecast's answers
        (of ``view``, the version of its files a page already read, else the newest)."""
        view = self.view(found) if view is None else view
        records, cfg = view.records, view.config
        y, evals = self.metric(cfg), view.evals
        last = records[-1] if records else {}
        target = rf.number(rf.section(cfg, "forecast"), "target")
        row = {"id": found.id, "folder": str(found.path), "recipe": str(cfg.get("name", "")),
               "state": view.state.state, "state_detail": view.state.detail, "metric": y,
               "step": _number(last.get(rf.STEP)), "steps": rf.setting(cfg, "train", "steps"),
               "reward": _number(next((r[rf.TRAIN_REWARD] for r in reversed(records) if rf.TRAIN_REWARD in r), None)),
               "val": _number(evals[-1][y]) if evals else None,
               "val_step": _number(evals[-1].get(rf.STEP)) if evals else None, "target": target}  # fmt: skip
        return row | self._answers(found, view, target, wait, first_wait)

    def _answers(self, found: Found, view: RunView, target: float | None, wait: float,
                 first_wait: float | None) -> dict:  # fmt: skip
        made = self.forecast(found, view, wait, first_wait)
        drawn: Drawn | None = made.forecast
        f = None if drawn is None else drawn.forecast
        none = {"median": None, "lo": None, "hi": None}
        head = {"budget": None, "state": None, "method": None, "note": made.error, "stale": made.stale, "cut": None}
        out = {"forecast": none | head, "hours_to_target": dict(none), "compute_to_target": dict(none), "p_reach": None}
        out["hours_note"] = "set forecast.target" if target is None else None
        if f is None:
            if made.pending:
                out["forecast"]["note"] = "being made"
            return out
        if f.budget is None:
            out["forecast"]["budget_note"] = ("no budget: the run's config sets neither train.max_compute nor "
                                              "train.steps, and no record has forecast_budget")  # fmt: skip
        out["forecast"] |= {"state": f.state.name, "method": f.method, "note": f.state.message, "cut": f.cut,
                            "level": f.level, "budget": f.budget}  # fmt: skip
        if f.budget is not None and f.draws is not None:
            a = drawn.at_budget
            out["forecast"] |= {"median": a.value, "lo": a.pred_lo, "hi": a.pred_hi, "band_lo": a.lo, "band_hi": a.hi}
        if target is not None:
            reach = drawn.reach if drawn.target == target else f.reach(target)  # a target changed since
            out["compute_to_target"] = _triple(reach.compute)
            out["hours_to_target"] = _triple(reach.hours) if reach.hours else dict(none)
            out["p_reach"] = reach.p_within
            out["reach"] = reach.to_dict()
            if reach.hours is None:
                out["hours_note"] = f.log.clock_error() if f.clock is None else (reach.note or "no forecast yet")
            elif not np.isfinite(reach.hours[0]):
                out["hours_note"] = reach.note or "not reached within the horizon at the median"
        return out

    def detail(self, found: Found, wait: float | None = None) -> dict:
        """Everything a run's page draws: the validation curve against compute and hours with
        the forecast ahead of it, the training curves, where the roles ran, the config and the
        resume command."""
        view = self.view(found)
        # a page's policy: a forecast remade is answered stale at once, a first one waited on
        # PAGE_WAIT; a caller's own ``wait`` bounds both
        head = self.summary(found, 0.0, PAGE_WAIT, view) if wait is None else self.summary(found, wait, view=view)
        records, y, evals = view.records, head["metric"], view.evals
        keys = [k for k in TRAINING if any(_number(r.get(k)) is not None for r in records)]
        keys += sorted({k for r in records for k in r if isinstance(k, str) and k.startswith("reward_")
                        and k not in NOT_FUNCTIONS and _number(r.get(k)) is not None})  # fmt: skip
        try:
            placed = self.files.text(found.path / rf.PLACEMENT)
        except (rf.BadRunFile, OSError) as err:
            placed = json.dumps({"not shown": str(err)})
        plan = _json_or_none(placed)
        compute = [float(r[rf.COMPUTE]) for r in evals]
        drawn = self.forecast(found, view).forecast
        fitted = None  # the forecast at each evaluation, where the forecast saw the same ones
        if drawn is not None and drawn.fitted is not None and len(drawn.fitted) == len(compute):
            fitted = drawn.fitted
        return head | {
            "units": {"compute": self.unit(found), "hours": "hours since the run started", "step": "step"},
            "validation": {"compute": compute, "value": [float(r[y]) for r in evals],
                           "hours": [None if (w := _number(r.get(rf.WALL))) is None else w / 3600.0 for r in evals],
                           "step": [_number(r.get(rf.STEP)) for r in evals],
                           "stderr": [_number(r.get(rf.VAL_STDERR)) for r in evals], "forecast": fitted},
            "band": self._band(found, view, head), "training": {k: _series(records, k) for k in keys},
            "plan": plan, "config": self._config_text(found, view),
            "resume": None if found.log is not None else f"scalerl train --resume {found.path}",
            "source": None if found.log is None else str(found.log),
        }  # fmt: skip

    def _config_text(self, found: Found, view: RunView) -> str:
        try:
            return self.files.text(found.path / rf.CONFIG, MAX_SMALL) or ""
        except (rf.BadRunFile, OSError) as err:
            return f"(not shown: {err})"

    def _band(self, found: Found, view: RunView, head: dict) -> dict:
        """The forecast ahead of the data, read off the run's one forecast: the expected curve's
        median, its band and the predictive interval on a grid from the cut to the budget (2x the
        compute so far without one), against compute and hours; the target's crossing."""
        made = self.forecast(found, view)
        drawn: Drawn | None = made.forecast
        f = None if drawn is None else drawn.forecast
        if f is None or f.draws is None:
            return {"error": made.error or (f.state.message if f is not None else "being made")}
        grid, a = drawn.grid, drawn.band
        clock = f.clock
        out = {"compute": grid.tolist(), "median": np.asarray(a.value).tolist(), "lo": np.asarray(a.lo).tolist(),
               "hi": np.asarray(a.hi).tolist(), "pred_lo": np.asarray(a.pred_lo).tolist(),
               "pred_hi": np.asarray(a.pred_hi).tolist(), "source": f.method, "state": f.state.name,
               "rise": f.state.message, "stale": made.stale, "level": f.level,
               "hours": None if clock is None else clock.hours(grid).tolist(),
               "hours_note": None if clock is not None else f.log.clock_error(),
               "step": steps_at(view.records, grid)}  # fmt: skip
        if head.get("reach") is not None:
            r = head["reach"]
            none = {"median": None, "lo": None, "hi": None}
            out["crossing"] = r["compute"] if r["supported"] else none
            out["crossing_hours"] = r["hours"] if r["supported"] and r["hours"] else none
            ends = [out["crossing"].get(k) for k in ("median", "lo", "hi")]
            at = steps_at(view.records, np.array([np.nan if e is None else e for e in ends], float))
            out["crossing_step"] = dict(zip(("median", "lo", "hi"), at)) if at is not None else none
        return out

    def samples(self, found: Found, query: str = "", limit: int = 50) -> list[dict]:
        """The newest ``limit`` samples whose prompt or completion holds ``query`` (any case)."""
        q = query.lower()
        rows = self.files.records(found.path / rf.SAMPLES)
        hits = [r for r in rows if not q or q in str(r.get("prompt", "")).lower()
                or q in str(r.get("completion", "")).lower()]  # fmt: skip
        return hits[-limit:][::-1]

    def close(self) -> None:
        for background in (self.reads, self.forecasts):
            background.close()


@dataclass(frozen=True, eq=False)
class Drawn:
    """A run's one ``Forecast`` and what its pages read off it, all made in the background
    thread with it (the band at a grid costs more than a poll: ``Forecast.at`` projects the
    law's band at every point): the forecast at the budget, the answer for the run's own
    target, the band from the cut to the budget (2x the compute so far without one), and
    the forecast at each evaluation it saw."""

    forecast: Any
    target: float | None = None
    at_budget: Any = None
    reach: Any = None
    grid: np.ndarray | None = None
    band: Any = None
    fitted: list[float] | None = None


def _forecast_of(log, folder: Path) -> Drawn:
    """The run's one forecast: its folder's ``forecast.*`` settings (its prior of
    ``forecast.prior_runs`` too, learned as the trainer learns it), its own budget, as ``plan``.
    The prior's finished runs are read, never served."""
    from scalerl.fit.forecast import forecast_of
    from scalerl.fit.forecast.prior_runs import run_options

    f = forecast_of(log, options=run_options(log, folder, budget=log.budget, x=rf.COMPUTE))
    reach = None if log.target is None else f.reach(log.target)
    if f.draws is None:
        return Drawn(f, log.target, reach=reach)
    grid = np.linspace(f.cut, max(f.budget or 0.0, 2.0 * f.cut), GRID)
    return Drawn(f, log.target, None if f.budget is None else f.at(f.budget), reach, grid, f.at(grid),
                 f.median_at(log.curve.compute).tolist())  # fmt: skip


def steps_at(records: list[dict], compute: np.ndarray) -> list[float | None] | None:
    """The step at each ``compute`` (an axis change for the band): interpolated between the
    records' (compute, step) pairs, and past the last at the last third's steps per compute;
    None where the records have fewer than two pairs. A NaN compute gives None."""
    pairs = [(c, s) for r in records if (c := _number(r.get(rf.COMPUTE))) is not None
             and (s := _number(r.get(rf.STEP))) is not None]  # fmt: skip
    if len(pairs) < 2:
        return None
    c, s = (np.array(v, float) for v in zip(*pairs))
    k = max(len(c) - max(len(c) // 3, 2), 0)
    rate = (s[-1] - s[k]) / (c[-1] - c[k]) if c[-1] > c[k] else 0.0
    x = np.asarray(compute, float)
    out = np.where(x <= c[-1], np.interp(x, c, s), s[-1] + rate * (x - c[-1]))
    return [None if not np.isfinite(v) else float(v) for v in out]


def _triple(v) -> dict:
    return {k: (float(x) if x is not None and np.isfinite(x) else None) for k, x in zip(("median", "lo", "hi"), v)}


def _series(records: list[dict], key: str) -> dict:
    pts = [(_number(r.get(rf.STEP)), _number(r.get(key))) for r in records]
    pts = [p for p in pts if p[0] is not None and p[1] is not None]
    return {"step": [p[0] for p in pts], "value": [p[1] for p in pts]}


def _json_or_none(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _has_runs(folder: Path, runs: list[Path]) -> bool:
    """A folder above two or more runs is a study (a sweep folder without its spec)."""
    return sum(1 for r in runs if r.parent == folder) >= 2
