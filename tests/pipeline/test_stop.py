"""Graceful stops: SIGTERM and SIGINT end a run with a checkpoint of its last completed step,
one sentence and exit code 143 / 130; a resume from it loses and repeats no step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from pipeline_helpers import run_overrides
from test_resume import _all_gone, _children, _last_step, _wait_until

from scalerl.checkpoint import load_checkpoint
from scalerl.pipeline import stop
from scalerl.pipeline.stop import Stopped, Stopping, on_signals
from scalerl.runfolder import read_records

STEPS = 6


class _Exit(Exception):
    pass


def test_a_signal_before_the_loop_stops_at_once_and_after_it_at_the_end_of_the_step(tmp_path):
    early = Stopping(tmp_path, resumable=False)
    with pytest.raises(Stopped, match="stopped by SIGINT before training began; nothing was trained") as err:
        early.handle(signal.SIGINT)
    assert err.value.code == 130
    armed = Stopping(tmp_path, resumable=True)
    armed.arm()
    armed.handle(signal.SIGTERM)  # only a request: the loop ends the step
    assert armed.requested and armed.name == "SIGTERM"
    stopped = armed.stopped(7)
    assert stopped.code == 143 and str(stopped) == (
        f"stopped by SIGTERM at step 7; checkpoint written to {tmp_path / 'checkpoint'}; "
        f"resume with `scalerl train --resume {tmp_path}`.")


def test_a_second_signal_exits_at_once(tmp_path, monkeypatch):
    def fake_exit(code):
        raise _Exit(code)

    monkeypatch.setattr(stop.os, "_exit", fake_exit)
    stopping = Stopping(tmp_path, resumable=True)
    stopping.arm()
    stopping.handle(signal.SIGINT)
    with pytest.raises(_Exit) as err:
        stopping.handle(signal.SIGINT)
    assert err.value.args == (130,)


def test_handlers_are_installed_for_the_run_and_restored_after(tmp_path):
    before = {s: signal.getsignal(s) for s in stop.SIGNALS}
    with on_signals(tmp_path, resumable=False) as stopping:
        assert all(signal.getsignal(s) == stopping.handle for s in stop.SIGNALS)
    assert {s: signal.getsignal(s) for s in stop.SIGNALS} == before
    with stop.children_ignore_stop_signals():
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM))
    assert {s: signal.getsignal(s) for s in stop.SIGNALS} == before


def _train(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # a session of its own: the SIGINT test signals the whole group, as Ctrl-C does
    return subprocess.Popen([sys.executable, "-m", "scalerl.cli", "train", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_checkpoints_the_last_step_and_the_resume_loses_none(warm_model_dir, tmp_path, signum):
    """SIGTERM (a scheduler such as Slurm) or SIGINT (Ctrl-C) to the whole group, generators
    included, sent once the log shows step 2 (an observed event, not a sleep):
    exit 143 / 130, one sentence, no traceback from any process, the checkpoint at the step
    the log ends on; the resume (after SIGTERM, to keep the suite short) logs every step once."""
    run = tmp_path / "run"
    overrides = run_overrides(warm_model_dir, **{
        "pipeline.backend": "local", "train.steps": STEPS, "train.checkpoint_every": 100,
        "eval.every": 3, "eval.schedule": "every", "eval.num_prompts": 3, "eval.k": 2, "pipeline.prompts_per_step": 4,
        "pipeline.generations": 4, "log.tensorboard": "true"})
    proc = _train(["--recipe", "scalerl", *[a for o in overrides for a in ("--set", o)], "--out", str(run), "--no-fit"])
    _wait_until(lambda: _last_step(run) >= 2, proc, "step 2")
    generators = _children(proc.pid)
    os.killpg(proc.pid, signum)  # every process of the job, as Ctrl-C and a Slurm scheduler signal
    code = proc.wait(timeout=600)  # a hang bound, not a speed one
    err = proc.stderr.read()
    if code == 0:
        pytest.skip(f"the run finished all {STEPS} steps before the signal: nothing to resume")
    assert code == 128 + signum, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "leaked" not in err, err
    state, meta = load_checkpoint(run)
    step = meta["step"]
    lines = [line for line in err.splitlines() if line.startswith("scalerl train: stopped")]
    assert lines == [f"scalerl train: stopped by {signal.Signals(signum).name} at step {step}; checkpoint "
                     f"written to {run / 'checkpoint'}; resume with `scalerl train --resume {run}`."], err
    assert 2 <= step < STEPS and state["learner"]["version"] == step
    assert meta["logged_through"] == step == _last_step(run)  # the log and the checkpoint agree
    assert _all_gone(generators), "generators outlived the stopped run"
    if signum == signal.SIGINT:
        return  # resuming is the same after either signal (the SIGTERM case does it)
    resumed = _train(["--resume", str(run), "--no-fit"])
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    assert [r["step"] for r in read_records(run / "metrics.jsonl")] == list(range(STEPS + 1))
    assert load_checkpoint(run)[1]["step"] == STEPS
