"""End of a run: its one forecast, read from its own log, and a short report.

Reads ``RUN_DIR`` as ``scalerl fit RUN_DIR`` and ``scalerl plan RUN_DIR`` do
(``fit.forecast.read_logs``: x = ``compute_gpu_hours``, y = ``forecast.metric``'s column, the
training reward beside it), makes the run's ``Forecast`` with the config's ``forecast.*``
options, and prints: the law's fit and its ceiling verdict, the forecast at twice the run's
compute (band and predictive interval; ``scalerl fit RUN_DIR --target-compute <2x>`` prints
the same), the compute that would pin A, the last live forecast, and the fit-to-half check:
the forecast made from the first half of the compute, scored on the second half, with its
interval's width beside "covered" (``scalerl fit RUN_DIR --fit-frac 0.5``). Then it writes
``RUN_DIR/fit.png`` and ``RUN_DIR/report.md``.
"""

from __future__ import annotations

from pathlib import Path

from scalerl.runfolder import (
    COMPUTE,
    FIT_FIGURE,
    METRICS,
    REPORT,
    STOPPED_EARLY,
    read_records,
    run_unit,
)
from scalerl.runfolder import Forecast as K


def final_report(run_dir: str | Path, cfg, log=print):
    """Forecast, print and write the report; returns the ``Forecast`` (None if the log has no
    evaluation of the metric)."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import forecast_of, read_logs
    from scalerl.fit.forecast.prior_runs import run_options
    from scalerl.fit.forecast.words import at_sentence, state_sentence
    from scalerl.fit.readers import Columns

    run_dir = Path(run_dir)
    y = cfg.fitted_metric
    every = read_records(run_dir / METRICS)
    records = [r for r in every if r.get(y) is not None]
    try:
        (run,) = read_logs([run_dir], Columns(x=COMPUTE, y=y, bounded=y == "val_pass_rate"))
        budget = 2.0 * float(run.curve.compute[-1])
        forecast = forecast_of(run, options=run_options(run, run_dir, budget=budget, x=COMPUTE))
    except CurveError as err:
        log(f"no forecast of {y}: {err}")
        return None
    r0, last = records[0][y], records[-1][y]
    log(f"{_NAMES[y]} ({y}): {r0:.3f} at step 0 -> {last:.3f} at step {records[-1]['step']} "
        f"({last - r0:+.3f})")
    unit = run_unit(run_dir)
    lines = [state_sentence(forecast).split(": ", 1)[1]]
    fit = forecast.fit
    if fit is not None:
        lines.append(f"fitted sigmoid to {y} (forecast.metric): R(C) = {fit.R0:.3f} + ({fit.A:.3f} - {fit.R0:.3f}) / "
                     f"(1 + ({fit.C_mid:.4g} / C)^{fit.B:.2f})   [C in {unit}, {fit.n_points} points, "
                     f"rmse {fit.rmse:.4f}{', bounds hit: ' + ','.join(fit.bounds_hit) if fit.bounds_hit else ''}]")  # fmt: skip
    lines += _outlook(forecast, every, at_sentence, unit)
    if cfg.forecast.target is not None:
        lines += _target(run, run_dir, cfg.forecast.target)
    lines.append(_half_check(run, run_dir))
    for sentence in lines:
        log(sentence)
    figure = _figure(forecast, run_dir / FIT_FIGURE, f"{cfg.name}: {_NAMES[y]} vs {unit}")
    _write_markdown(run_dir / REPORT, cfg, records, fit, lines, figure, unit)
    log(f"report: {run_dir / REPORT}")
    return forecast


def _target(run, run_dir: Path, target: float) -> list[str]:
    """The run's ``forecast.target`` answered as ``scalerl plan RUN_DIR`` answers it (its budget
    the run's own, ``forecast_budget``): P(by that budget), P(within the horizon), and the
    compute and hours with their intervals."""
    from scalerl.fit.forecast import forecast_of
    from scalerl.fit.forecast.prior_runs import run_options
    from scalerl.fit.forecast.words import reach_sentences

    forecast = forecast_of(run, options=run_options(run, run_dir, budget=run.budget, x=COMPUTE))
    return [f"forecast.target {target:g}, as scalerl plan {run_dir} answers it:",
            *reach_sentences(forecast, forecast.reach(target))]


def _outlook(forecast, all_records: list[dict], at_sentence, unit: str) -> list[str]:
    """The forecast of the finished run, in sentences: the ceiling verdict, the forecast at
    twice its compute (both bands), the compute that would pin A, and the last live forecast."""
    from scalerl.fit.budget import budget_to_pin_A
    from scalerl.fit.forecast.words import calibration_text

    out = []
    unc = forecast.unc
    if unc is not None:
        out.append(unc.verdict)
    out.append(at_sentence(forecast, forecast.budget, f"twice this run's compute, {unit}")
               + f" Intervals from {forecast.source_sentence}.")  # fmt: skip
    if unc is not None:
        pin = budget_to_pin_A(unc) if not unc.falling else None
        pin_text = ("pinned now" if pin == 1.0 else f"about {pin:g}x this run's compute" if pin
                    else "not within 100x this run's compute")  # fmt: skip
        out.append(f"compute to pin A to ±{unc.margin:g}: {pin_text}")
    live = [r for r in all_records if r.get(K.STATE) is not None]
    if live:
        r = live[-1]
        text = f"last live forecast (made at step {r[K.STEP]}): {r[K.STATE].replace('_', ' ')}"
        if r.get(K.FINAL) is not None:
            text += (f"; at this run's budget ({r[K.BUDGET]:.4g} {unit}) {r[K.FINAL]:.3f} [{r[K.FINAL_LO]:.3f}, "
                     f"{r[K.FINAL_HI]:.3f}] ({r[K.METHOD]}{calibration_text(r.get(K.UNCALIBRATED))})")  # fmt: skip
        out.append(text)
    if any(STOPPED_EARLY in r for r in all_records):
        out.append(next(r[STOPPED_EARLY] for r in all_records if STOPPED_EARLY in r))
    return out


_NAMES = {"val_pass_rate": "validation pass rate", "val_reward_mean": "validation mean reward"}
"""What each fitted column is called in sentences (``forecast.metric``)."""


def _half_check(run, run_dir: Path) -> str:
    """The paper's fit-to-half check (§1.5) on the run itself: its forecast from the first half
    of its compute against what happened after, with the interval's width."""
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast import forecast_of
    from scalerl.fit.forecast.prior_runs import run_options

    end = float(run.curve.compute[-1])
    try:
        forecast = forecast_of(run, cut=0.5 * end, options=run_options(run, run_dir, budget=end, x=COMPUTE))
    except CurveError as err:
        return f"fit-to-half check: not possible ({err})"
    held = forecast.heldout(run.curve.compute, run.curve.reward)
    if held is None:
        return f"fit-to-half check: not possible ({forecast.state.message})"
    return (f"fit-to-half check: the forecast from the first half of the compute ({forecast.method}), at the end: "
            f"{held.final['predicted']:.3f}, observed {held.sentence()}")  # fmt: skip


def _figure(forecast, path: Path, title: str) -> Path | None:
    try:
        from scalerl.fit import plot
    except ImportError:  # matplotlib is the optional ``plots`` extra
        return None
    ax = plot.plot_forecast(forecast, title=title)
    return plot.save(ax, path)


def _write_markdown(path: Path, cfg, records: list[dict], fit, lines: list[str], figure: Path | None,
                    unit: str) -> None:
    from scalerl.eval_plan import eval_prompts

    law = "" if fit is None else f"- A = {fit.A:.3f}, B = {fit.B:.3f}, C_mid = {fit.C_mid:.4g}, R0 = {fit.R0:.3f}"
    last, y = records[-1], cfg.fitted_metric
    se = "val_stderr" if y == "val_pass_rate" else "val_reward_stderr"
    rows = "\n".join(
        f"| {r['step']} | {r['compute_gpu_hours']:.5f} | {r.get('flops', 0):.3g} | {r[y]:.3f} "
        f"| {_se(r, se)} |"
        for r in records
    )
    text = f"""# {cfg.name}: training report

{cfg.description}

- steps: {last['step']}; {unit}: {last['compute_gpu_hours']:.5f}; FLOPs: {last.get('flops', 0):.3g}
- {_NAMES[y]} (`{y}`, the fitted curve; mean@{cfg.eval.k} on {eval_prompts(cfg) or 'all'} prompts): {records[0][y]:.3f} -> {last[y]:.3f} (standard error over prompts {_se(last, se)})
{chr(10).join(f"- {line}" for line in lines)}
{law}

{f'![fit]({figure.name})' if figure is not None else '(matplotlib not installed: no figure)'}

| step | {unit} | FLOPs | {y} | its standard error |
|---:|---:|---:|---:|---:|
{rows}
"""
    path.write_text(text)


def _se(record: dict, key: str) -> str:
    """The evaluation's standard error over prompts (``key``), when it was recorded."""
    value = record.get(key)
    return "-" if value is None else f"{value:.3f}"
