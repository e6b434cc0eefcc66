"""Learner data parallelism on this machine: ``learner.world_size`` 1 vs 2, side by side, one run.

The same fixed batch (P groups × G completions of random tokens, every group trained) goes
through ``--steps`` AdamW steps of:

- ``ws=1``: the single-process :class:`~scalerl.pipeline.learner.role.Learner`, ``--cores`` threads;
- ``ws=2 fsdp2`` and ``ws=2 ddp``: a :class:`~scalerl.pipeline.learner.group.ShardedLearner`
  of two gloo ranks with ``--cores / 2`` threads each (the cores split, not added).

Printed per variant: trained tokens per second of wall time (median step after one warm-up),
the wall time of one weight sync into a shared-memory sink (``learner.sync_bucket_mb``
buckets; every rank gathers, rank 0 writes), and the bytes of parameters and AdamW state
each rank holds. The machine's parallel scaling right now is printed first and last: on two
cores the two ranks can at best match one process with two threads, since both split the
same cores, and gloo's all-gathers and reduce-scatters go through loopback TCP.

Usage: python bench/learner_scaling.py [--preset micro] [--prompts 8] [--generations 8]
       [--length 48] [--steps 4] [--cores 2] [--bucket-mb 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _workload import parallel_scaling, save_base_model, synthetic_groups  # noqa: E402

from scalerl.compute import matmul_peak  # noqa: E402
from scalerl.config import load_config  # noqa: E402
from scalerl.models import load_pretrained  # noqa: E402
from scalerl.pipeline import build  # noqa: E402
from scalerl.pipeline.learner.group import ShardedLearner, free_port  # noqa: E402
from scalerl.pipeline.learner.rank import RankSpec  # noqa: E402
from scalerl.pipeline.learner.role import Learner  # noqa: E402
from scalerl.pipeline.weights import SharedWeights, WeightLayout  # noqa: E402
from scalerl.types import Group  # noqa: E402


def _measure(learner, sink, batch: list[Group], steps: int) -> dict:
    times, tokens = [], 0
    for i in range(steps + 1):  # the first is a warm-up
        start = time.perf_counter()
        metrics = learner.step(batch).metrics
        if i:
            times.append(time.perf_counter() - start)
            tokens = metrics["step_trained_tokens"]
    syncs = []
    for _ in range(3):
        syncs.append(learner.publish(sink).seconds)
    return {"tok_s": tokens / statistics.median(times), "step_s": statistics.median(times),
            "sync_s": statistics.median(syncs)}


def _local_bytes(model, optimizer) -> dict:
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    optim = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))
    return {"param_bytes": params, "optim_bytes": optim}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="micro")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--length", type=int, default=48)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--bucket-mb", type=int, default=64)
    args = ap.parse_args()
    print(f"parallel scaling now: {parallel_scaling():.2f}x (2.0 = two free cores)")
    cfg = load_config("scalerl", ["filters.zero_variance=false", "length.truncation=keep", "optim.micro_batch=16"])
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_base_model(args.preset, Path(tmp) / "model")
        torch.set_num_threads(args.cores)
        model, tok = load_pretrained(model_dir)
        batch = synthetic_groups(args.prompts, args.generations, args.length, len(tok))
        rules = build.learner_rules(cfg, tok.pad_token_id)
        ctx = torch.multiprocessing.get_context("spawn")
        sink = SharedWeights(WeightLayout(model), ctx)
        rows = {}
        single = Learner(model, rules, args.bucket_mb << 20)
        rows["ws=1"] = _measure(single, sink, batch, args.steps) | _local_bytes(model, single.optimizer)
        for strategy in ("fsdp2", "ddp"):
            spec = RankSpec(model_dir=str(model_dir), rules=rules, strategy=strategy, world=2, device="cpu",
                            dtype="float32", lora=None, threads=max(1, args.cores // 2),
                            bucket_bytes=args.bucket_mb << 20, master_addr="127.0.0.1", master_port=free_port(),
                            seed=0, timeout_s=600)
            sharded = ShardedLearner(spec, model, transport="local", peak_flop_s=matmul_peak("cpu"),
                                     sync_timeout_s=600)
            sharded.start(sink)
            try:
                rows[f"ws=2 {strategy}"] = _measure(sharded, sink, batch, args.steps) | sharded.memory()[0]
            finally:
                sharded.close()
    n = sum(p.numel() for p in model.parameters())
    print(f"\n{args.preset} ({n / 1e6:.1f}M params), P x G = {args.prompts} x {args.generations}, L = {args.length}, "
          f"AdamW, {args.cores} cores split between the ranks, median of {args.steps} steps")
    base = rows["ws=1"]
    for name, r in rows.items():
        print(f"  {name:10s} {r['step_s'] * 1e3:7.0f} ms/step {r['tok_s']:8.0f} tok/s ({r['tok_s'] / base['tok_s']:.2f}x)"
              f"  sync {r['sync_s'] * 1e3:6.0f} ms  rank 0 holds params {r['param_bytes'] / 2**20:6.1f} MiB "
              f"({r['param_bytes'] / base['param_bytes']:.2f}x), AdamW state {r['optim_bytes'] / 2**20:6.1f} MiB "
              f"({r['optim_bytes'] / base['optim_bytes']:.2f}x)")
    print(f"parallel scaling now: {parallel_scaling():.2f}x")


if __name__ == "__main__":
    main()
