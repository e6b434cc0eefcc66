"""Transports between the learner (the driver process) and the generator roles, in one table.

Every backend is built from an :class:`~scalerl.pipeline.generators.actor.ActorSpec`, the weight
layout the learner publishes (:class:`~scalerl.pipeline.weights.WeightLayout`) and the run
plan (:class:`~scalerl.pipeline.plan.RunPlan`), never from a model; it satisfies
:class:`Backend` and declares what it can do in :class:`Capabilities`, which the plan reads.
Nothing else tests a backend's name. A new backend is one file and one :data:`BACKENDS` entry.

- ``inprocess``: one process, decode on collect (tests, debugging);
- ``local``: spawned generator processes, weights in shared memory (the embedded default), over
  a collective group, or through CUDA IPC;
- ``ray``: generator actors on a Ray cluster's nodes, weights through the object store.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from scalerl.types import EvalRequest, EvalResult, Group, PromptAssignment

BACKENDS: dict[str, str] = {
    "local": "scalerl.pipeline.generators.local:LocalBackend",
    "inprocess": "scalerl.pipeline.generators.inprocess:InProcessBackend",
    "ray": "scalerl.pipeline.generators.ray:RayBackend",
}
"""Backend name (``pipeline.backend``) -> ``module:Class``, imported only when chosen (Ray is
an extra)."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the run plan decides placement from these alone."""

    generators: Literal["in_learner", "processes", "cluster"]
    """Where its generators run: in the learner's process (they share its cores), as
    processes on this machine (a share of its cores and GPUs each), or on the nodes of a
    cluster (resources reserved there; the plan places each on a node)."""
    evaluates: bool
    """Its generators evaluate weight snapshots between chunks (:class:`EvaluatingBackend`):
    ``eval.on=generator`` needs it, and ``auto`` chooses it."""
    ranks: Literal["processes", "ray"]
    """How the ranks of a data-parallel learner run (``learner.group``)."""
    weights: tuple[str, ...]
    """The weight transports it can move versions by (``pipeline.weights.TRANSPORTS``); the
    plan chooses one (``pipeline.plan.weight_transport``), the first on CPUs."""


@runtime_checkable
class Backend(Protocol):
    """What the driver needs from a transport."""

    capabilities: ClassVar[Capabilities]

    @classmethod
    def nodes(cls) -> tuple | None:
        """The live nodes of the cluster its generators run on (``plan.Node``s; connecting to
        it), or None when they run on this machine: what the run plan places roles on."""
        ...

    @property
    def layout(self):
        """The :class:`~scalerl.pipeline.weights.WeightLayout` of the published weights."""
        ...

    @property
    def restarts(self) -> int:
        """Dead generators replaced so far (``pipeline.restarts``): ``generator_restarts``."""
        ...

    @property
    def sink(self):
        """The :class:`~scalerl.pipeline.weights.WeightSink` a learner writes versions into;
        picklable when it ``crosses_processes``, so a learner rank in another process (or, on
        Ray, another node) writes it."""
        ...

    def announce(self, version: int, handle) -> None:
        """Tell the generators that ``version`` was written; ``handle``: what the sink's write returned."""
        ...

    def submit(self, chunk: list[PromptAssignment]) -> None:
        """Queue a chunk of prompts for some generator to decode."""
        ...

    def collect(self, timeout: float) -> list[Group]:
        """Groups finished so far, waiting up to ``timeout`` s for the first. A dead generator
        is replaced and its work sent again; ``restarts.GeneratorsFailed`` when they die too
        often, ``restarts.NodeLost`` when the node it ran on left the cluster."""
        ...

    def placement(self) -> list[dict[str, Any]]:
        """Where each generator actually runs: ``{"role", "host", "pid", "devices"}`` (and
        ``"node"`` on a cluster), for ``plan.json``."""
        ...

    def close(self) -> None:
        """Stop the generators; unsent work is dropped."""
        ...


@runtime_checkable
class EvaluatingBackend(Backend, Protocol):
    """A backend whose generators evaluate (``capabilities.evaluates``)."""

    def evaluate(self, request: EvalRequest) -> None:
        """Queue an evaluation of ``request.weights`` (flat, in :attr:`layout`) on a generator."""
        ...

    def evaluations(self, timeout: float = 0.0) -> list[EvalResult]:
        """Evaluation results returned so far (waiting up to ``timeout`` s for the first)."""
        ...


def backend_class(name: str) -> type:
    """The class :data:`BACKENDS` names; ``ImportError`` when its extra is not installed."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
