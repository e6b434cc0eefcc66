"""The lag bound as a queue policy: quotas per mode, and refusal of over-stale groups."""

from __future__ import annotations

import pytest
from pipeline_helpers import make_group

from scalerl.pipeline.queues import GroupQueue, LagPolicy, staleness


def test_staleness_is_learner_version_minus_oldest_token():
    g = make_group(0, versions=[5, 3, 4], rewards=[1, 0, 1])
    assert staleness(g, 7) == 7 - 3


@pytest.mark.parametrize(
    "mode, k, outstanding, quota",
    [
        ("sync", 8, 0, 4),  # one batch, only when nothing is outstanding
        ("sync", 8, 4, 0),
        ("ppo-off-policy", 3, 0, 12),  # k batches of the frozen policy
        ("ppo-off-policy", 3, 1, 0),
        ("pipeline-rl", 2, 0, 12),  # the next batch plus k more: trained at most k versions later
        ("pipeline-rl", 2, 5, 7),
        ("pipeline-rl", 2, 13, 0),
    ],
)
def test_dispatch_quota(mode, k, outstanding, quota):
    assert LagPolicy(mode, k, prompts_per_step=4).dispatch_quota(outstanding) == quota


def test_publish_rule():
    assert LagPolicy("pipeline-rl", 8, 4).publish_after_step(outstanding=30)
    assert not LagPolicy("ppo-off-policy", 8, 4).publish_after_step(outstanding=4)
    assert LagPolicy("ppo-off-policy", 8, 4).publish_after_step(outstanding=0)


def test_bounds():
    assert LagPolicy("sync", 8, 4).bound == 0
    assert LagPolicy("ppo-off-policy", 8, 4).bound == 7  # k updates on one frozen policy
    assert LagPolicy("pipeline-rl", 2, 4).bound == 2


def test_queue_refuses_groups_beyond_the_bound_and_waits_for_a_full_batch():
    q = GroupQueue(LagPolicy("pipeline-rl", 2, prompts_per_step=2))
    q.put([make_group(0, [3, 3], [1, 0]), make_group(1, [1, 4], [1, 0]), make_group(2, [4, 4], [0, 1])])
    batch, refused = q.take_batch(learner_version=4)
    # group 1 has a token of version 1: staleness 3 > k = 2, so it is refused
    assert [g.prompt_id for g in refused] == [1]
    assert [g.prompt_id for g in batch] == [0, 2]
    assert all(staleness(g, 4) <= 2 for g in batch)
    q.put([make_group(3, [4, 4], [1, 0])])
    assert q.take_batch(learner_version=4) == (None, [])  # one group < P = 2: the learner waits
    assert len(q) == 1


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown pipeline mode"):
        LagPolicy("async", 2, 4)
