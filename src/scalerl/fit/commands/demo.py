"""``scalerl demo-fit``: the forecasting story on the bundled SYNTHETIC example curves.

1. Fit ScaleRL's first 8k GPU-hours, forecast 16k with a bootstrap interval, and check
   it against the full run; score sigmoid vs power-law extrapolation (App. A.4).
2. Compare ScaleRL with leave-one-out-like variants (A within the margin: B decides, §1.4)
   and print the Fig. 7 table and efficiency plot.
3. Compare ScaleRL with ScaleRL-32k (A apart by more than the margin: A decides).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from scalerl.fit import plot, report
from scalerl.fit.compare import compare_runs, extrapolation_errors, fit_run, loo_table
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.readers import Curve, load_runs


def _example(name: str) -> Curve:
    from scalerl.examples import example_path

    (curve,) = load_runs([example_path(name)])
    return curve


def _demo_forecast(console, out: Path) -> dict:
    """Fit the first half of the budget, forecast the end, check against the full run."""
    half = _example("synthetic_scalerl_seed0_half.jsonl")
    full = _example("synthetic_scalerl_seed0.csv")
    budget = float(full.compute[-1])
    fc = forecast_of(RunLog(half), options=ForecastOptions(budget=budget))
    run = fit_run(half, fit=fc.fit, unc=fc.unc)
    pred = fc.at(budget)
    measured = float(np.mean(full.reward[-5:]))  # the last 5 evaluations, to average noise
    ax = plot.plot_forecast(fc, full)
    ax.set_title(f"Fitted on {half.compute[-1]:.0f} GPU-h (dots); held-out to {budget:.0f} (x)")
    figure = report.write(out / "forecast.png", plot.png_bytes(ax))
    console.print(
        report.rich_table(report.fits_table([run], "1. Fit on the half budget (8k GPU-h)"))
    )
    console.print(
        f"Forecast at {budget:.0f} GPU-h: {pred.value:.3f}, band on the expected curve "
        f"{report.interval_text(pred.lo, pred.hi)}, predictive interval "
        f"{report.interval_text(pred.pred_lo, pred.pred_hi)}; measured (mean of the last 5 "
        f"evaluations): {measured:.3f}. {run.unc.verdict} The forecast follows {fc.source_sentence}.",
        markup=False,
    )
    score = extrapolation_errors(full, fit_frac=0.5)
    console.print(report.rich_table(report.extrapolation_table([score])))
    return {
        "fit_half": run.fit.to_dict(),
        "intervals": {k: list(v) for k, v in run.intervals.items()},
        "forecast": {"compute": budget, "reward": pred.value, "lo": pred.lo, "hi": pred.hi,
                     "pred_lo": pred.pred_lo, "pred_hi": pred.pred_hi},
        "ceiling": run.unc.to_dict(),
        "measured_final": measured,
        "extrapolation": score.to_dict(),
        "figure": str(figure),
    }


def _demo_compare(console, out: Path) -> dict:
    """ScaleRL against the LOO-like variants (A within the margin: B decides), and
    against ScaleRL-32k (A outside the margin: A decides)."""
    names = ["scalerl_seed0", "loo-dapo", "loo-savg", "loo-8op", "loo-fp32"]
    curves = [_example(f"synthetic_{n}.csv") for n in names]
    comparison = compare_runs(curves)
    loo = loo_table(curves, baseline=curves[0].name)
    rep = report.comparison_report(
        comparison,
        loo=loo,
        figures=report.comparison_figures(comparison, loo),
        title="scalerl demo-fit: ScaleRL vs leave-one-out-like variants (SYNTHETIC curves)",
    )
    for table in rep.tables:
        console.print(report.rich_table(table))
    console.print(f"2. Verdict: {comparison.verdict.sentence}", markup=False)
    html = report.write(out / "compare.html", report.to_html(rep))
    pngs = [report.write(out / f.filename, f.png) for f in rep.figures]
    longer = compare_runs([curves[0], _example("synthetic_scalerl-32k.csv")])
    console.print(f"3. Verdict: {longer.verdict.sentence}", markup=False)
    return {
        "loo": comparison.to_dict() | {"loo_table": loo.to_dict()},
        "scalerl_vs_32k": longer.to_dict(),
        "report": str(html),
        "figures": [str(p) for p in pngs],
    }


def demo_command(args: argparse.Namespace) -> int:
    """``scalerl demo-fit``: forecast and compare on the bundled synthetic curves."""
    console = report.console()
    console.print(
        "Forecasting demo on the bundled SYNTHETIC curves (ScaleRL Table 1 parameters plus "
        "mean@16 noise; see src/scalerl/examples/README.md).",
        markup=False,
    )
    out = args.out
    summary = {
        "forecast": _demo_forecast(console, out),
        "compare": _demo_compare(console, out),
    }
    path = report.write_json(out / "summary.json", summary)
    console.print(
        f"wrote {out}/: forecast.png, compare.png, efficiency.png, compare.html, {path.name}",
        markup=False,
    )
    return 0
