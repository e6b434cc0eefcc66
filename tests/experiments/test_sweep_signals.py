"""SIGTERM to a running sweep: every point stops with its checkpoint, no training process
outlives the sweep, and the sweep ends with one line, the resume command and exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.serial  # two training processes at once


def _children(pid: int) -> list[int]:
    """Every process whose parent chain reaches ``pid`` (their sessions differ from the sweep's)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out += [int(entry), *_children(int(entry))]
    return out


def test_sigterm_stops_every_point_with_one_line_and_leaves_no_process(tmp_path, warm_model_dir):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"recipes: [scalerl]\nseeds: [0]\nparallel: 2\nset:\n  model.base: {warm_model_dir}\n"
                    "  train.steps: 400\n  pipeline.backend: inprocess\n  eval.every: 1000\n  eval.schedule: every\n  log.progress: false\n"
                    "  log.tensorboard: false\n  train.max_minutes: null\naxes:\n  lr: [1.0e-4, 2.0e-4]\n")  # fmt: skip
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "scalerl", "sweep", str(spec), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 600
    logs = [out / "scalerl" / f"lr={lr}" / "seed0" / "metrics.jsonl" for lr in ("0.0001", "0.0002")]
    while not all(p.is_file() and p.stat().st_size for p in logs) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)  # both points are training: they have written records
    points = _children(proc.pid)
    assert points
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 143, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("scalerl sweep: stopped by SIGTERM;") and f"--out {out}" in last, stderr
    assert "Traceback" not in stderr
    time.sleep(1)
    alive = [p for p in points if os.path.exists(f"/proc/{p}") and "zombie" not in open(f"/proc/{p}/status").read()
             .lower()]  # fmt: skip
    assert alive == []  # no training process outlives the sweep
    for log in logs:  # each point stopped at a step boundary with its checkpoint
        assert (log.parent / "checkpoint").is_dir(), log
