"""``scalerl train``: run a recipe, or resume a run directory.

    scalerl train --recipe scalerl [--set optim.lr=1e-4 ...] [--out RUN_DIR]
    scalerl train --resume RUN_DIR [--set train.steps=80 ...]

Torch is imported inside the handler only, so ``scalerl fit`` works without it. A bad
recipe or override prints one sentence and exits with code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train with a ScaleRL recipe (PipelineRL-k on this machine)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="scalerl", help="recipe name (scalerl, loo-dapo, ...) or YAML path")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, e.g. --set pipeline.k=4 (repeatable)")
    p.add_argument("--out", type=Path, help="run directory (default: runs/RECIPE-TIMESTAMP)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument("--no-fit", action="store_true", help="skip the final sigmoid fit and report")
    p.set_defaults(func=handle)


def _config(args: argparse.Namespace):
    from scalerl.config import ConfigError, load_config

    if args.resume is None:
        return load_config(args.recipe, args.overrides)
    saved = args.resume / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"{args.resume} is not a run directory (no config.yaml in it).")
    return load_config(saved, args.overrides)


def handle(args: argparse.Namespace) -> int:
    from scalerl.config import ConfigError

    try:
        cfg = _config(args)
    except ConfigError as err:
        print(f"scalerl train: {err}", file=sys.stderr)
        return 2
    run_dir = args.resume or args.out or Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.resume is None and (run_dir / "metrics.jsonl").exists():
        print(f"scalerl train: {run_dir} already holds a run; continue it with --resume {run_dir} "
              "or choose another --out.", file=sys.stderr)
        return 2
    # transformers' per-load progress bars would interleave with ours (generators inherit this)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from scalerl.pipeline.report import final_report
    from scalerl.pipeline.run import train

    train(cfg, run_dir, resume=args.resume is not None)
    print(f"run directory: {run_dir}")
    if not args.no_fit:
        final_report(run_dir, cfg)
    return 0
