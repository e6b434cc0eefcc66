"""``get_task(name, **knobs)``: build a task by name; ``register_task`` adds a user's own in
this process, and a ``FILE.py:NAME`` or ``package.module:NAME`` name loads a user's factory in
every process that builds the task; ``check_task`` checks a name and its knobs without
building anything."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from scalerl.data.tasks.base import Task
from scalerl.plugins import PluginError, is_spec, load

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
    if name == "calculator":
        from scalerl.data.tasks.calculator import CalculatorTask

        return CalculatorTask
    if name == "dataset":
        from scalerl.data.tasks.dataset import DatasetTask

        return DatasetTask
    return None


BUILTIN_TASKS = ("addition", "multiplication", "calculator", "math", "code", "dataset")


def _factory(name: str) -> Callable[..., Task] | None:
    """A registered or built-in task, or a user's ``FILE.py:NAME`` / ``package.module:NAME``
    factory, loaded in whichever process asks (``scalerl.plugins``)."""
    factory = _FACTORIES.get(name) or _builtin(name)
    if factory is None and is_spec(name):
        factory = load(name, "task.name")
        if not callable(factory):
            raise PluginError(f"task.name {name!r} is a {type(factory).__name__}, not a task factory")
    return factory


def task_names() -> list[str]:
    return sorted(set(BUILTIN_TASKS) | set(_FACTORIES))


def get_task(name: str, **knobs) -> Task:
    """The task called ``name``, built with ``knobs`` (e.g. ``max_digits=4, seed=1``)."""
    factory = _factory(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; choose one of {task_names()}")
    return factory(**knobs)


def check_task(name: str, knobs: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` (one sentence) when ``name`` is no task or ``knobs`` do not fit
    its constructor (an unknown knob, a required one missing); builds nothing."""
    factory = _factory(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(task_names())}, "
                         "or name your own as FILE.py:NAME or package.module:NAME")
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a callable without a signature: nothing to check
        return
    named = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        unknown = [k for k in knobs if k not in {p.name for p in named}]
        if unknown:
            raise ValueError(f"task {name!r} has no knob {unknown[0]!r}; its knobs are "
                             f"{', '.join(p.name for p in named)}")
    missing = [p.name for p in named if p.default is p.empty and p.name not in knobs]
    if missing:
        raise ValueError(f"task {name!r} needs the knob {missing[0]!r} (task.knobs.{missing[0]})")
