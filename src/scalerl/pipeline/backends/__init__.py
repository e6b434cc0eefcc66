"""Transports between the learner (the driver process) and the generator roles.

Every backend builds its generators from an :class:`~scalerl.pipeline.actor.ActorSpec` alone
and satisfies :class:`Backend`; the driver's scheduler and lag policy never see which one runs.

- ``inprocess``: one process, decode on collect (tests, debugging);
- ``local``: spawned generator processes, weights in shared memory (the embedded default);
- ``ray``: generator actors, weights through the object store (one machine to a cluster).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from scalerl.types import Group, PromptAssignment

BACKENDS = ("local", "inprocess", "ray")
"""Backend names (``pipeline.backend``); ``scalerl.pipeline.build.make_backend`` maps them."""


@runtime_checkable
class Backend(Protocol):
    """What the driver needs from a transport."""

    @property
    def num_devices(self) -> int:
        """Roles that compute (learner + generators): the compute accounting's device count."""
        ...

    @property
    def restarts(self) -> int:
        """Dead generators replaced so far (``pipeline.restarts``): ``generator_restarts``."""
        ...

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """Make ``model``'s weights, as policy ``version``, available to every generator."""
        ...

    @property
    def sink(self):
        """The :class:`~scalerl.pipeline.weights.WeightSink` a learner writes versions into;
        picklable, so a learner rank in another process (or, on Ray, another node) writes it."""
        ...

    def announce(self, version: int, handle) -> None:
        """Tell the generators that ``version`` was written; ``handle``: what the sink's write returned."""
        ...

    def submit(self, chunk: list[PromptAssignment]) -> None:
        """Queue a chunk of prompts for some generator to decode."""
        ...

    def collect(self, timeout: float) -> list[Group]:
        """Groups finished so far, waiting up to ``timeout`` s for the first. A dead generator
        is replaced and its work sent again; ``restarts.GeneratorsFailed`` when they die too often."""
        ...

    def close(self) -> None:
        """Stop the generators; unsent work is dropped."""
        ...
