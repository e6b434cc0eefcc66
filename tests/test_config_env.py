"""The ``env`` section: unset is single-turn; a set one loads its class at config load."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalerl.config import ConfigError, load_config
from scalerl.config.runtime import env_spec
from scalerl.rollout.env import EnvSpec

ENVS = Path(__file__).parent / "rollout" / "envs.py"


def test_unset_env_is_single_turn():
    assert env_spec(load_config("scalerl")) is None


def test_a_relative_env_file_is_made_absolute_for_every_process(monkeypatch):
    monkeypatch.chdir(ENVS.parent)
    cfg = load_config("scalerl", ["env.name=envs.py:Scripted", "env.knobs={turns: 2}", "env.reward=last",
                                  "env.stop_strings=['</calc>']"])
    spec = env_spec(cfg)
    assert spec == EnvSpec(f"{ENVS}:Scripted", {"turns": 2}, 4, 256, "last", "tool", ("</calc>",), 60.0, 100_000)
    assert spec.build().turns == 2


@pytest.mark.parametrize("name, words", [("NoStep", "has no step() method"), ("Nope", "there is no 'Nope'")])
def test_a_bad_environment_is_one_sentence_at_load(name, words):
    with pytest.raises(ConfigError, match="env.name") as err:
        load_config("scalerl", [f"env.name={ENVS}:{name}"])
    assert words in str(err.value) and "\n" not in str(err.value)
