"""Several sweep points at once: ``scalerl train`` subprocesses, or Ray tasks.

A point needs at least the cores of its smallest role split (``scalerl.pipeline.plan.cores``, by
where its backend's generators run: two for a ``local`` point left on ``auto``, one learner +
one generator; one for ``inprocess`` and ``ray``). :func:`auto_parallel` fits as many points as the machine's cores allow, and
each point gets an equal share as its ``train.cores``, which its own split then divides
between its roles; Ray instead schedules each task by the CPUs it asks for. Every point writes its own log, ``RUN_DIR/train.log``; a failed point
is named at the end, after the others have finished (their results are kept).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scalerl.config import Config, dump_config
from scalerl.experiments.signals import requested, started
from scalerl.runfolder import TRAIN_LOG

Todo = tuple[str, Path, Config, bool]  # label, run dir, config, resume


def need(cfg: Config) -> int:
    """Cores one point needs at the smallest split its config allows."""
    from scalerl.pipeline.backends import backend_class
    from scalerl.pipeline.plan.cores import split_cores

    where = backend_class(cfg.pipeline.backend).capabilities.generators
    split = split_cores(where, cfg.train.cores or (2 if where == "processes" else 1), cfg.pipeline.num_generators,
                        cfg.pipeline.generator_threads, cfg.train.threads)
    # generators in the learner's process share its cores; a cluster's reserve their own CPUs there
    return split.held(generators=where == "processes")


def auto_parallel(configs: Sequence[Config], cores: int | None = None) -> int:
    """Points at once so that every role of every point has a core: ``cores // need``."""
    from scalerl.pipeline.plan.cores import available_cores

    cores = cores or available_cores()
    return max(1, cores // max((need(c) for c in configs), default=1))


def with_cores(cfg: Config, cores: int) -> Config:
    """``cfg`` with ``train.cores`` set to ``cores`` unless the point set it itself."""
    if cfg.train.cores is not None:
        return cfg
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"cores": max(cores, need(cfg))})})


class PointFailed(RuntimeError):
    """One or more sweep points did not finish; the message names them and their logs."""


def _command(run_dir: Path, cfg: Config, resume: bool) -> list[str]:
    if resume:  # the run's own config.yaml, but for the compute it may go on to (an adaptive sweep's rung)
        limit = [] if cfg.train.max_compute is None else ["--set", f"train.max_compute={cfg.train.max_compute!r}"]
        return [sys.executable, "-m", "scalerl", "train", "--resume", str(run_dir), *limit]
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = run_dir / "point.yaml"  # the point's whole config, validated once more by train
    recipe.write_text(dump_config(cfg))
    return [sys.executable, "-m", "scalerl", "train", "--recipe", str(recipe), "--out", str(run_dir)]


def run_in_subprocesses(todo: Sequence[Todo], parallel: int, log: Callable[[str], None]) -> None:
    """Train ``todo`` as ``scalerl train`` subprocesses, ``parallel`` at a time, each on an
    equal share of the cores."""
    from scalerl.pipeline.plan.cores import available_cores

    share = max(1, available_cores() // parallel)

    def one(item: Todo) -> str | None:
        label, run_dir, cfg, resume = item
        if requested():  # a stop came: no point starts after it
            return None
        cfg = with_cores(cfg, share)
        log(f"{label}: {'resuming' if resume else 'training'} in {run_dir} (log: {run_dir / TRAIN_LOG})")
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / TRAIN_LOG, "a") as out:
            # its own process group: a terminal's Ctrl-C reaches the sweep, which forwards it once
            proc = subprocess.Popen(_command(run_dir, cfg, resume), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            with started(proc):
                code = proc.wait()
        if requested() and code in (130, 143):
            log(f"{label}: stopped with its checkpoint")
            return None
        log(f"{label}: {'finished' if code == 0 else f'FAILED (exit {code})'}")
        return None if code == 0 else f"{label} (see {run_dir / TRAIN_LOG})"

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        failed = [f for f in pool.map(one, todo) if f]
    if failed:
        raise PointFailed(f"{len(failed)} sweep point(s) failed: {'; '.join(failed)}")


def _train_point(cfg_data: dict, run_dir: str, resume: bool) -> str:
    """A Ray task: one point, trained in the worker (its log goes to ``train.log``)."""
    from scalerl.config import Config
    from scalerl.pipeline.run import train

    with open(Path(run_dir) / TRAIN_LOG, "a") as out:
        train(Config.model_validate(cfg_data), run_dir, resume=resume, log=lambda *a: print(*a, file=out, flush=True))
    return run_dir


def run_on_ray(todo: Sequence[Todo], log: Callable[[str], None]) -> None:
    """Submit every point as a Ray task asking for its cores; Ray runs as many as fit."""
    import logging

    import ray

    owns = not ray.is_initialized()
    if owns:
        ray.init(include_dashboard=False, logging_level=logging.WARNING)
    try:
        task = ray.remote(_train_point)
        refs = {}
        for label, run_dir, cfg, resume in todo:
            run_dir.mkdir(parents=True, exist_ok=True)
            cpus = need(cfg)
            log(f"{label}: submitted to Ray ({cpus} CPUs; log: {run_dir / TRAIN_LOG})")
            ref = task.options(num_cpus=cpus).remote(with_cores(cfg, cpus).model_dump(mode="json"), str(run_dir),
                                                     resume)
            refs[ref] = label
        failed = []
        for ref, label in refs.items():
            try:
                ray.get(ref)
                log(f"{label}: finished")
            except Exception as err:  # noqa: BLE001 - one failed point must not lose the others
                failed.append(f"{label} ({type(err).__name__})")
        if failed:
            raise PointFailed(f"{len(failed)} sweep point(s) failed on Ray: {'; '.join(failed)}")
    finally:
        if owns:
            ray.shutdown()
