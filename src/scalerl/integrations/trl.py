"""scalerl's forecast inside TRL's trainers (and any Hugging Face ``Trainer``): one callback.

    from scalerl.integrations.trl import ForecastCallback

    trainer = GRPOTrainer(..., callbacks=[ForecastCallback(metric="eval_reward", target=0.8, out="runs/my-trl-run")])

At every evaluation the callback makes the run's one ``Forecast`` (``fit.forecast.forecast_of``,
as ``scalerl plan`` makes it) in a background thread, following the training reward (TRL's
``reward``) as scalerl's own trainer does, and:

- **logs it through the trainer's own ``report_to``** (``Trainer.log``, at the next evaluation, or
  at the end for the last one: an entry of ``log_history`` of its own): ``forecast/value_at_budget``
  with ``_lo``/``_hi`` (the predictive interval of one evaluation at the budget),
  ``forecast/p_reach`` (of ``target`` by the budget), ``forecast/hours_to_target`` with
  ``_lo``/``_hi``, and ``forecast/state_code`` (the index of the state in
  ``fit.forecast.states.STATES``; ``forecast/state`` in words where a reporter takes text: W&B,
  MLflow, trackio), so W&B, TensorBoard, trackio and MLflow get them with no code of yours;
- **writes ``out`` as a run folder as it goes** (``runfolder``'s format: ``metrics.jsonl``, the
  trainer's arguments in ``config.yaml``, ``status.json``, ``plan.json`` naming the x unit), so
  ``scalerl serve``, ``plan`` and ``fit`` read it live like a scalerl run; the forecast is made
  from that folder through ``forecast.prior_runs.run_options``, so ``scalerl plan OUT`` gives
  the callback's last record's numbers;
- **stops the run** (``control.should_training_stop``) when P(reach) falls below
  ``stop_if_p_reach_below`` or, with ``stop_if_not_learning``, when the run is not learning, in
  one line with the forecast it stopped on. An evaluation waits for the forecast of the one
  before (made meanwhile in the background), so a stop comes by the evaluation after the one
  that decided it.

``x`` is the law's compute axis: ``steps`` (the optimiser step), ``tokens`` (TRL's cumulative
``num_tokens``), ``samples`` (steps x the global batch) or ``device_hours`` (wall hours since the
start x ``devices``). The budget is the trainer's ``max_steps`` in that unit (for tokens and
device-hours at the run's rate so far) unless given.

It never harms the training: a metric that is never logged, steps that do not increase, or a
forecast that fails are each one warning line, and the training goes on. Nothing in scalerl's
core imports this module (the ``trl`` extra).
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from scalerl import runfolder as rf
from scalerl.fit.forecast.states import NOT_LEARNING, STATES

__all__ = ["KEYS", "X_UNITS", "ForecastCallback"]

X_UNITS = ("steps", "tokens", "samples", "device_hours")
TEXT_REPORTERS = ("wandb", "mlflow", "trackio", "all")  # reporters that take a text value
KEYS = ("forecast/value_at_budget", "forecast/value_at_budget_lo", "forecast/value_at_budget_hi", "forecast/p_reach",
        "forecast/hours_to_target", "forecast/hours_to_target_lo", "forecast/hours_to_target_hi",
        "forecast/state_code")  # fmt: skip
"""The scalar keys the callback logs through the trainer (module docstring)."""
_log = logging.getLogger("scalerl.trl")


class ForecastCallback(TrainerCallback):
    """The module docstring's callback."""

    def __init__(self, metric: str = "eval_reward", target: float | None = None, out: str | Path | None = None, *,
                 x: str = "steps", budget: float | None = None, devices: int = 1, train_reward: str = "reward",
                 bounded: bool = True, stop_if_p_reach_below: float | None = None,
                 stop_if_not_learning: bool = False) -> None:  # fmt: skip
        if x not in X_UNITS:
            raise ValueError(f"ForecastCallback: x must be one of {', '.join(X_UNITS)}, got {x!r}")
        if target is not None and not 0.0 <= float(target) <= 1.0 and bounded:
            raise ValueError(f"ForecastCallback: target must lie in [0, 1] for a bounded metric, got {target!r}")
        if stop_if_p_reach_below is not None and (target is None or not 0.0 < stop_if_p_reach_below < 1.0):
            raise ValueError("ForecastCallback: stop_if_p_reach_below needs a target and must lie in (0, 1)")
        self.metric, self.target, self.x, self.devices = metric, target, x, max(int(devices), 1)
        self.given_budget, self.train_reward, self.bounded = budget, train_reward, bounded
        self.stop_p, self.stop_flat = stop_if_p_reach_below, stop_if_not_learning
        self.out = Path(out) if out is not None else None
        self.y = rf.VAL_PASS_RATE if bounded else rf.VAL_REWARD_MEAN
        self.records: list[dict[str, Any]] = []
        self.fields: dict[str, Any] = {}  # the newest forecast's record fields
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scalerl-forecast")
        self._pending: Future | None = None
        self._ready: dict[str, Any] | None = None
        self._said: set[str] = set()
        self._start: float | None = None
        self._last_x: float | None = None
        self._max_steps = 0
        self._text = False
        self._stopped: str | None = None
        self._trainer = None  # the Trainer the events come from, whose log() the forecast goes through

    # --- the trainer's events -------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self._trainer = _first(self)
        self._start = time.monotonic() - (self.records[-1][rf.WALL] if self.records else 0.0)
        self._max_steps = int(state.max_steps or 0)
        report = args.report_to if isinstance(args.report_to, list | tuple) else [args.report_to]
        self._text = any(str(r) in TEXT_REPORTERS for r in report)
        if self.out is not None:
            self._guarded("write the run folder", self._begin_folder, args, state)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs if logs is not None else {}
        if any(k.startswith("forecast/") for k in logs):
            return control  # its own entry (``_report``)
        self._collect()
        if self._trainer is None and self._ready is not None:  # no Trainer.log: into the next log's reporters
            logs.update(self._logged(self._ready))
            self._ready = None
        if self.metric in logs or self.train_reward in logs:
            self._guarded("record the log", self._record, args, state, logs)
        return control

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.metric not in (metrics or {}):
            self._say("metric", f"ForecastCallback: the evaluation logged no {self.metric!r} (it logged "
                                f"{', '.join(sorted(metrics or {})) or 'nothing'}); no forecast, and training goes on")
            return control
        if self._pending is not None:  # the last evaluation's forecast decides before this one's is made
            self._wait()
        self._report()
        if self._stopped is None and (why := self._stop_reason()):
            self._stopped = why
            _log.warning(why)
            control.should_training_stop = True
        self._submit()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._wait()
        self._report()
        if not any(self.y in r for r in self.records):
            self._say("never", f"ForecastCallback: {self.metric!r} was never logged, so the run had no forecast")
        if self.out is not None:
            detail = self._stopped or f"{state.global_step} steps"
            self._guarded("write the run folder", rf.write_status, self.out,
                          "stopped" if self._stopped else "finished", detail)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return control

    # --- the run folder ---------------------------------------------------------------------

    def _begin_folder(self, args, state) -> None:
        import yaml

        self.out.mkdir(parents=True, exist_ok=True)
        forecast = {"metric": "pass_rate" if self.bounded else "reward_mean", "target": self.target}
        config = {"name": "trl", "train": {"steps": int(state.max_steps or 0)}, "forecast": forecast,
                  "trl": json.loads(args.to_json_string())}  # fmt: skip
        _atomic(self.out / rf.CONFIG, yaml.safe_dump(config, sort_keys=False).encode())
        unit = {"steps": "steps", "tokens": "tokens", "samples": "samples", "device_hours": "device-hours"}[self.x]
        _atomic(self.out / rf.PLACEMENT, json.dumps({"plan": {"unit": unit, "trainer": "trl",
                                                              "devices": self.devices}}).encode())  # fmt: skip
        rf.write_status(self.out, "running", host=os.uname().nodename)

    def _record(self, args, state, logs: dict) -> None:
        """One record of the run folder from a log: its x, wall time, training reward and the metric."""
        step = int(state.global_step)
        x = self._x(args, state, logs)
        if self._last_x is not None and x < self._last_x:
            self._say("order", f"ForecastCallback: {self.x} went back from {self._last_x:g} to {x:g}; that log is "
                               "left out of the forecast")
            return
        record = {rf.STEP: step, rf.WALL: time.monotonic() - (self._start or time.monotonic()), rf.COMPUTE: float(x)}
        if (v := _number(logs.get(self.train_reward))) is not None:
            record[rf.TRAIN_REWARD] = v
        if (v := _number(logs.get(self.metric))) is not None:
            record[self.y] = v
            record[self.metric] = v
        if len(record) > 3:
            self._last_x = float(x)
            self.records.append(record)
            if self.out is not None:
                with (self.out / rf.METRICS).open("a") as f:
                    f.write(json.dumps(record) + "\n")

    def _x(self, args, state, logs: dict) -> float:
        if self.x == "tokens":
            return float(logs.get("num_tokens", logs.get("eval_num_tokens", state.num_input_tokens_seen or 0)))
        if self.x == "samples":
            return float(state.global_step * args.per_device_train_batch_size * args.gradient_accumulation_steps
                         * max(args.world_size, 1))  # fmt: skip
        if self.x == "device_hours":
            return (time.monotonic() - (self._start or time.monotonic())) * self.devices / 3600.0
        return float(state.global_step)

    # --- the forecast, in the background ----------------------------------------------------------

    def _budget(self) -> float | None:
        """The compute the run will have spent at ``max_steps``, in the x unit (the rate so far)."""
        if self.given_budget is not None:
            return float(self.given_budget)
        last = next((r for r in reversed(self.records) if r[rf.STEP] > 0), None)
        if last is None or not self._max_steps:
            return None
        return float(last[rf.COMPUTE]) * self._max_steps / last[rf.STEP] if self.x != "steps" else float(self._max_steps)

    def _submit(self) -> None:
        records, budget = [dict(r) for r in self.records], self._budget()
        self._pending = self._pool.submit(self._guarded, "make the forecast", _forecast, records, budget,
                                          self.out, self.y, self.target)  # fmt: skip

    def _collect(self) -> None:
        if self._pending is not None and self._pending.done():
            fields = self._pending.result()
            self._pending = None
            if fields:
                self.fields = self._ready = fields
                if self.out is not None:
                    with (self.out / rf.METRICS).open("a") as f:  # the forecast's own record, as a scalerl run logs it
                        f.write(json.dumps({rf.STEP: fields[rf.Forecast.STEP], **fields}) + "\n")

    def _wait(self) -> None:
        if self._pending is not None:
            try:
                self._pending.result()
            finally:
                self._collect()

    def _stop_reason(self) -> str | None:
        f = self.fields
        if not f:
            return None
        p = f.get(rf.Forecast.P_REACH)
        if self.stop_p is not None and p is not None and p < self.stop_p:
            return (f"ForecastCallback: stopping: P = {p:.3f} of reaching {self.target:g} by the budget, below "
                    f"stop_if_p_reach_below = {self.stop_p:g} (forecast at the budget {_iv(f)}, made at step "
                    f"{f[rf.Forecast.STEP]})")  # fmt: skip
        if self.stop_flat and f.get(rf.Forecast.STATE) == NOT_LEARNING:
            return f"ForecastCallback: stopping: {f.get(rf.Forecast.SAID)} (made at step {f[rf.Forecast.STEP]})"
        return None

    def _report(self) -> None:
        """The forecast made since the last report, as its own entry of the trainer's log (its
        reporters and ``log_history``)."""
        if self._trainer is not None and self._ready is not None:
            entry, self._ready = self._logged(self._ready), None
            if entry:
                self._guarded("log the forecast", self._trainer.log, entry)

    def _logged(self, f: dict) -> dict:
        """The newest forecast as the trainer's log keys (module docstring)."""
        K = rf.Forecast
        out = {"forecast/value_at_budget": f.get(K.FINAL), "forecast/value_at_budget_lo": f.get(K.FINAL_LO),
               "forecast/value_at_budget_hi": f.get(K.FINAL_HI), "forecast/p_reach": f.get(K.P_REACH),
               "forecast/hours_to_target": f.get(K.HOURS), "forecast/hours_to_target_lo": f.get(K.HOURS_LO),
               "forecast/hours_to_target_hi": f.get(K.HOURS_HI),
               "forecast/state_code": STATES.index(f[K.STATE]) if f.get(K.STATE) in STATES else None}  # fmt: skip
        out = {k: v for k, v in out.items() if v is not None}
        if self._text and f.get(K.STATE):
            out["forecast/state"] = f[K.STATE]
        return out

    def _guarded(self, what: str, fn, *a):
        """``fn(*a)``, any failure one warning line: the forecast never ends a training run."""
        try:
            return fn(*a)
        except Exception as err:  # noqa: BLE001 - see the docstring
            self._say(what, f"ForecastCallback: could not {what} ({type(err).__name__}: {err}); training goes on")
            return None

    def _say(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            _log.warning(text)


def _first(callback):
    """The ``Trainer`` whose ``train`` sent this event, found up the calling frames (transformers
    hands a callback the model and optimiser, never the trainer), with ``callback`` moved before
    its reporting callbacks (TensorBoard, W&B, ...: ``Trainer(callbacks=[...])`` and
    ``add_callback`` put it after them, and they close their writers at the end before it could
    log the last forecast). The handler's ``call_event`` iterates its list: moving an item already
    called to the front leaves the rest of that iteration as it was. None outside a Trainer."""
    import sys

    frame, trainer = sys._getframe(2), None
    while frame is not None and trainer is None:
        me = frame.f_locals.get("self")
        if hasattr(me, "callback_handler") and callable(getattr(me, "log", None)):
            trainer = me
        frame = frame.f_back
    callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
    if isinstance(callbacks, list) and callback in callbacks and callbacks[0] is not callback:
        callbacks.remove(callback)
        callbacks.insert(0, callback)
    return trainer


def _forecast(records: list[dict], budget: float | None, out: Path | None, y: str, target: float | None) -> dict:
    """The run's one forecast as record fields (``fit.forecast.record``), made from its folder as
    ``scalerl plan OUT`` makes it (``run_options``), or from the records in memory without one."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import RunLog, forecast_of, read_logs
    from scalerl.fit.forecast.prior_runs import run_options
    from scalerl.fit.forecast.record import record_fields
    from scalerl.fit.readers import Columns

    evals = [r for r in records if r.get(y) is not None]
    if not evals:
        return {}
    step = int(evals[-1][rf.STEP])
    try:
        if out is not None:
            (log,) = read_logs([out], Columns(x=rf.COMPUTE, y=y, bounded=y == rf.VAL_PASS_RATE))
            log = log.upto(float(evals[-1][rf.COMPUTE]))
            options = run_options(log, out, budget=budget, x=rf.COMPUTE)
        else:
            train = [(r[rf.COMPUTE], r[rf.TRAIN_REWARD]) for r in records if rf.TRAIN_REWARD in r]
            log = RunLog.of([r[rf.COMPUTE] for r in evals], [r[y] for r in evals], train=train,
                            clock=[(r[rf.COMPUTE], r[rf.WALL]) for r in records], metric=y)  # fmt: skip
            from scalerl.fit.forecast import ForecastOptions
            from scalerl.fit.options import FitOptions

            options = ForecastOptions(fit=FitOptions(bounded=y == rf.VAL_PASS_RATE), budget=budget)
        return record_fields(forecast_of(log, options=options), step=step, target=target)
    except CurveError as err:
        return {rf.Forecast.STEP: step, rf.Forecast.ERROR: str(err)}


def _iv(f: dict) -> str:
    K = rf.Forecast
    if f.get(K.FINAL) is None:
        return "-"
    return f"{f[K.FINAL]:.3f} [{f.get(K.FINAL_LO) or float('nan'):.3f}, {f.get(K.FINAL_HI) or float('nan'):.3f}]"


def _number(value) -> float | None:
    return rf.number({"v": value}, "v")


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
