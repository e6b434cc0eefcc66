"""How fast is ``scalerl serve`` on a big folder? First load and update, measured side by side.

    PYTHONPATH=src .venv/bin/python bench/serve.py [--runs 20] [--evals 1000] [--repeats 5]

Writes ``--runs`` run folders of ``--evals`` evaluations each (one record a step, as
``scalerl train`` writes them with ``eval.every=1``: a validation that follows Eq. 1 with noise,
and the training fields), then times through Starlette's test client (the app's own work, no
network):

* **first load**: the runs list page and its ``/api/runs``, then one run's page and its
  ``/api/run/ID``, with nothing cached (a fresh app and cleared caches each repeat);
* **update**: one new evaluation appended to that run's log, then what the pages poll:
  ``/api/run/ID`` and ``/api/runs`` (the curve is new at once; its band is refitted in the
  background, the previous one served meanwhile marked stale), and how long until the
  refitted band is served.

Medians of ``--repeats``. The machine's parallel scaling first (the app is single-threaded).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from forecast_real import _scaling  # noqa: E402


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--evals", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from starlette.testclient import TestClient

    from scalerl.serve import runs as data
    from scalerl.serve.app import build_app

    print(_scaling())
    first, update, refit = [], [], []
    with tempfile.TemporaryDirectory(prefix="scalerl-serve-") as scratch:
        root = Path(scratch)
        for i in range(args.runs):
            write_run(root / f"run{i:02d}", args.evals)
        rid = "0/run00"
        for r in range(args.repeats):
            data.shutdown()  # cold: nothing read, nothing fitted
            client = TestClient(build_app([root]))
            t = time.perf_counter()
            for url in ("/", "/api/runs", f"/run/{rid}", f"/api/run/{rid}"):
                assert client.get(url).status_code == 200
            first.append(time.perf_counter() - t)
            with (root / "run00" / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(_record(args.evals + r)) + "\n")
            t = time.perf_counter()
            for url in (f"/api/run/{rid}", "/api/runs"):
                assert client.get(url).status_code == 200
            update.append(time.perf_counter() - t)
            while client.get(f"/api/run/{rid}").json()["band"].get("stale"):  # the refit, in the background
                time.sleep(0.05)
            refit.append(time.perf_counter() - t)
    print(f"{args.runs} runs x {args.evals} evaluations: first load (list + a run's page) "
          f"{statistics.median(first):.2f} s, update after a new evaluation {statistics.median(update):.2f} s "
          f"(medians of {args.repeats}; update / first load = {statistics.median(update) / statistics.median(first):.2f}); "
          f"the band refitted on the new evaluation {statistics.median(refit):.2f} s after it")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
