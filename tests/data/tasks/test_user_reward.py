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


def test_a_failure_is_shown_once_per_run_across_its_processes(tmp_path, capsys):
    # reliability probe 3: "only this first failure is shown" came once from the generator and
    # once from the driver's evaluation; each process's task is its own, as here
    import os
    import subprocess
    import sys

    path = tmp_path / "reward.py"
    path.write_text("def score(completion, **fields):\n    raise ValueError('boom')\n")
    spec = TaskSpec("addition", {"min_digits": 1, "max_digits": 1}, (f"{path}:score",), reward_timeout_s=5.0)
    with user_code.shown_once_per_run():
        generator, evaluator = spec.build(), spec.build()
        for task in (generator, evaluator):
            assert task.reward("x", task.train_example(0)) == 0.0
        child = subprocess.run([sys.executable, "-c", "from scalerl.user_code import first_in_run as f\n"
                                f"print(f({f'task.reward_fns {path}:score'!r}), f('another'))"],
                               env=os.environ, capture_output=True, text=True, check=True)
        assert child.stdout.split() == ["False", "True"]  # a spawned process sees the same run
    assert generator.reward_errors == evaluator.reward_errors == 1
    assert capsys.readouterr().err.count("only this first failure is shown") == 1
    assert user_code.SHOWN_ENV not in os.environ  # the run's folder is gone with it
    outside = spec.build()  # outside a run (a notebook, a test) each task says its own, as before
    outside.reward("x", outside.train_example(0))
    assert capsys.readouterr().err.count("only this first failure is shown") == 1
