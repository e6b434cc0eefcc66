"""``TaskSpec``: everything a process needs to build the run's task, picklable.

The driver, every generator (spawned or a Ray actor) and every evaluator build their own
task from the same spec, so a user's task factory or reward function named by a plug-in
spec (``scalerl.plugins``) is loaded wherever scoring happens, never pickled across.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scalerl.data.tasks.base import Task
from scalerl.data.tasks.registry import get_task


@dataclass(frozen=True)
class TaskSpec:
    name: str
    """A built-in or registered task, or ``FILE.py:NAME`` / ``package.module:NAME``."""
    knobs: dict = field(default_factory=dict)
    reward_fn: str | None = None
    """``FILE.py:NAME`` / ``package.module:NAME`` replacing the task's own reward."""
    reward_timeout_s: float | None = None
    """Seconds one call of ``reward_fn`` may take (``task.reward_timeout_s``); None: no limit."""

    def build(self) -> Task:
        task = get_task(self.name, **self.knobs)
        if self.reward_fn is None:
            return task
        from scalerl.data.tasks.user_reward import UserRewardTask, load_reward_fn

        return UserRewardTask(task, load_reward_fn(self.reward_fn), self.reward_fn, self.reward_timeout_s)

    def with_knobs(self, knobs: dict) -> TaskSpec:
        return replace(self, knobs=dict(knobs))
