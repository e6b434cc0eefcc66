"""GPU placement of the roles, derived by hand."""

from __future__ import annotations

import pytest

from scalerl.pipeline.plan.gpus import gpu_plan


@pytest.mark.parametrize("gpus, ranks, gens, learner, generators, devices", [
    (1, 1, 1, (0,), (0,), 1),  # one H200: everything shares it, counted once
    (8, 1, 7, (0,), (1, 2, 3, 4, 5, 6, 7), 8),  # the learner keeps GPU 0, generators the rest
    (4, 2, 2, (0, 1), (2, 3), 4),
    (3, 1, 4, (0,), (1, 2, 1, 2), 3),  # more generators than GPUs left: round-robin over those
    (2, 2, 1, (0, 1), (0,), 2),  # none left: share the learner's, GPU 0 first
])
def test_the_learner_keeps_the_first_gpus_and_generators_take_the_rest(gpus, ranks, gens, learner, generators,
                                                                       devices):
    plan = gpu_plan(gpus, ranks, gens)
    assert (plan.learner, plan.generators, plan.devices) == (learner, generators, devices)


def test_a_learner_and_vllm_that_cannot_share_a_gpu_are_one_sentence():
    from scalerl.pipeline.plan.gpus import shared_gpu_problem

    gib = 2**30
    # 1B parameters: 16 GiB of learner state; vLLM at 0.4 of 141 GiB is 56.4 GiB: fits
    assert shared_gpu_problem(141 * gib, 10**9, 0.4, None, 2) is None
    # 6B: 96 GB of learner state (89.4 GiB) + 56.4 GiB > 0.95 x 141 GiB = 134 GiB
    said = shared_gpu_problem(141 * gib, 6 * 10**9, 0.4, None, 2)
    assert "lower rollout.vllm.gpu_memory_utilization or set rollout.vllm.kv_cache_memory_bytes" in said
    # the same 6B learner with an explicit 20 GiB cache: 89.4 + 11.2 (bf16 weights) + 20 GiB would
    # fit, but vLLM's start still wants 0.4 x 141 = 56.4 GiB free, and only 51.6 GiB is (N5)
    assert "gpu_memory_utilization" in shared_gpu_problem(141 * gib, 6 * 10**9, 0.4, 20 * gib, 2)
    # at 0.25 (35.3 GiB free wanted) the 31.2 GiB of weights and cache fit: 89.4 + 35.3 <= 134
    assert shared_gpu_problem(141 * gib, 6 * 10**9, 0.25, 20 * gib, 2) is None
