"""``scalerl train``: run a recipe, or resume a run directory.

    scalerl train --recipe scalerl [--set optim.lr=1e-4 ...] [--out RUN_DIR]
    scalerl train --resume RUN_DIR [--set train.steps=80 ...]

Torch is imported inside the handler only, so ``scalerl fit`` works without it. A bad
recipe, override, flag or run folder prints one sentence and exits with code 2, before
anything is built or written (``scalerl.pipeline.commands.preflight``); so do a run directory whose
``config.yaml`` or checkpoints do not load and a disk that fills up during the run.
SIGTERM or SIGINT stops the run after the step under way with a checkpoint, one sentence and
exit code 143 or 130 (a second one exits at once; ``scalerl.pipeline.stop``). A learner rank
that dies, a weight sync that times out, generators that die too often or a Ray node that
leaves the cluster (``scalerl.pipeline.restarts``) stop it with one sentence saying whether a checkpoint exists,
and exit code 1.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time
from pathlib import Path

from scalerl.fit.errors import EXIT_BAD_INPUT
from scalerl.runfolder import CONFIG, METRICS

# what ``scalerl train --help`` says; the module docstring above is for whoever reads the code
HELP = """Train with a recipe, or continue a run directory.

  scalerl train --recipe scalerl [--set optim.lr=1e-4 ...] [--out RUN_DIR]
  scalerl train --resume RUN_DIR [--set train.steps=80 ...]

A recipe is a shipped name or a YAML file; relative paths in a YAML file are read from its
folder, those in --set from this one. A bad recipe, override, flag or run folder prints one
sentence and exits with code 2 before anything is written. SIGTERM or Ctrl-C stops the run
after the step under way with a checkpoint (exit code 143 or 130; a second one stops at once);
--resume continues it. A run that cannot go on (a learner rank dies, a weight sync times out,
generators die too often) says whether a checkpoint exists and exits with code 1.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train with a ScaleRL recipe (PipelineRL-k on this machine)",
                              description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", help="recipe name (scalerl, loo-dapo, ...) or YAML path (default: scalerl)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config field, e.g. --set pipeline.k=4 (repeatable)")
    p.add_argument("--out", type=_folder, help="run directory (default: runs/RECIPE-TIMESTAMP)")
    p.add_argument("--resume", type=_folder, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument("--no-fit", action="store_true", help="skip the final sigmoid fit and report")
    p.add_argument("--force", action="store_true",
                   help="train from an SFT warm-up that missed its band (model.sft.force=true)")  # fmt: skip
    p.set_defaults(func=handle)


def _folder(text: str) -> Path:
    """A folder flag's value; an empty one is refused, not read as the working directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the folder is empty (it would train in the working directory); "
                                         "name a folder, or . for this one")
    return Path(text)


def _config(args: argparse.Namespace):
    from scalerl.config import DEFAULT_RECIPE, ConfigError, load_config
    from scalerl.pipeline.commands.preflight import check_path

    if getattr(args, "force", False):
        args.overrides = [*args.overrides, "model.sft.force=true"]
    if args.resume is None:
        from scalerl.config.layers import shadows_recipe

        recipe = args.recipe or DEFAULT_RECIPE
        if shadows_recipe(recipe):
            print(f"scalerl train: recipe {recipe!r} is the built-in one; the folder ./{recipe} here is not a recipe "
                  f"(give ./{recipe}/FILE.yaml for a file in it).")  # fmt: skip
        return load_config(recipe, args.overrides)
    if args.recipe is not None:
        raise ConfigError(f"--resume continues {args.resume} with its own config.yaml, so it takes no "
                          "--recipe (change fields with --set).")
    check_path(args.resume, "--resume")
    saved = args.resume / CONFIG
    if not saved.is_file():
        raise ConfigError(f"{args.resume} is not a run directory (no config.yaml in it).")
    try:
        empty = not saved.read_bytes().strip()
    except OSError as err:
        raise ConfigError(f"cannot read {saved} ({err.strerror or err}).") from None
    if empty:
        raise ConfigError(f"{saved} is empty, so this run's config is lost; restore the file to resume "
                          "(--resume never falls back to default settings).")
    return load_config(saved, args.overrides)


def _prepare(args: argparse.Namespace):
    """``(config, run folder)`` once every check before the run has passed."""
    from scalerl.config import ConfigError
    from scalerl.pipeline.commands import preflight

    cfg = _config(args)
    run_dir = args.resume or args.out or Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    preflight.check_path(run_dir, "--resume" if args.resume is not None else "--out")
    if args.resume is None and (run_dir / METRICS).exists():
        raise ConfigError(f"{run_dir} already holds a run; continue it with --resume {run_dir} "
                          "or choose another --out.")
    preflight.check(cfg, run_dir, "--resume" if args.resume is not None else "--out")
    return cfg, run_dir


def _fail(message: object) -> int:
    print(f"scalerl train: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def handle(args: argparse.Namespace) -> int:
    try:
        return _handle(args)
    except KeyboardInterrupt:  # before or after the run (imports, the fit): nothing to save
        print("scalerl train: interrupted.", file=sys.stderr)
        return 130


def _handle(args: argparse.Namespace) -> int:
    from scalerl.config import ConfigError

    # transformers' per-load progress bars would interleave with ours (generators inherit
    # this); set before the checks, whose tokenizer load imports transformers
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:  # the variable is read at import: already imported when called in-process
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if hasattr(sys.stdout, "reconfigure"):  # a batch job's log gets each line as it is said, not 8 KiB later
        sys.stdout.reconfigure(line_buffering=True)
    try:
        cfg, run_dir = _prepare(args)
    except ConfigError as err:
        return _fail(err)
    from scalerl.checkpoint import CheckpointError
    from scalerl.pipeline.commands.report import final_report
    from scalerl.pipeline.learner.rank import RankFailed, SyncTimeout
    from scalerl.pipeline.restarts import GeneratorsFailed, NodeLost, failure_sentence
    from scalerl.pipeline.run import train
    from scalerl.pipeline.stop import Stopped
    from scalerl.user_code import TooManyStuck

    try:
        train(cfg, run_dir, resume=args.resume is not None)
    except Stopped as stop:  # SIGTERM or SIGINT: the sentence says where the checkpoint is
        print(f"scalerl train: {stop}", file=sys.stderr)
        return stop.code
    except (ConfigError, CheckpointError, TooManyStuck) as err:  # TooManyStuck: user code that hangs
        return _fail(err)
    except (SyncTimeout, RankFailed, GeneratorsFailed, NodeLost) as err:  # the roles are stopped; checkpoints are whole
        print(f"scalerl train: {failure_sentence(err, run_dir)}", file=sys.stderr)
        return 1
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return _fail(f"no space left on the device of {err.filename or run_dir}; free some space and "
                     f"continue with --resume {run_dir}.")
    print(f"run directory: {run_dir}")
    if not args.no_fit:
        final_report(run_dir, cfg)
    return 0
