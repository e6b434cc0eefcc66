"""The generation-engine seam: what the generator role needs from any sampler.

Two implementations: :class:`scalerl.rollout.torch_engine.TorchEngine` (pure torch, CPU or
one GPU, used by tests and small runs) and :class:`scalerl.rollout.vllm_engine.VLLMEngine`
(optional GPU extra).

PipelineRL in-flight updates (digest §2.2, §4.3): ``on_step(engine, step)`` is called
before the forward pass that produces completion token ``step``; the generator role polls
for published weights there and calls ``engine.update_weights(...)``. Sequences in flight
continue under the new weights with their existing (stale) KV cache, and every token
records the version of the weights that produced it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch

from scalerl.types import Completion, SamplingParams

OnStep = Callable[["GenerationEngine", int], None]


@runtime_checkable
class GenerationEngine(Protocol):
    """Samples completions with per-token behaviour log-probs and policy versions."""

    @property
    def version(self) -> int:
        """Policy version of the weights currently loaded."""
        ...

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        on_step: OnStep | None = None,
    ) -> list[Completion]:
        """One completion per prompt (token ids, no padding), in order."""
        ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load new weights (in place, also mid-decode from ``on_step``) and set ``version``."""
        ...
