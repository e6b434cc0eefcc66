"""The live forecast of ``scalerl train``: Eq. 1 refitted on the run so far, off the
learner's critical path, and the optional early stop it allows.

After every evaluation the validation curve so far is handed to one background thread,
which fits the law and assesses its intervals (``scalerl.fit.forecast.live_forecast``).
The learner never waits for it: the fields join the first metrics record written after
the fit finishes, with ``forecast_step`` naming the evaluation they were fitted up to
(and ``forecast_fit_until`` its compute, so ``scalerl fit --max-compute`` reproduces
them). Only the run's last record waits, so that a run ends with its latest forecast.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from scalerl.config import Config
from scalerl.metric_names import COMPUTE, TRAIN_REWARD, VAL_PASS_RATE, WALL


class LiveForecast:
    """Collects evaluations, refits in the background, and says when to stop."""

    def __init__(self, cfg: Config, past=()) -> None:
        """``past``: the evaluation records a resumed run already has."""
        self.cfg = cfg.forecast
        self.train = cfg.train
        self.lr = cfg.optim.lr
        self._said_no_rise = False  # the not-learning line is said once per session
        self.y = cfg.fitted_metric  # forecast.metric: val_pass_rate or val_reward_mean
        self.points: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[self.y])) for r in past
                                                  if r.get(self.y) is not None]
        self.clock: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[WALL])) for r in past if r.get(WALL) is not None]
        self.trained: list[tuple[float, float]] = [(float(r[COMPUTE]), float(r[TRAIN_REWARD])) for r in past
                                                   if r.get(TRAIN_REWARD) is not None and r.get(COMPUTE) is not None]
        self._step = int(past[-1]["step"]) if past else 0
        self._start: tuple[float, int, float] | None = None  # (compute, step, time) of this session
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forecast")
        self._pending: Future | None = None
        self._ready: dict[str, Any] | None = None  # finished, not yet handed out
        self._stale = False  # an evaluation arrived while a fit was running
        self._prior: dict[str, Any] = {}  # forecast.prior_runs' prior, learned once in the forecast thread
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
        if len(self.points) - 1 < self.cfg.min_points or self._step <= 0:
            return
        compute, reward = zip(*self.points)
        self._pending = self._pool.submit(
            _fit, list(compute), list(reward), self.budget(), self._step, self.cfg, self._prior, self.y,
            list(self.clock), list(self.trained)
        )
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
        validation after ``train.no_rise_after`` of the run's budget (``scalerl.fit.rise``)."""
        if fields.get("forecast_rise") is not False or self._said_no_rise:
            return None
        done = fields["forecast_fit_until"] / fields["forecast_budget"]
        if done < self.train.no_rise_after:
            return None
        self._said_no_rise = True
        z = fields.get("forecast_rise_z")
        return (f"not learning: after {100 * done:.0f}% of the run's budget, {self.y} shows no rise (the last third "
                f"of its evaluations reads {fields['forecast_rise_last']:.3f} against {fields['forecast_rise_first']:.3f} "
                f"in the first third, {0.0 if z is None else z:+.1f} sd of their noise); what usually helps is the "
                f"learning rate (optim.lr = {self.lr:g}: a curve that never moves often needs a larger one, one that "
                "rises and falls a smaller one), or the reward's signal on this task (near a pass rate of 0 or 1 few "
                "groups have a spread of rewards to learn from)"
                + ("." if self.train.stop_if_no_rise else "; train.stop_if_no_rise=true stops such a run."))  # fmt: skip

    def stop_reason(self, fields: dict[str, Any]) -> str | None:
        """One sentence when the forecast says the run cannot reach what it is for."""
        p_floor, p_reach = self.train.stop_if_p_reach_below, fields.get("forecast_p_reach")
        if p_floor is not None and p_reach is not None and p_reach < p_floor:  # carries A's whole interval
            return (
                f"stopping early: the forecast gives P = {p_reach:.3f} of reaching forecast.target = "
                f"{self.cfg.target:g} within the run's budget, below train.stop_if_p_reach_below = {p_floor:g}."
            )
        if not fields.get("forecast_identified"):
            return None  # never on a ceiling the data do not pin down
        lo, hi = fields["forecast_A_lo"], fields["forecast_A_hi"]
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


def _fit(compute: list[float], reward: list[float], budget: float, step: int, cfg, prior: dict,
         y: str, clock: list[tuple[float, float]] = (), trained: list[tuple[float, float]] = ()) -> dict[str, Any]:
    """Runs in the forecast thread; a curve the law cannot fit yet gives a reason, not a crash.

    Any other failure is logged as ``forecast_error`` too: the forecast is a diagnostic, and
    a bug in it must never end a training run hours in. ``prior`` caches the prior of
    ``forecast.prior_runs`` (learned at the first forecast; the one worker thread is its
    only user). ``y`` is the fitted column (``forecast.metric``), logged as ``forecast_metric``;
    a mean reward is not bounded to [0, 1] as a pass rate is. ``trained``: (compute,
    ``reward_mean``) of the step records, the time to target's companion (``fit.companion``).
    """
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import live_forecast
    from scalerl.fit.options import FitOptions
    from scalerl.fit.prior_runs import load_prior
    from scalerl.fit.readers import Columns

    options = FitOptions(r0="first", min_compute=cfg.min_compute, level=cfg.level, margin=cfg.margin,
                         bounded=y == VAL_PASS_RATE)
    head = {"forecast_step": step, "forecast_metric": y}
    try:
        if cfg.prior_runs is not None and "learned" not in prior:
            prior["learned"] = load_prior(cfg.prior_runs, options, Columns(x=COMPUTE, y=y), what="forecast.prior_runs")
        fields = live_forecast(compute, reward, budget=budget, target=cfg.target, options=options,
                               prior=prior.get("learned"))  # fmt: skip
        if cfg.target is not None:  # hours to the target and P(reaching it by the run's end)
            from scalerl.fit.companion import Companion
            from scalerl.fit.time.answer import live_time_to_target

            companion = Companion.from_points(compute, reward, trained, TRAIN_REWARD)
            try:
                fields |= live_time_to_target(compute, reward, clock, target=cfg.target, budget=budget,
                                              options=options, companion=companion)  # fmt: skip
            except CurveError as err:  # too few timed records yet: the rest of the forecast stands
                fields["forecast_time_to_target_error"] = str(err)
    except CurveError as err:
        return head | {"forecast_error": str(err)}
    except Exception as err:  # noqa: BLE001 - see the docstring
        return head | {"forecast_error": f"{type(err).__name__}: {err}"}
    return head | fields
