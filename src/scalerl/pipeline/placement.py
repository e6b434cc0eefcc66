"""Which GPU each role holds on one machine (``gpu-review.md`` #8, #16).

The learner's ranks take GPUs ``0 … W−1``; the generators take the GPUs left, one each
(round-robin when there are more generators than GPUs left); only when no GPU is left do
generators share the learner's, GPU 0 first. A generator is pinned through
``CUDA_VISIBLE_DEVICES``, set in its process before any CUDA call, so its engine — vLLM
included — sees one device as ``cuda:0``. The compute meter counts the distinct GPUs of the
plan once each: a learner and a generator sharing one H200 are one GPU-hour per hour, not two.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPlan:
    learner: tuple[int, ...]  # physical GPU of each learner rank
    generators: tuple[int, ...]  # physical GPU of each generator

    @property
    def devices(self) -> int:
        """Distinct physical GPUs the run holds."""
        return len(set(self.learner) | set(self.generators))


def gpu_plan(n_gpus: int, learner_ranks: int, generators: int) -> GpuPlan:
    """The placement above for ``n_gpus`` visible GPUs (module doc)."""
    if n_gpus < 1:
        raise ValueError("a GPU plan needs at least one GPU")
    learner = tuple(r % n_gpus for r in range(learner_ranks))
    free = [g for g in range(n_gpus) if g not in learner] or list(range(n_gpus))
    return GpuPlan(learner, tuple(free[i % len(free)] for i in range(generators)))
