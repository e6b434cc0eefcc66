"""Run folders written as ``scalerl train`` writes them, for the serve tests."""

from __future__ import annotations

import json
import math
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
