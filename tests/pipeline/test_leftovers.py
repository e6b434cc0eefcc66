"""Processes user code leaves running are stopped when the run ends (reliability probe 3,
R16/R17): the run's new children and the orphans that come to the driver, never a process
that was there before the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from scalerl.pipeline.leftovers import stopped_at_end

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_what_the_run_left_running_is_stopped_and_what_was_there_before_is_not():
    before = subprocess.Popen(["sleep", "300"])  # a test's helper, started before the run
    lines: list[str] = []
    try:
        with stopped_at_end(lines.append):
            child = subprocess.Popen(["sleep", "300"])  # a reward function's Popen, never waited for
            # a child that starts a grandchild and exits: the orphan comes to this process
            shell = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                   text=True, check=True)
            orphan = int(shell.stdout)
            assert _alive(child.pid) and _alive(orphan)
        assert not _alive(child.pid) and not _alive(orphan)
        assert _alive(before.pid)
        assert len(lines) == 1 and lines[0].startswith("stopped 2 processes that user code")
    finally:
        before.kill()
        before.wait()


def test_a_run_that_leaves_nothing_says_nothing():
    lines: list[str] = []
    with stopped_at_end(lines.append):
        subprocess.run(["true"], check=True)
    assert lines == []


def test_a_forked_child_returning_into_a_user_code_worker_ends_there():
    # R16: the child of a reward function that forks keeps only the worker thread, returned into
    # its loop and waited for jobs forever
    from scalerl.user_code import UserCalls

    pid = UserCalls("task.reward_fn test", 30.0, "task.reward_timeout_s").call(os.fork)
    assert pid > 0  # the parent's result; the child got 0 and ended in the worker
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child never ended")
    assert os.waitstatus_to_exitcode(status) == 0
