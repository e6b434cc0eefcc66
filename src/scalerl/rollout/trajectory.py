"""What a rollout returns, and how a stop request reaches it: the wire between the rollout seam
(``rollout.rollout``), its multi-turn form (``rollout.multi_turn``), validation and the learner.

Its own module so that the single-turn and multi-turn rollouts both depend on it and not on
each other (``build_rollout`` picks ``MultiTurn``; ``MultiTurn`` returns these).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scalerl.data.tasks.base import Prompt
from scalerl.rollout.engine import OnStep
from scalerl.types import Completion


@dataclass
class Trajectories:
    """The G scored trajectories of one example."""

    completions: list[Completion]  # (G,)
    rewards: np.ndarray  # (G,) float32: the task's or environment's reward; NaN = not scored
    prompt: Prompt = ""
    """The first prompt, text or chat messages, before rendering (``samples.jsonl`` shows it
    rendered)."""
    reward_errors: int = 0
    """Samples the task could not grade (each scored 0)."""
    env_errors: int = 0
    """Trajectories an environment's exception ended (each scored 0)."""
    reward_parts: dict[str, np.ndarray] = field(default_factory=dict)
    """Each user reward function's own (G,) float32 rewards by name, NaN where it returned
    None (``task.reward_fns``); empty when the task or an environment scores."""
    reward_part_errors: dict[str, int] = field(default_factory=dict)
    """Samples each user reward function failed on, by name (its share of ``reward_errors``), so
    the first batch's check can name the function that is broken, not all of them."""


class RolloutStopped(Exception):
    """A stop was requested while a rollout ran (an evaluation on the learner): its results are dropped."""


def stop_hook(stop: Callable[[], bool] | None, on_step: OnStep | None = None) -> OnStep | None:
    """``on_step`` (if any), then :class:`RolloutStopped` once ``stop()`` is true: between decode
    steps and, in the rollouts, between the user calls that score or answer a turn."""
    if stop is None:
        return on_step

    def hook(engine=None, step: int = 0) -> None:
        if on_step is not None:
            on_step(engine, step)
        if stop():
            raise RolloutStopped("a stop was requested")

    hook.stop = stop  # type: ignore[attr-defined] - the rollouts check it between user calls too
    return hook


def check_stop(on_step: OnStep | None) -> None:
    """Raise :class:`RolloutStopped` when ``on_step`` is a :func:`stop_hook` whose stop came."""
    stop = getattr(on_step, "stop", None)
    if stop is not None and stop():
        raise RolloutStopped("a stop was requested")


def trajectory_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """Per-batch shape of the trajectories: ``turns_mean`` (model turns per trajectory),
    ``tool_calls_mean`` (observations per trajectory) and ``env_tokens_frac`` (share of the
    completion tokens an environment appended, all masked from the loss); 1, 0, 0 single-turn."""
    total = sum(c.num_tokens for c in completions)
    return {"turns_mean": float(np.mean([c.model_turns for c in completions])),
            "tool_calls_mean": float(np.mean([c.observations for c in completions])),
            "env_tokens_frac": sum(c.env_tokens for c in completions) / max(1, total)}
