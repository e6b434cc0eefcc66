"""Single-process backend for tests and debugging: the actor decodes when groups are collected.

The actor keeps its own copy of the model and receives weights only when the learner
publishes (an :class:`~scalerl.pipeline.weights.InProcessWeights` channel), so versions,
staleness and the lag policy behave as in the ``local`` backend, without overlap.
"""

from __future__ import annotations

from collections import deque

import torch

from scalerl.pipeline.actor import ActorSpec, build_actor
from scalerl.pipeline.weights import InProcessWeights
from scalerl.types import Group, PromptAssignment


class InProcessBackend:
    num_devices = 1
    restarts = 0  # the generator is this process: it cannot die alone

    def __init__(self, spec: ActorSpec, model: torch.nn.Module | None = None, num_generators: int = 1) -> None:
        self.weights = InProcessWeights()
        self.actor = build_actor(spec, self.weights)
        self.pending: deque[list[PromptAssignment]] = deque()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        self.weights.publish(model, version)

    @property
    def sink(self) -> InProcessWeights:
        return self.weights

    def announce(self, version: int, handle) -> None:
        """Nothing to do: the actor reads the same object."""

    def submit(self, chunk: list[PromptAssignment]) -> None:
        self.pending.append(chunk)

    def collect(self, timeout: float) -> list[Group]:
        """Decode the oldest submitted chunk now (``timeout`` is irrelevant in one process)."""
        return self.actor.run_batch(self.pending.popleft()) if self.pending else []

    def close(self) -> None:
        self.pending.clear()
