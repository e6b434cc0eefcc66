"""A ScaleRL run, start to finish: the story the config tells.

build (or load) the model -> task, prompt pool, learner, queue policy -> generators (backend)
-> evaluate R0 -> loop { wait for P admissible groups, train, publish weights, start an
evaluation (on a generator: ``pipeline.evaluation``), log the records whose evaluations are
in, refit the law in the background (the live forecast), checkpoint, stop early if the
forecast says the run cannot reach its goal } -> fit the sigmoid law to the run's own
validation curve.

Checkpoints are written every ``train.checkpoint_every`` steps at once, with the records
whose evaluations are still out (``pipeline.evaluation``). SIGTERM and SIGINT stop the run after
the step under way with a checkpoint of it (``pipeline.stop``).

Resuming (``resume=True``) restores the newest checkpoint of ``run_dir`` that loads (the older
of the two kept when the newest is broken, said in the log) — model, optimiser, RNG,
curriculum, queued groups, undelivered prompts (re-dispatched), step, version, compute, the
records awaiting their evaluations (re-submitted) — and truncates ``metrics.jsonl`` back to
the last record logged before the checkpoint.

Where every role runs is decided once, before anything is written, by the run plan
(``scalerl.pipeline.plan``): printed at start and saved as ``RUN_DIR/plan.json`` with where each
role actually ran. Every start writes ``config.yaml`` atomically and sweeps the semaphores a
killed run leaked into ``/dev/shm`` (``scalerl.pipeline.shm``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from scalerl.checkpoint import (
    atomic_write,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from scalerl.compute import ComputeMeter, TokenRates
from scalerl.config import Config, dump_config
from scalerl.config.runtime import task_spec
from scalerl.live_forecast import LiveForecast
from scalerl.metrics import read_evaluations, truncate_after
from scalerl.pipeline import build, time_limit
from scalerl.pipeline.evaluation import OrderedRecords, make_evaluation
from scalerl.pipeline.learner.role import LearnerRole
from scalerl.pipeline.overlap import OverlapMonitor
from scalerl.pipeline.plan import RunPlan, build_plan, write_plan
from scalerl.pipeline.queues import LagPolicy
from scalerl.pipeline.reward_notes import check_first_batch, describe_rewards
from scalerl.pipeline.scheduler import Scheduler
from scalerl.pipeline.shm import sweep_semaphores
from scalerl.pipeline.stop import Stopping, on_signals


def train(cfg: Config, run_dir: str | Path, *, resume: bool = False, log=print) -> dict[str, Any]:
    """Run (or resume) ``cfg`` in ``run_dir``; returns the last metrics record.

    Raises :class:`~scalerl.pipeline.stop.Stopped` when SIGTERM or SIGINT ended the run."""
    run_dir = Path(run_dir)
    plan = build_plan(cfg)  # first: a plan the machine or cluster cannot serve is one sentence
    saved = _start(cfg, run_dir, resume, log)
    if saved and (line := time_limit.spent(cfg.train.max_minutes, saved[0]["compute"]["wall_s"])):
        log(line)  # before anything is built: the checkpoint stays as it is
        return {}
    with on_signals(run_dir, resumable=saved is not None) as stopping:
        return _train(cfg, plan, run_dir, saved, resume, log, stopping)


def _train(cfg: Config, plan: RunPlan, run_dir: Path, saved, resume: bool, log, stopping: Stopping) -> dict[str, Any]:
    for line in plan.lines():
        log(line)
    log(describe_rewards(cfg))
    torch.set_num_threads(plan.learner_threads)
    torch.manual_seed(cfg.train.seed)

    task = task_spec(cfg).build()
    if (line := build.validation_line(cfg, task)) is not None:
        log(line)
    model_dir = build.prepare_base_model(cfg, task, run_dir, log)
    learner, tokenizer = build.make_learner(cfg, plan, model_dir, log)
    pool = build.make_pool(cfg, task)
    policy = LagPolicy(cfg.pipeline.mode, cfg.pipeline.k, cfg.pipeline.prompts_per_step)
    scheduler = Scheduler(policy, pool, cfg.pipeline.prompts_per_chunk)

    step = saved[1]["step"] if saved else 0
    spec = build.actor_spec(cfg, plan, model_dir, cfg.train.seed + step)
    backend = build.make_backend(cfg, plan, spec, learner.layout, clock=lambda: learner.version,
                                 n_params=learner.num_params)
    forecaster = logger = None
    record: dict[str, Any] = {}
    try:
        learner.start(backend.sink)
        write_plan(run_dir, plan, {"learner": learner.placement(), "generators": backend.placement()})
        # built before the compute meter starts: the evaluation sets' construction is set-up
        evaluation = make_evaluation(plan.eval_on == "generator", backend,
                                     lambda: build.evaluators(cfg, learner.eval_snapshot(), tokenizer),
                                     stop=lambda: stopping.requested, log=log)
        compute = ComputeMeter(plan.devices, learner.num_params)
        records = OrderedRecords(evaluation, compute)
        if saved:
            restore(saved[0], learner, pool, scheduler, compute, records)
            log(f"resumed {run_dir} at step {step} (policy version {learner.version})")
        logged = saved[1].get("logged_through", step) if saved else -1  # the checkpoint's log
        if resume:  # records past it (all of them, without a checkpoint) are redone
            for log_file in ("metrics.jsonl", "samples.jsonl"):
                truncate_after(run_dir / log_file, logged)
        logger = build.make_logger(cfg, run_dir, max(logged, 0))
        forecaster = LiveForecast(cfg, past=read_evaluations(run_dir / "metrics.jsonl") if saved else ())
        export = build.exporter(cfg, run_dir, learner.eval_snapshot(), tokenizer)
        # CPU seconds measure launches and spinning, not work, on a GPU or in vLLM's engine process
        overlap = OverlapMonitor(enabled=not plan.generators_in_learner and cfg.pipeline.mode != "sync"
                                 and not plan.accelerated)
        step, record = _loop(cfg, run_dir, step, saved, learner, pool, scheduler, backend, compute, records, logger,
                             forecaster, export, stopping, overlap, log)
    finally:
        for part in (forecaster, learner, backend, logger):  # the backend last: it may end a Ray it started
            if part is not None:
                part.close()
    if stopping.requested:
        raise stopping.stopped(step)
    return record


def _loop(cfg: Config, run_dir: Path, step: int, saved, learner: LearnerRole, pool, scheduler: Scheduler, backend,
          compute: ComputeMeter, records: OrderedRecords, logger, forecaster: LiveForecast, export,
          stopping: Stopping, overlap: OverlapMonitor, log) -> tuple[int, dict[str, Any]]:
    """Train until ``train.steps``, the time limit, an early stop or a signal; the last step
    and its record."""
    record: dict[str, Any] = {}
    rates = TokenRates(compute.snapshot())
    publish(learner, backend)
    if not saved:
        records.add({"step": 0, **compute.snapshot()}, evaluate=True, learner=learner)
    deadline = time_limit.deadline(cfg.train.max_minutes, compute.wall_s)  # the whole run's, resumes included
    logger.set_deadline(deadline)  # the progress line's ETA
    forecaster.set_deadline(deadline)  # the budget a forecast's P(reach) is read at
    stopping.arm()
    first = True
    while step < cfg.train.steps:
        got = next_batch(scheduler, backend, learner.version, compute, stopping)
        done = False
        if got is not None:  # None: a signal came while waiting for groups; no state changed
            if first:
                check_first_batch(cfg, got[0], log)
                first = False
            step += 1
            record = {"step": step} | advance(learner, pool, scheduler, backend, compute, got, overlap, log)
            done = step == cfg.train.steps or (deadline is not None and time.monotonic() > deadline)
            with_compute(record, compute, rates)
            records.add(record, evaluate=step % cfg.eval.every == 0 or done, learner=learner)
        last = done or stopping.requested
        if stopping.requested and records.pending:  # first with the evaluations still out:
            checkpoint(run_dir, cfg.name, step, learner, pool, scheduler, compute, records, export)  # a kill waiting loses nothing
        until = time.monotonic() + cfg.train.stop_wait_s if stopping.requested else None  # a stop waits so long
        stop = write_released(records, forecaster, logger, lambda: receive(scheduler, backend, compute, 0.0),
                              drain=last, final=step if done else None, until=until)
        if stopping.requested and records.pending:
            log(f"{records.pending} evaluation(s) still running after train.stop_wait_s={cfg.train.stop_wait_s:g} s "
                "are left to the checkpoint: a resume runs them again.")
        if last or stop or step % cfg.train.checkpoint_every == 0:  # at once, however far evaluations lag
            checkpoint(run_dir, cfg.name, step, learner, pool, scheduler, compute, records, export)
        if stop:
            log(stop)
        if last or stop:
            break
    return step, record


def checkpoint(run_dir: Path, recipe: str, step: int, learner: LearnerRole, pool, scheduler: Scheduler,
               compute: ComputeMeter, records: OrderedRecords, export) -> None:
    """Write the checkpoint of ``step`` with the records not yet logged (their evaluations are
    out); its meta says the last step logged before them: a resume truncates the log there.
    Then ``export`` the same weights as ``RUN_DIR/model``."""
    state = snapshot(learner, pool, scheduler, compute) | {"records": records.state_dict()}
    meta = {"step": step, "version": learner.version, "recipe": recipe, "logged_through": records.logged_until(step)}
    save_checkpoint(run_dir, state, meta)
    export(state["learner"])


def advance(learner: LearnerRole, pool, scheduler: Scheduler, backend, compute: ComputeMeter, got,
            overlap: OverlapMonitor, log) -> dict[str, Any]:
    """One learner step on ``got`` = ``(batch, seconds waited)``, its weights published when the
    lag policy says; the step's record, without its compute snapshot."""
    metrics = learn(learner, pool, *got, overlap, log)
    compute.add_training(metrics["step_trained_tokens"])
    start = time.perf_counter()
    sync = {"sync_s": 0.0, "sync_bytes": 0}
    if scheduler.policy.publish_after_step(scheduler.outstanding):
        sync = publish(learner, backend)
    return {"version": learner.version, "learner_wait_s": got[1], "publish_s": time.perf_counter() - start,
            **sync, "refused_stale": scheduler.refused, "generator_restarts": backend.restarts, **metrics}


def publish(learner: LearnerRole, backend) -> dict[str, Any]:
    """Sync the learner's current version into the backend's sink and announce it."""
    published = learner.publish(backend.sink)
    backend.announce(learner.version, published.handle)
    return {"sync_s": published.seconds, "sync_bytes": published.bytes}


def with_compute(record: dict[str, Any], compute: ComputeMeter, rates: TokenRates) -> None:
    """Add the compute snapshot and the token rates over ``rates``' window of steps."""
    current = compute.snapshot()
    record.update(current, **rates(current))


def write_released(records: OrderedRecords, forecaster: LiveForecast, logger, pump, *, drain: bool,
                   final: int | None, until: float | None = None) -> str | None:
    """Log the records whose evaluations are in (all of them, waiting — until ``until`` on a
    stop — with ``drain``, and after an early stop: the run's last checkpoint must not be ahead
    of the log); each is seen by the live forecast, which waits for its refit on the ``final``
    step's record. Returns the first early-stop reason, if any."""
    stop = None
    for record in records.drain(pump, until) if drain else records.ready():
        forecaster.observe(record)
        record.update(forecaster.poll(wait=record["step"] == final))
        reason = forecaster.stop_reason(record) if stop is None else None
        if reason:
            record["stopped_early"] = stop = reason
        logger.write(record)
    if stop and not drain:
        write_released(records, forecaster, logger, pump, drain=True, final=None)
    return stop


def _start(cfg: Config, run_dir: Path, resume: bool, log) -> tuple[dict, dict] | None:
    """The checkpoint to resume from (loaded before anything is built or written), then
    ``config.yaml`` written atomically and leaked semaphores swept."""
    run_dir.mkdir(parents=True, exist_ok=True)
    saved = load_checkpoint(run_dir, log) if resume else None
    atomic_write(run_dir / "config.yaml", dump_config(cfg).encode())
    leaked = sweep_semaphores()
    if leaked:
        log(f"removed {len(leaked)} semaphores (/dev/shm/sem.mp-*) that a killed run had leaked")
    return saved


def learn(learner: LearnerRole, pool, batch, waited: float, overlap: OverlapMonitor, log) -> dict[str, Any]:
    """One learner step; the curriculum records its pass rates; the roles' times are checked
    for a lost overlap (``pipeline.overlap``), which is said once in the log."""
    metrics, pass_rates = learner.step(batch)
    for prompt_id, rate in pass_rates:  # no-positive resampling
        pool.record(prompt_id, rate)
    roles = generator_times(batch)
    # a generator's evaluations are its work too: without them a step that waited on one
    # would read as a lost overlap
    stats, warning = overlap.observe(waited + metrics["learner_busy_s"], metrics["learner_cpu_s"],
                                     roles["generator_cpu_s"] + roles["generator_eval_cpu_s"])
    if warning:
        log(warning)
    return metrics | stats | roles | {"pool_live": int(pool.live_size)}


def generator_times(batch) -> dict[str, float]:
    """Where the generators' time went for this batch's groups (``types.GeneratorTimes``), and
    the mean seconds a group spent between leaving its generator and reaching the driver, and
    how many samples the task could not grade (``reward_errors``: each scored 0) or an
    environment's failure ended (``env_errors``: each scored 0)."""
    keys = ("cpu_s", "eval_cpu_s", "stall_s", "swap_s", "idle_s")
    out = {f"generator_{k}": sum(getattr(g.times, k) for g in batch) for k in keys}
    transit = [g.times.received_at - g.times.sent_at for g in batch
               if g.times.sent_at is not None and g.times.received_at is not None]
    return out | {"group_transit_s": sum(transit) / len(transit) if transit else 0.0,
                  "reward_errors": sum(g.reward_errors for g in batch),
                  "env_errors": sum(g.env_errors for g in batch)}


def next_batch(scheduler: Scheduler, backend, version: int, compute: ComputeMeter, stopping=None):
    """Dispatch what the lag policy allows and collect groups until P admissible ones wait.

    Returns ``(batch, seconds the learner waited)``, or None once ``stopping`` is requested
    (the scheduler's state, a checkpoint's, holds what was dispatched and received meanwhile).
    """
    start = time.perf_counter()
    while True:
        for chunk in scheduler.to_dispatch(version):
            backend.submit(chunk)
        batch = scheduler.next_batch(version)
        if batch is not None:
            return batch, time.perf_counter() - start
        if stopping is not None and stopping.requested:
            return None
        receive(scheduler, backend, compute, 0.5)


def receive(scheduler: Scheduler, backend, compute: ComputeMeter, timeout: float) -> None:
    """Groups the generators finished (waiting up to ``timeout`` s) into the scheduler; their
    tokens count as generation compute and their arrival time stamps the transit."""
    groups = backend.collect(timeout=timeout)
    now = time.time()
    for g in groups:
        g.times.received_at = now
    compute.add_generation(sum(c.num_tokens + len(c.prompt_tokens) for g in groups for c in g.completions))
    scheduler.receive(groups)


def snapshot(learner: LearnerRole, pool, scheduler: Scheduler, compute: ComputeMeter) -> dict[str, Any]:
    """Everything a resume needs (see ``scalerl.checkpoint``)."""
    return {
        "learner": learner.state_dict(),
        "pool": pool.state_dict(),
        "scheduler": scheduler.state_dict(),
        "compute": compute.state_dict(),
        "rng": rng_state(),
    }


def restore(state: dict[str, Any], learner: LearnerRole, pool, scheduler: Scheduler, compute: ComputeMeter,
            records: OrderedRecords) -> None:
    learner.load_state_dict(state["learner"])
    pool.load_state_dict(state["pool"])
    scheduler.load_state_dict(state["scheduler"])
    compute.load_state_dict(state["compute"])
    records.load_state_dict(state.get("records", {"held": [], "evaluations": []}))  # older: none
    set_rng_state(state["rng"])
