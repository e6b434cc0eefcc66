"""The live forecast of ``scalerl train``: the run's ``Forecast`` remade after every
evaluation, off the learner's critical path, and the early stops it allows.

After every evaluation the run so far (its evaluations, training rewards and clock) is handed
to one background thread, which makes the one forecast (``fit.forecast.forecast_of``: one fit
of the validation per evaluation) and turns it into ``forecast_*`` fields
(``fit.forecast.record``). The learner never waits for it: the fields join the first metrics
record written after the forecast is made, with ``forecast_step`` naming the evaluation it
was made at (and ``forecast_fit_until`` its compute, so ``scalerl plan --max-compute``
reproduces it). Only the run's last record waits, so that a run ends with its latest forecast.
The first evaluations already carry a forecast: its state (``too_few_evaluations``) says how
many more it needs and about which step they come.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.config import Config
from scalerl.eval_plan import plan_of
from scalerl.runfolder import COMPUTE, TRAIN_REWARD, VAL_PASS_RATE, WALL
from scalerl.runfolder import Forecast as K


class LiveForecast:
    """Collects evaluations, refits in the background, and says when to stop."""

    def __init__(self, cfg: Config, past=(), run_dir: Path | None = None) -> None:
        """``past``: the evaluation records a resumed run already has; ``run_dir``: the run's
        folder, never part of its own prior (``forecast.prior_runs``)."""
        self.cfg = cfg.forecast
        self.train = cfg.train
        self.lr = cfg.optim.lr
        self.plan = plan_of(cfg)  # the steps validated: the too-few state's "about step N"
        self._said_no_rise = False  # the not-learning line is said once per session
        self.y = cfg.fitted_metric  # forecast.metric: val_pass_rate or val_reward_mean
        self.points: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[self.y])) for r in past
                                                  if r.get(self.y) is not None]
        self.steps: list[int] = [int(r["step"]) for r in past if r.get(self.y) is not None]
        self.clock: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[WALL])) for r in past if r.get(WALL) is not None]
        self.trained: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[TRAIN_REWARD])) for r in past
                                                   if r.get(TRAIN_REWARD) is not None and r.get(COMPUTE) is not None]
        self._step = int(past[-1]["step"]) if past else 0
        self._start: tuple[float, int, float] | None = None  # (compute, step, time) of this session
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast")
        self._pending: Future | None = None
        self._ready: dict[str, Any] | None = None  # finished, not yet handed out
        self._stale = False  # an evaluation arrived while a fit was running
        self.run_dir = run_dir
        self.deadline: float | None = None  # time.monotonic() at which train.max_minutes ends the run

    def set_deadline(self, deadline: float | None) -> None:
        """When (``time.monotonic()``) ``train.max_minutes`` ends the run, the whole run's limit
        (``scalerl.pipeline.time_limit``); None: no limit. The budget is read at it."""
        self.deadline = deadline

    def observe(self, record: dict[str, Any]) -> None:
        """Take a metrics record; an evaluation (step, compute, pass rate) triggers a refit."""
        if self._start is None and record.get(COMPUTE) is not None:
            self._start = (float(record[COMPUTE]), int(record["step"]), time.monotonic())
        if record.get(COMPUTE) is not None and record.get(WALL) is not None:
            self.clock.append((float(record[COMPUTE]), float(record[WALL])))  # compute -> hours for the time to target
        if record.get(COMPUTE) is not None and record.get(TRAIN_REWARD) is not None:
            self.trained.append((float(record[COMPUTE]), float(record[TRAIN_REWARD])))  # the forecast's companion
        if not self.cfg.enabled or record.get(self.y) is None:
            return
        self.points.append((float(record[COMPUTE]), float(record[self.y])))
        self._step = int(record["step"])
        self.steps.append(self._step)
        if self._pending is not None and not self._pending.done():
            self._stale = True
            return
        self._collect()
        self._submit()

    def budget(self) -> float:
        """Compute the run will have spent when it ends: at ``train.steps``, at
        ``train.max_compute``, or at the ``train.max_minutes`` deadline (:meth:`set_deadline`) if that comes first, at this
        session's rate so far."""
        compute, step = self.points[-1][0], self._step
        if self._start is None or step <= self._start[1]:
            return compute * self.train.steps / max(step, 1)
        c0, s0, t0 = self._start
        per_step = (compute - c0) / (step - s0)
        budget = compute + per_step * max(self.train.steps - step, 0)
        if self.deadline is not None:
            now = time.monotonic()
            elapsed, left = max(now - t0, 1e-9), max(self.deadline - now, 0.0)
            budget = min(budget, compute + (compute - c0) / elapsed * left)
        if self.train.max_compute is not None:
            budget = min(budget, max(self.train.max_compute, compute))
        return float(budget)

    def _submit(self) -> None:
        run = Seen(list(self.points), list(self.trained), list(self.clock), list(self.steps), self.budget(), self._step,
                   self.plan)
        self._pending = self._pool.submit(_forecast, run, self.cfg, self.y, self.run_dir)
        self._stale = False

    def _collect(self) -> None:
        """Keep a finished fit's fields until ``poll`` hands them out."""
        if self._pending is not None and self._pending.done():
            self._ready = self._pending.result()
            self._pending = None

    def poll(self, *, wait: bool = False) -> dict[str, Any]:
        """Fields of the newest finished forecast (empty when none is ready); ``wait``
        blocks until the forecast of the latest evaluation is done."""
        if wait and self._pending is not None:
            self._pending.result()
        self._collect()
        if self._stale and self._pending is None:
            self._submit()
            if wait:
                return self.poll(wait=True)
        fields, self._ready = self._ready or {}, None
        return fields

    def no_rise(self, fields: dict[str, Any]) -> str | None:
        """The not-learning line, once: the forecast of ``fields`` finds no rise in the
        validation after ``train.no_rise_after`` of the run's budget (``scalerl.fit.forecast.rise``)."""
        if fields.get(K.STATE) not in ("not_learning", "diverging") or self._said_no_rise:
            return None
        done = fields[K.CUT] / fields[K.BUDGET]
        if done < self.train.no_rise_after:
            return None
        self._said_no_rise = True
        z = fields.get(K.RISE_Z)
        return (f"not learning: after {100 * done:.0f}% of the run's budget, {self.y} shows no rise (the last third "
                f"of its evaluations reads {fields[K.RISE_LAST]:.3f} against {fields[K.RISE_FIRST]:.3f} "
                f"in the first third, {0.0 if z is None else z:+.1f} sd of their noise"
                + (f"; {fields[K.SAID].split('; ')[0]}" if fields[K.STATE] == "diverging" else "")
                + "); what usually helps is the "
                f"learning rate (optim.lr = {self.lr:g}: a curve that never moves often needs a larger one, one that "
                "rises and falls a smaller one), or the reward's signal on this task (near a pass rate of 0 or 1 few "
                "groups have a spread of rewards to learn from)"
                + ("." if self.train.stop_if_no_rise else "; train.stop_if_no_rise=true stops such a run."))  # fmt: skip

    def stop_reason(self, fields: dict[str, Any]) -> str | None:
        """One sentence when the forecast says the run cannot reach what it is for."""
        p_floor, p_reach = self.train.stop_if_p_reach_below, fields.get(K.P_REACH)
        if p_floor is not None and p_reach is not None and p_reach < p_floor:  # carries A's whole interval
            return (
                f"stopping early: the forecast gives P = {p_reach:.3f} of reaching forecast.target = "
                f"{self.cfg.target:g} within the run's budget, below train.stop_if_p_reach_below = {p_floor:g}."
            )
        if not fields.get(K.IDENTIFIED):
            return None  # never on a ceiling the data do not pin down
        lo, hi = fields[K.A_LO], fields[K.A_HI]
        floor = self.train.stop_if_ceiling_below
        if floor is not None and hi < floor:
            return (
                f"stopping early: the forecast of {self.y} identifies the ceiling A in [{lo:.3f}, {hi:.3f}], "
                f"entirely below train.stop_if_ceiling_below = {floor:g}."
            )
        target = self.cfg.target
        if self.train.stop_if_target_unreachable and target is not None and hi < target:
            return (
                f"stopping early: the forecast of {self.y} identifies the ceiling A in [{lo:.3f}, {hi:.3f}], "
                f"so forecast.target = {target:g} is out of reach."
            )
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class Seen:
    """What the run had logged when an evaluation came: (compute, value) of its evaluations and
    training rewards, (compute, wall seconds) of its records, the evaluations' steps."""

    points: list[tuple[float, float]]
    trained: list[tuple[float, float]]
    clock: list[tuple[float, float]]
    steps: list[int]
    budget: float
    step: int
    plan: Any = None  # the run's ``EvalPlan``


def _forecast(run: Seen, cfg, y: str, run_dir: Path | None = None) -> dict[str, Any]:
    """Runs in the forecast thread: the run's one forecast, as record fields. A forecast that
    fails is logged as ``forecast_error``, one sentence: the forecast is a diagnostic, and a
    bug in it must never end a training run hours in. ``y`` is the fitted column
    (``forecast.metric``); a mean reward is not bounded to [0, 1] as a pass rate is. The prior
    is ``forecast.prior_runs``', as ``serve`` and ``plan`` learn it (``forecast.prior_runs.run_prior``:
    ``run_dir`` and a copy of the run left out).
    """
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
    from scalerl.fit.forecast.options import MAX_POINTS
    from scalerl.fit.forecast.prior_runs import run_prior
    from scalerl.fit.forecast.record import record_fields
    from scalerl.fit.options import FitOptions
    from scalerl.fit.readers import Columns

    fit = FitOptions(min_compute=cfg.min_compute, level=cfg.level, margin=cfg.margin,
                     bounded=y == VAL_PASS_RATE, max_points=MAX_POINTS)  # fmt: skip
    head = {K.STEP: run.step, K.METRIC: y}
    try:
        compute, reward = zip(*run.points)
        log = RunLog.of(compute, reward, train=run.trained, clock=run.clock, steps=run.steps, metric=y,
                        plan=run.plan)  # fmt: skip
        prior = run_prior(cfg.prior_runs, fit, Columns(x=COMPUTE, y=y), exclude=() if run_dir is None else (run_dir,),
                          curves=(log.curve,))  # fmt: skip
        options = ForecastOptions(fit=fit, budget=run.budget, prior=prior)
        return record_fields(forecast_of(log, options=options), step=run.step, target=cfg.target)
    except CurveError as err:
        return head | {K.ERROR: str(err)}
    except Exception as err:  # noqa: BLE001 - see the docstring
        return head | {K.ERROR: f"{type(err).__name__}: {err}"}
