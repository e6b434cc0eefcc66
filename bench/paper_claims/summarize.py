"""Per point of a sweep folder: what the runs reached, their mismatch, their evaluation noise.

For every point (``scalerl report``'s grouping: seeds pooled), over its seeds: the last
validation pass rate (mean and spread), the best, the mean ``val_stderr`` (the evaluation's
own standard error over prompts), the mean ``mismatch_kl`` of the training steps (staleness
and numerics together) and ``mismatch_fresh_kl`` (tokens sampled by the trainer's current
weights: numerics alone), the mean ``is_ratio_max``, and the steps trained. Complements the fits of ``scalerl report``.

    .venv/bin/python bench/paper_claims/summarize.py runs/claims/fp32_head [downstream_pass_rate]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from scalerl.experiments.study import discover
from scalerl.runfolder import read_records


def _mean(values) -> float:
    values = [v for v in values if v is not None and v == v]  # NaN: a step with nothing measured
    return statistics.mean(values) if values else float("nan")


def main(root: Path, y: str = "val_pass_rate") -> None:
    se = y.replace("pass_rate", "stderr")
    print("| point | seeds | steps | final val (mean ± sd) | best val | val_stderr | mismatch_kl | fresh mismatch_kl | is_ratio_max |")
    print("|---|---|---|---|---|---|---|---|---|")
    for point in discover(root):
        finals, bests, stderrs, kls, fresh, ratios, steps = [], [], [], [], [], [], []
        for run in point.runs:
            records = read_records(run / "metrics.jsonl")
            evals = [r for r in records if r.get(y) is not None]
            trained = [r for r in records if r.get("step", 0) > 0]
            if not evals:
                continue
            finals.append(evals[-1][y])
            bests.append(max(r[y] for r in evals))
            stderrs.append(_mean(r.get(se) for r in evals))
            kls.append(_mean(r.get("mismatch_kl") for r in trained))
            fresh.append(_mean(r.get("mismatch_fresh_kl") for r in trained))
            ratios.append(_mean(r.get("is_ratio_max") for r in trained))
            steps.append(records[-1].get("step", 0))
        if not finals:
            print(f"| {point.name} | {len(point.runs)} | - | no evaluations of {y} | | | | | |")
            continue
        sd = statistics.stdev(finals) if len(finals) > 1 else float("nan")
        print(f"| {point.name} | {len(point.runs)} | {min(steps)} | {statistics.mean(finals):.3f} ± {sd:.3f} | "
              f"{statistics.mean(bests):.3f} | {_mean(stderrs):.3f} | {_mean(kls):.2e} | {_mean(fresh):.2e} | {_mean(ratios):.2f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
