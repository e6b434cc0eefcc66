"""The values the story (``pipeline.run``) is told with, and the steps it takes over them.

- :class:`Start`: where a run starts: its folder, the checkpoint it resumes from (or none),
  whether it resumes, where lines go;
- :class:`LoopRules`: the loop's config values, read once;
- :class:`RunParts`: the run's parts, built once (``run._build``); every step below takes it.

A step of the loop: :func:`next_batch` (dispatch what the lag policy allows, collect until P
admissible groups wait) -> :func:`advance` (one learner step, its weights published when the
lag policy says) -> :func:`write_released` (the records whose evaluations are in, each seen by
the live forecast) -> :func:`checkpoint` (the run's state, :func:`snapshot`; a resume reads it
back with :func:`restore`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalerl.checkpoint import (
    atomic_write,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from scalerl.compute import ComputeMeter, TokenRates
from scalerl.config import Config, dump_config
from scalerl.eval_plan import plan_of
from scalerl.fit.forecast.schedule import EvalPlan
from scalerl.live_forecast import LiveForecast
from scalerl.pipeline.evaluation import OrderedRecords
from scalerl.pipeline.learner.role import LearnerRole
from scalerl.pipeline.overlap import OverlapMonitor
from scalerl.pipeline.scheduler import Scheduler
from scalerl.pipeline.shm import sweep_semaphores
from scalerl.pipeline.stop import Stopping
from scalerl.runfolder import CONFIG, GENERATOR_TIMES, LEARNER_BUSY, PUBLISH, SYNC


@dataclass(frozen=True)
class Start:
    """Where a run starts: ``state`` and ``meta`` of the checkpoint it resumes from (None when
    it starts afresh), and ``resume``: whether the logs are cut back to that checkpoint's."""

    run_dir: Path
    state: dict[str, Any] | None
    meta: dict[str, Any] | None
    resume: bool
    log: Callable[[str], None]

    @property
    def step(self) -> int:
        return self.meta["step"] if self.meta else 0

    @property
    def logged(self) -> int:
        """The last step the checkpoint's log holds (-1: none); a resume redoes the records past it."""
        return self.meta.get("logged_through", self.step) if self.meta else -1


def start_run(cfg: Config, run_dir: Path, resume: bool, log) -> Start:
    """The checkpoint to resume from (loaded before anything is built or written), then
    ``config.yaml`` written atomically and the semaphores a killed run leaked swept."""
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = load_checkpoint(run_dir, log) if resume else None
    atomic_write(run_dir / CONFIG, dump_config(cfg).encode())
    leaked = sweep_semaphores()
    if leaked:
        log(f"removed {len(leaked)} semaphores (/dev/shm/sem.mp-*) that a killed run had leaked")
    return Start(run_dir, *(saved or (None, None)), resume, log)


@dataclass(frozen=True)
class LoopRules:
    """The config values the loop runs by, read once."""

    recipe: str
    steps: int
    plan: EvalPlan  # the steps validated (``eval_plan``)
    eval_every_compute: float | None
    checkpoint_every: int
    stop_wait_s: float
    max_minutes: float | None
    max_compute: float | None

    @classmethod
    def of(cls, cfg: Config) -> LoopRules:
        return cls(cfg.name, cfg.train.steps, plan_of(cfg), cfg.eval.every_compute, cfg.train.checkpoint_every,
                   cfg.train.stop_wait_s, cfg.train.max_minutes, cfg.train.max_compute)

    def evaluates(self, step: int, before: float, compute: float) -> bool:
        """Whether ``step`` is validated: a step of the plan (``eval_plan``), and the first step
        whose compute passes a multiple of ``eval.every_compute`` (``before``: the step before's)."""
        every = self.eval_every_compute
        return self.plan.evaluates(step) or (every is not None and compute // every > before // every)

    def ends(self, step: int, compute: float, deadline: float | None, step_cost: float = 0.0) -> str | None:
        """Why ``step`` (its record's ``compute``) is the run's last, in words (its
        ``status.json``), None where it is not: ``train.steps``, the ``train.max_minutes``
        deadline (``time.monotonic()``), or ``train.max_compute`` reached, or passed by the next
        step at ``step_cost`` (the dearest of the last steps, an evaluation's included), so that
        a run never passes it by more than its last step."""
        if step >= self.steps:
            return f"train.steps = {self.steps} reached"
        if self.max_compute is not None and compute >= self.max_compute:
            return f"train.max_compute = {self.max_compute:g} reached at step {step}"
        if self.max_compute is not None and compute + step_cost > self.max_compute * (1 + 1e-9):
            return (f"train.max_compute = {self.max_compute:g} at step {step}: the next step would pass it "
                    f"(compute {compute:.4g}, a step up to {step_cost:.3g})")
        if deadline is not None and time.monotonic() > deadline:
            return f"train.max_minutes reached at step {step}"
        return None


@dataclass(frozen=True)
class RunParts:
    """The run's parts, built once: the learner role, the prompt pool and the scheduler over it,
    the generators' backend, the compute meter, the records awaiting their evaluations, the
    metrics logger, the live forecast, the exporter of ``RUN_DIR/model``, the signal state,
    the overlap monitor, ``first_batch``, the check of the run's first batch, and
    ``on_evaluation``, a caller's hook on each evaluation's record as it is logged (a sentence
    stops the run as an early stop does)."""

    start: Start
    learner: LearnerRole
    pool: Any
    scheduler: Scheduler
    backend: Any
    compute: ComputeMeter
    records: OrderedRecords
    logger: Any
    forecaster: LiveForecast
    export: Callable[[dict], None]
    stopping: Stopping
    overlap: OverlapMonitor
    first_batch: Callable[[list], None]
    on_evaluation: Callable[[dict], str | None] | None = None  # a caller's hook (an Optuna trial): a stop reason or None

    @property
    def log(self) -> Callable[[str], None]:
        return self.start.log


def next_batch(parts: RunParts):
    """Dispatch what the lag policy allows and collect groups until P admissible ones wait.

    Returns ``(batch, seconds the learner waited)``, or None once a stop is requested (the
    scheduler's state, a checkpoint's, holds what was dispatched and received meanwhile)."""
    start = time.perf_counter()
    while True:
        for chunk in parts.scheduler.to_dispatch(parts.learner.version):
            parts.backend.submit(chunk)
        batch = parts.scheduler.next_batch(parts.learner.version)
        if batch is not None:
            return batch, time.perf_counter() - start
        if parts.stopping.requested:
            return None
        receive(parts, 0.5)


def receive(parts: RunParts, timeout: float) -> None:
    """Groups the generators finished (waiting up to ``timeout`` s) into the scheduler; their
    tokens count as generation compute and their arrival time stamps the transit."""
    groups = parts.backend.collect(timeout=timeout)
    now = time.time()
    for g in groups:
        g.times.received_at = now
    parts.compute.add_generation(sum(c.num_tokens + len(c.prompt_tokens) for g in groups for c in g.completions))
    parts.scheduler.receive(groups)


def advance(parts: RunParts, got) -> dict[str, Any]:
    """One learner step on ``got`` = ``(batch, seconds waited)``, its weights published when the
    lag policy says; the step's record, without its compute snapshot."""
    metrics = learn(parts, *got)
    parts.compute.add_training(metrics["step_trained_tokens"])
    start = time.perf_counter()
    sync = {SYNC: 0.0, "sync_bytes": 0}
    if parts.scheduler.policy.publish_after_step(parts.scheduler.outstanding):
        sync = publish(parts.learner, parts.backend)
    return {"version": parts.learner.version, "learner_wait_s": got[1], PUBLISH: time.perf_counter() - start,
            **sync, "refused_stale": parts.scheduler.refused, "generator_restarts": parts.backend.restarts,
            **metrics}


def learn(parts: RunParts, batch, waited: float) -> dict[str, Any]:
    """One learner step; the curriculum records its pass rates; the roles' times are checked
    for a lost overlap (``pipeline.overlap``), which is said once in the log."""
    metrics, pass_rates = parts.learner.step(batch)
    for prompt_id, rate in pass_rates:  # no-positive resampling
        parts.pool.record(prompt_id, rate)
    roles = generator_times(batch)
    # a generator's evaluations are its work too: without them a step that waited on one
    # would read as a lost overlap
    stats, warning = parts.overlap.observe(waited + metrics[LEARNER_BUSY], metrics["learner_cpu_s"],
                                           roles[GENERATOR_TIMES["cpu_s"]] + roles[GENERATOR_TIMES["eval_cpu_s"]])
    if warning:
        parts.log(warning)
    return metrics | stats | roles | {"pool_live": int(parts.pool.live_size)}


def publish(learner: LearnerRole, backend) -> dict[str, Any]:
    """Sync the learner's current version into the backend's sink and announce it."""
    published = learner.publish(backend.sink)
    backend.announce(learner.version, published.handle)
    return {SYNC: published.seconds, "sync_bytes": published.bytes}


def generator_times(batch) -> dict[str, float]:
    """Where the generators' time went for this batch's groups (``types.GeneratorTimes``), and
    the mean seconds a group spent between leaving its generator and reaching the driver, and
    how many samples the task could not grade (``reward_errors``: each scored 0) or an
    environment's failure ended (``env_errors``: each scored 0)."""
    out = {key: sum(getattr(g.times, field) for g in batch) for field, key in GENERATOR_TIMES.items()}
    transit = [g.times.received_at - g.times.sent_at for g in batch
               if g.times.sent_at is not None and g.times.received_at is not None]
    return out | {"group_transit_s": sum(transit) / len(transit) if transit else 0.0,
                  "reward_errors": sum(g.reward_errors for g in batch),
                  "env_errors": sum(g.env_errors for g in batch)}


def with_compute(record: dict[str, Any], compute: ComputeMeter, rates: TokenRates) -> None:
    """Add the compute snapshot and the token rates over ``rates``' window of steps."""
    current = compute.snapshot()
    record.update(current, **rates(current))


def write_released(parts: RunParts, *, drain: bool, final: int | None, until: float | None = None) -> str | None:
    """Log the records whose evaluations are in (all of them, waiting — until ``until`` on a
    stop — with ``drain``, and after an early stop: the run's last checkpoint must not be ahead
    of the log); each is seen by the live forecast, which waits for its refit on the ``final``
    step's record. Returns the first early-stop reason, if any."""
    stop = None
    pump = lambda: receive(parts, 0.0)  # noqa: E731  (evaluations come back with the groups)
    for record in parts.records.drain(pump, until) if drain else parts.records.ready():
        parts.forecaster.observe(record)
        record.update(parts.forecaster.poll(wait=record["step"] == final))
        reason = parts.forecaster.stop_reason(record) if stop is None else None
        if (note := parts.forecaster.no_rise(record)) and parts.forecaster.train.stop_if_no_rise:
            reason = reason or f"stopping early: {note}"
        elif note:
            parts.log(note)
        if parts.on_evaluation is not None and stop is None and record.get(parts.forecaster.y) is not None:
            reason = reason or parts.on_evaluation(record)  # as soon as the evaluation is in
        if reason:
            record["stopped_early"] = stop = reason
        parts.logger.write(record)
    if stop and not drain:
        write_released(parts, drain=True, final=None)
    return stop


def checkpoint(parts: RunParts, recipe: str, step: int) -> None:
    """Write the checkpoint of ``step`` with the records not yet logged (their evaluations are
    out); its meta says the last step logged before them: a resume truncates the log there.
    Then export the same weights as ``RUN_DIR/model``."""
    state = snapshot(parts) | {"records": parts.records.state_dict()}
    meta = {"step": step, "version": parts.learner.version, "recipe": recipe,
            "logged_through": parts.records.logged_until(step)}
    save_checkpoint(parts.start.run_dir, state, meta)
    parts.export(state["learner"])


def snapshot(parts: RunParts) -> dict[str, Any]:
    """Everything a resume needs (see ``scalerl.checkpoint``) but the records."""
    return {"learner": parts.learner.state_dict(), "pool": parts.pool.state_dict(),
            "scheduler": parts.scheduler.state_dict(), "compute": parts.compute.state_dict(), "rng": rng_state()}


def restore(state: dict[str, Any], owners: dict[str, Any]) -> None:
    """Load each part's state (``owners``: the checkpoint's key -> the part holding it) and the
    RNGs'. A checkpoint older than the records' state holds none."""
    for key, part in owners.items():
        part.load_state_dict(state.get(key, {"held": [], "evaluations": []}) if key == "records" else state[key])
    set_rng_state(state["rng"])
