"""How fast is ``scalerl serve`` on a big folder? This code and an earlier one, side by side.

    PYTHONPATH=src .venv/bin/python bench/serve.py [--runs 50] [--evals 2000] [--repeats 3]
        [--baseline-src /path/to/an/older/checkout/src]

Writes ``--runs`` run folders of ``--evals`` evaluations each (one record a step, as
``scalerl train`` writes them with ``eval.every=1``: a validation that follows Eq. 1 with noise,
and the training fields), then, for each version of the code (this checkout's ``src``, and
``--baseline-src`` where given, each in its own process), times through Starlette's test
client (the app's own work, no network), nothing cached at the start of each repeat:

* **first load**: what the runs list and a run's page fetch: ``/``, ``/api/runs`` (and
  ``/api/overview`` where the version has it), ``/run/ID`` and ``/api/run/ID``;
* **update**: once the page's forecast is made (untimed), one new evaluation appended to that
  run's log, then what the pages poll: ``/api/run/ID`` and ``/api/runs``;
* **during a fit**: right after a second update, while that run's forecast is being remade,
  the runs list (``/api/runs``): how long it waits.

Medians of ``--repeats``. The machine's parallel scaling first (the app's work is one thread;
a forecast runs beside it in another).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write_run(run: Path, evals: int) -> None:
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"name: scalerl\ntrain: {{steps: {evals}}}\nforecast: {{target: 0.6}}\n")
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(evals):
            f.write(json.dumps(_record(step)) + "\n")


def _record(step: int) -> dict:
    c = 0.001 * (step + 1)
    return {"step": step, "compute_gpu_hours": c, "wall_s": 3.6 * step, "reward_mean": 0.3, "entropy": 0.4,
            "loss": 0.01, "val_pass_rate": 0.1 + 0.6 / (1 + (0.3 / c) ** 1.5) + 0.01 * math.sin(step)}  # fmt: skip


def measure(root: Path, evals: int, repeats: int) -> dict:
    """The worker: this process's ``scalerl`` (whichever ``src`` its path holds) over ``root``."""
    from starlette.testclient import TestClient

    from scalerl.serve import app as app_module
    from scalerl.serve import runs as data

    first, update, during = [], [], []
    for r in range(repeats):
        if hasattr(data, "shutdown"):
            data.shutdown()  # an earlier version kept its caches in the module
        with TestClient(app_module.build_app([root])) as client:
            t = time.perf_counter()
            assert client.get("/").status_code == 200
            ids = [x["id"] for x in client.get("/api/runs").json()["runs"]]
            rid = next(i for i in ids if i.endswith("run00"))
            if client.get("/api/overview").status_code == 200:
                pass  # the runs list's chart, where this version has one
            for url in (f"/run/{rid}", f"/api/run/{rid}"):
                assert client.get(url).status_code == 200
            first.append(time.perf_counter() - t)
            settle = time.monotonic() + 120  # untimed: the page's forecast made, as a user's next poll sees it
            while "error" in client.get(f"/api/run/{rid}").json().get("band", {}) and time.monotonic() < settle:
                time.sleep(0.1)
            with (root / "run00" / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(_record(evals + 2 * r)) + "\n")
            t = time.perf_counter()
            for url in (f"/api/run/{rid}", "/api/runs"):
                assert client.get(url).status_code == 200
            update.append(time.perf_counter() - t)
            with (root / "run00" / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(_record(evals + 2 * r + 1)) + "\n")
            client.get(f"/api/run/{rid}")  # its forecast is remade now
            t = time.perf_counter()
            assert client.get("/api/runs").status_code == 200
            during.append(time.perf_counter() - t)
    return {"first": statistics.median(first), "update": statistics.median(update), "during": statistics.median(during)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--evals", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-src", type=Path, help="an older checkout's src, measured the same way beside this one")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.evals, args.repeats)))
        return 0
    sys.path.insert(0, str(HERE))
    from forecast_real import _scaling

    print(_scaling())
    print(f"load average at start {os.getloadavg()[0]:.2f}")
    versions = {"this checkout": HERE.parent / "src"}
    if args.baseline_src is not None:
        versions["baseline"] = args.baseline_src.resolve()
    out = {}
    for name, src in versions.items():
        with tempfile.TemporaryDirectory(prefix="scalerl-serve-") as scratch:
            root = Path(scratch)
            for i in range(args.runs):
                write_run(root / f"run{i:02d}", args.evals)
            env = dict(os.environ, PYTHONPATH=str(src))
            done = subprocess.run([sys.executable, __file__, "--worker", str(root), "--evals", str(args.evals),
                                   "--repeats", str(args.repeats)], env=env, capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0:
                print(f"{name}: failed\n{done.stderr[-3000:]}")
                return 1
            out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{args.runs} runs x {args.evals} evaluations, medians of {args.repeats} (seconds):")
    print(f"{'version':<16}{'first load':>12}{'update':>10}{'during a fit':>14}")
    for name, m in out.items():
        print(f"{name:<16}{m['first']:>12.3f}{m['update']:>10.3f}{m['during']:>14.3f}")
    if len(out) == 2:
        a, b = out["this checkout"], out["baseline"]
        print("ratios, baseline / this checkout: " + ", ".join(f"{k} {b[k] / a[k]:.1f}x" for k in ("first", "update", "during")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
