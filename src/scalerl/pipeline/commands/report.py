"""End of a run: fit the sigmoid law to its own validation curve and write a short report.

Reads ``RUN_DIR/metrics.jsonl`` through ``scalerl.fit.readers`` exactly as ``scalerl fit`` does
(x = ``compute_gpu_hours``, y = ``forecast.metric``'s column: ``val_pass_rate`` or
``val_reward_mean``), fits Eq. 1 with R0 fixed to the first point (the starting policy's
value), assesses it (is the ceiling identified? the
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
    metrics, y = run_dir / "metrics.jsonl", cfg.fitted_metric
    every = read_records(metrics)
    records = [r for r in every if r.get(y) is not None]
    bounded = y == "val_pass_rate"  # a mean reward need not lie in [0, 1]
    try:
        curve = read_curves(metrics, y=y, bounded=bounded)[0]
        fit = fit_sigmoid(curve.compute, curve.reward, r0="first", bounded=bounded, source=str(metrics))
    except CurveError as err:
        log(f"no sigmoid fit of {y}: {err}")
        return None
    r0, last = records[0][y], records[-1][y]
    line = (f"fitted sigmoid to {y} (forecast.metric): R(C) = {fit.R0:.3f} + ({fit.A:.3f} - {fit.R0:.3f}) / "
            f"(1 + ({fit.C_mid:.4g} / C)^{fit.B:.2f})   [C in device-hours, {fit.n_points} points, "
            f"rmse {fit.rmse:.4f}{', bounds hit: ' + ','.join(fit.bounds_hit) if fit.bounds_hit else ''}]")
    log(f"{_NAMES[y]} ({y}): {r0:.3f} at step 0 -> {last:.3f} at step {records[-1]['step']} "
        f"({last - r0:+.3f})")
    log(line)
    unc, outlook = _outlook(fit, cfg, every)
    outlook.append(_half_check(curve, cfg, bounded))
    for sentence in outlook:
        log(sentence)
    figure = _figure(fit, curve, unc, run_dir / "fit.png", f"{cfg.name}: {_NAMES[y]} vs device-hours")
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


_NAMES = {"val_pass_rate": "validation pass rate", "val_reward_mean": "validation mean reward"}
"""What each fitted column is called in sentences (``forecast.metric``)."""


def _half_check(curve, cfg, bounded: bool) -> str:
    """The paper's fit-to-half check (§1.5) on the run itself: fit the first half of its
    compute, forecast its end with the predictive interval, compare with what happened."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import holdout_forecast
    from scalerl.fit.options import FitOptions

    options = FitOptions(r0="first", min_compute=cfg.forecast.min_compute, level=cfg.forecast.level,
                         margin=cfg.forecast.margin, bounded=bounded)
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
    ax.set_title(title)
    return plot.save(ax, path)


def _write_markdown(path: Path, cfg, records: list[dict], fit, lines: list[str], figure: Path | None) -> None:
    last, y = records[-1], cfg.fitted_metric
    se = "val_stderr" if y == "val_pass_rate" else "val_reward_stderr"
    rows = "\n".join(
        f"| {r['step']} | {r['compute_gpu_hours']:.5f} | {r.get('flops', 0):.3g} | {r[y]:.3f} "
        f"| {_se(r, se)} |"
        for r in records
    )
    text = f"""# {cfg.name}: training report

{cfg.description}

- steps: {last['step']}; device-hours: {last['compute_gpu_hours']:.5f}; FLOPs: {last.get('flops', 0):.3g}
- {_NAMES[y]} (`{y}`, the fitted curve; mean@{cfg.eval.k} on {cfg.eval.num_prompts or 'all'} prompts): {records[0][y]:.3f} -> {last[y]:.3f} (standard error over prompts {_se(last, se)})
{chr(10).join(f"- {line}" for line in lines)}
- A = {fit.A:.3f}, B = {fit.B:.3f}, C_mid = {fit.C_mid:.4g}, R0 = {fit.R0:.3f}

{f'![fit]({figure.name})' if figure is not None else '(matplotlib not installed: no figure)'}

| step | device-hours | FLOPs | {y} | its standard error |
|---:|---:|---:|---:|---:|
{rows}
"""
    path.write_text(text)


def _se(record: dict, key: str) -> str:
    """The evaluation's standard error over prompts (``key``), when it was recorded."""
    value = record.get(key)
    return "-" if value is None else f"{value:.3f}"
