"""A learning-rate study run in full and adaptively, side by side: the winner, the compute used.

    PYTHONPATH=src .venv/bin/python bench/adaptive_live.py [--lrs 1e-5 3e-5 1e-4 3e-4] [--steps 600] [--pairing P]

One task (the ``scalerl-tools`` recipe: the calculator environment, which learns within
minutes here), four learning rates, seed 0, every point from the same SFT-warmed model:

1. **full**: ``scalerl sweep SPEC``, every point to ``--steps``;
2. the budget: the smallest final compute of the full runs (compute on a CPU is core-hours,
   so equal steps are not exactly equal compute);
3. **replay**: ``scalerl sweep --replay`` of the full runs at that budget (what the policy
   would have stopped on these very runs), once per pairing of ``fit.choose.PAIRINGS``;
4. **adaptive**: ``scalerl sweep SPEC --adaptive --budget B`` in a fresh folder (its own
   training: rungs at B/8, B/4, B/2 and B; a survivor resumes with ``train.max_compute``).

Printed: each study's winner, the compute it used against the full study's, and its wall
time (the adaptive study pays a process start per point and rung). The machine's parallel
scaling first. Run it alone on a quiet machine: compute here is wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

from _workload import parallel_scaling  # noqa: E402

from scalerl.fit.choose import PAIRING, PAIRINGS  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

SCALERL = str(ROOT / ".venv/bin/scalerl")


def _run(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run([SCALERL, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scalerl {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - t, done.stdout


def _winner(w) -> str:
    return w if isinstance(w, str) else "tied: " + ", ".join(w)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-5, 3e-5, 1e-4, 3e-4])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--recipe", default="scalerl-tools")
    ap.add_argument("--keep", type=Path, help="keep the study folders here (default: a scratch folder)")
    ap.add_argument("--pairing", choices=list(PAIRINGS), default=PAIRING,
                    help="the live study's pairing (the replay of the full runs prints every pairing)")
    args = ap.parse_args()
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one)", flush=True)
    with tempfile.TemporaryDirectory(prefix="scalerl-adaptive-") as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        base = root / "base"
        if not (base / "base_model" / "config.json").is_file():
            _run("train", "--recipe", args.recipe, "--out", str(base), "--no-fit", "--set", "train.steps=1")
        spec = root / "lr.yaml"
        spec.write_text(
            f"name: lr\nrecipes: [{args.recipe}]\nseeds: [0]\nparallel: 1\n"
            f"set:\n  model.base: {base / 'base_model'}\n  train.steps: {args.steps}\n  train.max_minutes: null\n"
            f"  eval.every: 5\n  eval.schedule: every\n  log.tensorboard: false\n  forecast.enabled: false\n"
            f"axes:\n  lr: [{', '.join(f'{lr:.1e}' for lr in args.lrs)}]\n")  # fmt: skip
        full_s, _ = _run("sweep", str(spec), "--out", str(root / "full"))
        finals = {m.parent.parent.name: read_records(m)[-1]["compute_gpu_hours"]
                  for m in (root / "full").rglob("metrics.jsonl")}  # fmt: skip
        budget = min(finals.values())
        replays = {}
        for pairing in PAIRINGS:
            replay_json = root / f"replay-{pairing}.json"
            _run("sweep", "--replay", str(root / "full"), "--budget", repr(budget), "--pairing", pairing, "--json",
                 str(replay_json))  # fmt: skip
            replays[pairing] = json.loads(replay_json.read_text())
        replay = replays[args.pairing]
        adaptive_s, _ = _run("sweep", str(spec), "--adaptive", "--budget", repr(budget), "--pairing", args.pairing,
                             "--out", str(root / "adaptive"))  # fmt: skip
        live = json.loads((root / "adaptive" / "decisions.json").read_text())
    print(f"\nbudget {budget:.4g} compute per point (the smallest final compute of {len(finals)} full runs of "
          f"{args.steps} steps)")  # fmt: skip
    print(f"full study:     winner {_winner(replay['full']['winner'])}, compute {replay['compute_full']:.4g} (1.00), "
          f"wall {full_s:.0f} s")  # fmt: skip
    for pairing, r in replays.items():
        print(f"replay of it ({pairing}): winner {_winner(r['winner'])}, compute {r['compute_used']:.4g} "
              f"({r['fraction_used']:.2f}), stopped {[s['point'] for s in r['stopped']]}")  # fmt: skip
    print(f"adaptive, live ({args.pairing}): winner {_winner(live['winner'])}, compute {live['compute_used']:.4g} "
          f"({live['compute_used'] / replay['compute_full']:.2f} of the full study's), wall {adaptive_s:.0f} s "
          f"({adaptive_s / full_s:.2f}x), stopped {[(s['point'], round(s['at_compute'], 4)) for s in live['stopped']]}")  # fmt: skip
    for r in replay["full"]["ranking"]:
        print(f"  full run {r['point']}: forecast at the budget {r['median']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}], "
              f"P(best) {r['p_best']:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
