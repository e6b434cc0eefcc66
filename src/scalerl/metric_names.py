"""The metric keys the trainer writes and ``scalerl.fit`` reads back, in one table both sides
import (plain strings; this module imports nothing, so ``fit/`` may read it and stay free of
torch and the trainer). ``docs/METRICS.md`` says what each key counts, in which unit.

Only the keys that cross from the trainer to a reader are here: the clock and the curve
(``compute_gpu_hours``, ``wall_s``, ``val_pass_rate``), and the role times, token totals and
staleness that ``fit.time.throughput`` builds its PipelineRL-k model from. :data:`RENAMED`
is the one list of keys renamed since a run may have been written, old name -> current name.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

__all__ = ["COMPUTE", "GENERATOR_IDLE", "GENERATOR_STALL", "GENERATOR_TIMES", "LEARNER_BUSY", "LEARNER_EVAL",
           "LEARNER_WORLD_SIZE", "PUBLISH", "RENAMED", "STALENESS_HIST", "STEP", "SYNC", "TOTAL_GEN_TOKENS",
           "TOTAL_TRAINED_TOKENS", "TRAIN_REWARD", "VAL_PASS_RATE", "WALL", "current_names", "old_name"]  # fmt: skip

# every record
STEP = "step"
COMPUTE = "compute_gpu_hours"  # device-hours so far: the law's x
WALL = "wall_s"  # seconds since the run started: the clock of the time to target
# evaluation records
VAL_PASS_RATE = "val_pass_rate"  # the law's y
TRAIN_REWARD = "reward_mean"  # a step's mean training reward: the forecast's companion (fit.companion)
# step records: the learner's role times
LEARNER_BUSY = "learner_busy_s"  # its step's seconds (only step records carry it)
LEARNER_WORLD_SIZE = "learner_world_size"  # its ranks
LEARNER_EVAL = "learner_eval_s"  # what an evaluation cost it
PUBLISH = "publish_s"  # publishing the weights, the sync within it
SYNC = "sync_s"
# the generators' times: ``types.GeneratorTimes`` field -> key (summed over a batch's groups)
GENERATOR_TIMES = MappingProxyType({
    "cpu_s": "generator_cpu_s",
    "eval_cpu_s": "generator_eval_cpu_s",
    "stall_s": "generator_stall_s",
    "swap_s": "generator_swap_s",
    "idle_s": "generator_idle_s",
})
GENERATOR_STALL = GENERATOR_TIMES["stall_s"]  # waiting for the weights the lag policy asks for
GENERATOR_IDLE = GENERATOR_TIMES["idle_s"]  # waiting for work
# cumulative tokens and the staleness of a step's groups
TOTAL_GEN_TOKENS = "total_gen_tokens"
TOTAL_TRAINED_TOKENS = "total_trained_tokens"
STALENESS_HIST = "staleness_hist"  # {versions behind: groups}

RENAMED = MappingProxyType({
    "gen_tokens": TOTAL_GEN_TOKENS,
    "train_tokens": TOTAL_TRAINED_TOKENS,
    "trained_tokens": "step_trained_tokens",
    "padded_tokens": "step_padded_tokens",
    "train_tokens_per_s": "trained_tokens_per_s",
})
"""Metric keys renamed (issue 29: ``train_tokens`` was cumulative and ``trained_tokens`` per
step), old name -> current name. Runs written before keep their old keys on disk."""


def current_names(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every key of :data:`RENAMED` under its current name."""
    return {RENAMED.get(key, key): value for key, value in record.items()}


def old_name(key: str) -> str | None:
    """The name a run written before a rename used for ``key`` (:data:`RENAMED`), or None."""
    return next((old for old, new in RENAMED.items() if new == key), None)
