"""``scalerl sweep`` (train a grid, then compare) and ``scalerl report`` (the study's report).

    scalerl sweep SPEC.yaml --out runs/batch                 # recipes x seeds x scaling axes
    scalerl sweep --loo --seeds 0 1 --set train.steps=60 --out runs/loo   # shortcut, no spec
    scalerl report runs/batch --html batch.html --markdown batch.md

A sweep trains every point into ``OUT/<recipe>/<axis>=<value>,.../seed<k>``; finished points
are skipped and unfinished ones resume, so rerunning the same command continues it. ``OUT``
remembers its spec (``OUT/sweep.yaml``) and refuses points of a different one. At the end
``OUT/report.md`` / ``report.html`` / ``comparison.json`` hold the fits and verdicts. ``scalerl
report DIR`` reads every ``metrics.jsonl`` under DIR. Bad input is one sentence, exit code 2.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

# what ``--help`` says; the module docstring above is for whoever reads the code
SWEEP_HELP = """Train a grid of recipes x seeds x scaling axes, then compare the runs.

  scalerl sweep SPEC.yaml --out runs/batch
  scalerl sweep --loo --seeds 0 1 --set train.steps=60 --out runs/loo   # shortcut, no spec

A spec (every key but recipes optional):

  name: batch-size            # what the sweep studies (used in its report)
  recipes: [scalerl]          # recipe names or YAML paths
  seeds: [0, 1, 2]
  set: {train.steps: 120}     # overrides applied to every point
  axes:                       # every combination of the listed values is one point
    batch: [4, 16]            # prompts per step
    length: [48, 80]          # the generation budget, interruptions scaled alike
    generations: [4, 8]       # completions per prompt at a fixed total batch
    model: [nano, micro]      # model size preset
    lr: [1.0e-5, 1.0e-4]      # peak learning rate (optim.lr)
  parallel: auto              # points trained at once (auto: as the cores allow)
  runner: local               # local subprocesses, or ray

Every point trains into OUT/<recipe>/<axis>=<value>,.../seed<k>; finished points are skipped
and unfinished ones resume, so rerunning the same command continues the sweep. OUT remembers
its spec (OUT/sweep.yaml) and refuses points of a different one. At the end OUT/report.md,
report.html and comparison.json hold the fits and verdicts. Bad input prints one sentence and
exits with code 2.

Studies that choose:

  scalerl sweep SPEC.yaml --adaptive --out runs/lr    # spec: adaptive: {budget: 0.05}
  scalerl sweep --replay runs/lr-full --budget 0.05 --json decisions.json

--adaptive trains every point to a first rung (budget / 8), forecasts each at the budget and
stops the points whose P(best at the budget) fell below the threshold; the rest go on, doubling, to the
budget (OUT/decisions.json: winner or tie, compute used, every stop and why). --replay applies
the same policy to finished runs of any trainer and trains nothing.
"""

REPORT_HELP = """The study report of a sweep, or of any folder of runs.

  scalerl report runs/batch --html batch.html --markdown batch.md

Reads every metrics.jsonl under DIR, fits each run and writes one Markdown and one
self-contained HTML report: every curve with its fit and forecast, the comparison and
leave-one-out tables with their ceiling verdicts, and A and B per scaling axis. Bad input
prints one sentence and exits with code 2.
"""


def register(subparsers) -> None:
    import textwrap

    from scalerl.fit.choose import MEASURED, PAIRING, PAIRINGS, THRESHOLD

    said = textwrap.fill(f"The default threshold, {THRESHOLD:g}, {MEASURED}.", 95)
    p = subparsers.add_parser("sweep", help="train recipes x seeds x scaling axes and compare them",
                              description=f"{SWEEP_HELP}\n{said}\n",
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("spec", nargs="?", type=Path, help="a sweep spec (YAML, as above)")
    p.add_argument("--recipes", nargs="+", default=[], metavar="RECIPE", help="recipe names or YAML paths")
    p.add_argument("--loo", action="store_true", help="add scalerl and every shipped loo-* recipe")
    p.add_argument("--seeds", nargs="+", type=int, default=None, metavar="SEED")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override applied to every point, e.g. --set train.steps=60 (repeatable)")
    p.add_argument("--out", type=Path, help="sweep folder (default: runs/sweep-TIMESTAMP)")
    p.add_argument("--force", action="store_true",
                   help="go on past a check that failed: a shared SFT warm-up that missed its band "
                        "(model.sft.force=true), an adaptive budget too small to decide")  # fmt: skip
    p.add_argument("--parallel", help="points at once: 'auto' (as the cores allow) or N; overrides the spec")
    p.add_argument("--runner", choices=["local", "ray"], help="local subprocesses or Ray tasks; overrides the spec")
    p.add_argument("--x", help="compute axis of the fits (default compute_gpu_hours; 'flops' is hardware-free)")
    p.add_argument("--report-only", action="store_true", help="skip training; compare the runs in OUT")
    p.add_argument("--adaptive", action="store_true",
                   help="train rung by rung and stop the points whose forecast says they cannot be the best at "
                        "the budget (the spec's adaptive section, or --budget); decisions in OUT/decisions.json")
    p.add_argument("--replay", nargs="+", type=Path, metavar="RUN",
                   help="train nothing: apply the adaptive policy to finished runs (files, run folders, or "
                        "folders of runs) and say what it would have stopped, kept and saved")
    p.add_argument("--budget", type=float, help="compute per point the study is judged at (--adaptive, --replay)")
    p.add_argument("--first-rung", type=float, help="compute of the first decision (default: budget / 8)")
    p.add_argument("--threshold", type=float,
                   help=f"stop a point below this P(best at the budget) (default {THRESHOLD:g}: see above)")
    p.add_argument("--pairing", choices=list(PAIRINGS),
                   help=f"how P(best) pairs the points' forecasts (default {PAIRING}): "
                        + "; ".join(f"{k}: {v}" for k, v in PAIRINGS.items()))  # fmt: skip
    p.add_argument("--json", type=Path, help="write the decisions here (--replay; decisions.json's fields)")
    p.set_defaults(func=handle)
    r = subparsers.add_parser("report", help="the study report of a sweep or any folder of runs",
                              description=REPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("dir", type=Path, help="a folder holding run directories (each with metrics.jsonl)")
    r.add_argument("--html", type=Path, help="self-contained HTML (default DIR/study.html)")
    r.add_argument("--markdown", type=Path, help="Markdown, figures beside it (default DIR/study.md)")
    r.add_argument("--x", help="compute axis (default compute_gpu_hours; 'flops' is hardware-free)")
    r.add_argument("--y", help="reward column (default val_pass_rate; downstream_pass_rate for the harder variant)")
    r.add_argument("--pooled", action="store_true",
                   help="compare a joint fit of the points: B and C_mid partially pooled, A per point")
    r.set_defaults(func=handle_report)


def _plan(args: argparse.Namespace, out: Path):
    """The points to train and how: from a spec, or from the shortcut flags (``--force`` adds
    ``model.sft.force=true`` to every point, not to what the folder remembers)."""
    from scalerl.config import ConfigError
    from scalerl.experiments.spec import SweepSpec, load_spec, points
    from scalerl.experiments.sweep import loo_recipes, plan

    forced = ["model.sft.force=true"] if getattr(args, "force", False) else []
    if args.spec is not None:
        if args.recipes or args.loo:
            raise ConfigError("give either a sweep spec or --recipes/--loo, not both")
        spec = load_spec(args.spec)
        if args.seeds:
            spec = SweepSpec(**{**spec.__dict__, "seeds": tuple(args.seeds)})
        return points(spec, out, (*args.overrides, *forced)), spec
    recipes = list(dict.fromkeys([*(loo_recipes() if args.loo else []), *args.recipes]))
    variants = plan(recipes, args.seeds or [0], [*args.overrides, *forced], out)
    return variants, None


def _parallel(args, spec, variants) -> int:
    from scalerl.config import ConfigError
    from scalerl.experiments.runners import auto_parallel

    value = args.parallel if args.parallel is not None else ("auto" if spec is None or spec.parallel is None
                                                             else str(spec.parallel))
    if value == "auto":
        return auto_parallel([v.config for v in variants]) if spec is not None or args.parallel else 1
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"--parallel must be 'auto' or a positive integer; got {value!r}")
    return int(value)


def _adaptive(args, spec):
    """The adaptive study's settings (the spec's section, the flags over it), or None."""
    from scalerl.config import ConfigError
    from scalerl.experiments.adaptive import Adaptive

    if not args.adaptive:
        if any(v is not None for v in (args.budget, args.first_rung, args.threshold, args.pairing)):
            raise ConfigError("--budget, --first-rung, --threshold and --pairing go with --adaptive or --replay")
        return None
    held = spec.adaptive if spec is not None else None
    if held is None and args.budget is None:
        raise ConfigError("--adaptive needs a compute budget per point: 'adaptive: {budget: C}' in the spec, "
                          "or --budget C")
    flags = {k: v for k, v in (("budget", args.budget), ("first_rung", args.first_rung),
                                ("threshold", args.threshold), ("pairing", args.pairing)) if v is not None}  # fmt: skip
    return Adaptive.checked({**(held.model_dump(exclude_none=True) if held else {}), **flags}, "--adaptive")


def _resume_command(args, out: Path) -> str:
    """The command that continues this sweep where it stopped."""
    what = str(args.spec) if args.spec is not None else " ".join(["--recipes", *args.recipes] if args.recipes
                                                                 else ["--loo"])  # fmt: skip
    extra = " --adaptive" if args.adaptive else ""
    return f"scalerl sweep {what} --out {out}{extra}"


def _record(args, spec, variants) -> dict:
    """What the sweep folder remembers, to refuse mixing points of another sweep."""
    if spec is not None:
        return {**spec.to_dict(), "set": [*spec.overrides, *args.overrides]}
    return {"name": "recipes", "recipes": list(dict.fromkeys(v.recipe for v in variants)),
            "seeds": sorted({v.seed for v in variants}), "set": list(args.overrides), "axes": {}}


def handle(args: argparse.Namespace) -> int:
    from scalerl.config import ConfigError
    from scalerl.experiments.report import write_report
    from scalerl.experiments.runners import PointFailed
    from scalerl.experiments.sweep import claim_folder, run_sweep
    from scalerl.fit.errors import CurveError

    if args.replay:
        return handle_replay(args)
    out = args.out or Path("runs") / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        variants, spec = _plan(args, out)
        parallel = _parallel(args, spec, variants)
        runner = args.runner or (spec.runner if spec else "local")
        adaptive = _adaptive(args, spec)
        claim_folder(out, _record(args, spec, variants))
    except ConfigError as err:
        print(f"scalerl sweep: {err}", file=sys.stderr)
        return 2
    if not args.report_only:
        from scalerl.checkpoint import CheckpointError  # torch: only when training

        print(f"scalerl sweep: {len(variants)} point(s), {parallel} at a time ({runner})"
              + (f", adaptive: judged at {adaptive.budget:g} compute per point" if adaptive else ""))
        from scalerl.experiments.signals import SweepStopped, stopping
        from scalerl.pipeline.stop import Stopped

        try:
            with stopping():
                if adaptive is not None:
                    from scalerl.experiments.adaptive import run_adaptive

                    run_adaptive(variants, out, adaptive, parallel=parallel, runner=runner, x=args.x,
                                 force=getattr(args, "force", False))
                else:
                    run_sweep(variants, out, parallel=parallel, runner=runner)
        except (SweepStopped, Stopped) as stop:  # SIGTERM or SIGINT: the points are checkpointed
            name = signal.Signals(stop.code - 128).name
            print(f"scalerl sweep: stopped by {name}; every point started has its checkpoint; resume with "
                  f"`{_resume_command(args, out)}`.", file=sys.stderr)  # fmt: skip
            return stop.code
        except PointFailed as err:
            print(f"scalerl sweep: {err}", file=sys.stderr)
            return 1
        except (ConfigError, CheckpointError, CurveError) as err:  # a run's own bad input, a log unreadable
            print(f"scalerl sweep: {err}", file=sys.stderr)
            return 2
    runs: dict[str, list[Path]] = {}
    for v in variants:
        key = Path(v.recipe).stem + (f" {','.join(f'{k}={x}' for k, x in v.values)}" if v.values else "")
        runs.setdefault(key, []).append(v.run_dir)
    from scalerl.experiments.study import StudyError, write_study

    try:  # the study report always; the comparison (verdict, LOO, JSON) when there is something to compare
        written = write_study(out, x=args.x)
        if len(runs) >= 2:
            written += write_report(runs, out, x=args.x)
    except (CurveError, StudyError, OSError) as err:
        print(f"scalerl sweep: no report: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0


def handle_replay(args: argparse.Namespace) -> int:
    """``--replay``: the policy on finished runs (``scalerl.experiments.replay``)."""
    from scalerl.experiments.replay import describe, replay_inputs, replay_logs, write_json
    from scalerl.fit.choose import PAIRING, THRESHOLD, replay
    from scalerl.fit.commands.outputs import check_outputs
    from scalerl.fit.errors import CurveError

    try:
        if args.spec is not None:
            raise CurveError("--replay reads finished runs; give them without a spec")
        if args.budget is None or not args.budget > 0:
            raise CurveError("--replay needs --budget, a positive compute per point to judge the runs at")
        threshold = THRESHOLD if args.threshold is None else args.threshold
        if not 0 < threshold < 1:
            raise CurveError(f"--threshold must lie in (0, 1), got {threshold:g}")
        check_outputs(replay_inputs(args.replay), {"--json": args.json})  # never over a run it reads
        logs = replay_logs(args.replay, x=args.x)
        decided = replay(logs, args.budget, first_rung=args.first_rung, threshold=threshold,
                         pairing=args.pairing or PAIRING).to_dict()  # fmt: skip
        if args.json is not None:
            write_json(decided, args.json)
    except (CurveError, OSError) as err:
        print(f"scalerl sweep: {str(err).rstrip('.')}.", file=sys.stderr)
        return 2
    print("\n".join(describe(decided)))
    if args.json is not None:
        print(f"wrote {args.json}")
    return 0


def handle_report(args: argparse.Namespace) -> int:
    from scalerl.experiments.study import StudyError, write_study

    try:
        written = write_study(args.dir, html=args.html, markdown=args.markdown, x=args.x, y=args.y,
                              pooled=args.pooled)
    except StudyError as err:
        print(f"scalerl report: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
