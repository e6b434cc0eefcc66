"""Issue 9's stability rule for the default recipe's curves, run by run.

A curve is *stable* when it rises (its best validation point beats R0, the step-0 point, by
more than 2 standard errors) and then saturates without falling back: every evaluation after
the midpoint of the run's compute is at least ``running best − 2·SE``, with the running best
the highest evaluation up to it and SE the standard error of the fall-back itself,
``sqrt(SE_best² + SE_now²)`` (each from ``val_stderr``, prompts as the independent units):
both ends of the difference are noisy evaluations. The worst fall-back is printed in units
of that SE.

Usage: python bench/paper_claims/stability.py RUN/metrics.jsonl [...] [--x compute_gpu_hours]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from scalerl.metrics import read_evaluations  # noqa: E402


def stability(points: list[dict], x: str = "compute_gpu_hours") -> dict:
    """The rule's verdict for one run's evaluation records (module doc)."""
    val = [p["val_pass_rate"] for p in points]
    se = [p.get("val_stderr", float("nan")) for p in points]
    mid = points[-1][x] / 2
    best, best_se, worst, worst_at = val[0], se[0], 0.0, None
    for p, v, s in zip(points, val, se):
        if v > best:
            best, best_se = v, s
        diff_se = (best_se**2 + s**2) ** 0.5
        if p[x] >= mid and diff_se > 0 and (best - v) / diff_se > worst:
            worst, worst_at = (best - v) / diff_se, p["step"]
    top = val.index(max(val))
    rise_se = (se[0] ** 2 + se[top] ** 2) ** 0.5
    rise = (val[top] - val[0]) / rise_se if rise_se > 0 else float("nan")
    return {"r0": val[0], "best": max(val), "final": val[-1], "se": sum(se) / len(se), "rise_se": rise,
            "worst_fallback_se": worst, "worst_at": worst_at, "stable": rise > 2 and worst <= 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--x", default="compute_gpu_hours", help="the compute axis whose midpoint splits the run")
    args = ap.parse_args(argv)
    print("| run | evals | R0 | best | final | mean SE | rise (SE) | worst fall-back after midpoint (SE) | stable |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for path in args.paths:
        points = [p for p in read_evaluations(path) if "val_pass_rate" in p]
        s = stability(points, args.x)
        verdicts.append(s["stable"])
        name = path.parent.name if path.name == "metrics.jsonl" else path.stem
        print(f"| {name} | {len(points)} | {s['r0']:.3f} | {s['best']:.3f} | {s['final']:.3f} | "
              f"{s['se']:.4f} | {s['rise_se']:.1f} | {s['worst_fallback_se']:.2f} (step {s['worst_at']}) | "
              f"{'yes' if s['stable'] else 'no'} |")
    print(f"\n{sum(verdicts)} of {len(verdicts)} runs meet the rule")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
