"""The ``Task`` protocol, the ``Example`` record, and answer-extraction helpers.

Format (digest §2.1): the model writes ``<think> … </think>`` and then its final solution.
Rewards are in {0, 1} here; ``in_form`` maps them to the paper's ±1 for the loss (digest §2.1,
"Reward"). A forced interruption (digest §2.9) ends thinking with a phrase whose last token
is ``</think>``, so "text after the LAST ``</think>``" is the answer in both cases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class Example:
    """One verifiable problem. ``answer`` is the ground truth the reward checks against."""

    id: int
    problem: str
    answer: str
    meta: Mapping = field(default_factory=dict)


Prompt = str | list[dict]
"""A task's prompt: plain text, or chat messages ``[{"role": ..., "content": ...}, ...]``
(rendered with the model's chat template, ``scalerl.models.chat``)."""


class PromptError(ValueError):
    """A prompt that is neither a string nor a list of chat messages, in one sentence."""


def check_prompt(prompt: Any, where: str) -> Prompt:
    """``prompt`` if it is a string or a list of ``{role: str, content: str}`` messages, else
    :class:`PromptError` naming ``where`` (a file and line, or an example)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in prompt):
        return prompt
    raise PromptError(f"{where}: the prompt is neither a string nor a non-empty list of "
                      f"chat messages ({{'role': ..., 'content': ...}}), it is {kind_of(prompt)}.")


def kind_of(value: Any) -> str:
    """What a value that is no prompt is, for a sentence: "a dict", "an empty list", ..."""
    if isinstance(value, list):
        return "a list whose items are not all {'role': str, 'content': str}" if value else "an empty list"
    return f"a {type(value).__name__}"


RewardFn = Callable[[str, Example], float]
"""A reward is any plain callable ``(completion_text, example) -> float``."""


@runtime_checkable
class Task(Protocol):
    """What the trainer, generators and SFT need from a task (docs/design/data.md)."""

    name: str
    num_train: int

    def train_example(self, i: int) -> Example: ...

    def validation(self) -> list[Example]: ...

    def prompt(self, example: Example) -> Prompt: ...

    def reward(self, completion_text: str, example: Example) -> float: ...

    def demonstration(self, example: Example) -> str: ...


def strip_thinking(text: str) -> str:
    """The final solution: text after the last ``</think>``, or ``""`` if thinking never ended.

    An unterminated think block earns nothing: the paper counts only the solution part.
    """
    head, sep, tail = text.rpartition(THINK_CLOSE)
    return tail if sep else ""


_INT = re.compile(r"-?\d+")


def first_integer(text: str) -> int | None:
    """The first (optionally negative) integer in ``text``, or ``None``."""
    m = _INT.search(text)
    return int(m.group()) if m else None


REWARD_LIMIT = 3.4028234663852886e38
"""The largest reward a sample may carry: float32's largest finite value (rewards travel as
float32, where anything larger becomes inf and would pass every threshold)."""


def checked_reward(value) -> float | None:
    """A reward function's or environment's reward as a float (None stays None); a value that
    is not a real number (a bool or a string included), not finite, or beyond
    :data:`REWARD_LIMIT` is a ``TypeError`` saying what was returned."""
    from numbers import Real

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"it returned {value!r}, not a finite number or None")
    number = float(value)  # an int too large for a float: OverflowError, also an error
    if not math.isfinite(number):
        raise TypeError(f"it returned {value!r}, not a finite number or None")
    if abs(number) > REWARD_LIMIT:
        raise TypeError(f"it returned {number:.3g}, beyond the ±{REWARD_LIMIT:.3g} a reward may be (float32)")
    return number


REWARD_FORMS = ("as_is", "pm1")
"""What the loss trains on (``task.reward``, ``auto`` decided): the reward as returned, or the
paper's ±1 from a {0, 1} reward."""


def in_form(reward, form: str):
    """A reward ``r`` as returned in ``form``: ``as_is`` is ``r``, ``pm1`` is ``2r − 1`` (digest
    §2.1). Scalars, numpy arrays and tensors alike; NaN (unscored) stays NaN. The one place a
    reward changes form (``pipeline.batch``, and :func:`plus_minus_one`)."""
    if form not in REWARD_FORMS:
        raise ValueError(f"unknown reward form {form!r}; valid: {', '.join(REWARD_FORMS)}")
    return 2.0 * reward - 1.0 if form == "pm1" else reward


PASS_TOLERANCE = 1e-6
"""Slack of the pass test, relative to ``max(1, |threshold|)``: rewards travel as float32, and
a weighted sum such as 0.7 + 0.3 may land a rounding error below 1."""


def passes(reward, threshold: float):
    """Whether a reward as returned is a pass: ``r ≥ threshold − 1e-6·max(1, |threshold|)``
    (``task.pass_threshold``). NaN (unscored) is no pass. Arrays and tensors elementwise."""
    return reward >= threshold - PASS_TOLERANCE * max(1.0, abs(threshold))


def plus_minus_one(reward_fn: RewardFn) -> RewardFn:
    """Wrap a {0, 1} reward as ±1: ``r' = 2r - 1`` (the paper's reward, digest §2.1)."""

    def wrapped(completion_text: str, example: Example) -> float:
        return in_form(float(reward_fn(completion_text, example)), "pm1")

    wrapped.__name__ = f"pm1_{getattr(reward_fn, '__name__', 'reward')}"
    return wrapped


def in_validation_split(key: str, fraction: float) -> bool:
    """Deterministic hash split: ``key`` belongs to validation iff its hash falls under ``fraction``.

    Seed-independent, so a validation problem is never a training problem for any seed.
    """
    import hashlib

    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return h / 2**64 < fraction
