"""The run's first batch: user code that failed on every sample stops the run (one sentence);
a reward function that declined every sample is said once and training goes on."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.config import ConfigError, load_config
from scalerl.pipeline.reward_notes import check_first_batch, describe_rewards
from scalerl.types import Completion, Group


def _group(rewards, reward_errors=0, part_errors=None) -> Group:
    done = Completion(np.array([1]), np.array([2]), np.zeros(1, np.float32), np.zeros(1, np.int64),
                      np.ones(1, bool), "stop", text="x")
    return Group(0, [done] * len(rewards), np.array(rewards, np.float32), reward_errors=reward_errors,
                 reward_part_errors=part_errors or {})


@pytest.fixture
def cfg(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def score(completion, **fields):\n    pass\n")
    return load_config("scalerl", [f"task.reward_fn={reward}:score"])


def test_a_reward_function_that_declined_every_sample_is_said_once(cfg):
    said = []
    check_first_batch(cfg, [_group([np.nan] * 4), _group([np.nan] * 4)], said.append)
    assert len(said) == 1 and "returned None (cannot be scored) for every sample of the first batch (8 of 8" in said[0]
    assert "ends without `return`" in said[0]
    check_first_batch(cfg, [_group([np.nan] * 4), _group([np.nan, 0.0, 1.0, 0.0])], said.append)
    assert len(said) == 1  # one sample scored: nothing to say


def test_a_reward_function_that_failed_on_every_sample_stops_the_run(cfg):
    with pytest.raises(ConfigError, match=r"failed on every sample of the first batch \(4 of 4"):
        check_first_batch(cfg, [_group([0.0] * 4, reward_errors=4)], print)


@pytest.fixture
def two(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def a(completion, **fields):\n    return 1.0\ndef b(completions, **kw):\n    return []\n")
    return reward, load_config("scalerl", [f"task.reward_fns=[{reward}:a, {reward}:b]"])


def test_a_list_of_reward_functions_whose_groups_carry_no_counts_is_named_whole(two):
    reward, cfg = two
    assert cfg.reward_form == "as_is"  # several user functions: the user's reward
    with pytest.raises(ConfigError, match=rf"task.reward_fns {reward}:a {reward}:b failed on every sample"):
        check_first_batch(cfg, [_group([1.0] * 4, reward_errors=4)], print)


def test_of_several_reward_functions_only_the_one_that_failed_is_named(two):
    reward, cfg = two
    with pytest.raises(ConfigError) as err:
        check_first_batch(cfg, [_group([1.0] * 4, reward_errors=4, part_errors={"a": 0, "b": 4}),
                                _group([1.0] * 4, reward_errors=4, part_errors={"a": 1, "b": 4})], print)
    assert str(err.value).startswith(f"task.reward_fns {reward}:b failed on every sample of the first batch "
                                     "(8 of 8, counted in reward_errors"), err.value
    assert f"{reward}:a" not in str(err.value)


def test_functions_that_failed_on_every_sample_only_between_them_are_named_with_counts(two):
    reward, cfg = two
    with pytest.raises(ConfigError) as err:
        check_first_batch(cfg, [_group([1.0] * 4, reward_errors=4, part_errors={"a": 1, "b": 3})], print)
    assert str(err.value).startswith(f"task.reward_fns {reward}:a (on 1) and {reward}:b (on 3) between them "
                                     "failed on every sample of the first batch (4 of 4"), err.value
    check_first_batch(cfg, [_group([1.0] * 4, reward_errors=3, part_errors={"a": 0, "b": 3})], print)  # one passed


def test_auto_trains_a_users_reward_as_returned_and_a_built_in_task_the_papers_way(cfg):
    assert (cfg.reward_form, cfg.truncation_fails) == ("as_is", False)  # task.reward_fn: the user's reward
    builtin = load_config("scalerl")
    assert (builtin.reward_form, builtin.truncation_fails) == ("pm1", True)  # addition: digest §2.1
    tools = load_config("scalerl-tools")  # this package's own calculator environment
    assert (tools.reward_form, tools.truncation_fails) == ("pm1", True)
    chosen = load_config("scalerl", [f"task.reward_fn={cfg.task.reward_fn}", "task.reward=pm1",
                                     "length.truncation_is_failure=true"])
    assert (chosen.reward_form, chosen.truncation_fails) == ("pm1", True)  # explicit wins
    assert load_config("scalerl", ["task.reward=binary"]).reward_form == "as_is"  # the old name


def test_the_start_line_says_every_transform_and_its_key(cfg):
    line = describe_rewards(cfg)
    assert line.startswith(f"rewards: r, what task.reward_fn {cfg.task.reward_fn} returns, is logged as reward_mean; ")
    assert "the loss trains on r as returned (task.reward=as_is from auto)" in line
    assert "a cut completion keeps its reward (length.truncation_is_failure=false from auto)" in line
    assert line.endswith("a sample passes at r ≥ 1 (task.pass_threshold), and the forecast fits val_pass_rate "
                         "(forecast.metric).")
    paper = describe_rewards(load_config("scalerl", ["forecast.metric=reward_mean"]))
    assert "2r − 1" in paper and "trains as a failure" in paper and "fits val_reward_mean" in paper
    assert paper.startswith("rewards: r, task addition's reward, is logged as reward_mean; ")


def test_the_start_line_reads_as_a_sentence_with_several_functions(two):
    reward, cfg = two
    line = describe_rewards(cfg)
    assert line.startswith(f"rewards: r, the sum of what task.reward_fns {reward}:a, {reward}:b return, is logged "
                           "as reward_mean and each function's as reward/<NAME>; the loss trains on r as returned")
    weighted = load_config("scalerl", [f"task.reward_fns=[{reward}:a, {reward}:b]", "task.reward_weights=[1, 0.2]"])
    assert f"{reward}:b return, weighted by task.reward_weights, is logged" in describe_rewards(weighted)


def test_a_graded_reward_under_the_pass_rate_forecast_is_warned_about_once(cfg):
    said = []
    check_first_batch(cfg, [_group([0.0, 1.0, -1.0, np.nan])], said.append)
    assert said == []  # pass/fail rewards: nothing to say
    check_first_batch(cfg, [_group([0.0, 0.2, 1.0, 1.0])], said.append)
    assert len(said) == 1 and "graded (the first batch has r = 0.2)" in said[0]
    assert "task.pass_threshold" in said[0] and "forecast.metric=reward_mean" in said[0]
    fitted = load_config("scalerl", [f"task.reward_fn={cfg.task.reward_fn}", "forecast.metric=reward_mean"])
    check_first_batch(fitted, [_group([0.0, 0.2, 1.0, 1.0])], said.append)
    assert len(said) == 1  # the mean reward is what is forecast: nothing to warn about
