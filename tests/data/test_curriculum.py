"""PromptPool: epochs, no-positive resampling at the threshold, history rules, resumption."""

import json

import pytest

from scalerl.data.curriculum import PoolExhausted, PromptPool


def test_each_epoch_is_a_seeded_permutation_and_sampling_crosses_epochs():
    pool = PromptPool(5, seed=3)
    first = pool.sample(3)
    assert (pool.epoch, pool.position) == (0, 3)
    rest = pool.sample(4)  # 2 from epoch 0, then 2 from epoch 1
    assert (pool.epoch, pool.position) == (1, 2)
    assert sorted(first + rest[:2]) == [0, 1, 2, 3, 4]
    more = pool.sample(3)
    assert sorted(rest[2:] + more) == [0, 1, 2, 3, 4]
    assert PromptPool(5, seed=3).sample(10) == first + rest + more
    assert PromptPool(5, seed=4).sample(10) != first + rest + more


def test_small_pool_serves_prompts_repeatedly_in_one_call():
    pool = PromptPool(2, seed=0)
    ids = pool.sample(5)
    assert len(ids) == 5 and pool.epoch == 2
    assert sorted(ids[:2]) == [0, 1] and sorted(ids[2:4]) == [0, 1]


def test_retires_at_threshold_but_not_below():
    pool = PromptPool(4, seed=0, retire_threshold=0.9)
    pool.sample(4)
    pool.record(0, 0.9)  # >= 0.9: retired
    pool.record(1, 0.89)  # below: stays
    assert pool.is_retired(0) and not pool.is_retired(1)
    assert (pool.retired, pool.live_size) == (1, 3)
    later = pool.sample(9)  # three later epochs
    assert 0 not in later and sorted(later) == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_uniform_baseline_never_retires():
    pool = PromptPool(3, seed=0, retire_threshold=None)
    for pid in pool.sample(3):
        pool.record(pid, 1.0)
    assert pool.retired == 0 and pool.live_size == 3
    assert sorted(pool.sample(3)) == [0, 1, 2]
    assert pool.pass_rate(0) == 1.0


def test_history_last_versus_mean():
    last = PromptPool(2, history="last")
    mean = PromptPool(2, history="mean")
    for pool in (last, mean):
        pool.record(0, 0.5)
        pool.record(0, 0.95)
    # last: 0.95 >= 0.9 -> retired; mean: (0.5 + 0.95) / 2 = 0.725 -> stays
    assert last.pass_rate(0) == 0.95 and last.is_retired(0)
    assert mean.pass_rate(0) == pytest.approx(0.725) and not mean.is_retired(0)
    mean.record(0, 1.0)
    mean.record(0, 1.0)  # (0.5 + 0.95 + 1 + 1) / 4 = 0.8625
    assert not mean.is_retired(0)
    mean.record(0, 1.0)  # 4.45 / 5 = 0.89
    assert not mean.is_retired(0)
    mean.record(0, 1.0)  # 5.45 / 6 = 0.9083
    assert mean.is_retired(0)
    assert last.pass_rate(1) is None


def test_prompt_retired_after_the_next_epoch_was_drawn_is_skipped():
    pool = PromptPool(4, seed=1)
    pool.sample(4)
    head = pool.sample(1)  # draws epoch 1's order
    upcoming = [int(i) for i in pool.state_dict()["order"][1:]]
    pool.record(upcoming[0], 1.0)  # its record arrives late (PipelineRL)
    tail = pool.sample(2)
    assert tail == upcoming[1:]
    assert upcoming[0] not in head + tail + pool.sample(3)


def test_all_retired_raises_a_clear_error():
    pool = PromptPool(2, seed=0)
    for pid in pool.sample(2):
        pool.record(pid, 1.0)
    with pytest.raises(PoolExhausted, match="all 2 prompts are retired"):
        pool.sample(1)


def _drive(pool, steps, batch=3):
    """Sample batches and record a deterministic pass rate per visit, as a trainer would."""
    seen = []
    for step in range(steps):
        ids = pool.sample(batch)
        seen.append(ids)
        for pid in ids:
            pool.record(pid, ((pid * 7 + step) % 11) / 10)  # in [0, 1], sometimes >= 0.9
    return seen


@pytest.mark.parametrize("history", ["last", "mean"])
def test_state_round_trip_reproduces_the_future_sequence(history):
    pool = PromptPool(10, seed=5, history=history)
    _drive(pool, 4)  # crosses an epoch boundary and retires some prompts
    assert pool.epoch >= 1 and pool.retired > 0
    state = json.loads(json.dumps(pool.state_dict()))  # must be JSON-serialisable
    resumed = PromptPool(10, seed=5, history=history)
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.position, resumed.retired) == (
        pool.epoch,
        pool.position,
        pool.retired,
    )
    assert _drive(resumed, 6) == _drive(pool, 6)


def test_loading_state_into_a_different_pool_names_the_field():
    state = PromptPool(10, seed=5).state_dict()
    with pytest.raises(ValueError, match="field 'seed' is 5 but this pool has 6"):
        PromptPool(10, seed=6).load_state_dict(state)


def test_bad_arguments():
    with pytest.raises(ValueError, match="retire_threshold"):
        PromptPool(3, retire_threshold=1.5)
    with pytest.raises(ValueError, match="valid rules are: last, mean"):
        PromptPool(3, history="ema")
    pool = PromptPool(3)
    with pytest.raises(ValueError, match="outside the pool of 3"):
        pool.record(3, 0.5)
    with pytest.raises(ValueError, match="pass_rate must be in"):
        pool.record(0, 1.5)
