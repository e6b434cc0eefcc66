"""``scalerl fit``, ``scalerl compare`` and ``scalerl demo-fit``.

Every bad input ends the command with one sentence on stderr and exit code 2, never a
traceback: the handlers turn ``CurveError`` (bad curves and options) and ``OSError``
(missing or unwritable files) into that sentence.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from scalerl.fit import fit_output, forecast, plot, report
from scalerl.fit.companion import Companion, add_train_reward_option, companion_of
from scalerl.fit.compare import (
    RunFit,
    compare_runs,
    extrapolation_errors,
    fit_run,
    loo_table,
)
from scalerl.fit.demo import demo_command
from scalerl.fit.errors import EXIT_BAD_INPUT, CurveError, CurveWarning
from scalerl.fit.options import FitOptions
from scalerl.fit.outcome import FitOutcome
from scalerl.fit.outputs import check_outputs
from scalerl.fit.pooling import joint_fit
from scalerl.fit.posterior import PriorForecast, forecast_with_prior
from scalerl.fit.prior_answer import ALONE, prior_answer
from scalerl.fit.prior_runs import load_prior
from scalerl.fit.readers import (
    FORMATS,
    Columns,
    Curve,
    expand_paths,
    load_runs,
)
from scalerl.fit.resample import PooledFit, pooled_fit


def _r0(text: str) -> float | str:
    if text in ("first", "fit"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number, 'first' or 'fit', not {text!r}"
        ) from None


def _add_curve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs", nargs="+", metavar="RUN", help=f"{FORMATS}; globs ok"
    )
    p.add_argument(
        "--x", help="compute column (default: compute, gpu_hours, compute_gpu_hours, ...)"
    )
    p.add_argument("--y", help="reward column (default: val_pass_rate, pass_rate, reward, ...)")
    p.add_argument(
        "--step-to-compute",
        type=float,
        metavar="F",
        help="compute per step: compute = step (or --x) times F",
    )
    p.add_argument(
        "--r0",
        type=_r0,
        default=None,
        metavar="VALUE|first|fit",
        help="R0: a number, the first point's reward, or fitted "
        "(default: the step-0 reward if there is a compute-0 point, else fitted)",
    )
    p.add_argument(
        "--min-compute",
        type=float,
        default=None,
        metavar="C",
        help="fit only points with at least this compute (the paper drops ~1.5k GPU-h)",
    )
    p.add_argument(
        "--method",
        choices=("fast", "paper"),
        default=None,
        help="fast continuous fit, or the paper's App. A.5 grid",
    )
    p.add_argument(
        "--level",
        type=float,
        default=None,
        metavar="P",
        help=f"coverage every interval claims (default {FitOptions.level})",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="M",
        help="a ceiling is identified when A's interval is within ±M; two ceilings are equal "
        f"within M (default {FitOptions.margin}, the paper's)",
    )
    p.add_argument(
        "--no-budget",
        action="store_true",
        help="skip the budget advice (compute needed to pin A; ~1 s per run)",
    )


def register(subparsers) -> None:
    """Add ``fit``, ``compare`` and ``demo-fit`` to the ``scalerl`` command."""
    p = subparsers.add_parser("fit", help="fit the ScaleRL sigmoid to runs and forecast")
    _add_curve_options(p)
    p.add_argument(
        "--fit-frac",
        type=float,
        default=1.0,
        metavar="F",
        help="fit on this fraction of each run's compute budget and score the rest",
    )
    p.add_argument(
        "--max-compute",
        type=float,
        default=None,
        metavar="C",
        help="use only points with compute <= C (a run cut at a step, as its live forecast saw it)",
    )
    p.add_argument(
        "--target-compute",
        type=float,
        action="append",
        default=[],
        metavar="C",
        help="forecast the reward at this compute (repeatable)",
    )
    p.add_argument(
        "--target-reward",
        type=float,
        action="append",
        default=[],
        metavar="R",
        help="compute needed to reach this reward (repeatable)",
    )
    p.add_argument(
        "--pool",
        action="store_true",
        help="the runs are seeds of one recipe: add their pooled fit and across-seed spread",
    )
    p.add_argument(
        "--prior-runs",
        metavar="DIR_OR_GLOB",
        help="finished runs to learn a prior from; the forecast under it comes first in every "
        "output, the prior-free fit beside it (needs --fit-frac < 1 or --target-compute)",
    )
    add_train_reward_option(p)
    p.add_argument("--json", type=Path, metavar="FILE", help="write the fits as JSON")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the figure as PNG")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.set_defaults(func=_guard(fit_command))

    _register_compare(subparsers)
    p = subparsers.add_parser("demo-fit", help="forecasting demo on the bundled synthetic curves")
    p.add_argument("--out", type=Path, default=Path("out/demo-fit"), help="output folder")
    p.set_defaults(func=_guard(demo_command))


def _register_compare(subparsers) -> None:
    """``scalerl compare``."""
    p = subparsers.add_parser("compare", help="compare runs with the paper's A-margin rule")
    _add_curve_options(p)
    p.add_argument("--baseline", help="run name for the leave-one-out table (Fig. 7)")
    p.add_argument(
        "--pooled",
        action="store_true",
        help="fit the runs jointly: B and C_mid partially pooled across runs, A per run; "
        "the comparison and leave-one-out table read the joint fit",
    )
    p.add_argument(
        "--fit-frac",
        type=float,
        default=None,
        metavar="F",
        help="also score sigmoid vs power-law extrapolation fitted on this fraction",
    )
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write a Markdown report")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the comparison figure as PNG")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the comparison as JSON")
    p.set_defaults(func=_guard(compare_command))


def _guard(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``handler``; bad input becomes one sentence on stderr and exit code 2, and each
    ``CurveWarning`` one line on stderr."""

    def run(args: argparse.Namespace) -> int:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", CurveWarning)
                shown = warnings.showwarning

                def show(message, category, *rest, **kwargs):
                    if not issubclass(category, CurveWarning):
                        return shown(message, category, *rest, **kwargs)
                    print(f"scalerl {args.command}: warning: {message}", file=sys.stderr)

                warnings.showwarning = show
                return handler(args)
        except CurveError as err:
            message = str(err)
        except OSError as err:
            name = err.filename if err.filename is not None else ""
            message = f"{name}: {err.strerror or err}." if name else f"{err}."
        print(f"scalerl {args.command}: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    return run


def _check_outputs(args: argparse.Namespace, outputs: dict[str, Path | None]) -> None:
    """Refuse, before anything is read or written, an output that is an input (a TensorBoard
    folder's event files included) or that another output also writes."""
    given = expand_paths(args.runs)
    inside = [f for p in given if p.is_dir() for f in p.iterdir()]
    check_outputs([*given, *inside], outputs)


def _markdown_figures(markdown: Path | None) -> dict[str, Path | None]:
    """The PNGs ``report.write_markdown`` puts beside a comparison's Markdown file."""
    if markdown is None:
        return {}
    return {f"--markdown's {name.removesuffix('.png')} figure": markdown.parent / f"{markdown.stem}_{name}"
            for name in ("compare.png", "efficiency.png")}  # report.comparison_figures' names


def _load(args: argparse.Namespace) -> list[Curve]:
    return load_runs(args.runs, _columns_of(args))


def _columns_of(args: argparse.Namespace) -> Columns:
    return Columns(x=args.x, y=args.y, step_to_compute=args.step_to_compute)


OPTION_FLAGS = {"r0": "--r0", "min_compute": "--min-compute", "method": "--method", "level": "--level",
                "margin": "--margin"}  # fmt: skip


def options_from(args: argparse.Namespace) -> FitOptions:
    """The fit options the flags name; a flag not given keeps ``FitOptions``' default. Every
    bad number (a level, margin, R0, cut or target outside its range, NaN included) is one
    sentence here, before any file is read or any line printed."""
    max_compute = getattr(args, "max_compute", None)
    if max_compute is not None and not (np.isfinite(max_compute) and max_compute > 0):
        raise CurveError(f"--max-compute must be a positive compute, got {max_compute:g}.")
    options = FitOptions.from_given({k: getattr(args, k) for k in OPTION_FLAGS}, OPTION_FLAGS)
    for c in getattr(args, "target_compute", ()):
        if not np.isfinite(c) or c <= 0:
            raise CurveError(f"--target-compute must be a positive compute, got {c:g}.")
    for r in getattr(args, "target_reward", ()):
        if not np.isfinite(r) or not 0.0 <= r <= 1.0:
            raise CurveError(f"--target-reward must be a pass rate in [0, 1], got {r:g}.")
    return options


def _check_fraction(value: float | None, name: str, *, allow_one: bool) -> None:
    if value is None:
        return
    ok = 0.0 < value <= 1.0 if allow_one else 0.0 < value < 1.0
    if not ok:
        upper = "1]" if allow_one else "1)"
        raise CurveError(f"{name} must lie in (0, {upper}, got {value:g}.")


def _cut(curve: Curve, max_compute: float) -> Curve:
    cut = curve.head(max_compute)
    if len(cut) == 0:
        raise CurveError(f"{curve.source}: no point has compute <= --max-compute {max_compute:g}.")
    return cut


def _columns(console, curves: list[Curve]) -> None:
    """Say which columns were read: the first thing to check when a fit looks wrong."""
    for c in curves:
        console.print(f"{c.source}: x = {c.x}, y = {c.y} ({len(c)} points)", markup=False)


# --- scalerl fit -----------------------------------------------------------------------


def _fit_one(curve: Curve, args: argparse.Namespace, options: FitOptions, prior=None) -> FitOutcome:
    """One run's fit, hold-out score and forecasts; ``prior`` is ``load_prior``'s
    (prior, why none, n) when --prior-runs was given."""
    holdout = None
    horizon = 2.0
    if args.fit_frac < 1.0:
        holdout = forecast.holdout_forecast(
            curve.compute, curve.reward, fit_frac=args.fit_frac, options=options, source=curve.source
        )
        horizon = holdout.extrapolation_ratio
    fit = holdout.fit if holdout is not None else options.fit(curve.compute, curve.reward, source=curve.source)
    horizon = max(horizon, forecast.horizon_for(float(fit.compute.max()), args.target_compute))
    run = fit_run(curve, options=options, fit=fit, horizon=horizon, budget=not args.no_budget)
    with_prior = None if prior is None else _with_prior(curve, fit, holdout, args, options, prior)
    companion = companion_of(args, curve, _columns_of(args)) if args.target_compute else None
    outcome = _with_forecasts(run, holdout, args, with_prior, companion, options)
    if with_prior is None or not with_prior.used:
        return outcome
    answer = prior_answer(with_prior, fit, margin=options.margin, holdout=holdout, targets=args.target_compute,
                          rewards=args.target_reward)  # fmt: skip
    return replace(outcome, answer=answer)


def _with_prior(curve: Curve, fit, holdout, args, options: FitOptions, prior) -> PriorForecast:
    """The forecast under the prior at the hold-out's end, else the largest --target-compute."""
    prior, why, n_runs = prior
    fit_until = holdout.fit_until if holdout is not None else float(curve.compute[-1])
    budget = float(holdout.compute[-1]) if holdout is not None else max(args.target_compute, default=fit_until)
    if budget <= fit_until:
        why = "no forecast beyond the data was asked for (--fit-frac < 1 or --target-compute), so the fit is prior-free"
        return PriorForecast(n_runs, False, why)
    return forecast_with_prior(
        fit, fit_until=fit_until, budget=budget, prior=prior, options=options, n_runs=n_runs, why_none=why
    )


def _with_forecasts(run: RunFit, holdout, args: argparse.Namespace, prior=None, companion: Companion | None = None,
                    options: FitOptions | None = None) -> FitOutcome:
    """The forecasts at ``--target-compute``: the training reward's (``fit.companion``) where
    the run has one that fits and rises, else Eq. 1's with the fit's intervals."""
    forecasts = [(c, forecast.predict_at(run.fit, c, run.unc)) for c in args.target_compute]
    reaches = [forecast.compute_to_reach(run.fit, r, run.unc) for r in args.target_reward]
    followed = ""
    if companion is not None:
        from scalerl.fit.time.answer import forecast_draws

        ahead = [(c, *forecast_draws(run.fit, options, None, c, None, c, companion=companion)[:2])
                 for c in args.target_compute]  # fmt: skip
        if all(source == "training reward" for _, _, source in ahead):
            forecasts = [(c, _from_draws(pred, c)) for c, pred, _ in ahead]
            followed = companion.column
    return FitOutcome(run, holdout, forecasts, reaches, prior, forecasts_from=followed)


def _from_draws(pred, C: float) -> forecast.Forecast:
    """A forecast at ``C`` read off the predictive draws: their median, band and the interval of one evaluation."""
    at = np.array([C])
    (lo, hi), (p_lo, p_hi) = pred.band(at), pred.predictive(at)
    return forecast.Forecast(float(pred.median(at)[0]), float(lo[0]), float(hi[0]), float(p_lo[0]), float(p_hi[0]))


def _pooled(curves: list[Curve], args, options: FitOptions) -> tuple[FitOutcome, PooledFit]:
    """Seeds of one recipe fitted together (``pooled_fit``); forecasts use the pooled fit."""
    pooled = pooled_fit([(c.compute, c.reward) for c in curves], options)
    order = np.argsort(np.concatenate([c.compute for c in curves]), kind="stable")
    merged = Curve(
        f"pooled ({len(curves)} seeds)",
        np.concatenate([c.compute for c in curves])[order],
        np.concatenate([c.reward for c in curves])[order],
        "; ".join(c.source for c in curves),
        curves[0].x,
        curves[0].y,
    )
    run = fit_run(merged, options=options, fit=pooled.fit, budget=not args.no_budget)
    return _with_forecasts(run, None, args), pooled


def _spread_sentence(pooled: PooledFit) -> str:
    half = pooled.spread
    return (
        f"Across-seed spread (half range) over {len(pooled.per_seed)} seeds: "
        f"A ±{half['A']:.3f}, B ±{half['B']:.3f}, C_mid ±{report.fmt(half['C_mid'])}; "
        "the paper's margin on A is ±0.02, from ±0.015 over 3 ScaleRL seeds (§1.4)."
    )


def fit_command(args: argparse.Namespace) -> int:
    """``scalerl fit``: fit each run, print the table, verdicts, forecasts, hold-out scores."""
    _check_fraction(args.fit_frac, "--fit-frac", allow_one=True)
    options = options_from(args)  # bad flags fail before anything is read or printed
    if args.pool and args.fit_frac < 1.0:
        raise CurveError("--pool fits whole runs; use it without --fit-frac.")
    _check_outputs(args, {"--json": args.json, "--plot": args.plot, "--html": args.html})
    curves = _load(args)
    if args.max_compute is not None:
        curves = [_cut(c, args.max_compute) for c in curves]
    if args.pool and len(curves) < 2:
        raise CurveError(f"--pool needs at least two runs (seeds), got {len(curves)}.")
    prior = None
    if args.prior_runs is not None:
        prior = load_prior(args.prior_runs, options, _columns_of(args),
                           exclude=tuple(str(p) for p in expand_paths(args.runs)), forecast=curves)  # fmt: skip
    console = report.console()
    _columns(console, curves)
    outcomes = [_fit_one(curve, args, options, prior) for curve in curves]
    pooled = None
    if args.pool:
        pooled_outcome, pooled = _pooled(curves, args, options)
        outcomes.append(pooled_outcome)
    caption = fit_output.caption(outcomes, args.fit_frac, options.level)
    for table in fit_output.fit_tables(outcomes, caption):
        console.print(report.rich_table(table))
    if pooled is not None:
        console.print(_spread_sentence(pooled), markup=False)
    for line in fit_output.verdict_lines(outcomes):
        console.print(line, markup=False)
    if args.json:
        data = {"runs": [o.to_dict() for o in outcomes]}
        if pooled is not None:
            data["pooled"] = pooled.to_dict()
        console.print(f"wrote {report.write_json(args.json, data)}", markup=False)
    shown = outcomes[-1:] if pooled is not None else outcomes
    if args.plot or args.html:
        png = plot.png_bytes(fit_output.fit_figure(shown))
        if args.plot:
            console.print(f"wrote {report.write(args.plot, png)}", markup=False)
        if args.html:
            what = "Fit, band on the expected curve and predictive interval"
            if any(o.answer is not None for o in shown):
                what = f"Fit with the prior first (band and predictive interval), {ALONE} beside it; the legend names both"
            figure = report.Figure(what, png, "fit.png")
            page = report.to_html(fit_output.fit_report(outcomes, caption, [figure]))
            console.print(f"wrote {report.write(args.html, page)}", markup=False)
    return 0


# --- scalerl compare -------------------------------------------------------------------


def _compare(args: argparse.Namespace, curves: list[Curve], options: FitOptions):
    """Comparison, LOO table, (with --fit-frac) extrapolation scores and (with --pooled) the
    joint fit both read."""
    joint = joint_fit(curves, options) if args.pooled else None
    fits = None if joint is None else joint.fits
    comparison = compare_runs(curves, options=options, budget=not args.no_budget, fits=fits)
    loo = loo_table(curves, baseline=args.baseline, options=options, fits=fits)
    extrapolation = []
    if args.fit_frac is not None:
        extrapolation = [extrapolation_errors(c, fit_frac=args.fit_frac, options=options) for c in curves]
    return comparison, loo, extrapolation, joint


def compare_command(args: argparse.Namespace) -> int:
    """``scalerl compare``: table, verdict, and the figure / HTML / Markdown / JSON."""
    options = options_from(args)  # bad flags fail before anything is read or printed
    _check_fraction(args.fit_frac, "--fit-frac", allow_one=False)
    outputs = {"--html": args.html, "--markdown": args.markdown, "--plot": args.plot, "--json": args.json}
    _check_outputs(args, outputs | _markdown_figures(args.markdown))
    curves = _load(args)
    console = report.console()
    _columns(console, curves)
    comparison, loo, extrapolation, joint = _compare(args, curves, options)
    if joint is not None:
        console.print(
            f"Joint fit of {len(curves)} runs: B and C_mid partially pooled (B ~ {np.exp(joint.mu[0]):.3g} "
            f"x/÷ {np.exp(joint.tau[0]):.3g}, C_mid ~ {np.exp(joint.mu[1]):.4g} x/÷ {np.exp(joint.tau[1]):.3g}), "
            "A per run; the tables read the joint fit.", markup=False)  # fmt: skip
    rep = report.comparison_report(
        comparison, loo=loo if args.baseline else None, extrapolation=extrapolation
    )
    for table in rep.tables:
        console.print(report.rich_table(table))
    for sentence in report.ceiling_sentences(comparison.runs):
        console.print(sentence, markup=False)
    console.print(f"Verdict ({comparison.verdict.decided_by}): {comparison.verdict.sentence}", markup=False)
    if not (args.plot or args.html or args.markdown):
        figures = []
    else:
        figures = report.comparison_figures(comparison, loo)
    written = []
    if args.plot:
        written.append(report.write(args.plot, figures[0].png))
    if args.html or args.markdown:
        rep = replace(rep, figures=tuple(figures))
    if args.html:
        written.append(report.write(args.html, report.to_html(rep)))
    if args.markdown:
        written += report.write_markdown(args.markdown, rep)
    if args.json:
        data = comparison.to_dict() | {"loo": loo.to_dict()}
        data["runs"] = [row | {"fit": r.fit_dict()} for row, r in zip(data["runs"], comparison.runs)]
        data["extrapolation"] = [s.to_dict() for s in extrapolation]
        data["pooled"] = None if joint is None else joint.to_dict()
        written.append(report.write_json(args.json, data))
    for path in written:
        console.print(f"wrote {path}", markup=False)
    return 0
