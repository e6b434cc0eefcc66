"""``task.reward_fns`` / ``task.reward_weights``: checked at load like ``task.reward_fn``, one
sentence when they disagree, carried to every process in the task spec."""

from __future__ import annotations

import pytest

from scalerl.config import ConfigError, load_config
from scalerl.config.runtime import task_spec


@pytest.fixture
def fns(tmp_path):
    path = tmp_path / "fns.py"
    path.write_text("def trl(prompts, completions, **kw):\n    return [1.0] * len(completions)\n"
                    "def one(completion, **fields):\n    return 1.0\n"
                    "def neither(text):\n    return 1.0\n")
    return path


def test_several_functions_and_their_weights_reach_the_spec(fns):
    cfg = load_config("scalerl", [f"task.reward_fns=[{fns}:trl, {fns}:one]", "task.reward_weights=[0.5, 2]"])
    spec = task_spec(cfg)
    assert spec.reward_fns == (f"{fns}:trl", f"{fns}:one") and spec.reward_weights == (0.5, 2.0)
    assert [f.batch for f in spec.build().functions] == [True, False]


def test_one_reward_fn_is_the_one_function_case(fns):
    cfg = load_config("scalerl", [f"task.reward_fn={fns}:trl"])
    assert cfg.task.reward_specs == (f"{fns}:trl",) and task_spec(cfg).reward_weights is None
    assert load_config("scalerl", []).task.reward_specs == ()


@pytest.mark.parametrize("sets, needle", [
    (["task.reward_fn={fns}:one", "task.reward_fns=[{fns}:trl]"], "not both"),
    (["task.reward_fns=[{fns}:trl, {fns}:one]", "task.reward_weights=[1]"],
     "task.reward_weights has 1 weights for 2 task.reward_fns"),
    (["task.reward_fns=[{fns}:trl, {fns}:neither]"], "takes no 'completion' parameter"),
    (["task.reward_fns=[{fns}:trl]", "task.reward_weights=[.nan]"], "task.reward_weights"),
])
def test_disagreeing_reward_fields_are_one_sentence(fns, sets, needle):
    with pytest.raises(ConfigError) as err:
        load_config("scalerl", [s.format(fns=fns) for s in sets])
    assert needle in str(err.value) and "\n" not in str(err.value), err.value
