"""``get_task(name, **knobs)``: build a task by name; ``register_task`` adds a user's own."""

from __future__ import annotations

from collections.abc import Callable

from scalerl.data.tasks.base import Task

_FACTORIES: dict[str, Callable[..., Task]] = {}


def register_task(name: str, factory: Callable[..., Task]) -> None:
    """Make ``get_task(name, **knobs)`` call ``factory(**knobs)``."""
    _FACTORIES[name] = factory


def _builtin(name: str) -> Callable[..., Task] | None:
    # Imported lazily: math and code pull in optional dependencies.
    if name == "addition":
        from scalerl.data.tasks.addition import AdditionTask

        return AdditionTask
    if name == "multiplication":
        from scalerl.data.tasks.multiplication import MultiplicationTask

        return MultiplicationTask
    if name == "math":
        from scalerl.data.tasks.math import MathTask

        return MathTask
    if name == "code":
        from scalerl.data.tasks.code import CodeTask

        return CodeTask
    return None


BUILTIN_TASKS = ("addition", "multiplication", "math", "code")


def task_names() -> list[str]:
    return sorted(set(BUILTIN_TASKS) | set(_FACTORIES))


def get_task(name: str, **knobs) -> Task:
    """The task called ``name``, built with ``knobs`` (e.g. ``max_digits=4, seed=1``)."""
    factory = _FACTORIES.get(name) or _builtin(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; choose one of {task_names()}")
    return factory(**knobs)
