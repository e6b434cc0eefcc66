"""The run folder's one definition of a run's state (``scalerl.runfolder.run_state``) from an
untrusted ``status.json``: one bad field is one run's sentence, never an error for the list."""

from __future__ import annotations

import json
import os
import time

from scalerl import runfolder as rf


def _stale_run(tmp_path, status: str):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / rf.METRICS).write_text(json.dumps({"step": 0, rf.COMPUTE: 0.0}) + "\n")
    (run / rf.STATUS).write_text(status)
    old = time.time() - 3600.0
    for f in run.iterdir():
        os.utime(f, (old, old))
    return run


def test_a_running_status_whose_time_is_not_a_number_is_paused_with_a_plausible_age(tmp_path):
    """Probe ST-time_str/_null/_list/_nan/_inf: each raised in ``run_state`` and made the list a 500."""
    for t in ('"abc"', "null", "[1]", "NaN", "1e400", "true", "1e12", "-5"):
        run = _stale_run(tmp_path, f'{{"state": "running", "time": {t}, "pid": 999999999}}')
        state = rf.run_state(run)
        assert state.state == "paused", t
        seconds = int(state.detail.split("stopped writing ")[1].split(" s ago")[0])
        assert 3500 <= seconds <= 4000, (t, state.detail)  # the files' age where the time is not plausible


def test_a_running_run_is_running_while_its_process_lives_however_quiet(tmp_path):
    mine = {"state": "running", "time": time.time() - 3600.0, "pid": os.getpid(), "host": os.uname().nodename}
    assert rf.run_state(_stale_run(tmp_path, json.dumps(mine))).state == "running"
    other_host = mine | {"host": "elsewhere"}  # a pid there says nothing here
    assert rf.run_state(_stale_run(tmp_path, json.dumps(other_host))).state == "paused"
