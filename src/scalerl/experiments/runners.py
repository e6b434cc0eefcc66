"""Several sweep points at once: ``scalerl train`` subprocesses, or Ray tasks.

A point costs ``roles × train.threads`` cores: ``local`` runs 1 learner + ``num_generators``
generator processes, ``inprocess`` one. :func:`auto_parallel` fits as many points as the
machine's cores allow and splits threads between them; Ray instead schedules each task by
the CPUs it asks for. Every point writes its own log, ``RUN_DIR/train.log``; a failed point
is named at the end, after the others have finished (their results are kept).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scalerl.config import Config, dump_config

Todo = tuple[str, Path, Config, bool]  # label, run dir, config, resume


def roles(cfg: Config) -> int:
    """Processes one run keeps busy (learner + generators)."""
    return 1 + cfg.pipeline.num_generators if cfg.pipeline.backend == "local" else 1


def auto_parallel(configs: Sequence[Config], cores: int | None = None) -> int:
    """Points at once so that every role of every point has a core: ``cores // roles``."""
    cores = cores or os.cpu_count() or 1
    need = max((roles(c) * c.train.threads for c in configs), default=1)
    return max(1, cores // need)


class PointFailed(RuntimeError):
    """One or more sweep points did not finish; the message names them and their logs."""


def _command(run_dir: Path, cfg: Config, resume: bool) -> list[str]:
    if resume:
        return [sys.executable, "-m", "scalerl", "train", "--resume", str(run_dir)]
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = run_dir / "point.yaml"  # the point's whole config, validated once more by train
    recipe.write_text(dump_config(cfg))
    return [sys.executable, "-m", "scalerl", "train", "--recipe", str(recipe), "--out", str(run_dir)]


def run_in_subprocesses(todo: Sequence[Todo], parallel: int, log: Callable[[str], None]) -> None:
    """Train ``todo`` as ``scalerl train`` subprocesses, ``parallel`` at a time."""

    def one(item: Todo) -> str | None:
        label, run_dir, cfg, resume = item
        log(f"{label}: {'resuming' if resume else 'training'} in {run_dir} (log: {run_dir / 'train.log'})")
        run_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "train.log", "a") as out:
            code = subprocess.run(_command(run_dir, cfg, resume), stdout=out, stderr=subprocess.STDOUT).returncode
        log(f"{label}: {'finished' if code == 0 else f'FAILED (exit {code})'}")
        return None if code == 0 else f"{label} (see {run_dir / 'train.log'})"

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        failed = [f for f in pool.map(one, todo) if f]
    if failed:
        raise PointFailed(f"{len(failed)} sweep point(s) failed: {'; '.join(failed)}")


def _train_point(cfg_data: dict, run_dir: str, resume: bool) -> str:
    """A Ray task: one point, trained in the worker (its log goes to ``train.log``)."""
    from scalerl.config import Config
    from scalerl.pipeline.run import train

    with open(Path(run_dir) / "train.log", "a") as out:
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
            log(f"{label}: submitted to Ray ({roles(cfg) * cfg.train.threads} CPUs; log: {run_dir / 'train.log'})")
            ref = task.options(num_cpus=roles(cfg) * cfg.train.threads).remote(
                cfg.model_dump(mode="json"), str(run_dir), resume)
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
