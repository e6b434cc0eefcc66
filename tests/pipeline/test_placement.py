"""GPU placement of the roles, derived by hand."""

from __future__ import annotations

import pytest

from scalerl.pipeline.placement import gpu_plan


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
