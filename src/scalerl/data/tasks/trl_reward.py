"""TRL's reward-function calling convention (``GRPOTrainer(reward_funcs=...)``), as TRL calls it.

A function whose signature names ``completions`` (plural) and not ``completion`` is in TRL's
form and scores a whole batch in one call::

    NAME(prompts=prompts, completions=completions, completion_ids=completion_ids,
         trainer_state=state, **columns) -> list[float | None]

with one list entry per completion (the G completions of an example follow each other):

- ``prompts``: each completion's prompt as the task gives it, a string or chat messages;
- ``completions``: the completion's text, or ``[{"role": "assistant", "content": text}]``
  when its prompt is chat messages (TRL's conversational format);
- ``completion_ids``: the completion's generated token ids (a list of ints);
- ``columns``: every other field of the example (a dataset record's columns, or a built-in
  task's ``answer`` and metadata) as one list per field; a field an example lacks is None;
- ``trainer_state``: a :class:`TrainerState`, whose ``global_step`` is the policy version of
  the weights the generator holds when it scores (the learner steps those weights have
  taken); None where no rollout scores (the SFT warm-up's pass-rate check). TRL passes its
  ``transformers.TrainerState``; this one has ``global_step`` only.

The result is a list (a tuple, numpy array or tensor too) of one reward per completion; None
(or NaN, as TRL writes it) means "cannot be scored". A result of another length or type fails
the whole call; an entry that is not a finite number fails its own sample
(``data.tasks.user_reward`` counts both).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scalerl.data.tasks.base import Prompt, checked_reward


@dataclass(frozen=True)
class TrainerState:
    """What a TRL-form reward function gets as ``trainer_state`` (module doc)."""

    global_step: int
    """The policy version of the weights that score: learner steps taken by them."""


def takes_batch(fn: Callable) -> bool:
    """Whether ``fn`` is in TRL's batch form: it names a ``completions`` parameter and no
    ``completion`` one (a function taking only ``**kwargs`` stays per sample)."""
    try:
        names = {p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    except (TypeError, ValueError):  # a builtin without a signature: called per sample, as before
        return False
    return "completions" in names and "completion" not in names


def completion_as_trl(text: str, prompt: Prompt) -> str | list[dict]:
    """A completion as TRL hands it over: text after a text prompt, one assistant message
    after a chat prompt."""
    return text if isinstance(prompt, str) else [{"role": "assistant", "content": text}]


def batch_kwargs(prompts: Sequence[Prompt], texts: Sequence[str], ids: Sequence[Sequence[int] | None],
                 fields: Sequence[dict[str, Any]], state: TrainerState | None) -> dict[str, Any]:
    """The keyword arguments of one TRL-form call for N completions (module doc).

    ``fields[i]`` is completion i's example's columns without ``prompt``; the columns are
    their union, in order of first appearance."""
    columns: dict[str, list] = {}
    for row in fields:
        for key in row:
            columns.setdefault(key, [])
    for key, values in columns.items():
        values.extend(row.get(key) for row in fields)
    return {**columns, "prompts": list(prompts),
            "completions": [completion_as_trl(t, p) for t, p in zip(texts, prompts)],
            "completion_ids": [None if i is None else [int(t) for t in i] for i in ids],
            "trainer_state": state}


class BatchEntryError(TypeError):
    """One entry of a TRL-form result that is not a reward: fails that sample only."""


def checked_batch(value: Any, n: int) -> list[float | BatchEntryError]:
    """A TRL-form result as N rewards (NaN for None or NaN), or :class:`BatchEntryError` in
    place of an entry that is not a finite real number; ``TypeError`` (the whole call fails)
    for a result that is not one reward per completion."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays, tensors
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"it returned {_kind(value)}, not a list of {n} rewards (one per completion, "
                        "None where it cannot score)")
    if len(value) != n:
        raise TypeError(f"it returned {len(value)} rewards for {n} completions; return one per completion "
                        "(None where it cannot score)")
    out: list[float | BatchEntryError] = []
    for i, entry in enumerate(value):
        if isinstance(entry, float) and math.isnan(entry):  # TRL's own "not applicable"
            out.append(math.nan)
            continue
        try:
            reward = checked_reward(entry)
        except (TypeError, OverflowError) as err:
            out.append(BatchEntryError(f"entry {i} of its list: {err}"))
            continue
        out.append(math.nan if reward is None else reward)
    return out


def _kind(value: Any) -> str:
    text = repr(value)
    return f"a {type(value).__name__} ({text[:60]}{'…' if len(text) > 60 else ''})"
