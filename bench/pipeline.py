"""Completions/s of PipelineRL-k vs PPO-off-policy-k vs sync on the same work, in one run.

Digest §2.2 / ICLR A.20: PipelineRL's gain is system throughput — generators never wait for
the learner and the learner waits only when it gets k steps ahead. Each mode trains the same
random-init model on the same task and step shape (P x G completions of at most L tokens,
every completion in the loss) with the ``local`` backend (1 generator process + the learner
process, 1 torch thread each), for ``warmup + steps + 1`` optimiser steps; the window of
``steps`` steps after the warm-up is timed from ``metrics.jsonl``.

Besides completions/s it prints the learner's busy share (1 − waited / window) so you can see
which role limits a mode: PipelineRL can at best hide the cheaper role behind the dearer one,
so its ceiling over sync is ``(T_gen + T_learn) / max(T_gen, T_learn)`` (2x when balanced).

Usage: python bench/pipeline.py [--preset nano] [--prompts 2] [--generations 8]
       [--max-new-tokens 128] [--k 4] [--steps 12] [--warmup 4] [--backend local] [--repeats 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames, not ours
sys.path.insert(0, str(Path(__file__).parent))
from _workload import (  # noqa: E402
    Workload,
    add_workload_args,
    parallel_scaling,
    run_scalerl,
    save_base_model,
)

from scalerl.runfolder import read_records  # noqa: E402

MODES = ("sync", "ppo-off-policy", "pipeline-rl")


def learner_busy(run_dir: Path, warmup: int, steps: int) -> float:
    """Share of the window the learner spent training rather than waiting for groups."""
    records = {r["step"]: r for r in read_records(run_dir / "metrics.jsonl")}
    span = records[warmup + steps]["wall_s"] - records[warmup]["wall_s"]
    waited = sum(records[s]["learner_wait_s"] for s in range(warmup + 1, warmup + steps + 1))
    return 1.0 - waited / span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap)
    ap.add_argument("--k", type=int, default=4, help="lag bound of pipeline-rl / round length of ppo-off-policy")
    ap.add_argument("--steps", type=int, default=12, help="timed optimiser steps (a multiple of k is fairest)")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps first (a multiple of k)")
    ap.add_argument("--chunk", type=int, help="prompts a generator decodes per engine call (default: P)")
    ap.add_argument("--backend", default="local", choices=["local", "ray"])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds over all modes (interleaved, so load drifts hit every mode); best kept")
    args = ap.parse_args()

    work = Workload(args.preset, args.prompts, args.generations, args.max_new_tokens)
    print(f"workload: {args.preset} model, addition task, P={work.prompts} x G={work.generations}, "
          f"<= {work.max_new_tokens} new tokens, k={args.k}, backend={args.backend}, "
          f"{args.steps} timed steps after {args.warmup}; {os.cpu_count()} CPUs")
    print(f"machine parallel scaling now (2 single-thread processes vs 1): {parallel_scaling():.2f}x "
          "- the most any overlap of two roles can give", flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="scalerl-bench-") as tmp:
        model_dir = save_base_model(args.preset, Path(tmp) / "base")
        for round_, mode in ((r, mode) for r in range(args.repeats) for mode in args.modes):
            run_dir = Path(tmp) / f"{mode}-{round_}"
            m = run_scalerl(
                work, model_dir, run_dir, warmup=args.warmup, steps=args.steps,
                **{"pipeline.mode": mode, "pipeline.k": args.k, "pipeline.backend": args.backend,
                   "pipeline.prompts_per_chunk": args.chunk or args.prompts},
            )
            if mode not in results or m.completions_per_s > results[mode].completions_per_s:
                results[mode] = m
            print(f"  {mode:15s} #{round_ + 1} {m.completions_per_s:8.1f} completions/s {m.tokens_per_s:9.0f} tok/s  "
                  f"mean len {m.mean_len:5.1f}  learner busy {learner_busy(run_dir, args.warmup, args.steps):4.0%}  "
                  f"({m.seconds:.1f} s for {m.steps} steps)", flush=True)
    if "sync" in results:
        base = results["sync"].completions_per_s
        print(f"ratios vs sync (completions/s, best of {args.repeats}): " + ", ".join(
            f"{mode} {m.completions_per_s / base:.2f}x" for mode, m in results.items() if mode != "sync"))


if __name__ == "__main__":
    main()
