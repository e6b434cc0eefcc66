"""The run's first batch: user code that failed on every sample stops the run (one sentence);
a reward function that declined every sample is said once and training goes on."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.config import ConfigError, load_config
from scalerl.pipeline.run import check_first_batch
from scalerl.types import Completion, Group


def _group(rewards, reward_errors=0) -> Group:
    done = Completion(np.array([1]), np.array([2]), np.zeros(1, np.float32), np.zeros(1, np.int64),
                      np.ones(1, bool), "stop", text="x")
    return Group(0, [done] * len(rewards), np.array(rewards, np.float32), reward_errors=reward_errors)


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


def test_a_list_of_reward_functions_that_failed_on_every_sample_is_named(tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text("def a(completion, **fields):\n    return 1.0\ndef b(completions, **kw):\n    return []\n")
    cfg = load_config("scalerl", [f"task.reward_fns=[{reward}:a, {reward}:b]"])
    with pytest.raises(ConfigError, match=rf"task.reward_fns {reward}:a {reward}:b failed on every sample"):
        check_first_batch(cfg, [_group([1.0] * 4, reward_errors=4)], print)
