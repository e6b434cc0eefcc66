"""Wire types: a group pickled before the typed fields (a checkpoint's) still loads."""

from __future__ import annotations

import pickle

import numpy as np

from scalerl.types import Group


def test_a_group_pickled_with_the_old_meta_dict_unpickles_into_the_typed_fields():
    old = Group(3, [], np.zeros(2, dtype=np.float32))
    del old.__dict__["seq"], old.__dict__["reward_errors"], old.__dict__["env_errors"]
    del old.__dict__["start_version"], old.__dict__["times"]
    old.__dict__["meta"] = {"seq": 7, "reward_errors": 1, "gen_cpu_s": 0.5, "gen_idle_s": 0.25, "sent_at": 10.0}
    new = pickle.loads(pickle.dumps(old))
    assert (new.seq, new.reward_errors, new.env_errors, new.start_version) == (7, 1, 0, -1)
    assert (new.times.cpu_s, new.times.idle_s, new.times.sent_at, new.times.received_at) == (0.5, 0.25, 10.0, None)
    assert not hasattr(new, "meta") and new.prompt_id == 3
    fresh = pickle.loads(pickle.dumps(Group(1, [], np.ones(1, dtype=np.float32), seq=4)))
    assert fresh.seq == 4 and fresh.times.cpu_s == 0.0


def test_a_group_pickled_before_reward_parts_unpickles_with_none():
    old = Group(2, [], np.zeros(2, dtype=np.float32), reward_parts={"f": np.ones(2, dtype=np.float32)})
    assert pickle.loads(pickle.dumps(old)).reward_parts["f"].tolist() == [1.0, 1.0]
    del old.__dict__["reward_parts"]
    assert pickle.loads(pickle.dumps(old)).reward_parts == {}


def test_a_group_pickled_before_reward_part_errors_unpickles_with_none():
    old = Group(2, [], np.zeros(2, dtype=np.float32), reward_part_errors={"f": 1})
    assert pickle.loads(pickle.dumps(old)).reward_part_errors == {"f": 1}
    del old.__dict__["reward_part_errors"]
    assert pickle.loads(pickle.dumps(old)).reward_part_errors == {}
