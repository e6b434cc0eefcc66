"""``TaskSpec``: everything a process needs to build the run's task, picklable.

The driver, every generator (spawned or a Ray actor) and every evaluator build their own
task from the same spec, so a user's task factory or reward functions named by plug-in
specs (``scalerl.plugins``) are loaded wherever scoring happens, never pickled across.
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
    reward_fns: tuple[str, ...] = ()
    """``FILE.py:NAME`` / ``package.module:NAME`` of each reward function replacing the task's
    own reward (``task.reward_fn`` is the one-function case); empty: the task's reward."""
    reward_timeout_s: float | None = None
    """Seconds one call of a reward function may take (``task.reward_timeout_s``); None: no limit."""
    reward_weights: tuple[float, ...] | None = None
    """One weight per ``reward_fns`` entry (``task.reward_weights``); None: all 1."""
    reward_field: str = "task.reward_fns"
    """The config field that named the functions, for the sentences that name one."""

    def build(self) -> Task:
        task = get_task(self.name, **self.knobs)
        if not self.reward_fns:
            return task
        from scalerl.data.tasks.user_reward import UserRewardTask, build_functions

        return UserRewardTask(task, build_functions(self.reward_fns, self.reward_weights, self.reward_timeout_s,
                                                    self.reward_field))

    def with_knobs(self, knobs: dict) -> TaskSpec:
        return replace(self, knobs=dict(knobs))
