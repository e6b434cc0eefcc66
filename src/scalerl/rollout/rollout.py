"""The rollout seam: one example in, G scored trajectories out, on any generation engine.

A :class:`Rollout` is what the generator role (``pipeline.generators.actor``) and validation
(``rollout.validate``) call; neither knows whether a trajectory has one turn or several.

- :class:`SingleTurn` (the default): the task's prompt rendered once
  (``models.chat.PromptRenderer``), one ``engine.generate`` for every example × G, each
  completion scored by ``task.reward``; a user's reward functions
  (``data.tasks.user_reward``) score all of them at once (``score_batch``: TRL-form functions
  take the whole batch in one call), and their own rewards leave in ``reward_parts``.
- ``rollout.multi_turn.MultiTurn`` (``env.name`` set): an environment answers each turn and
  its observations are appended to the trajectory with ``loss_mask=False``.

:func:`build_rollout` picks one from an optional :class:`~scalerl.rollout.env.EnvSpec`.
Rewards leave a rollout as the task or environment gives them ({0, 1}, fractional, NaN for
"cannot be scored"); the caller puts them in the configured form
(``data.tasks.base.in_form``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from scalerl.data.tasks.base import Example
from scalerl.data.tasks.trl_reward import TrainerState
from scalerl.models.chat import ChatFormat, PromptRenderer
from scalerl.rollout.engine import GenerationEngine, OnStep
from scalerl.rollout.trajectory import Trajectories, check_stop
from scalerl.types import SamplingParams


@runtime_checkable
class Rollout(Protocol):
    """Turns examples into scored trajectories with an engine and sampling parameters."""

    def run(self, engine: GenerationEngine, examples: Sequence[Example], generations: int,
            params: SamplingParams, *, on_step: OnStep | None = None) -> list[Trajectories]:
        """``generations`` trajectories per example, in order, in as few engine calls as it can;
        ``on_step`` is the engine's hook between decode steps (in-flight weight swaps)."""
        ...


class SingleTurn:
    """One completion per trajectory, scored by the task (the default rollout)."""

    def __init__(self, task, renderer: PromptRenderer) -> None:
        self.task, self.renderer = task, renderer

    def run(self, engine: GenerationEngine, examples: Sequence[Example], generations: int,
            params: SamplingParams, *, on_step: OnStep | None = None) -> list[Trajectories]:
        firsts = [self.task.prompt(ex) for ex in examples]
        prompts = [self.renderer.ids(p) for p in firsts]
        flat = [p for p in prompts for _ in range(generations)]  # prompt-major: G per example
        completions = engine.generate(flat, params, on_step=on_step)
        if hasattr(self.task, "score_batch"):
            return self._score_together(engine, examples, firsts, completions, generations, on_step)
        out = []
        for i, ex in enumerate(examples):
            members = completions[i * generations : (i + 1) * generations]
            errors = getattr(self.task, "reward_errors", 0)  # a task may count samples it could not grade
            rewards = np.array([self._score(c.text, ex, on_step) for c in members], dtype=np.float32)
            out.append(Trajectories(members, rewards, firsts[i],
                                    reward_errors=getattr(self.task, "reward_errors", 0) - errors))
        return out

    def _score_together(self, engine, examples, firsts, completions, generations, on_step) -> list[Trajectories]:
        """Every completion scored by the user's reward functions in one batch (prompt-major)."""
        flat_examples = [ex for ex in examples for _ in range(generations)]
        scores = self.task.score_batch([c.text for c in completions], flat_examples, [c.tokens for c in completions],
                                       TrainerState(engine.version), lambda: check_stop(on_step))
        out = []
        for i in range(len(examples)):
            rows = slice(i * generations, (i + 1) * generations)
            out.append(Trajectories(completions[rows], scores.rewards[rows].copy(), firsts[i],
                                    reward_errors=int(scores.errors[rows].sum()),
                                    reward_parts={k: v[rows].copy() for k, v in scores.parts.items()},
                                    reward_part_errors={k: int(v[rows].sum()) for k, v in scores.part_errors.items()}))
        return out

    def _score(self, text: str, example: Example, on_step: OnStep | None) -> float:
        check_stop(on_step)  # a stop (evaluation on the learner) does not wait for every reward
        return self.task.reward(text, example)


def build_rollout(task, tokenizer, chat: ChatFormat | None = None, env=None, log=None) -> Rollout:
    """The single-turn rollout, or with ``env`` (an :class:`~scalerl.rollout.env.EnvSpec`)
    the multi-turn one, which loads the environment class in this process."""
    renderer = PromptRenderer(tokenizer, chat or ChatFormat())
    if env is None:
        return SingleTurn(task, renderer)
    from scalerl.rollout.multi_turn import MultiTurn

    return MultiTurn(renderer, env, log=log)
