"""Claim 1 (paper §1.5, Fig. 1): a fit on part of a run forecasts its end within ±0.02.

For each run (default: the five real ``make demo`` runs, ``bench/data/demo_seed*.jsonl``), fit
Eq. 1 on the first 50% and the first 25% of its compute with the paper's protocol (R0 from the
step-0 evaluation; ``scalerl.fit.compare.holdout_forecast``), forecast the reward at the
run's full budget with the 95% predictive interval, and compare with what the run reached.
The forecast error is set beside the across-seed spread of the final evaluations (how much
the same recipe differs from one seed to the next), which bounds what any forecast of one
run can do.

    .venv/bin/python bench/paper_claims/predictability.py [metrics.jsonl ...]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from scalerl.fit.compare import holdout_forecast
from scalerl.fit.errors import CurveError
from scalerl.fit.options import FitOptions
from scalerl.fit.readers import read_jsonl

DATA = Path(__file__).resolve().parents[1] / "data"


def _name(path: Path) -> str:
    """``demo_seed0`` for a data file, ``seed0`` for a run's ``metrics.jsonl``."""
    return path.parent.name if path.stem == "metrics" else path.stem


def main(paths: list[Path]) -> None:
    start = time.perf_counter()
    options = FitOptions(r0="first")
    curves = [read_jsonl(p)[0] for p in paths]
    if not curves:
        sys.exit("predictability: no runs given and no bench/data/demo_seed*.jsonl found")
    finals = [float(c.reward[-1]) for c in curves]
    sd = statistics.stdev(finals) if len(finals) > 1 else float("nan")  # one run has no spread
    print(f"# {len(curves)} runs; final evaluation across seeds: mean {statistics.mean(finals):.3f}, "
          f"sd {sd:.3f}, range [{min(finals):.3f}, {max(finals):.3f}]")
    print("| run | fit on | forecast at the end | 95% predictive interval | observed | error | covered | A, identified? |")
    print("|---|---|---|---|---|---|---|---|")
    errors: dict[float, list[float]] = {0.5: [], 0.25: []}
    for path, curve in zip(paths, curves):
        for frac in (0.5, 0.25):
            try:
                hold = holdout_forecast(curve.compute, curve.reward, fit_frac=frac, options=options,
                                        source=curve.source)
            except CurveError as err:
                print(f"| {_name(path)} | {frac:.0%} | - | - | - | - | - | not possible: {err} |")
                continue
            f = hold.heldout.final
            errors[frac].append(f["predicted"] - f["observed"])
            unc = hold.unc
            print(f"| {_name(path)} | {frac:.0%} | {f['predicted']:.3f} | [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}] | "
                  f"{f['observed']:.3f} | {f['predicted'] - f['observed']:+.3f} | {'yes' if f['covered'] else 'NO'} | "
                  f"{hold.fit.A:.3f}, {'identified' if unc.identified else 'not identified'} |")
    for frac, errs in errors.items():
        if errs:
            mae = statistics.mean(abs(e) for e in errs)
            ratio = mae / sd if sd > 0 else float("nan")
            print(f"fit on {frac:.0%}: mean |error| {mae:.3f} over {len(errs)} runs = {ratio:.2f}x the "
                  f"across-seed sd {sd:.3f} (paper: ±0.02)")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]] or sorted(DATA.glob("demo_seed*.jsonl")))
