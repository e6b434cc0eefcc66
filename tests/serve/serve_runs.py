"""Run folders written as ``scalerl train`` writes them, for the serve tests; ``live_server``
runs the app on a free local port for the tests that need a real socket (a browser, a crowd)."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
from pathlib import Path

import yaml


def write_run(run: Path, *, steps: int = 60, upto: int | None = None, target: float | None = 0.6, every: int = 5,
              extra_last: dict | None = None, flat: float | None = None) -> Path:
    """A run of ``steps`` (records up to ``upto``) whose validation follows Eq. 1 with a little
    noise (or stays at ``flat`` exactly)."""
    run.mkdir(parents=True, exist_ok=True)
    cfg = {"name": "scalerl", "train": {"steps": steps, "max_compute": None}, "forecast": {"target": target}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "plan.json").write_text(json.dumps({"plan": {"backend": "local", "generators": 1}, "ran": {}}))
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(0, (upto if upto is not None else steps) + 1):
            c = 0.001 * (step + 1)
            rec = {"step": step, "compute_gpu_hours": c, "wall_s": 1.8 * step, "reward_mean": 0.2 + 0.004 * step,
                   "reward_correctness": 0.1 + 0.004 * step, "entropy": 0.5 - 0.003 * step}  # fmt: skip
            if step % every == 0:
                rec["val_pass_rate"] = (0.1 + 0.6 / (1 + (0.02 / c) ** 1.5) + 0.01 * math.sin(3 * step)
                                        if flat is None else flat)
            f.write(json.dumps(rec) + "\n")
        if extra_last:
            f.write(json.dumps({"step": upto if upto is not None else steps, **extra_last}) + "\n")
    with (run / "samples.jsonl").open("w") as f:
        for i, (p, c) in enumerate((("add 1+2 =", "<think></think> 3"), ("add 40+2 =", "<think></think> 41"))):
            f.write(json.dumps({"step": 5 * i, "prompt": p, "completion": c, "reward": 1.0 - i, "finish_reason": "stop"}) + "\n")
    return run


@contextlib.contextmanager
def live_server(roots, start_s: float = 60.0):
    """``scalerl serve``'s app over ``roots`` in a uvicorn thread: yields its URL, and stops it
    (asserting its thread ended) on the way out. Every wait is a bound, never a time asserted."""
    import uvicorn

    from scalerl.serve.app import build_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(build_app(list(roots)), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
    assert not thread.is_alive()
