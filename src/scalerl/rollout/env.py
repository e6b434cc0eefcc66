"""The environment protocol: a user's class that answers the model between its turns.

``env.name: FILE.py:NAME | package.module:NAME`` names a class; the trainer builds one
instance per trajectory as ``NAME(**env.knobs)`` and calls (TRL's ``environment_factory``,
SkyRL's ``step`` and tinker's ``Env.step`` have the same shape):

- ``reset(example: dict) -> str | list[dict]``: the first prompt, text or chat messages;
  ``example`` is the task's :class:`~scalerl.data.tasks.base.Example` as a dict (``id``,
  ``problem``, ``answer``, ``meta``);
- ``step(action: str) -> StepResult | (observation, reward, done)``: the model's last turn
  (its decoded text) in, the environment's answer out. ``observation`` is text or chat
  messages (None with ``done``), ``reward`` a float or None (counted 0);
- either may be ``async``; an optional ``close()`` runs when the trajectory ends.

Nothing user-written is pickled across processes: every generator (``local``, Ray) and
every evaluator loads the class itself from :class:`EnvSpec`, the same string everywhere
(``scalerl.plugins``). :func:`load_env` is also what the config runs at load, so a missing
file, a missing name, or a class without ``reset``/``step`` is one sentence before training.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from scalerl.data.tasks.base import PromptError, check_prompt, kind_of
from scalerl.plugins import PluginError, load

OBSERVATION_ROLES = ("tool", "user")
"""The chat role an observation is rendered as (``env.observation_role``)."""
ENV_REWARDS = ("sum", "last")
"""How step rewards make a trajectory's reward (``env.reward``)."""


class StepResult(NamedTuple):
    """What ``step`` returns (a plain 3-tuple in this order is accepted too)."""

    observation: str | list[dict] | None
    reward: float | None
    done: bool


@runtime_checkable
class Environment(Protocol):
    """One trajectory's environment (module doc); ``close()`` is optional."""

    def reset(self, example: dict) -> str | list[dict]: ...

    def step(self, action: str) -> StepResult | tuple: ...


@dataclass(frozen=True)
class EnvSpec:
    """Everything a process needs to run episodes of ``name`` (picklable)."""

    name: str
    """``FILE.py:NAME`` (an absolute path) or ``package.module:NAME``: the class."""
    knobs: dict
    """Keyword arguments of the class."""
    max_turns: int
    """Model turns per episode (``env.max_turns``)."""
    max_tokens: int
    """Completion tokens per episode, sampled and observation ones (``env.max_tokens``)."""
    reward: Literal["sum", "last"]
    """The trajectory's reward from its step rewards (``env.reward``)."""
    observation_role: Literal["tool", "user"]
    """The chat role observations are rendered as (``env.observation_role``)."""
    stop_strings: tuple[str, ...] = ()
    """Text that ends a model turn besides end-of-turn ids (``env.stop_strings``)."""
    timeout_s: float | None = None
    """Seconds one call of the environment may take (``env.timeout_s``); None: no limit."""
    max_observation_chars: int | None = None
    """Characters an observation may have before it is tokenized (``env.max_observation_chars``);
    None: no limit."""

    def factory(self):
        """The environment class, loaded in this process."""
        return load_env(self.name)

    def build(self, factory=None) -> Any:
        """A fresh environment for one trajectory."""
        return (factory or self.factory())(**self.knobs)


def load_env(spec: str) -> type:
    """The class named by ``spec``, with ``reset`` and ``step``; else one :class:`PluginError`
    sentence (the file does not exist, the name is not in it, a method is missing)."""
    factory = load(spec, "env.name")
    if not callable(factory):
        raise PluginError(f"env.name {spec!r} is a {type(factory).__name__}, not a class")
    missing = [m for m in ("reset", "step") if not callable(getattr(factory, m, None))]
    if missing:
        raise PluginError(f"env.name {spec!r} has no {missing[0]}() method; an environment needs "
                          "reset(example) and step(action)")
    return factory


def as_step_result(value: Any) -> StepResult:
    """``step``'s answer as a :class:`StepResult`; a value of another shape is a TypeError."""
    if isinstance(value, StepResult):
        return value
    if isinstance(value, tuple) and len(value) == 3:
        return StepResult(*value)
    raise TypeError(f"step() returned {type(value).__name__}, not StepResult(observation, reward, done) "
                    "or a 3-tuple")


def checked_observation(value: Any) -> str | list[dict]:
    """An observation to append: text or a non-empty list of chat messages; anything else is
    a TypeError saying what it is (not a chat template's failure further on)."""
    try:
        return check_prompt(value, "step()")
    except PromptError:
        raise TypeError(f"step() returned an observation that is {kind_of(value)}, not text, a non-empty "
                        "list of chat messages ({'role': ..., 'content': ...}) or None") from None


def observation_chars(observation: str | list[dict]) -> int:
    """The characters of a (checked) observation: its text, or its messages' contents."""
    return len(observation) if isinstance(observation, str) else sum(len(m["content"]) for m in observation)


def maybe_await(values: list[Any], timeout: float | None = None) -> list[Any]:
    """``values`` with every awaitable among them awaited, concurrently (async ``reset`` or
    ``step``), each for at most ``timeout`` seconds; an exception (``TimeoutError`` past the
    limit) is returned in its slot, not raised."""
    pending = [i for i, v in enumerate(values) if inspect.isawaitable(v)]
    if not pending:
        return values
    import asyncio

    async def gather():
        return await asyncio.gather(*(asyncio.wait_for(values[i], timeout) for i in pending), return_exceptions=True)

    out = list(values)
    for i, result in zip(pending, asyncio.run(gather())):
        out[i] = result
    return out
