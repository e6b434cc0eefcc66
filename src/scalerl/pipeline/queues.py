"""The off-policy bound as a queue policy: who may dispatch, publish and train, and when.

Digest §2.2. Every token carries the policy version that sampled it, so a group's staleness at
the learner is a number: ``learner_version − min token version``. The three modes differ only
in this policy; the loops that move prompts and groups never test the mode themselves.

- ``sync``: dispatch P prompts with the current weights, train once, publish, repeat.
  Lag bound 0.
- ``ppo-off-policy`` (k): dispatch k·P prompts with the frozen policy, take k updates on
  them, and publish only when the round is used up. Staleness runs 0 … k−1.
- ``pipeline-rl`` (k): publish after every step (generators swap weights in flight); keep at
  most (k+1)·P prompts outstanding (dispatched but not yet trained on). A prompt dispatched at
  learner version v starts on weights ≥ v (``PromptAssignment.min_version``) and has at most
  k batches ahead of it, so it is trained on at version ≤ v + k: staleness ≤ k, reached when
  the learner is the slower role. The learner waits for P admissible groups; a group whose
  staleness would still exceed k is refused and its prompt redone. This is "the trainer waits
  when k steps ahead of the generators", counted per token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from scalerl.types import Group

MODES = ("pipeline-rl", "ppo-off-policy", "sync")


def staleness(group: Group, learner_version: int) -> int:
    """``learner_version − min_t version_t`` over all tokens of the group's completions."""
    return learner_version - group.oldest_version


class LagPolicy:
    """Dispatch quota, publish rule and admission test for one off-policy mode."""

    def __init__(self, mode: str, k: int, prompts_per_step: int) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown pipeline mode {mode!r}; choose one of {', '.join(MODES)}")
        if k < 1:
            raise ValueError(f"the lag k must be at least 1, got {k}")
        self.mode, self.k, self.prompts_per_step = mode, k, prompts_per_step

    @property
    def bound(self) -> int:
        """Largest admissible staleness."""
        return {"sync": 0, "ppo-off-policy": self.k - 1, "pipeline-rl": self.k}[self.mode]

    def dispatch_quota(self, outstanding: int) -> int:
        """How many new prompts may go out now, given ``outstanding`` not yet trained on."""
        if self.mode == "pipeline-rl":
            return max(0, (self.k + 1) * self.prompts_per_step - outstanding)
        round_size = self.prompts_per_step * (1 if self.mode == "sync" else self.k)
        return round_size if outstanding == 0 else 0

    def publish_after_step(self, outstanding: int) -> bool:
        """Whether the learner publishes its weights after a step that leaves ``outstanding``."""
        return self.mode == "pipeline-rl" or outstanding == 0

    def admits(self, group: Group, learner_version: int) -> bool:
        """Whether training on ``group`` at ``learner_version`` respects the lag bound."""
        return staleness(group, learner_version) <= self.bound


class GroupQueue:
    """Finished groups waiting for the learner (FIFO); hands out full batches of P admissible
    groups and returns the refused (too stale) ones so their prompts can be redone."""

    def __init__(self, policy: LagPolicy) -> None:
        self.policy = policy
        self._groups: deque[Group] = deque()

    def __len__(self) -> int:
        return len(self._groups)

    def put(self, groups: Iterable[Group]) -> None:
        self._groups.extend(groups)

    def take_batch(self, learner_version: int) -> tuple[list[Group] | None, list[Group]]:
        """``(batch, refused)``: the oldest P admissible groups (None while fewer wait), and the
        groups removed because training on them now would break the lag bound."""
        refused = [g for g in self._groups if not self.policy.admits(g, learner_version)]
        if refused:
            self._groups = deque(g for g in self._groups if self.policy.admits(g, learner_version))
        p = self.policy.prompts_per_step
        if len(self._groups) < p:
            return None, refused
        return [self._groups.popleft() for _ in range(p)], refused

    def groups(self) -> list[Group]:
        """The waiting groups, oldest first (for checkpoints)."""
        return list(self._groups)
