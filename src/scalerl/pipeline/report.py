"""End of a run: fit the sigmoid law to its own validation curve and write a short report.

Reads ``RUN_DIR/metrics.jsonl`` through ``scalerl.fit.readers`` exactly as ``scalerl fit`` does
(x = ``compute_gpu_hours``, y = ``val_pass_rate``), fits Eq. 1 with R0 fixed to the first
point (the pass rate of the starting policy), assesses it (is the ceiling identified? the
forecast at twice the run's compute with its band and predictive interval; the compute
that would pin A), prints that, and writes ``RUN_DIR/fit.png`` and ``RUN_DIR/report.md``.
"""

from __future__ import annotations

from pathlib import Path

from scalerl.metrics import read_records


def final_report(run_dir: str | Path, cfg, log=print):
    """Fit, print and write the report; returns the ``FitResult`` (None if the fit failed)."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.fitting import fit_sigmoid
    from scalerl.fit.readers import read_curves

    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    every = read_records(metrics)
    records = [r for r in every if r.get("val_pass_rate") is not None]
    try:
        curve = read_curves(metrics)[0]
        fit = fit_sigmoid(curve.compute, curve.reward, r0="first", source=str(metrics))
    except CurveError as err:
        log(f"no sigmoid fit: {err}")
        return None
    r0, last = records[0]["val_pass_rate"], records[-1]["val_pass_rate"]
    line = (f"fitted sigmoid: R(C) = {fit.R0:.3f} + ({fit.A:.3f} - {fit.R0:.3f}) / "
            f"(1 + ({fit.C_mid:.4g} / C)^{fit.B:.2f})   [C in device-hours, {fit.n_points} points, "
            f"rmse {fit.rmse:.4f}{', bounds hit: ' + ','.join(fit.bounds_hit) if fit.bounds_hit else ''}]")
    log(f"validation pass rate: {r0:.3f} at step 0 -> {last:.3f} at step {records[-1]['step']} "
        f"({last - r0:+.3f})")
    log(line)
    unc, outlook = _outlook(fit, cfg, every)
    outlook.append(_half_check(curve, cfg))
    for sentence in outlook:
        log(sentence)
    figure = _figure(fit, curve, unc, run_dir / "fit.png", cfg.name)
    _write_markdown(run_dir / "report.md", cfg, records, fit, [line, *outlook], figure)
    log(f"report: {run_dir / 'report.md'}")
    return fit


def _outlook(fit, cfg, all_records: list[dict]):
    """The forecast of the finished run, in sentences: ceiling verdict, the reward at twice
    its compute (both bands), the compute that would pin A, and the last live forecast."""
    from scalerl.fit.calibrate import assess
    from scalerl.fit.forecast import budget_to_pin_A, predict_at

    unc = assess(fit, level=cfg.forecast.level, margin=cfg.forecast.margin, horizon=2.0)
    budget = 2.0 * float(fit.compute.max())
    f = predict_at(fit, budget, unc)
    pin = budget_to_pin_A(unc)
    pin_text = ("pinned now" if pin == 1.0 else f"about {pin:g}x this run's compute" if pin
                else "not within 100x this run's compute")
    out = [
        unc.verdict,
        f"forecast at twice this run's compute ({budget:.4g} device-hours): {f.value:.3f}; band on "
        f"the expected curve [{f.lo:.3f}, {f.hi:.3f}]; predictive interval for one evaluation "
        f"[{f.pred_lo:.3f}, {f.pred_hi:.3f}] ({unc.calibration.message})",
        f"compute to pin A to ±{unc.margin:g}: {pin_text}",
    ]
    live = [r for r in all_records if "forecast_A" in r]
    if live:
        r = live[-1]
        out.append(f"last live forecast (fitted up to step {r['forecast_step']}): A {r['forecast_A']:.3f} "
                   f"[{r['forecast_A_lo']:.3f}, {r['forecast_A_hi']:.3f}], "
                   f"{'identified' if r['forecast_identified'] else 'not identified'}; "
                   f"at this run's budget {r['forecast_final']:.3f} [{r['forecast_final_lo']:.3f}, "
                   f"{r['forecast_final_hi']:.3f}]")
    if any("stopped_early" in r for r in all_records):
        out.append(next(r["stopped_early"] for r in all_records if "stopped_early" in r))
    return unc, out


def _half_check(curve, cfg) -> str:
    """The paper's fit-to-half check (§1.5) on the run itself: fit the first half of its
    compute, forecast its end with the predictive interval, compare with what happened."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import holdout_forecast
    from scalerl.fit.options import FitOptions

    options = FitOptions(r0="first", min_compute=cfg.forecast.min_compute, level=cfg.forecast.level,
                         margin=cfg.forecast.margin)
    try:
        hold = holdout_forecast(curve.compute, curve.reward, fit_frac=0.5, options=options,
                                source=curve.source)
    except CurveError as err:
        return f"fit-to-half check: not possible ({err})"
    f = hold.final
    verdict = "covered" if f["covered"] else "NOT covered"
    return (f"fit-to-half check: fitted on the first half of the compute, the forecast at the end is "
            f"{f['predicted']:.3f}, predictive interval [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}]; "
            f"observed {f['observed']:.3f}: {verdict} ({hold.coverage:.0%} of the second half's "
            f"evaluations inside their intervals)")


def _figure(fit, curve, unc, path: Path, title: str) -> Path | None:
    try:
        from scalerl.fit import plot
    except ImportError:  # matplotlib is the optional ``plots`` extra
        return None
    ax = plot.plot_fit(fit, curve, unc=unc)
    ax.set_title(f"{title}: validation pass rate vs device-hours")
    return plot.save(ax, path)


def _write_markdown(path: Path, cfg, records: list[dict], fit, lines: list[str], figure: Path | None) -> None:
    last = records[-1]
    rows = "\n".join(
        f"| {r['step']} | {r['compute_gpu_hours']:.5f} | {r.get('flops', 0):.3g} | {r['val_pass_rate']:.3f} "
        f"| {_se(r)} |"
        for r in records
    )
    text = f"""# {cfg.name}: training report

{cfg.description}

- steps: {last['step']}; device-hours: {last['compute_gpu_hours']:.5f}; FLOPs: {last.get('flops', 0):.3g}
- validation pass rate (mean@{cfg.eval.k} on {cfg.eval.num_prompts or 'all'} prompts): {records[0]['val_pass_rate']:.3f} -> {last['val_pass_rate']:.3f} (standard error over prompts {_se(last)})
{chr(10).join(f"- {line}" for line in lines)}
- A = {fit.A:.3f}, B = {fit.B:.3f}, C_mid = {fit.C_mid:.4g}, R0 = {fit.R0:.3f}

{f'![fit]({figure.name})' if figure is not None else '(matplotlib not installed: no figure)'}

| step | device-hours | FLOPs | val pass rate | its standard error |
|---:|---:|---:|---:|---:|
{rows}
"""
    path.write_text(text)


def _se(record: dict) -> str:
    """The evaluation's standard error over prompts (``val_stderr``), when it was recorded."""
    value = record.get("val_stderr")
    return "-" if value is None else f"{value:.3f}"
