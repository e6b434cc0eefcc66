"""Prompt bookkeeping: dispatch within quota, redo refused prompts, checkpoint in-flight state."""

from __future__ import annotations

from pipeline_helpers import make_group

from scalerl.data.curriculum import PromptPool
from scalerl.pipeline.queues import LagPolicy
from scalerl.pipeline.scheduler import Scheduler


def _group_for(a, versions):
    return make_group(a.prompt_id, versions, [1, 0], seq=a.seq)


def test_dispatch_receive_batch_and_redo():
    s = Scheduler(LagPolicy("pipeline-rl", 1, prompts_per_step=2), PromptPool(50, seed=0), chunk=1)
    chunks = s.to_dispatch(learner_version=0)
    sent = [a for c in chunks for a in c]
    assert len(chunks) == 4 and len(sent) == 4 and s.to_dispatch(0) == []  # quota (k+1)·P = 4
    s.receive([_group_for(a, [0, 0]) for a in sent[:2]])
    assert s.outstanding == 4 and len(s.inflight) == 2
    assert [g.prompt_id for g in s.next_batch(learner_version=0)] == [a.prompt_id for a in sent[:2]]
    new = [a for c in s.to_dispatch(learner_version=1) for a in c]
    assert len(new) == 2 and all(a.min_version == 1 for a in new)
    # at learner version 2, a group with tokens of version 0 is 2 > k = 1 stale: refused, redone
    s.receive([_group_for(sent[2], [0, 0]), _group_for(sent[3], [1, 1])])
    assert s.next_batch(learner_version=2) is None
    assert s.refused == 1 and [a.prompt_id for a in s.redo] == [sent[2].prompt_id]
    again = [a for c in s.to_dispatch(learner_version=2) for a in c]
    assert again[0].prompt_id == sent[2].prompt_id and again[0].min_version == 2


def test_state_dict_keeps_queued_groups_and_redispatches_unreturned_prompts():
    s = Scheduler(LagPolicy("pipeline-rl", 2, prompts_per_step=2), PromptPool(50, seed=0), chunk=4)
    sent = [a for c in s.to_dispatch(0) for a in c]
    s.receive([_group_for(sent[0], [0, 0])])
    state = s.state_dict()
    fresh = Scheduler(LagPolicy("pipeline-rl", 2, prompts_per_step=2), PromptPool(50, seed=0), chunk=4)
    fresh.load_state_dict(state)
    assert [g.prompt_id for g in fresh.queue.groups()] == [sent[0].prompt_id]
    redo = [a for c in fresh.to_dispatch(learner_version=3) for a in c]
    # the queue is full again with the unreturned prompts: nothing new is drawn
    assert sorted(a.seq for a in redo) == sorted(a.seq for a in sent[1:])
    assert all(a.min_version == 3 for a in redo)
    # groups of prompts dispatched before the crash still match their (re-)assignment
    fresh.receive([_group_for(sent[1], [3, 3])])
    assert len(fresh.queue) == 2
