"""``scalerl plan RUN --target R``: compute, hours and device-hours to reach a reward, the
chance of reaching it within a budget, and the split of the devices that gets there soonest.

RUN is a run folder (``metrics.jsonl`` and ``config.yaml``, live or finished) or any log
``scalerl fit`` reads. Hours come from the log's own ``wall_s`` or, for a log without it, a
speeds file (``--speeds``, JSON):

    {"seconds_per_compute": 40.0, "devices": 8,          # required
     "seconds_per_compute_sd": 4.0,                       # optional (default 0)
     "roles": {"gen_device_s": 12.0, "learner_device_s": 3.0, "sync_s": 0.5,
               "eval_s": 0.2, "generators": 6, "learner_devices": 2, "k": 8,
               "gen_device_sd": 1.5, "learner_device_sd": 0.4}}  # optional; the sds too

``roles`` (per-step costs, ``scalerl.fit.time.throughput.RoleTimes``) enables the split advice
for a peer's log; a run folder's step records give them. A log with neither gets the compute
and the chance, and no hours.

Every number about the target is the run's one ``Forecast`` (``fit.forecast``), made with
``--max-compute`` as its cut and the budget (``--budget-compute``, ``--budget-hours``, else the
run's own) as its horizon: ``scalerl fit --target-reward`` and the trainer's live record read
the same one. Bad input is one sentence and exit code 2 (``flags.guard``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scalerl import runfolder as rf
from scalerl.fit import report
from scalerl.fit.commands.flags import (
    add_fit_flags,
    add_train_reward_option,
    forecast_options,
    guard,
    options_from,
)
from scalerl.fit.commands.outputs import check_outputs
from scalerl.fit.commands.plan_answer import Plan, make_plan, split_hours
from scalerl.fit.commands.speeds import read_speeds
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import RunLog, forecast_of, read_logs
from scalerl.fit.forecast.crossing import WINDOW
from scalerl.fit.forecast.options import forecast_defaults
from scalerl.fit.forecast.prior_runs import log_prior
from scalerl.fit.forecast.words import (
    at_sentence,
    hours_text,
    reach_sentences,
    source_sentence,
    state_sentence,
)
from scalerl.fit.readers import Columns
from scalerl.fit.time.throughput import RoleTimes, role_times
from scalerl.fit.time.timing import compute_for_hours

__all__ = ["plan_command", "register"]


def register(subparsers) -> None:
    """Add ``plan`` to the ``scalerl`` command."""
    p = subparsers.add_parser("plan", help="time and devices to reach a target reward")
    p.add_argument("run", metavar="RUN", help="a run folder (live or finished) or a log scalerl fit reads")
    p.add_argument("--target", type=float, metavar="R",
                   help="the reward to reach, in [0, 1] (default: a run folder's forecast.target)")
    p.add_argument("--budget-hours", type=float, metavar="H", help="P(reaching R within H hours of the start)")
    p.add_argument("--budget-compute", type=float, metavar="C",
                   help="P(reaching R within compute C) (default: the run's own budget, where its folder says)")  # fmt: skip
    p.add_argument("--max-compute", type=float, default=None, metavar="C",
                   help="plan from the evaluations up to compute C (the run as it was then)")  # fmt: skip
    p.add_argument("--prior-runs", metavar="DIR_OR_GLOB",
                   help="finished runs to learn a prior from (as fit; default: a run folder's forecast.prior_runs; "
                        "none: no prior)")  # fmt: skip
    p.add_argument("--speeds", type=Path, metavar="FILE", help="JSON speeds of a log without wall time")
    p.add_argument("--devices", type=int, metavar="N", help="split N devices instead of the run's")
    p.add_argument("--k", type=int, metavar="K", help="predict the splits at lag bound K instead of the run's")
    p.add_argument("--generators", type=int, metavar="G",
                   help="generators of the run (default: its devices less its learner ranks)")  # fmt: skip
    p.add_argument("--window", type=int, default=None, metavar="W",
                   help=f"the run reaches R when the mean of its last W evaluations does (default {WINDOW}; "
                        "0: when its expected curve does)")  # fmt: skip
    add_fit_flags(p)
    add_train_reward_option(p)
    p.add_argument("--json", type=Path, metavar="FILE", help="write the plan as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the figure as PNG")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.set_defaults(func=guard(plan_command))


def _check_numbers(args: argparse.Namespace) -> None:
    if args.target is not None and not (np.isfinite(args.target) and 0.0 <= args.target <= 1.0):
        raise CurveError(f"--target must be a pass rate in [0, 1], got {args.target:g}.")
    for flag, value in (("--budget-hours", args.budget_hours), ("--budget-compute", args.budget_compute)):
        if value is not None and not (np.isfinite(value) and value > 0):
            raise CurveError(f"{flag} must be a positive number, got {value:g}.")
    if args.devices is not None and args.devices < 2:
        raise CurveError(f"--devices must be at least 2 (a generator and a learner), got {args.devices}.")
    if args.k is not None and args.k < 0:
        raise CurveError(f"--k must be 0 (on-policy) or more, got {args.k}.")
    if args.generators is not None and args.generators < 1:
        raise CurveError(f"--generators must be at least 1, got {args.generators}.")
    if args.window is not None and args.window < 0:
        raise CurveError(f"--window must be 0 (the expected curve) or a number of evaluations, got {args.window}.")


def _run_k(config: dict) -> int | None:
    """The run's lag bound from its config (``sync``: 0), or None without one."""
    if not config:
        return None
    pipeline = rf.section(config, "pipeline")
    if pipeline.get("mode") == "sync":
        return 0
    k = rf.number(pipeline, "k")
    return None if k is None else int(k)


def _times(log: RunLog, args: argparse.Namespace, roles: RoleTimes | None) -> RoleTimes | None:
    """The run's per-step role costs: a speeds file's, else its step records' (a run folder)."""
    if roles is not None:
        return roles
    clock, k = log.clock(), _run_k(log.config)
    records = list(log.records)
    if clock is None or k is None or not any(rf.LEARNER_BUSY in r for r in records):
        return None
    ranks = max(int(rf.number(r, rf.LEARNER_WORLD_SIZE) or 1) for r in records if rf.LEARNER_BUSY in r)
    generators = args.generators if args.generators is not None else max(int(round(clock.devices)) - ranks, 1)
    return role_times(records, generators=generators, learner_devices=ranks, k=k, source=log.curve.source)


def _log(args: argparse.Namespace, speeds) -> RunLog:
    logs = read_logs([args.run], Columns(x=args.x, y=args.y, step_to_compute=args.step_to_compute,
                                         trainer=args.trainer),
                     train=args.train_reward, speeds=speeds)  # fmt: skip
    if len(logs) != 1:
        raise CurveError(f"{args.run} holds {len(logs)} runs; plan one at a time (split the log, or pick a run).")
    log = logs[0]
    if args.max_compute is not None:
        log = log.upto(args.max_compute)
        if not len(log.curve):
            raise CurveError(f"{args.run}: no evaluation has compute <= --max-compute {args.max_compute:g}.")
    return log


def _target(args: argparse.Namespace, log: RunLog) -> float:
    """``--target``, else the run folder's own ``forecast.target``; neither is one sentence."""
    target = args.target if args.target is not None else log.target
    if target is None:
        raise CurveError(f"give --target R: {args.run} sets no forecast.target to plan for.")
    return target


def _budget(args: argparse.Namespace, log: RunLog) -> float | None:
    """The compute P(reach) is asked within: the budgets given (hours through the run's clock),
    else the run's own."""
    asked = [v for v in (args.budget_compute,) if v is not None]
    if args.budget_hours is not None:
        clock = log.clock()
        if clock is None:
            raise CurveError(log.clock_error())
        asked.append(compute_for_hours(clock, args.budget_hours))
    return max(asked) if asked else log.budget


def plan_of(args: argparse.Namespace) -> Plan:
    """The plan ``args`` ask for (``plan_command`` prints it)."""
    speeds, roles = (None, None) if args.speeds is None else read_speeds(args.speeds)
    log = _log(args, speeds)
    options = options_from(args, forecast_defaults(log.config))
    prior = log_prior(log, args.prior_runs, options, Columns(x=args.x, y=args.y), runs=[args.run],
                      curves=[log.curve], train=args.train_reward)  # fmt: skip
    fo = forecast_options(args, options, budget=_budget(args, log), prior=prior, window=args.window)
    forecast = forecast_of(log, options=fo)
    answer = forecast.reach(_target(args, log), budget_compute=args.budget_compute, budget_hours=args.budget_hours)
    return make_plan(forecast, answer, times=_times(log, args, roles), devices=args.devices, k=args.k)


def _lags(shares: dict) -> str:
    """``{lag: share}`` as "lag 1 83%, lag 2 17%" ("-" when nothing was measured)."""
    if not shares:
        return "-"
    return ", ".join(f"lag {int(k)} {float(v):.0%}" for k, v in sorted(shares.items(), key=lambda kv: int(kv[0])))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _sentences(plan: Plan) -> list[str]:
    f, curve, clock = plan.forecast, plan.curve, plan.clock
    where = (f"clock {clock.s:.4g} s per unit of compute (sd {clock.s_sd:.3g}), {clock.devices:.3g} devices"
             if clock is not None else "no wall time in the log: no hours (give --speeds FILE for them)")  # fmt: skip
    out = [f"{curve.source}: x = {curve.x}, y = {curve.y} ({len(curve)} points); {where}.", state_sentence(f)]
    out += reach_sentences(f, plan.answer)
    if f.budget is not None and f.draws is not None:
        out.append(at_sentence(f, f.budget, "the budget"))
    out.append(source_sentence(f))
    if plan.times is not None:
        m, cur, best = plan.times, plan.current, plan.best
        out.append(f"throughput: measured {m.measured_step_s:.3g} s per step, the model {cur.step_s:.3g} s "
                   f"({cur.bottleneck}-bound); staleness measured {_lags(m.measured_staleness)}, model "
                   f"{_lags(cur.staleness)}.")  # fmt: skip
        hours = split_hours(plan, best)
        when = ("target never reached" if not np.isfinite(hours[0])
                else f"target at {hours_text(hours[0])} h [{hours_text(hours[1])}, {hours_text(hours[2])} h]")  # fmt: skip
        out.append(f"recommended: {_count(best.generators, 'generator')} + "
                   f"{_count(best.learner_devices, 'learner device')} at k={best.k}: {best.steps_per_hour:.4g} "
                   f"steps/h by the model, {when}.")  # fmt: skip
    return out


def _split_table(plan: Plan) -> report.Table:
    rows = []
    for s in plan.options:
        h = split_hours(plan, s)
        mark = " (recommended)" if s is plan.best else ""
        rows.append((f"{s.generators} + {s.learner_devices}{mark}", str(s.k), f"{s.step_s:.4g}",
                     f"{s.steps_per_hour:.4g}", s.bottleneck, f"{s.mean_staleness:.2f}",
                     f"{hours_text(h[0])} [{hours_text(h[1])}, {hours_text(h[2])}]"))  # fmt: skip
    header = ("generators + learner", "k", "s/step", "steps/h", "bound by", "staleness", "hours to target")
    return report.Table("Splits of the devices (PipelineRL-k model)", header, tuple(rows))


def plan_command(args: argparse.Namespace) -> int:
    """``scalerl plan``: the module docstring."""
    _check_numbers(args)
    options_from(args)  # bad flags fail before anything is read or printed
    inputs = [Path(args.run), *([args.speeds] if args.speeds else [])]
    inside = [f for p in inputs if p.is_dir() for f in p.iterdir()]
    check_outputs([*inputs, *inside], {"--json": args.json, "--plot": args.plot, "--html": args.html})
    plan = plan_of(args)
    console = report.console()
    sentences = _sentences(plan)
    for s in sentences:
        console.print(s, markup=False)
    tables = [_split_table(plan)] if plan.times is not None else []
    for table in tables:
        console.print(report.rich_table(table))
    if args.json:
        console.print(f"wrote {report.write_json(args.json, plan.to_dict())}", markup=False)
    if args.plot or args.html:
        from scalerl.fit import plot
        from scalerl.fit.commands.plan_plot import plot_plan

        png = plot.png_bytes(plot_plan(plan))
        if args.plot:
            console.print(f"wrote {report.write(args.plot, png)}", markup=False)
        if args.html:
            figure = report.Figure("The curve and the forecast, and the crossing's interval", png, "plan.png")
            page = report.to_html(report.Report(f"Time to {plan.answer.target:g}: {plan.curve.source}", tuple(sentences),
                                                tuple(tables), (figure,)))  # fmt: skip
            console.print(f"wrote {report.write(args.html, page)}", markup=False)
    return 0
