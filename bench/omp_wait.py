"""Does OpenMP's passive wait speed up the trainer? Side by side on the demo and the tools recipe.

    PYTHONPATH=src .venv/bin/python bench/omp_wait.py [--steps 60] [--warmup 10] [--repeats 2]

The ``local`` backend's learner and generators share the cores by design, and torch's OpenMP
threads spin while they wait for work (``OMP_WAIT_POLICY`` unset: libgomp's default spins a
while before sleeping). A spinning thread takes the core its partner needs; the tests measured
4.0x on a contended pair of 2-thread processes (the Makefile's note). Here the question is the
user's: ``make demo`` (the ``scalerl`` recipe) and the ``scalerl-tools`` recipe as they run
on this machine, each with ``OMP_WAIT_POLICY`` unset and ``=PASSIVE``, alternating
(unset, passive, passive, unset, ...) so that drift in the machine's speed falls on both.
Each run starts from the same SFT-warmed model (built once per recipe, untimed) and is timed
on the window of ``--steps`` optimiser steps after ``--warmup`` (``metrics.jsonl``'s
``wall_s``). The machine's parallel scaling is printed first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

from _workload import parallel_scaling  # noqa: E402

from scalerl.runfolder import read_records  # noqa: E402

RECIPES = ("scalerl", "scalerl-tools")
POLICIES = ("unset", "PASSIVE")


def _train(recipe: str, out: Path, sets: list[str], policy: str) -> None:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "unset":
        env["OMP_WAIT_POLICY"] = policy
    cmd = [str(ROOT / ".venv/bin/scalerl"), "train", "--recipe", recipe, "--out", str(out), "--no-fit",
           "--set", "train.max_minutes=null", "--set", "log.tensorboard=false"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def steps_per_min(run_dir: Path, warmup: int, steps: int) -> float:
    rec = {r["step"]: r for r in read_records(run_dir / "metrics.jsonl")}
    return 60.0 * steps / (rec[warmup + steps]["wall_s"] - rec[warmup]["wall_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2, help="runs per recipe and policy")
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES))
    args = ap.parse_args()
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one)", flush=True)
    order = [POLICIES[(i + i // 2) % 2] for i in range(2 * args.repeats)]  # unset, passive, passive, unset, ...
    with tempfile.TemporaryDirectory(prefix="scalerl-omp-") as scratch:
        for recipe in args.recipes:
            base_run = Path(scratch) / f"{recipe}-base"
            _train(recipe, base_run, ["train.steps=1"], "unset")  # builds and SFT-warms its start, untimed
            sets = [f"model.base={base_run / 'base_model'}", f"train.steps={args.warmup + args.steps}",
                    "eval.every=1000", "eval.schedule=every"]  # fmt: skip
            rates: dict[str, list[float]] = {p: [] for p in POLICIES}
            for i, policy in enumerate(order):
                out = Path(scratch) / f"{recipe}-{i}"
                _train(recipe, out, sets, policy)
                rates[policy].append(steps_per_min(out, args.warmup, args.steps))
                print(f"  {recipe} OMP_WAIT_POLICY={policy}: {rates[policy][-1]:.1f} steps/min", flush=True)
            med = {p: statistics.median(v) for p, v in rates.items()}
            print(f"{recipe}: unset {med['unset']:.1f} steps/min, PASSIVE {med['PASSIVE']:.1f} steps/min: "
                  f"PASSIVE/unset = {med['PASSIVE'] / med['unset']:.2f}x (median of {args.repeats})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
