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


LEARNER_BYTES_PER_PARAM = 16
"""float32 master weight, its gradient and AdamW's two moments: 4 + 4 + 8 bytes."""
HEADROOM = 0.95
"""Share of a GPU the roles on it may plan for; the rest is the CUDA context, fragmentation,
activations."""


def shared_gpu_problem(total_bytes: int, n_params: int, vllm_share: float, kv_bytes: int | None,
                       vllm_dtype_bytes: int) -> str | None:
    """One sentence when a learner and a vLLM generator on one GPU cannot both fit, else None.

    The learner needs ``16·N`` bytes before activations; vLLM takes
    ``gpu_memory_utilization × total`` — or, with ``kv_cache_memory_bytes``, its weights
    (``N × dtype bytes``) plus that cache. vLLM's start also requires
    ``gpu_memory_utilization × total`` to be free whatever the cache size
    (``v1/worker/utils.py`` of vLLM 0.32, ``gpu-review-2.md`` N5), so that share must fit too."""
    learner = LEARNER_BYTES_PER_PARAM * n_params
    vllm = vllm_share * total_bytes
    if kv_bytes is not None:
        vllm = max(vllm, n_params * vllm_dtype_bytes + kv_bytes)
    if learner + vllm <= HEADROOM * total_bytes:
        return None
    gib = 2**30
    return (f"the learner ({learner / gib:.1f} GiB: float32 masters, gradients and AdamW state of "
            f"{n_params / 1e6:.0f}M parameters, before activations) and vLLM ({vllm / gib:.1f} GiB) would share a "
            f"{total_bytes / gib:.0f} GiB GPU past {HEADROOM:.0%}; lower rollout.vllm.gpu_memory_utilization or set "
            "rollout.vllm.kv_cache_memory_bytes, or give the generators GPUs of their own")
