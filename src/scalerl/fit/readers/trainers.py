"""Other trainers' logs, read with no columns named: each trainer's names for the validation, the
training reward and the step, and how a log says whose it is (``TRAINERS``; ``--from NAME``, or
detected).

Read from each trainer's own source (``docs/trainers/``):

- **TRL** (``GRPOTrainer``'s ``log_history``, ``trainer_state.json``, a TensorBoard folder):
  the validation ``eval_reward`` (``eval/reward`` as a TensorBoard tag), the training reward
  ``reward`` (``train/reward``), the step ``step``;
- **verl** (its ``file`` logger's JSONL, ``{"step": N, "data": {...}}``): the validation
  ``val-core/<data source>/acc/mean@N`` (else ``.../reward/mean@N``), the training reward
  ``critic/score/mean``;
- **prime-rl** (its file monitor's ``metrics.jsonl``, the trainer's and the orchestrator's lines
  in one file): the validation ``eval/<env>/effective/<agent>/avg@k``, the training reward
  ``train/agg/effective/<agent>/reward/mean`` (``reward/mean`` in older runs);
- **NeMo-RL** (TensorBoard, W&B): ``validation/accuracy``, ``train/reward``;
- **OpenRLHF** (TensorBoard, W&B): ``eval/eval_<data set>_pass1``, ``train/rollout/reward_mean``
  (else ``train/reward``).

A trainer is detected where one of its validation names is among a log's columns; its names
come before the generic ``core.REWARD_COLUMNS`` (TRL's training ``reward`` is not its
validation). Its x, where a log has no compute column, is its step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TRAINERS", "Names", "detect", "first_match"]


@dataclass(frozen=True)
class Names:
    """One trainer's column names: each a regular expression matched whole, in preference order."""

    trainer: str
    y: tuple[str, ...]
    train: tuple[str, ...]
    step: tuple[str, ...] = ("step", "_step", "global_step", "training/global_step")


TRAINERS = {
    "trl": Names("trl", (r"eval_reward", r"eval/reward", r"eval_[\w/]*accuracy", r"eval/[\w/]*accuracy"),
                 (r"reward", r"train/reward")),
    "verl": Names("verl", (r"val-core/.+/acc/mean@\d+", r"val-core/.+/reward/mean@\d+"),
                  (r"critic/score/mean", r"critic/rewards/mean")),
    "prime-rl": Names("prime-rl", (r"eval/[^/]+/effective/[^/]+/avg@\d+", r"eval/.+/avg@\d+"),
                      (r"train/agg/effective/[^/]+/reward/mean", r"reward/mean", r"reward/all/mean")),
    "nemo-rl": Names("nemo-rl", (r"validation/accuracy",), (r"train/reward",)),
    "openrlhf": Names("openrlhf", (r"eval/eval_.+_pass1", r"eval_.+_pass1"), (r"train/rollout/reward_mean", r"train/reward")),
}  # fmt: skip
"""Each trainer's names (module docstring); the keys are ``--from``'s choices."""


def first_match(columns: Sequence[str], patterns: Sequence[str]) -> str | None:
    """The first column matching the first pattern that matches any (patterns in preference order)."""
    for pattern in patterns:
        hit = next((c for c in columns if re.fullmatch(pattern, c)), None)
        if hit is not None:
            return hit
    return None


def detect(columns: Sequence[str], trainer: str | None = None) -> Names | None:
    """``TRAINERS[trainer]`` where named, else the trainer one of whose validation names the
    columns hold (None: none)."""
    if trainer is not None:
        return TRAINERS[trainer]
    return next((n for n in TRAINERS.values() if first_match(columns, n.y) is not None), None)
