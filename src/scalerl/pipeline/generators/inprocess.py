"""Single-process backend for tests and debugging: the actor decodes when groups are collected.

The actor keeps its own copy of the model and receives weights only when the learner
publishes (an :class:`~scalerl.pipeline.weights.InProcessWeights` channel), so versions,
staleness and the lag policy behave as in the ``local`` backend, without overlap.
"""

from __future__ import annotations

import os
import socket
from collections import deque

from scalerl.pipeline.backends import Capabilities
from scalerl.pipeline.generators.actor import ActorSpec, build_actor
from scalerl.pipeline.plan import RunPlan
from scalerl.pipeline.weights import InProcessWeights, WeightLayout
from scalerl.types import Group, PromptAssignment


class InProcessBackend:
    """One generator, decoding in this (the learner's) process."""

    capabilities = Capabilities(generators="in_learner", evaluates=False, ranks="processes",
                                weights=("in_process",))
    restarts = 0  # the generator is this process: it cannot die alone

    @classmethod
    def nodes(cls) -> None:
        """This machine alone: no cluster."""
        return None

    def __init__(self, spec: ActorSpec, layout: WeightLayout, plan: RunPlan | None = None, deaths=None) -> None:
        """``plan`` and ``deaths`` are taken as every backend's are; one generator in this
        process needs neither."""
        self.weights, self.layout = InProcessWeights(), layout
        self.actor = build_actor(spec, self.weights)
        self.pending: deque[list[PromptAssignment]] = deque()
        self.device = spec.device

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

    def placement(self) -> list[dict]:
        return [{"role": "generator 0", "host": socket.gethostname(), "pid": os.getpid(), "devices": [self.device]}]

    def close(self) -> None:
        self.pending.clear()
