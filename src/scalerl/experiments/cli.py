"""``scalerl sweep``: train recipes x seeds, then compare them with the sigmoid law.

    scalerl sweep --loo --seeds 0 1 --set train.steps=60 --out runs/loo
    scalerl sweep --recipes scalerl loo-dapo --out runs/dapo --report-only

Every variant trains into ``OUT/<recipe>/seed<k>``; finished ones are skipped and unfinished
ones resume, so rerunning the same command continues a sweep. At the end the seeds of each
recipe are pooled into one curve and ``OUT/report.md`` / ``report.html`` /
``comparison.json`` hold the fits, the verdict and (with ``scalerl`` in the sweep) the
leave-one-out table. Bad input prints one sentence and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="train recipes x seeds (e.g. the leave-one-out study) and compare them",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", nargs="+", default=[], metavar="RECIPE", help="recipe names or YAML paths")
    p.add_argument("--loo", action="store_true", help="add scalerl and every shipped loo-* recipe")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], metavar="SEED")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override applied to every variant, e.g. --set train.steps=60 (repeatable)")
    p.add_argument("--out", type=Path, help="sweep folder (default: runs/sweep-TIMESTAMP)")
    p.add_argument("--x", help="compute axis of the fits (default compute_gpu_hours; 'flops' is hardware-free)")
    p.add_argument("--report-only", action="store_true", help="skip training; compare the runs in OUT")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from scalerl.config import ConfigError
    from scalerl.experiments.report import write_report
    from scalerl.experiments.sweep import loo_recipes, plan, run_sweep
    from scalerl.fit.errors import CurveError

    recipes = list(dict.fromkeys([*(loo_recipes() if args.loo else []), *args.recipes]))
    out = args.out or Path("runs") / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        variants = plan(recipes, args.seeds, args.overrides, out)
    except ConfigError as err:
        print(f"scalerl sweep: {err}", file=sys.stderr)
        return 2
    if not args.report_only:
        run_sweep(variants, out)
    runs: dict[str, list[Path]] = {}
    for v in variants:
        runs.setdefault(Path(v.recipe).stem, []).append(v.run_dir)
    try:
        written = write_report(runs, out, x=args.x)
    except (CurveError, OSError) as err:
        print(f"scalerl sweep: no comparison report: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
