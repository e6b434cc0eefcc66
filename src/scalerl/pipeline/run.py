"""A ScaleRL run, start to finish: the story the config tells.

plan where every role runs -> build (or load) the model -> task, prompt pool, learner, lag
policy -> generators (backend) -> evaluate R0 -> loop { wait for P admissible groups, train,
publish weights, start an evaluation, log the records whose evaluations are in (each seen by
the live forecast, which refits the law in the background and may stop a run that cannot
reach its goal), checkpoint } -> the last record.

The parts are built once into one value (``steps.RunParts``), the loop's config values read
once into another (``steps.LoopRules``); each step of the loop is a function of the parts in
``pipeline.steps``. Checkpoints are written every ``train.checkpoint_every`` steps at once,
with the records whose evaluations are still out (``pipeline.evaluation``); SIGTERM and SIGINT
stop the run after the step under way with a checkpoint of it (``pipeline.stop``). A resume
restores the newest checkpoint that loads (``scalerl.checkpoint``) and cuts ``metrics.jsonl``
back to the last record logged before it. The run plan (``pipeline.plan``) is printed at start
and saved as ``RUN_DIR/plan.json`` with where each role actually ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from scalerl.compute import ComputeMeter, TokenRates
from scalerl.config import Config
from scalerl.config.runtime import task_spec
from scalerl.live_forecast import LiveForecast
from scalerl.metrics import read_evaluations, truncate_after
from scalerl.pipeline import build, steps, time_limit
from scalerl.pipeline.evaluation import OrderedRecords, make_evaluation
from scalerl.pipeline.leftovers import stopped_at_end
from scalerl.pipeline.overlap import OverlapMonitor
from scalerl.pipeline.plan import RunPlan, build_plan, write_plan
from scalerl.pipeline.reward_notes import check_first_batch, describe_rewards
from scalerl.pipeline.status import reported
from scalerl.pipeline.steps import LoopRules, RunParts, Start
from scalerl.pipeline.stop import Stopping, on_signals
from scalerl.runfolder import COMPUTE, METRICS, SAMPLES
from scalerl.user_code import shown_once_per_run

COSTS = 8  # steps whose dearest bounds the next one's compute (``LoopRules.ends``): an evaluation's among them


def train(cfg: Config, run_dir: str | Path, *, resume: bool = False, log=print,
          on_evaluation: Callable[[dict[str, Any]], str | None] | None = None) -> dict[str, Any]:
    """Run (or resume) ``cfg`` in ``run_dir``; returns the last metrics record.
    ``on_evaluation(record)``: called with each evaluation's record as it is logged (its
    forecast fields on it); a sentence it returns stops the run there, checkpointed, as an early
    stop does (an Optuna trial's prune, ``experiments.trial``).

    Raises :class:`~scalerl.pipeline.stop.Stopped` when SIGTERM or SIGINT ended the run."""
    plan = build_plan(cfg)  # first: a plan the machine or cluster cannot serve is one sentence
    start = steps.start_run(cfg, Path(run_dir), resume, log)
    if start.state and (line := time_limit.spent(cfg.train.max_minutes, start.state["compute"]["wall_s"])):
        log(line)  # before anything is built: the checkpoint stays as it is
        return {}
    rules = LoopRules.of(cfg)
    with stopped_at_end(log), reported(start.run_dir) as ending, on_signals(start.run_dir, start.state) as stopping:
        with shown_once_per_run(), ExitStack() as closing:  # each part closed as the run ends, the last built first
            parts = replace(_build(cfg, plan, start, stopping, closing), on_evaluation=on_evaluation)
            step, record, why = _loop(parts, rules)
        if stopping.requested:
            raise stopping.stopped(step)
        ending.ended(record, why)
    return record


def _build(cfg: Config, plan: RunPlan, start: Start, stopping: Stopping, closing: ExitStack) -> RunParts:
    """Every part of the run, once; a resume's state restored into them."""
    log, run_dir = start.log, start.run_dir
    for line in (*plan.lines(), describe_rewards(cfg)):
        log(line)
    torch.set_num_threads(plan.learner_threads)
    torch.manual_seed(cfg.train.seed)
    task = task_spec(cfg).build()
    for line in (*build.validation_lines(cfg, task), getattr(task, "columns_note", None)):  # a dataset's columns
        if line is not None:
            log(line)
    model_dir = build.prepare_base_model(cfg, task, run_dir, log)
    learner, tokenizer = build.make_learner(cfg, plan, model_dir, log)
    pool = build.make_pool(cfg, task)
    scheduler = build.make_scheduler(cfg, pool)
    spec = build.actor_spec(cfg, plan, model_dir, cfg.train.seed + start.step)
    backend = build.make_backend(cfg, plan, spec, learner.layout, clock=lambda: learner.version,
                                 n_params=learner.num_params)
    closing.callback(backend.close)  # after the learner: the backend may end a Ray it started
    closing.callback(learner.close)
    learner.start(backend.sink)
    write_plan(run_dir, plan, {"learner": learner.placement(), "generators": backend.placement()})
    # built before the compute meter starts: the evaluation sets' construction is set-up
    evaluation = make_evaluation(plan.eval_on == "generator", backend,
                                 lambda: build.evaluators(cfg, learner.eval_snapshot(), tokenizer),
                                 stop=lambda: stopping.requested, log=log)
    compute = ComputeMeter(plan.devices, learner.num_params)
    records = OrderedRecords(evaluation, compute)
    if start.state is not None:
        steps.restore(start.state, {"learner": learner, "pool": pool, "scheduler": scheduler, "compute": compute,
                              "records": records})
        log(f"resumed {run_dir} at step {start.step} (policy version {learner.version})")
    if start.resume:  # the records past the checkpoint's log (all of them, without one) are redone
        for log_file in (METRICS, SAMPLES):
            truncate_after(run_dir / log_file, start.logged)
    logger = build.make_logger(cfg, run_dir, max(start.logged, 0))
    closing.callback(logger.close)
    forecaster = LiveForecast(cfg, past=read_evaluations(run_dir / METRICS) if start.state else (), run_dir=run_dir)
    closing.callback(forecaster.close)
    # CPU seconds measure launches and spinning, not work, on a GPU or in vLLM's engine process
    overlap = OverlapMonitor(enabled=not plan.generators_in_learner and cfg.pipeline.mode != "sync"
                             and not plan.accelerated)
    return RunParts(start, learner, pool, scheduler, backend, compute, records, logger, forecaster,
                    build.exporter(cfg, run_dir, learner.eval_snapshot(), tokenizer), stopping, overlap,
                    first_batch=lambda groups: check_first_batch(cfg, groups, log))


def _loop(parts: RunParts, rules: LoopRules) -> tuple[int, dict[str, Any], str]:
    """Train until ``train.steps``, the time limit, an early stop or a signal; the last step,
    its record and why it was the last."""
    learner, records, stopping = parts.learner, parts.records, parts.stopping
    step, record, why = parts.start.step, {}, ""
    rates = TokenRates(parts.compute.snapshot())
    before = parts.compute.snapshot()[COMPUTE]  # the compute the last step ended at
    costs: list[float] = []  # the last steps' compute, evaluations included: the next one's bound
    steps.publish(learner, parts.backend)
    if parts.start.state is None:  # R0
        records.add({"step": 0, **parts.compute.snapshot()}, evaluate=True, learner=learner)
    deadline = time_limit.deadline(rules.max_minutes, parts.compute.wall_s)  # the whole run's, resumes included
    parts.logger.set_deadline(deadline)  # the progress line's ETA
    parts.forecaster.set_deadline(deadline)  # the budget a forecast's P(reach) is read at
    stopping.arm()
    while step < rules.steps:
        got = steps.next_batch(parts)  # None: a signal came while waiting for groups; no state changed
        done = False
        if got is not None:
            if step == parts.start.step:
                parts.first_batch(got[0])
            step += 1
            record = {"step": step} | steps.advance(parts, got)
            steps.with_compute(record, parts.compute, rates)
            costs = [*costs[-(COSTS - 1):], record[COMPUTE] - before]
            why = rules.ends(step, record[COMPUTE], deadline, max(costs)) or ""
            done = bool(why)
            records.add(record, evaluate=rules.evaluates(step, before, record[COMPUTE]) or done, learner=learner)
            before = record[COMPUTE]
        last = done or stopping.requested
        if stopping.requested and records.pending:  # first with the evaluations still out:
            steps.checkpoint(parts, rules.recipe, step)  # a kill while waiting loses nothing
        until = time.monotonic() + rules.stop_wait_s if stopping.requested else None  # a stop waits so long
        stop = steps.write_released(parts, drain=last, final=step if done else None, until=until)
        if stopping.requested and records.pending:
            parts.log(f"{records.pending} evaluation(s) still running after train.stop_wait_s="
                      f"{rules.stop_wait_s:g} s are left to the checkpoint: a resume runs them again.")
        if last or stop or step % rules.checkpoint_every == 0:  # at once, however far evaluations lag
            steps.checkpoint(parts, rules.recipe, step)
        if stop:
            parts.log(stop)
        if last or stop:
            return step, record, why or (stop or "")
    return step, record, why or f"train.steps = {rules.steps} reached"
