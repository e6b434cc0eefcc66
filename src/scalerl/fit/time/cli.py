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
for a peer's log; a run folder's step records give them. Bad input is one sentence and
exit code 2 (``fit.cli``'s guard).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from scalerl.fit import report
from scalerl.fit.cli import _guard, _r0, options_from
from scalerl.fit.companion import add_train_reward_option, companion_of
from scalerl.fit.errors import CurveError
from scalerl.fit.outputs import check_outputs
from scalerl.fit.predictive import HORIZON
from scalerl.fit.readers import (
    RUN_LOG,
    Columns,
    expand_paths,
    is_tensorboard,
    load_runs,
    read_jsonl,
    suffixes,
)
from scalerl.fit.time.answer import Plan, make_plan, split_hours
from scalerl.fit.time.crossing import WINDOW
from scalerl.fit.time.throughput import RoleTimes, role_times
from scalerl.fit.time.timing import clock_from_records, clock_from_speeds, read_records
from scalerl.metric_names import LEARNER_BUSY, LEARNER_WORLD_SIZE, WALL

__all__ = ["plan_command", "register"]

def register(subparsers) -> None:
    """Add ``plan`` to the ``scalerl`` command."""
    p = subparsers.add_parser("plan", help="time and devices to reach a target reward")
    p.add_argument("run", metavar="RUN", help="a run folder (live or finished) or a log scalerl fit reads")
    p.add_argument("--target", type=float, required=True, metavar="R", help="the reward to reach, in [0, 1]")
    p.add_argument("--budget-hours", type=float, metavar="H", help="P(reaching R within H hours of the start)")
    p.add_argument("--budget-compute", type=float, metavar="C", help="P(reaching R within compute C)")
    p.add_argument("--prior-runs", metavar="DIR_OR_GLOB", help="finished runs to learn a prior from (as fit)")
    p.add_argument("--speeds", type=Path, metavar="FILE", help="JSON speeds of a log without wall time")
    p.add_argument("--devices", type=int, metavar="N", help="split N devices instead of the run's")
    p.add_argument("--k", type=int, metavar="K", help="predict the splits at lag bound K instead of the run's")
    p.add_argument("--generators", type=int, metavar="G",
                   help="generators of the run (default: its devices less its learner ranks)")
    p.add_argument("--window", type=int, default=WINDOW, metavar="W",
                   help=f"the run reaches R when the mean of its last W evaluations does (default {WINDOW}; "
                        "0: when its expected curve does)")
    p.add_argument("--x", help="compute column (default as scalerl fit)")
    p.add_argument("--y", help="reward column (default as scalerl fit)")
    p.add_argument("--r0", type=_r0, default=None, metavar="VALUE|first|fit", help="R0, as scalerl fit")
    p.add_argument("--min-compute", type=float, default=None, metavar="C", help="fit points from C on")
    p.add_argument("--method", choices=("fast", "paper"), default=None, help="as scalerl fit")
    p.add_argument("--level", type=float, default=None, metavar="P", help="coverage of every interval")
    p.add_argument("--margin", type=float, default=None, metavar="M", help="as scalerl fit")
    add_train_reward_option(p)
    p.add_argument("--json", type=Path, metavar="FILE", help="write the plan as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the figure as PNG")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.set_defaults(func=_guard(plan_command))


def _check_numbers(args: argparse.Namespace) -> None:
    if not (np.isfinite(args.target) and 0.0 <= args.target <= 1.0):
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
    if args.window < 0:
        raise CurveError(f"--window must be 0 (the expected curve) or a number of evaluations, got {args.window}.")


def _log_of(run: Path) -> tuple[Path, Path | None]:
    """The metrics log and (for a run folder) its config.yaml."""
    if not run.is_dir():
        return run, None
    if (run / RUN_LOG).is_file():
        return run / RUN_LOG, run / "config.yaml"
    if is_tensorboard(run):
        return run, None
    raise CurveError(f"{run} is a folder without metrics.jsonl (not a scalerl run folder).")


def _run_k(config: Path | None) -> int | None:
    """The run's lag bound from its config.yaml (``sync``: 0), or None without one."""
    if config is None or not config.is_file():
        return None
    import yaml

    pipeline = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("pipeline") or {}
    return 0 if pipeline.get("mode") == "sync" else int(pipeline.get("k", 8))


def _roles_of(speeds: Path) -> RoleTimes | None:
    roles = json.loads(speeds.read_text(encoding="utf-8")).get("roles")
    if roles is None:
        return None
    try:
        return RoleTimes(**{k: (int(v) if k in ("generators", "learner_devices", "k") else float(v))
                            for k, v in roles.items()})  # fmt: skip
    except (TypeError, ValueError) as err:
        raise CurveError(f"{speeds}: roles must hold numbers gen_device_s, learner_device_s, sync_s, eval_s, "
                         f"generators, learner_devices and k ({err}).") from None  # fmt: skip


def _inputs(args: argparse.Namespace):
    """(curve, clock, role times or None) of RUN."""
    log, config = _log_of(Path(args.run))
    curves = load_runs([str(log)], Columns(x=args.x, y=args.y))
    if len(curves) != 1:
        raise CurveError(f"{log} holds {len(curves)} runs; plan one at a time (split the log, or pick a run).")
    curve = curves[0]
    records = read_records(log) if log.is_file() and log.suffix.lower() in suffixes(read_jsonl) else []
    if args.speeds is not None:
        return curve, clock_from_speeds(args.speeds), _roles_of(args.speeds)
    if not any(WALL in r for r in records):
        raise CurveError(f"{log} has no wall time ({WALL}) to turn compute into hours; give its speeds with "
                         "--speeds FILE (see scalerl plan --help).")  # fmt: skip
    clock = clock_from_records(records, str(log), x=curve.x)
    k = _run_k(config)
    if k is None or not any(LEARNER_BUSY in r for r in records):
        return curve, clock, None
    ranks = max(int(r.get(LEARNER_WORLD_SIZE, 1)) for r in records if LEARNER_BUSY in r)
    generators = args.generators if args.generators is not None else max(int(round(clock.devices)) - ranks, 1)
    return curve, clock, role_times(records, generators=generators, learner_devices=ranks, k=k, source=str(log))


def _hours(h: float) -> str:
    return "never" if not np.isfinite(h) else report.fmt(h)


def _compute(c: float) -> str:
    return "never" if not np.isfinite(c) else report.fmt_compute(c)


def _horizon(plan: Plan) -> str:
    """What P(reach at all) is within, in words: the horizon's compute and hours, and why."""
    a, last = plan.answer, float(plan.curve.compute.max())
    why = f"{HORIZON:g}x the compute so far" if a.horizon <= HORIZON * last * (1 + 1e-9) else "the budget"
    hours = float(plan.clock.hours(np.array([a.horizon]))[0])
    return f"{report.fmt_compute(a.horizon)} compute ({why}, about {_hours(hours)} h)"


def _lags(shares: dict) -> str:
    """``{lag: share}`` as "lag 1 83%, lag 2 17%" ("-" when nothing was measured)."""
    if not shares:
        return "-"
    return ", ".join(f"lag {int(k)} {float(v):.0%}" for k, v in sorted(shares.items(), key=lambda kv: int(kv[0])))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _sentences(plan: Plan) -> list[str]:
    a, t = plan.answer, plan.answer.target
    pct = f"{a.level:.0%}"
    out = [f"{plan.curve.source}: x = {plan.curve.x}, y = {plan.curve.y} ({len(plan.curve)} points); "
           f"clock {plan.clock.s:.4g} s per unit of compute (sd {plan.clock.s_sd:.3g}), "
           f"{plan.clock.devices:.3g} devices."]  # fmt: skip
    horizon = _horizon(plan) if a.horizon is not None else ""
    if a.already:
        out.append(f"target {t:g} already reached: the mean of the last {plan.window} evaluations read at least "
                   f"{t:g} at {report.fmt_compute(a.compute[0])} compute, {_hours(a.hours[0])} hours.")  # fmt: skip
    elif a.no_rise is not None:
        out.append(f"{a.no_rise}; P(reaching {t:g} within {horizon}) = {a.p_reach_at_all:.3f}.")
    elif not a.reachable:
        out.append(f"target {t:g} is not reachable: P(reaching it within {horizon}) = {a.p_reach_at_all:.3f}, "
                   f"below {(1 - a.level) / 2:.3f}.")  # fmt: skip
    else:
        c, h, d = a.compute, a.hours, a.device_hours
        read = f"read as the mean of {plan.window} evaluations" if plan.window else "the expected curve"
        out.append(f"target {t:g} ({read}; {pct} intervals): compute {report.fmt_compute(c[0])} "
                   f"[{report.fmt_compute(c[1])}, {_compute(c[2])}], hours {_hours(h[0])} [{_hours(h[1])}, "
                   f"{_hours(h[2])}], device-hours {_hours(d[0])} [{_hours(d[1])}, {_hours(d[2])}]; "
                   f"P(reached within {horizon}) = {a.p_reach_at_all:.3f}.")  # fmt: skip
    if a.p_reach is not None:
        within = " and ".join(f"{v:g} {u}" for v, u in ((a.budget_hours, "hours"), (a.budget_compute, "compute"))
                              if v is not None)  # fmt: skip
        out.append(f"P(reaching {t:g} within {within}) = {a.p_reach:.3f}.")
    source = {"prior": "the prior", "flat": "the run's flat level (no rise)",
              "training reward": f"the training reward's fit ({plan.companion_column}) and the validation's offset "
                                 "from it"}.get(plan.source, "the fit")  # fmt: skip
    out.append(f"intervals from: {source}" + (f" ({plan.prior_reason})." if plan.prior_reason else "."))
    if plan.times is not None:
        m, cur, best = plan.times, plan.current, plan.best
        out.append(f"throughput: measured {m.measured_step_s:.3g} s per step, the model {cur.step_s:.3g} s "
                   f"({cur.bottleneck}-bound); staleness measured {_lags(m.measured_staleness)}, model "
                   f"{_lags(cur.staleness)}.")  # fmt: skip
        hours = split_hours(plan, best)
        when = ("target never reached" if not np.isfinite(hours[0])
                else f"target at {_hours(hours[0])} h [{_hours(hours[1])}, {_hours(hours[2])} h]")  # fmt: skip
        out.append(f"recommended: {_count(best.generators, 'generator')} + "
                   f"{_count(best.learner_devices, 'learner device')} at k={best.k}: {best.steps_per_hour:.4g} "
                   f"steps/h, {when}.")  # fmt: skip
    return out


def _split_table(plan: Plan) -> report.Table:
    rows = []
    for s in plan.options:
        h = split_hours(plan, s)
        mark = " (recommended)" if s is plan.best else ""
        rows.append((f"{s.generators} + {s.learner_devices}{mark}", str(s.k), f"{s.step_s:.4g}",
                     f"{s.steps_per_hour:.4g}", s.bottleneck, f"{s.mean_staleness:.2f}",
                     f"{_hours(h[0])} [{_hours(h[1])}, {_hours(h[2])}]"))  # fmt: skip
    header = ("generators + learner", "k", "s/step", "steps/h", "bound by", "staleness", "hours to target")
    return report.Table("Splits of the devices (PipelineRL-k model)", header, tuple(rows))


def plan_command(args: argparse.Namespace) -> int:
    """``scalerl plan``: the module docstring."""
    _check_numbers(args)
    options = options_from(args)
    inputs = [Path(args.run), *([args.speeds] if args.speeds else [])]
    inside = [f for p in inputs if p.is_dir() for f in p.iterdir()]
    check_outputs([*inputs, *inside], {"--json": args.json, "--plot": args.plot, "--html": args.html})
    curve, clock, times = _inputs(args)
    companion = companion_of(args, curve, Columns(x=args.x, y=args.y), _log_of(Path(args.run))[0])
    prior = None
    if args.prior_runs is not None:
        from scalerl.fit.prior_runs import load_prior

        prior = load_prior(args.prior_runs, options, Columns(x=args.x, y=args.y),
                           exclude=tuple(str(p) for p in expand_paths([args.run])), forecast=[curve])  # fmt: skip
    plan = make_plan(curve, clock, args.target, options, prior=prior, times=times, devices=args.devices, k=args.k,
                     budget_hours=args.budget_hours, budget_compute=args.budget_compute,
                     window=args.window, companion=companion)  # fmt: skip
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
        from scalerl.fit.time.plot import plot_plan

        png = plot.png_bytes(plot_plan(plan))
        if args.plot:
            console.print(f"wrote {report.write(args.plot, png)}", markup=False)
        if args.html:
            figure = report.Figure("The curve against hours and the crossing time's interval", png, "plan.png")
            page = report.to_html(report.Report(f"Time to {args.target:g}: {curve.source}", tuple(sentences),
                                                tuple(tables), (figure,)))  # fmt: skip
            console.print(f"wrote {report.write(args.html, page)}", markup=False)
    return 0
