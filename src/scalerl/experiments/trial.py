"""One ``scalerl train`` run as a trial of someone else's study (Optuna's, through
``scalerl.integrations.optuna.objective``): trained in this process, each evaluation handed to
the caller as soon as it is logged, and stopped cleanly, checkpointed, when the caller says so.

A trial's value is what a study compares: the mean of its last ``SMOOTH`` evaluations of
``forecast.metric`` (one evaluation is noisy; the pruner's bar, ``ForecastPruner.best``, reads
a finished trial the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SMOOTH", "Trial", "run_trial"]

SMOOTH = 3
"""Evaluations whose mean is a trial's value."""


@dataclass(frozen=True)
class Trial:
    """How a trial ended: its value (None without an evaluation), whether the caller stopped
    it, and its evaluations as (step, compute, value)."""

    value: float | None
    stopped: str | None
    evaluations: tuple[tuple[int, float, float], ...]


def run_trial(recipe: str, sets: Sequence[str], out: str | Path, report: Callable[[int, float, float], str | None],
              *, log: Callable[[str], None] = print) -> Trial:
    """Train ``recipe`` with the ``--set``s ``sets`` into ``out``; ``report(step, compute, value)``
    is called at each evaluation as it is logged, and a sentence it returns stops the run there.
    A folder that already holds this trial's checkpoint resumes (a study rerun)."""
    from scalerl.checkpoint import latest_checkpoint
    from scalerl.config import load_config
    from scalerl.pipeline.run import train
    from scalerl.runfolder import COMPUTE, STEP

    cfg = load_config(recipe, list(sets))
    y = cfg.fitted_metric
    seen: list[tuple[int, float, float]] = []

    def hook(record: dict) -> str | None:
        seen.append((int(record[STEP]), float(record[COMPUTE]), float(record[y])))
        return report(*seen[-1])

    out = Path(out)
    last = train(cfg, out, resume=out.is_dir() and latest_checkpoint(out) is not None, log=log, on_evaluation=hook)
    values = [v for _, _, v in seen[-SMOOTH:]]
    stopped = last.get("stopped_early")
    return Trial(sum(values) / len(values) if values else None, stopped, tuple(seen))
