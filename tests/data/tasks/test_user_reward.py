"""A user's reward function under its time limit: a hung call, ``SystemExit``,
``KeyboardInterrupt`` and a reward beyond float32 each score 0, counted in
``reward_errors`` and said once; the run goes on."""

from __future__ import annotations

import threading

import pytest

from scalerl import user_code
from scalerl.data.tasks.spec import TaskSpec

REWARDS = '''
import sys, threading
import test_user_reward_release as release

def score(completion, **fields):
    if completion == "hang":
        release.EVENT.wait()
    if completion == "exit":
        sys.exit(0)
    if completion == "interrupt":
        raise KeyboardInterrupt
    if completion == "huge":
        return 1e300
    return 1.0
'''


@pytest.fixture
def task(tmp_path, monkeypatch):
    import sys
    import types

    module = types.ModuleType("test_user_reward_release")
    module.EVENT = release = threading.Event()  # what the hung reward waits for; set at the end
    monkeypatch.setitem(sys.modules, "test_user_reward_release", module)
    path = tmp_path / "reward.py"
    path.write_text(REWARDS)
    yield TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:score",), reward_timeout_s=0.2).build()
    release.set()


@pytest.mark.parametrize("completion", ["exit", "interrupt", "huge", "hang"])
def test_a_bad_call_scores_zero_and_is_counted(task, completion, capsys):
    before = user_code.stuck()
    example = task.train_example(0)
    assert task.reward(completion, example) == 0.0
    assert task.reward("ok", example) == 1.0  # the next sample is scored as usual
    assert task.reward(completion, example) == 0.0
    assert task.reward_errors == 2
    err = capsys.readouterr().err
    assert err.count("failed on a sample") == 1  # said once
    expected = {"exit": "SystemExit", "interrupt": "KeyboardInterrupt", "huge": "beyond the",
                "hang": "time limit of 0.2 s (task.reward_timeout_s)"}[completion]
    assert expected in err
    if completion == "hang":
        assert user_code.stuck() == before + 2
