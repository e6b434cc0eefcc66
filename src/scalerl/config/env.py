"""The ``env`` section: multi-turn episodes with a user's environment (``scalerl.rollout.env``).

Unset (``env.name: null``), every trajectory is one model turn scored by the task. Set, every
generator and evaluator runs episodes of the named class (``rollout.multi_turn``); the class
is loaded when the config loads too, so a missing file, a missing name or a class without
``reset``/``step`` is one sentence before anything is written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from scalerl.config.base import Frozen as _Frozen


class EnvConfig(_Frozen):
    name: str | None = None
    """The environment class as ``FILE.py:NAME`` or ``package.module:NAME``, one instance per
    trajectory (``reset(example) -> prompt``, ``step(action) -> (observation, reward, done)``);
    None: single-turn."""
    knobs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments the class is built with: ``NAME(**knobs)``."""
    max_turns: int = Field(4, ge=1)
    """Model turns per episode; one the environment has not ended by then is cut
    (``finish_reason="length"``)."""
    max_tokens: int = Field(256, ge=1)
    """Completion tokens per episode, the model's and the observations' together; a turn or an
    observation that would pass it ends the episode (``"length"``). Each turn is also capped
    by ``sampling.max_new_tokens``."""
    max_observation_chars: int = Field(100_000, ge=1)
    """Characters one observation may have (a list of chat messages: their contents together);
    a longer one ends the episode (``"length"``) before it is tokenized: tokenizing megabytes
    takes seconds per observation, and ``max_tokens`` would discard them anyway."""
    reward: Literal["sum", "last"] = "sum"
    """The trajectory's reward: the sum of its step rewards, or the last one (None counts 0)."""
    observation_role: Literal["tool", "user"] = "tool"
    """The chat role observations are rendered as with a chat template (plain text without one)."""
    stop_strings: tuple[str, ...] = ()
    """Text that ends a model turn besides the end-of-turn ids, e.g. a tool call's closing tag
    (``</calc>``): the environment answers it."""
    timeout_s: float | None = Field(60.0, gt=0)
    """Seconds each call of the environment may take (the constructor, ``reset``, ``step``,
    ``close``; one turn's async steps together); past it the trajectory scores 0 as an error
    (``env_errors``) and the call is abandoned on its worker thread, where it may keep running
    (``scalerl.user_code``: too many still running stop the run). None calls it on the main
    thread without a limit."""
