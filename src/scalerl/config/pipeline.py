"""The ``pipeline`` section: PipelineRL-k, its backend and generators (digest §2.2)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from scalerl.config.base import Frozen as _Frozen


class PipelineConfig(_Frozen):
    mode: Literal["pipeline-rl", "ppo-off-policy", "sync"] = "pipeline-rl"
    """Off-policy scheme (digest §2.2): streaming with in-flight weights, k frozen-policy
    updates per generation round, or on-policy."""
    k: int = Field(8, ge=1)
    """Maximum lag: the learner never trains on a group more than k versions older than
    itself (pipeline-rl), or takes k updates per round (ppo-off-policy). Ignored by sync."""
    backend: Literal["local", "inprocess", "ray"] = "local"
    """``local``: generator and learner in separate spawned processes with shared-memory
    weights; ``inprocess``: one process, for tests and debugging; ``ray``: actors on the nodes
    of a Ray cluster (joined through ``RAY_ADDRESS``). The names are
    ``scalerl.pipeline.backends.BACKENDS``; what each can do is checked by the run plan."""
    weight_transport: Literal["auto", "shm", "collective", "cuda_ipc"] = "auto"
    """How each version reaches the ``local`` backend's generators (``pipeline.weights.TRANSPORTS``):
    ``shm`` one flat tensor in shared memory; ``collective`` a two-rank ``torch.distributed``
    group per generator, gloo on CPUs and NCCL on GPUs, received while the generator decodes
    (``pipeline.collective``); ``cuda_ipc`` the shared tensor in the memory of the GPU the
    learner and the generators share. ``auto``: ``shm`` on CPUs, ``collective`` where each
    generator has a GPU of its own, ``cuda_ipc`` where they share the learner's. The other
    backends have their own (``inprocess`` a copy, ``ray`` the object store)."""
    num_generators: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """Generator roles (processes or actors); ``auto``: half the cores with ``local``
    (``scalerl.pipeline.plan.cores``, printed at start), 1 otherwise."""
    generator_threads: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """torch threads of each generator; ``auto``: 1."""
    prompts_per_step: int = Field(8, ge=1)
    """P: prompts per optimiser step (paper: 48)."""
    generations: int = Field(8, ge=2)
    """G: completions per prompt (paper: 16)."""
    prompts_per_chunk: int = Field(4, ge=1)
    """Prompts a generator decodes together in one engine call."""
    generator_deaths: int = Field(3, ge=1)
    generator_death_window: int = Field(20, ge=1)
    """A generator that dies (``kill -9``, ``os._exit`` in a reward function or environment) is
    replaced from the newest published weights and given its unfinished prompts again
    (``generator_restarts`` in the records), until ``generator_deaths`` deaths fall within
    ``generator_death_window`` learner steps: then the run stops with one sentence naming
    the cause (``scalerl.pipeline.restarts``). ``generator_deaths: 1`` stops at the first."""
