"""The PipelineRL-k throughput model against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from scalerl.fit.errors import CurveError
from scalerl.fit.time.throughput import (
    RoleTimes,
    expected_max,
    predict,
    recommend,
    role_times,
    splits,
)

# 6 generator-seconds and 4 learner-device-seconds a step, 0.5 s sync, 0.5 s evaluation
TIMES = RoleTimes(gen_device_s=6.0, learner_device_s=4.0, sync_s=0.5, eval_s=0.5, generators=2,
                  learner_devices=2, k=4, gen_tokens=600.0, train_tokens=400.0)


def test_generation_bound_split_steps_at_the_generators_pace_with_lag_one():
    # T_G = 6/2 = 3 s; T_L = 4/2 + 0.5 + 0.5 = 3 s: a tie is generation-bound, 1200 steps/h
    s = predict(TIMES, 2, 2, 4)
    assert s.step_s == pytest.approx(3.0)
    assert s.steps_per_hour == pytest.approx(1200.0)
    assert s.bottleneck == "generation" and s.staleness == {1: 1.0}
    # 3 + 1: T_G = 2 s, T_L = 4 + 1 = 5 s: learner-bound, every batch waits to lag k
    s = predict(TIMES, 3, 1, 4)
    assert s.step_s == pytest.approx(5.0) and s.bottleneck == "learner"
    assert s.staleness == {4: 1.0} and s.mean_staleness == pytest.approx(4.0)


def test_on_policy_alternates_and_a_near_balance_mixes_lags():
    s = predict(TIMES, 2, 2, 0)  # k = 0: 3 + 3 s one after the other
    assert s.step_s == pytest.approx(6.0) and s.staleness == {0: 1.0}
    # 4 generators + 4 learner devices: T_G = 1.5, T_L = 1 + 1 = 2
    # rho = 0.75 = 1 - 1/k: the share at lag k reaches 1; at rho = 0.875 it is (1 - 0.875) * 4 = 0.5
    assert predict(TIMES, 4, 4, 4).staleness == {4: 1.0}
    near = RoleTimes(7.0, 4.0, 0.5, 0.5, 4, 4, 4)  # T_G = 1.75, T_L = 2: rho = 0.875
    assert predict(near, 4, 4, 4).staleness == pytest.approx({1: 0.5, 4: 0.5})


def test_lag_one_waits_for_the_slower_role_every_step():
    # k = 1 on the 2 + 2 split: T_G = 3 s (sd 2/2 = 1), T_L = 2 + 1 = 3 s (sd 1.2/2 = 0.6):
    # E[max] of two balanced normals is the mean + theta * phi(0), theta = sqrt(1 + 0.36)
    jittery = RoleTimes(6.0, 4.0, 0.5, 0.5, 2, 2, 1, gen_device_sd=2.0, learner_device_sd=1.2)
    theta = (1.0 + 0.36) ** 0.5
    assert predict(jittery, 2, 2, 1).step_s == pytest.approx(3.0 + theta * 0.3989423, rel=1e-6)
    assert predict(jittery, 2, 2, 2).step_s == pytest.approx(3.0)  # a queue of 2 absorbs it
    assert predict(TIMES, 2, 2, 1).step_s == pytest.approx(3.0)  # no spread: the max of the means
    # far from balance the slower role's mean is the answer: 10 vs 1 with sds 0.1
    assert expected_max(10.0, 0.1, 1.0, 0.1) == pytest.approx(10.0, abs=1e-9)
    # Clark's formula against a direct average over a grid: N(1, 1) vs N(1.5, 0.5)
    a = np.linspace(-8, 8, 2001)
    grid_a, grid_b = np.meshgrid(1.0 + a, 1.5 + 0.5 * a)
    w = np.outer(stats.norm.pdf(a), stats.norm.pdf(a))
    assert expected_max(1.0, 1.0, 1.5, 0.5) == pytest.approx(float((np.maximum(grid_a, grid_b) * w).sum() / w.sum()),
                                                             rel=1e-4)
    options = splits(jittery, k=1)  # with spread, k = 1 no longer ties with a deeper queue
    assert all(s.step_s > predict(jittery, s.generators, s.learner_devices, 2).step_s for s in options)


def test_the_recommended_split_has_the_most_steps_per_hour():
    options = splits(TIMES)  # 4 devices: 1+3 (T_G 6), 2+2 (3), 3+1 (max(2, 5) = 5)
    assert [s.step_s for s in options] == pytest.approx([6.0, 3.0, 5.0])
    assert (recommend(options).generators, recommend(options).learner_devices) == (2, 2)
    # 8 devices: 3+5 gives max(2, 0.8 + 1) = 2 s at lag 1, 4+4 max(1.5, 2) = 2 s at lag 4 (learner-
    # bound): the tie goes to the fresher samples; 5+3 is max(1.2, 2.33)
    more = splits(TIMES, devices=8)
    assert [round(s.step_s, 3) for s in more[2:5]] == [2.0, 2.0, 2.333]
    best = recommend(more)
    assert (best.generators, best.step_s, best.staleness) == (3, pytest.approx(2.0), {1: 1.0})
    assert TIMES.gen_tokens_per_s == pytest.approx(100.0)  # 600 tokens over 6 generator-seconds
    assert TIMES.learner_tokens_per_s == pytest.approx(100.0)
    with pytest.raises(CurveError, match="at least 2 devices"):
        splits(TIMES, devices=1)


@pytest.mark.parametrize("gen, trained", [("total_gen_tokens", "total_trained_tokens"),
                                          ("gen_tokens", "train_tokens")])  # names before issue 29
def test_role_times_are_read_from_step_records(gen, trained):
    recs = [{"step": 0, "wall_s": 0.0, gen: 0, trained: 0, "learner_eval_s": 1.0}]
    for step in range(1, 9):  # 10 s a step on 2 generators, 4 s of them waiting: 16 busy generator-s
        recs.append({"step": step, "wall_s": 10.0 * step, gen: 160 * step, trained: 50 * step,
                     "learner_busy_s": 3.0, "publish_s": 1.0, "generator_stall_s": 1.0, "generator_idle_s": 3.0,
                     "staleness_hist": {"1": 3, "2": 1}, "learner_eval_s": 2.0 if step == 8 else None})
    t = role_times(recs, generators=2, learner_devices=1, k=2, source="log")
    assert t.gen_device_s == pytest.approx(16.0) and t.learner_device_s == pytest.approx(3.0)
    assert t.sync_s == pytest.approx(1.0) and t.eval_s == pytest.approx(2.0 / 4)  # recent half: steps 5-8
    assert t.measured_step_s == pytest.approx(10.0) and t.measured_staleness == {1: 0.75, 2: 0.25}
    assert t.gen_device_sd == 0.0 and t.learner_device_sd == 0.0  # every step alike
    assert t.gen_tokens_per_s == pytest.approx(10.0)  # 160 tokens over 16 generator-seconds
    assert t.learner_tokens_per_s == pytest.approx(50.0 / 3.0)
    assert predict(t, 2, 1, 2).step_s == pytest.approx(8.0)  # generation-bound: 16 / 2
    with pytest.raises(CurveError, match="at least 2"):
        role_times(recs[:2], generators=2, learner_devices=1, k=2, source="log")
