"""Does the throughput model of ``scalerl plan`` predict this machine? The split benchmark of issue 31.

    PYTHONPATH=src .venv/bin/python bench/plan_split.py [--shapes nano:2x8@128,nano:16x8@256] [--markdown PATH]

For each step shape (a model preset, P prompts x G completions, at most L new tokens: the
workload of ``throughput.py``, random-init model, every completion trained) the trainer runs
with the ``local`` backend at **every feasible split of the machine's cores** between
generators and the learner, for every lag bound in ``--ks`` (``0`` is ``pipeline.mode: sync``,
on-policy). Each run is a fresh process; the timed window is ``--steps`` optimiser steps after
``--warmup`` untimed ones (evaluations only at step 0 and after the window).

The model (``scalerl.fit.time.throughput``) is built from **one** of those runs, the reference
(``--reference-k``, the default k of ``pipeline.k``), exactly as ``scalerl plan`` builds it: the
run's step records up to the window's end (``role_times``). It then predicts the steps per
hour and mean staleness of every other run, which is compared with what that run measured
over its own window. ``scalerl plan`` answers another split in hours by scaling the reference
run's *measured* time by the model's ratio of step times (``plan.split_hours``), so the
model's error on the reference cancels: the **plan / measured** column is that figure,
``measured(ref) x model(run) / model(ref)`` over what the run measured; **model / measured**
is the model's raw prediction. Reported per run: measured steps/hour, predicted, their ratio, measured
and predicted mean staleness, and, per shape, the split and k the model recommends against the
measured best (the recommendation ranks by steps per hour; on ties the smaller lag).

Feasible splits: ``G`` generators (one thread each) and a learner of ``L`` ranks (one thread
each) with ``G + L`` equal to the cores the machine has. On 2 cores that is one split, 1 + 1:
every other split oversubscribes a core, which the model (a device is a device) does not
describe. The comparison across k is then the test of the model's overlap and staleness terms.

The parallel scaling of the machine (two single-thread processes against one) is printed at
the start and at the end; read every ratio against it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import Workload, parallel_scaling, save_base_model, scalerl_overrides  # noqa: E402
from throughput import in_fresh_process, parse_shape, shape_name  # noqa: E402

from scalerl.fit.time.throughput import predict, role_times  # noqa: E402

DEFAULT_SHAPES = "nano:2x8@128,nano:16x8@256"


@dataclass(frozen=True)
class Measured:
    generators: int
    ranks: int
    k: int  # 0: sync
    steps_per_hour: float
    mean_staleness: float
    records: list  # the run's step records up to the window's end


def train_once(work: Workload, model_dir: Path, run_dir: Path, *, generators: int, ranks: int, k: int,
               warmup: int, steps: int) -> Measured:
    """One run of ``work`` at ``generators`` + ``ranks`` and lag bound ``k`` (0: sync)."""
    from scalerl.config import load_config
    from scalerl.pipeline.run import train
    from scalerl.runfolder import read_records

    mode = {"pipeline.mode": "sync"} if k == 0 else {"pipeline.mode": "pipeline-rl", "pipeline.k": k}
    extra = {**mode, "pipeline.num_generators": generators, "pipeline.generator_threads": 1,
             "learner.world_size": ranks, "train.cores": generators + ranks,
             "train.max_minutes": "null"}  # fmt: skip: every step, however long a step takes
    cfg = load_config("scalerl", scalerl_overrides(work, model_dir, warmup + steps + 1, **extra))
    train(cfg, run_dir, log=lambda *_: None)
    records = read_records(run_dir / "metrics.jsonl")
    steps_rec = {r["step"]: r for r in records if "step" in r}
    if warmup + steps not in steps_rec:
        raise SystemExit(f"{run_dir}: the run stopped at step {max(steps_rec, default=None)} of {warmup + steps}: "
                         f"{records[-1] if records else 'no records'}")
    seconds = steps_rec[warmup + steps]["wall_s"] - steps_rec[warmup]["wall_s"]
    hist: dict[int, float] = {}
    for s in range(warmup + 1, warmup + steps + 1):
        for lag, n in (steps_rec[s].get("staleness_hist") or {}).items():
            hist[int(lag)] = hist.get(int(lag), 0.0) + float(n)
    total = sum(hist.values()) or 1.0
    upto = [r for r in records if r.get("step", 0) <= warmup + steps]
    return Measured(generators, ranks, k, 3600.0 * steps / seconds, sum(lag * n for lag, n in hist.items()) / total,
                    upto)  # fmt: skip


def feasible_splits(cores: int) -> list[tuple[int, int]]:
    """(generators, learner ranks) using every core once: G + L = cores, both at least 1."""
    return [(g, cores - g) for g in range(1, cores)]


def run_shape(work: Workload, model_dir: Path, tmp: Path, args) -> list[str]:
    runs: dict[tuple[int, int, int], Measured] = {}
    for g, ranks in feasible_splits(args.cores):
        for k in args.ks:
            run_dir = Path(tempfile.mkdtemp(prefix=f"g{g}l{ranks}k{k}-", dir=tmp))
            m = in_fresh_process(train_once, work, model_dir, run_dir, generators=g, ranks=ranks, k=k,
                                 warmup=args.warmup, steps=args.steps)  # fmt: skip
            runs[(g, ranks, k)] = m
            print(f"  {shape_name(work):14s} {g} gen + {ranks} learner, {'sync' if k == 0 else f'k={k}'}: "
                  f"{m.steps_per_hour:8.0f} steps/h, mean staleness {m.mean_staleness:.2f}", flush=True)
    ref_key = next(key for key in runs if key[2] == args.reference_k)
    ref = runs[ref_key]
    times = role_times(ref.records, generators=ref.generators, learner_devices=ref.ranks, k=ref.k,
                       source=f"{shape_name(work)} reference run")  # fmt: skip
    rows = []
    preds = {key: predict(times, key[0], key[1], key[2]) for key in runs}
    for key, m in runs.items():
        p = preds[key]
        planned = ref.steps_per_hour * p.steps_per_hour / preds[ref_key].steps_per_hour  # split_hours' scaling
        rows.append(f"| {shape_name(work)} | {key[0]} + {key[1]} | {'sync' if key[2] == 0 else key[2]} | "
                    f"{m.steps_per_hour:.0f} | {p.steps_per_hour:.0f} | {p.steps_per_hour / m.steps_per_hour:.3f} | "
                    f"{planned / m.steps_per_hour:.3f} | {m.mean_staleness:.2f} | {p.mean_staleness:.2f} | "
                    f"{p.bottleneck}{' (reference)' if key == ref_key else ''} |")  # fmt: skip
    best_pred = min(preds, key=lambda key: (round(preds[key].step_s, 12), preds[key].mean_staleness))
    best_meas = max(runs, key=lambda key: runs[key].steps_per_hour)
    gap = 1.0 - runs[best_pred].steps_per_hour / runs[best_meas].steps_per_hour

    def name(key):
        return f"{key[0]} + {key[1]}, {'sync' if key[2] == 0 else f'k={key[2]}'}"

    rows.append(f"| {shape_name(work)} | recommended: {name(best_pred)} | measured best: {name(best_meas)} | "
                f"recommended is {gap:.1%} below the best | | | | | | |")  # fmt: skip
    print(f"  model from {name(ref_key)}: gen {times.gen_device_s:.3f} generator-s, learner "
          f"{times.learner_device_s:.3f} s, sync {times.sync_s:.4f} s, eval {times.eval_s:.4f} s per step", flush=True)
    return rows


HEADER = ("| shape | generators + learner ranks | k | measured steps/h | model steps/h | model / measured | "
          "plan / measured | measured mean staleness | model mean staleness | model's bottleneck |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated [preset:]PxG@L")
    ap.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2, 4, 8], help="lag bounds; 0 is sync")
    ap.add_argument("--reference-k", type=int, default=8, help="the run the model is built from")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores to split")
    ap.add_argument("--steps", type=int, default=20, help="timed optimiser steps per run")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps first")
    ap.add_argument("--markdown", type=Path, metavar="PATH", help="also write the table to PATH")
    args = ap.parse_args()
    if args.reference_k not in args.ks:
        ap.error("--reference-k must be one of --ks")
    if args.cores < 2:
        ap.error("--cores must be at least 2 (a generator and a learner)")
    started = time.perf_counter()
    header = [f"workload: addition task, random-init model, {args.steps} timed steps after {args.warmup}, "
              f"local backend, {args.cores} cores split every feasible way, k in {args.ks} (0: sync), "
              f"model from the k={args.reference_k} run",
              f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x"]
    print("\n".join(header), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="scalerl-split-") as tmp:
        for work in (parse_shape(s) for s in args.shapes.split(",") if s.strip()):
            model_dir = save_base_model(work.preset, Path(tmp) / f"base-{shape_name(work)}")
            rows += run_shape(work, model_dir, Path(tmp), args)
    footer = [f"machine parallel scaling at the end: {parallel_scaling():.2f}x",
              f"{(time.perf_counter() - started) / 60:.1f} min"]
    table = "\n".join([HEADER, *rows])
    print(table)
    print("\n".join(footer))
    if args.markdown:
        args.markdown.write_text("\n\n".join(["\n".join(header), table, "\n".join(footer)]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
