"""Verifiable tasks: the built-in synthetic addition task, math (math-verify), code (sandbox)."""

from scalerl.data.tasks.addition import AdditionTask, addition_reward
from scalerl.data.tasks.base import (
    Example,
    RewardFn,
    Task,
    first_integer,
    plus_minus_one,
    strip_thinking,
)
from scalerl.data.tasks.registry import get_task, register_task, task_names

__all__ = [
    "AdditionTask",
    "Example",
    "RewardFn",
    "Task",
    "addition_reward",
    "first_integer",
    "get_task",
    "plus_minus_one",
    "register_task",
    "strip_thinking",
    "task_names",
]
