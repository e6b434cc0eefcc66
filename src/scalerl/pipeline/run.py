"""A ScaleRL run, start to finish: the story the config tells.

build (or load) the model -> task, prompt pool, learner, queue policy -> generators (backend)
-> evaluate R0 -> loop { wait for P admissible groups, train, publish weights, start an
evaluation (on a generator: ``pipeline.evaluation``), log the records whose evaluations are
in, refit the law in the background (the live forecast), checkpoint, stop early if the
forecast says the run cannot reach its goal } -> fit the sigmoid law to the run's own
validation curve.

Resuming (``resume=True``) restores the newest checkpoint of ``run_dir`` that loads (the older
of the two kept when the newest is broken, said in the log) — model, optimiser, RNG,
curriculum, queued groups, undelivered prompts (re-dispatched), step, version, compute — and
truncates ``metrics.jsonl`` back to the checkpoint's step.

Every start writes ``config.yaml`` atomically and sweeps the semaphores a killed run leaked
into ``/dev/shm`` (``scalerl.pipeline.shm``).
"""

from __future__ import annotations

import copy
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
from scalerl.compute import ComputeMeter
from scalerl.config import Config, ConfigError, dump_config
from scalerl.live_forecast import LiveForecast
from scalerl.metrics import read_evaluations, truncate_after
from scalerl.pipeline import build
from scalerl.pipeline.evaluation import OrderedRecords, make_evaluation
from scalerl.pipeline.learner import Learner
from scalerl.pipeline.overlap import OverlapMonitor
from scalerl.pipeline.queues import LagPolicy
from scalerl.pipeline.scheduler import Scheduler
from scalerl.pipeline.shm import sweep_semaphores


def train(cfg: Config, run_dir: str | Path, *, resume: bool = False, log=print) -> dict[str, Any]:
    """Run (or resume) ``cfg`` in ``run_dir``; returns the last metrics record."""
    from scalerl.data.tasks import get_task
    from scalerl.models import count_parameters

    run_dir = Path(run_dir)
    saved = _start(cfg, run_dir, resume, log)
    split = build.core_split(cfg)
    log(split.rule)
    torch.set_num_threads(split.learner_threads)
    torch.manual_seed(cfg.train.seed)

    task = get_task(cfg.task.name, **cfg.task.knobs)
    model_dir = build.prepare_base_model(cfg, task, run_dir, log)
    model, tokenizer = _load_model(cfg, model_dir)
    pool = build.make_pool(cfg, task)
    learner = Learner(model, cfg, tokenizer.pad_token_id)
    policy = LagPolicy(cfg.pipeline.mode, cfg.pipeline.k, cfg.pipeline.prompts_per_step)
    scheduler = Scheduler(policy, pool, cfg.pipeline.prompts_per_chunk)

    step = saved[1]["step"] if saved else 0
    backend = build.make_backend(cfg, build.actor_spec(cfg, model_dir, cfg.train.seed + step), model)
    # built before the compute meter starts: the evaluation sets' construction is set-up
    evaluation = make_evaluation(build.eval_on_generator(cfg), backend, lambda: build.evaluators(cfg, model, tokenizer))
    compute = ComputeMeter(build.compute_devices(cfg, backend), count_parameters(model))
    if saved:
        restore(saved[0], learner, pool, scheduler, compute)
        log(f"resumed {run_dir} at step {step} (policy version {learner.version})")
    if resume:  # records past the checkpoint (all of them, without one) are redone
        truncate_after(run_dir / "metrics.jsonl", step if saved else -1)
    logger = build.make_logger(cfg, run_dir, step)
    forecaster = LiveForecast(cfg, past=read_evaluations(run_dir / "metrics.jsonl") if saved else ())
    records = OrderedRecords(evaluation, compute)
    checkpoints = DeferredCheckpoints(run_dir)
    record: dict[str, Any] = {}
    previous = compute.snapshot()
    try:
        backend.publish(model, learner.version)
        if step == 0:
            records.add({"step": 0, **compute.snapshot()}, evaluate=True, model=model, version=learner.version)
        deadline = None if cfg.train.max_minutes is None else time.monotonic() + 60 * cfg.train.max_minutes
        overlap = OverlapMonitor(enabled=backend.num_devices > 1 and cfg.pipeline.mode != "sync")
        while step < cfg.train.steps:
            batch, waited = next_batch(scheduler, backend, learner.version, compute)
            metrics = learn(learner, pool, batch, waited, overlap, log)
            step += 1
            compute.add_training(metrics["trained_tokens"])
            publish_s = time.perf_counter()
            if policy.publish_after_step(scheduler.outstanding):
                backend.publish(model, learner.version)
            last = step == cfg.train.steps or (deadline is not None and time.monotonic() > deadline)
            record = {"step": step, "version": learner.version, "learner_wait_s": waited,
                      "publish_s": time.perf_counter() - publish_s, "refused_stale": scheduler.refused, **metrics}
            previous = with_compute(record, compute, previous)
            records.add(record, evaluate=step % cfg.eval.every == 0 or last, model=model, version=learner.version)
            stop = write_released(records, forecaster, logger, lambda: receive(scheduler, backend, compute, 0.0),
                                  drain=last, final=step if last else None)
            meta = {"step": step, "version": learner.version, "recipe": cfg.name}
            if last or stop:  # the log is drained: the checkpoint is this step's
                checkpoints.write(snapshot(learner, pool, scheduler, compute), meta)
            elif step % cfg.train.checkpoint_every == 0:
                checkpoints.take(snapshot(learner, pool, scheduler, compute), meta)
            checkpoints.flush(records)
            if stop:
                log(stop)
            if last or stop:
                break
    finally:
        forecaster.close()
        backend.close()
        logger.close()
    return record


class DeferredCheckpoints:
    """Periodic checkpoints written once ``metrics.jsonl`` has reached their step.

    A resume truncates the log back to the checkpoint's step, so a checkpoint must never be
    ahead of the log. When an evaluation of step s (or before) is still out, waiting for it
    would stop the learner, so the state of step s is copied now and written when the
    records up to s have been logged; a later checkpoint supersedes a pending one.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.pending = run_dir, None

    def take(self, state: dict[str, Any], meta: dict[str, Any]) -> None:
        self.pending = (copy.deepcopy(state), meta)  # training goes on changing the live tensors

    def write(self, state: dict[str, Any], meta: dict[str, Any]) -> None:
        save_checkpoint(self.run_dir, state, meta)
        self.pending = None

    def flush(self, records: OrderedRecords) -> None:
        if self.pending is not None and records.logged_through(self.pending[1]["step"]):
            self.write(*self.pending)


def with_compute(record: dict[str, Any], compute: ComputeMeter, previous: dict[str, float]) -> dict[str, float]:
    """Add the compute snapshot and the token rates since ``previous``; the new snapshot."""
    current = compute.snapshot()
    record.update(current, **compute.rates(previous, current))
    return current


def write_released(records: OrderedRecords, forecaster: LiveForecast, logger, pump, *, drain: bool,
                   final: int | None) -> str | None:
    """Log the records whose evaluations are in (all of them, waiting, with ``drain``, and
    after an early stop: the run's last checkpoint must not be ahead of the log); each is seen by
    the live forecast, which waits for its refit on the ``final`` step's record. Returns the
    first early-stop reason, if any."""
    stop = None
    for record in records.drain(pump) if drain else records.ready():
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


def _load_model(cfg: Config, model_dir: Path):
    """``(model, tokenizer)``; a ``model.base`` that does not load is one sentence (ConfigError)."""
    from scalerl.models import load_pretrained

    try:
        model, tokenizer = load_pretrained(model_dir, build.learner_dtype(cfg))
    except Exception as err:  # transformers and safetensors raise assorted errors on a bad model
        if cfg.model.base is None:
            raise
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"model.base {model_dir} does not load as a model ({text.rstrip('.')}).") from None
    return model.to(build.device(cfg)), tokenizer


def learn(learner: Learner, pool, batch, waited: float, overlap: OverlapMonitor, log) -> dict[str, Any]:
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
    """Where the generators' time went for this batch's groups (``actor`` module doc), and
    the mean seconds a group spent between leaving its generator and reaching the driver."""
    keys = ("cpu_s", "eval_cpu_s", "stall_s", "swap_s", "idle_s")
    out = {f"generator_{k}": sum(g.meta.get(f"gen_{k}", 0.0) for g in batch) for k in keys}
    transit = [g.meta["received_at"] - g.meta["sent_at"] for g in batch if "sent_at" in g.meta and "received_at" in g.meta]
    return out | {"group_transit_s": sum(transit) / len(transit) if transit else 0.0}


def next_batch(scheduler: Scheduler, backend, version: int, compute: ComputeMeter):
    """Dispatch what the lag policy allows and collect groups until P admissible ones wait.

    Returns ``(batch, seconds the learner waited)``.
    """
    start = time.perf_counter()
    while True:
        for chunk in scheduler.to_dispatch(version):
            backend.submit(chunk)
        batch = scheduler.next_batch(version)
        if batch is not None:
            return batch, time.perf_counter() - start
        receive(scheduler, backend, compute, 0.5)


def receive(scheduler: Scheduler, backend, compute: ComputeMeter, timeout: float) -> None:
    """Groups the generators finished (waiting up to ``timeout`` s) into the scheduler; their
    tokens count as generation compute and their arrival time stamps the transit."""
    groups = backend.collect(timeout=timeout)
    now = time.time()
    for g in groups:
        g.meta["received_at"] = now
    compute.add_generation(sum(c.num_tokens + len(c.prompt_tokens) for g in groups for c in g.completions))
    scheduler.receive(groups)


def snapshot(learner: Learner, pool, scheduler: Scheduler, compute: ComputeMeter) -> dict[str, Any]:
    """Everything a resume needs (see ``scalerl.checkpoint``)."""
    return {
        "learner": learner.state_dict(),
        "pool": pool.state_dict(),
        "scheduler": scheduler.state_dict(),
        "compute": compute.state_dict(),
        "rng": rng_state(),
    }


def restore(state: dict[str, Any], learner: Learner, pool, scheduler: Scheduler, compute: ComputeMeter) -> None:
    learner.load_state_dict(state["learner"])
    pool.load_state_dict(state["pool"])
    scheduler.load_state_dict(state["scheduler"])
    compute.load_state_dict(state["compute"])
    set_rng_state(state["rng"])
