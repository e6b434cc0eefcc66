"""Prompt bookkeeping between the curriculum, the generators and the learner.

Tracks every prompt from dispatch to training: ``inflight`` (dispatched, not yet returned),
the :class:`GroupQueue` (returned, not yet trained on) and ``redo`` (refused as too stale, or
dispatched before a crash: to be sent again). The :class:`LagPolicy` decides the quantities;
this class only moves records, so a checkpoint of it is the whole in-flight state.
"""

from __future__ import annotations

from typing import Any

from scalerl.pipeline.queues import GroupQueue, LagPolicy
from scalerl.types import Group, PromptAssignment


class Scheduler:
    def __init__(self, policy: LagPolicy, pool, chunk: int) -> None:
        self.policy, self.pool, self.chunk = policy, pool, chunk
        self.queue = GroupQueue(policy)
        self.inflight: dict[int, PromptAssignment] = {}
        self.redo: list[PromptAssignment] = []
        self.next_seq = 0
        self.refused = 0  # groups refused by the lag bound, over the run

    @property
    def outstanding(self) -> int:
        """Prompts dispatched (or due again) and not yet trained on."""
        return len(self.inflight) + len(self.queue) + len(self.redo)

    def to_dispatch(self, learner_version: int) -> list[list[PromptAssignment]]:
        """Chunks of new assignments the policy allows now (redone prompts first)."""
        quota = self.policy.dispatch_quota(self.outstanding)
        fresh = [self._assign(pid, learner_version) for pid in self.pool.sample(quota)] if quota else []
        again = [PromptAssignment(a.seq, a.prompt_id, a.epoch, learner_version) for a in self.redo]
        self.redo = []
        todo = again + fresh
        for a in todo:
            self.inflight[a.seq] = a
        return [todo[i : i + self.chunk] for i in range(0, len(todo), self.chunk)]

    def _assign(self, prompt_id: int, learner_version: int) -> PromptAssignment:
        self.next_seq += 1
        return PromptAssignment(self.next_seq, int(prompt_id), int(self.pool.epoch), learner_version)

    def receive(self, groups: list[Group]) -> None:
        """Returned groups join the queue; unknown ones (from before a resume) are ignored."""
        known = [g for g in groups if self.inflight.pop(g.seq, None) is not None]
        self.queue.put(known)

    def next_batch(self, learner_version: int) -> list[Group] | None:
        """P admissible groups, or None; refused groups are queued for redo."""
        batch, refused = self.queue.take_batch(learner_version)
        for g in refused:
            self.refused += 1
            self.redo.append(PromptAssignment(g.seq, g.prompt_id, g.epoch, learner_version))
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Waiting groups and every unreturned prompt (to be re-dispatched on resume)."""
        return {
            "groups": self.queue.groups(),
            "pending": [*self.redo, *self.inflight.values()],
            "next_seq": self.next_seq,
            "refused": self.refused,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queue = GroupQueue(self.policy)
        self.queue.put(state["groups"])
        self.inflight = {}
        self.redo = list(state["pending"])
        self.next_seq = int(state["next_seq"])
        self.refused = int(state["refused"])
