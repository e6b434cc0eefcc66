"""``scalerl fit``: each run's law (A, B, C_mid with their intervals) and its one ``Forecast``.

For each run of the given logs: the law fitted to what the forecast sees (the whole run, or
its first ``--fit-frac`` of compute, or up to ``--max-compute``), and the forecast made from
the same log (``fit.forecast.forecast_of``: following the training reward where the log has
one, under the prior of ``--prior-runs`` or of a run folder's ``forecast.prior_runs``). Every
forecast number comes from that one forecast: ``--target-compute`` (the value there),
``--target-reward`` (when it is reached, as ``scalerl plan`` reads it: the mean of the last 5
evaluations) and ``--fit-frac``'s held-out check (the forecast made at the cut, scored on the
rest, with the intervals' width beside "covered"). Bad input is one sentence and exit code 2 (``flags.guard``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scalerl import runfolder as rf
from scalerl.fit import plot, report
from scalerl.fit.commands import fit_output
from scalerl.fit.commands.demo import demo_command
from scalerl.fit.commands.flags import (
    add_curve_options,
    add_train_reward_option,
    check_fraction,
    columns_of,
    forecast_options,
    guard,
    options_from,
)
from scalerl.fit.commands.outcome import FitOutcome
from scalerl.fit.commands.outputs import check_outputs
from scalerl.fit.commands.prior_answer import prior_answer
from scalerl.fit.compare import fit_run
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import RunLog, forecast_of, read_logs
from scalerl.fit.forecast.options import forecast_defaults
from scalerl.fit.forecast.prior_runs import log_prior
from scalerl.fit.options import FitOptions
from scalerl.fit.readers import Curve, expand_paths
from scalerl.fit.resample import PooledFit, pooled_fit

__all__ = ["fit_command", "register"]


def register(subparsers) -> None:
    """Add ``fit``, ``compare`` and ``demo-fit`` to the ``scalerl`` command."""
    from scalerl.fit.commands.compare import register as register_compare

    p = subparsers.add_parser("fit", help="fit the ScaleRL sigmoid to runs and forecast")
    add_curve_options(p)
    p.add_argument("--fit-frac", type=float, default=1.0, metavar="F",
                   help="forecast from the first F of each run's compute and score it on the rest")  # fmt: skip
    p.add_argument("--max-compute", type=float, default=None, metavar="C",
                   help="use only points with compute <= C (a run cut at a step, as its live forecast saw it)")  # fmt: skip
    p.add_argument("--target-compute", type=float, action="append", default=[], metavar="C",
                   help="forecast the reward at this compute (repeatable)")  # fmt: skip
    p.add_argument("--target-reward", type=float, action="append", default=[], metavar="R",
                   help="when the run reaches this reward, and the chance it does (repeatable; as scalerl plan)")  # fmt: skip
    p.add_argument("--pool", action="store_true",
                   help="the runs are seeds of one recipe: add their pooled fit and across-seed spread")  # fmt: skip
    p.add_argument("--prior-runs", metavar="DIR_OR_GLOB",
                   help="finished runs to learn a prior from; the forecast follows it where it accepts the run "
                        "(default: a run folder's forecast.prior_runs; none: no prior)")  # fmt: skip
    add_train_reward_option(p)
    p.add_argument("--json", type=Path, metavar="FILE", help="write the fits and forecasts as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the figure as PNG")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.set_defaults(func=guard(fit_command))
    register_compare(subparsers)
    p = subparsers.add_parser("demo-fit", help="forecasting demo on the bundled synthetic curves")
    p.add_argument("--out", type=Path, default=Path("out/demo-fit"), help="output folder")
    p.set_defaults(func=guard(demo_command))


def _outcome(log: RunLog, args: argparse.Namespace, prior) -> FitOutcome:
    """One run: its forecast (cut at ``--fit-frac``), the law's fit of what it saw, the held-out
    score; a run folder's own ``forecast.*`` settings are the defaults the flags override."""
    options = options_from(args, forecast_defaults(log.config))
    end = float(log.curve.compute[-1])
    cut = None
    if args.fit_frac < 1.0:
        cut = args.fit_frac * end
        if not (log.curve.compute > cut).any() or not (log.curve.compute <= cut).any():
            raise CurveError(f"{log.curve.source}: --fit-frac {args.fit_frac:g} leaves no point on one side of "
                             f"compute {cut:g}.")  # fmt: skip
    asked = [*args.target_compute, *([end] if cut is not None else [])]
    budget = max(asked) if asked else log.budget
    fo = forecast_options(args, options, budget=budget, prior=prior)
    forecast = forecast_of(log, cut=cut, options=fo)
    seen = forecast.log.curve
    run = None
    if forecast.fit is not None:
        run = fit_run(seen, options=options, forecast=forecast, budget=not args.no_budget)
    heldout = forecast.heldout(log.curve.compute, log.curve.reward) if cut is not None else None
    answer = None
    if forecast.method == "prior" and forecast.fit is not None:
        answer = prior_answer(forecast.prior, forecast.fit, margin=options.margin)
    return FitOutcome(log, forecast, run, heldout, list(args.target_compute), list(args.target_reward), answer)


def _pooled(logs: list[RunLog], options: FitOptions, args) -> tuple[FitOutcome, PooledFit]:
    """Seeds of one recipe fitted together (``pooled_fit``): the recipe's law, no forecast of its own."""
    curves = [log.curve for log in logs]
    pooled = pooled_fit([(c.compute, c.reward) for c in curves], options)
    order = np.argsort(np.concatenate([c.compute for c in curves]), kind="stable")
    merged = Curve(f"pooled ({len(curves)} seeds)", np.concatenate([c.compute for c in curves])[order],
                   np.concatenate([c.reward for c in curves])[order], "; ".join(c.source for c in curves),
                   curves[0].x, curves[0].y)  # fmt: skip
    run = fit_run(merged, options=options, fit=pooled.fit, budget=not args.no_budget)
    return FitOutcome(RunLog(merged), None, run, None, [], [], None), pooled


def _spread_sentence(pooled: PooledFit) -> str:
    half = pooled.spread
    return (f"Across-seed spread (half range) over {len(pooled.per_seed)} seeds: A ±{half['A']:.3f}, "
            f"B ±{half['B']:.3f}, C_mid ±{report.fmt(half['C_mid'])}; the paper's margin on A is ±0.02, from "
            "±0.015 over 3 ScaleRL seeds (§1.4).")  # fmt: skip


def _inputs(args: argparse.Namespace) -> list[Path]:
    given = expand_paths(args.runs)
    return [*given, *(f for p in given if p.is_dir() for f in p.iterdir())]


def fit_command(args: argparse.Namespace) -> int:
    """``scalerl fit``: the module docstring."""
    check_fraction(args.fit_frac, "--fit-frac", allow_one=True)
    options = options_from(args)  # bad flags fail before anything is read or printed
    if args.pool and args.fit_frac < 1.0:
        raise CurveError("--pool fits whole runs; use it without --fit-frac.")
    check_outputs(_inputs(args), {"--json": args.json, "--plot": args.plot, "--html": args.html})
    logs = read_logs(args.runs, columns_of(args), train=args.train_reward)
    if args.max_compute is not None:
        logs = [_cut(log, args.max_compute) for log in logs]
    if args.pool and len(logs) < 2:
        raise CurveError(f"--pool needs at least two runs (seeds), got {len(logs)}.")
    curves = [log.curve for log in logs]
    priors = [log_prior(log, args.prior_runs, options, columns_of(args), runs=args.runs, curves=curves,
                        train=args.train_reward) for log in logs]  # fmt: skip
    console = report.console()
    for log in logs:
        console.print(f"{log.curve.source}: x = {log.curve.x}, y = {log.curve.y} ({len(log.curve)} points)",
                      markup=False)  # fmt: skip
    outcomes = [_outcome(log, args, prior) for log, prior in zip(logs, priors)]
    pooled = None
    if args.pool:
        pooled_outcome, pooled = _pooled(logs, options, args)
        outcomes.append(pooled_outcome)
    caption = fit_output.caption(outcomes, args.fit_frac, options.level)
    for table in fit_output.fit_tables(outcomes, caption):
        console.print(report.rich_table(table))
    if pooled is not None:
        console.print(_spread_sentence(pooled), markup=False)
    for line in fit_output.verdict_lines(outcomes):
        console.print(line, markup=False)
    _write(args, console, outcomes, pooled, caption)
    return 0


def _cut(log: RunLog, max_compute: float) -> RunLog:
    cut = log.upto(max_compute)
    if len(cut.curve) == 0:
        raise CurveError(f"{log.curve.source}: no point has compute <= --max-compute {max_compute:g}.")
    return cut


def _write(args, console, outcomes: list[FitOutcome], pooled: PooledFit | None, caption: str) -> None:
    """``--json``, ``--plot`` and ``--html``."""
    if args.json:
        data = {"runs": [o.to_dict() for o in outcomes]}
        if pooled is not None:
            data["pooled"] = pooled.to_dict()
        console.print(f"wrote {report.write_json(args.json, data)}", markup=False)
    shown = outcomes[-1:] if pooled is not None else outcomes
    if not (args.plot or args.html):
        return
    png = plot.png_bytes(fit_output.fit_figure(shown))
    if args.plot:
        console.print(f"wrote {report.write(args.plot, png)}", markup=False)
    if args.html:
        figure = report.Figure("Data, the law's fit, and the forecast with its band and predictive interval", png,
                               rf.FIT_FIGURE)  # fmt: skip
        page = report.to_html(fit_output.fit_report(outcomes, caption, [figure]))
        console.print(f"wrote {report.write(args.html, page)}", markup=False)
