"""``scalerl compare``: runs compared on the law (A first, then B and C_mid; the paper's
A-margin rule, §1.4), the leave-one-out table of Fig. 7, and with ``--fit-frac`` the laws'
extrapolation scored against each other (sigmoid against power law, App. A.4).

This compares the runs' laws; each run's forecast is ``scalerl fit``'s and ``plan``'s. Bad input
is one sentence and exit code 2 (``flags.guard``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from scalerl.fit import report
from scalerl.fit.commands.flags import (
    add_curve_options,
    check_fraction,
    columns_of,
    guard,
    options_from,
)
from scalerl.fit.commands.outputs import check_outputs
from scalerl.fit.compare import compare_runs, extrapolation_errors, loo_table
from scalerl.fit.options import FitOptions
from scalerl.fit.prior.pooling import joint_fit
from scalerl.fit.readers import Curve, expand_paths, load_runs

__all__ = ["compare_command", "register"]


def register(subparsers) -> None:
    """``scalerl compare``."""
    p = subparsers.add_parser("compare", help="compare runs with the paper's A-margin rule")
    add_curve_options(p)
    p.add_argument("--baseline", help="run name for the leave-one-out table (Fig. 7)")
    p.add_argument("--pooled", action="store_true",
                   help="fit the runs jointly: B and C_mid partially pooled across runs, A per run; the comparison "
                        "and leave-one-out table read the joint fit")  # fmt: skip
    p.add_argument("--fit-frac", type=float, default=None, metavar="F",
                   help="also score sigmoid vs power-law extrapolation fitted on this fraction")  # fmt: skip
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write a Markdown report")
    p.add_argument("--plot", type=Path, metavar="FILE", help="write the comparison figure as PNG")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the comparison as JSON")
    p.set_defaults(func=guard(compare_command))


def _markdown_figures(markdown: Path | None) -> dict[str, Path | None]:
    """The PNGs ``report.write_markdown`` puts beside a comparison's Markdown file."""
    if markdown is None:
        return {}
    return {f"--markdown's {name.removesuffix('.png')} figure": markdown.parent / f"{markdown.stem}_{name}"
            for name in ("compare.png", "efficiency.png")}  # report.comparison_figures' names

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
    check_fraction(args.fit_frac, "--fit-frac", allow_one=False)
    outputs = {"--html": args.html, "--markdown": args.markdown, "--plot": args.plot, "--json": args.json}
    given = expand_paths(args.runs)
    check_outputs([*given, *(f for p in given if p.is_dir() for f in p.iterdir())],
                  outputs | _markdown_figures(args.markdown))
    curves = load_runs(args.runs, columns_of(args))
    console = report.console()
    for c in curves:
        console.print(f"{c.source}: x = {c.x}, y = {c.y} ({len(c)} points)", markup=False)
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
