"""What ``scalerl fit`` prints and writes, in one order: the law's fits table (the prior's row
first where the forecast follows a prior), then the forecast's answers (its value at each
``--target-compute``, its reach of each ``--target-reward``, ``--fit-frac``'s held-out score),
then the sentences: the state of each run, whose curves its intervals follow, the ceiling
verdicts and the budget advice. Every forecast number is the one ``Forecast``'s; every caption
and title names the fitted metric (the y column)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from scalerl.fit import plot
from scalerl.fit.commands.outcome import FitOutcome
from scalerl.fit.commands.prior_answer import ALONE
from scalerl.fit.forecast.words import source_sentence, state_sentence, triple_text
from scalerl.fit.report import (
    BANDS,
    Figure,
    Report,
    Table,
    fits_table,
    fmt,
    fmt_compute,
    with_interval,
)

__all__ = ["caption", "fit_figure", "fit_report", "fit_tables", "verdict_lines"]


def metric(outcomes: Sequence[FitOutcome]) -> str:
    """The fitted y column(s), named in every caption and title."""
    return ", ".join(dict.fromkeys(o.log.curve.y or "reward" for o in outcomes))


def caption(outcomes: Sequence[FitOutcome], fit_frac: float, level: float) -> str:
    """The fits table's caption: the metric, the fitted share, the level and the order."""
    xs = ", ".join(dict.fromkeys(o.log.curve.x or "compute" for o in outcomes))
    text = f"Sigmoid fits (Eq. 1) of {metric(outcomes)} against {xs}"
    if fit_frac < 1:
        text += f", on the first {fit_frac:g} of compute"
    text += f"; intervals at {level:.0%}"
    if any(o.answer is not None for o in outcomes):
        text += "; where the forecast follows a prior, its law first and this run alone below it"
    return text


def _prior_row(o: FitOutcome) -> tuple[str, ...]:
    a = o.answer
    iv = a.intervals
    budget = "pinned now" if a.identified else f"A ±{a.A_half_width:.3f} now"
    return (f"{o.name} ({a.label})", with_interval(a.fit.A, iv["A"]), with_interval(a.fit.B, iv["B"]),
            with_interval(a.fit.C_mid, iv["C_mid"], fmt_compute), fmt(a.fit.R0), str(a.fit.n_points),
            a.ceiling_text, budget, "ok")  # fmt: skip


def fit_tables(outcomes: Sequence[FitOutcome], caption_text: str) -> list[Table]:
    """The fits table (a prior's row first), then the forecast's answers."""
    fitted = [o for o in outcomes if o.run is not None]
    first = fits_table([o.run for o in fitted], caption_text)
    rows, by_run = [], dict(zip((id(o) for o in fitted), first.rows))
    for o in outcomes:
        if o.answer is not None:
            rows.append(_prior_row(o))
        if id(o) in by_run:
            name = o.name if o.answer is None else f"{o.name} ({ALONE})"
            rows.append((name, *by_run[id(o)][1:]))
        else:
            rows.append((o.name, *("-",) * (len(first.header) - 2), f"no fit: {o.forecast.state.name}"))
    return [Table(first.caption, first.header, tuple(rows)), *forecast_tables(outcomes)]


def forecast_tables(outcomes: Sequence[FitOutcome]) -> list[Table]:
    """The forecast at target compute, the reaches of target rewards, the held-out scores."""
    tables = []
    rows = [(o.name, fmt(c), fmt(a.value), f"[{fmt(a.lo)}, {fmt(a.hi)}]", f"[{fmt(a.pred_lo)}, {fmt(a.pred_hi)}]",
             o.forecast.method) for o in outcomes for c, a in o.at]  # fmt: skip
    if rows:
        header = ("run", "target compute", "forecast reward", "band on expected curve", "predictive interval",
                  "follows")  # fmt: skip
        tables.append(Table("Forecast at target compute", header, tuple(rows)))
    rows = [_reach_row(o, r) for o in outcomes for r in o.reaches]
    if rows:
        header = ("run", "target reward", "compute to reach", "P(reach within the horizon)", "if it gets there",
                  "hours")  # fmt: skip
        tables.append(Table("When each target is reached (the mean of the last 5 evaluations), and the chance",
                            header, tuple(rows)))  # fmt: skip
    rows = [_heldout_row(o) for o in outcomes if o.heldout is not None]
    if rows:
        header = ("run", "forecast from", "held-out n", "RMSE", "final error", "in predictive interval",
                  "median width", "final point")  # fmt: skip
        tables.append(Table("Held-out check of the forecast (predicted - observed)", header, tuple(rows)))
    return tables


def _reach_row(o: FitOutcome, r) -> tuple[str, ...]:
    if r.already:
        needed = f"already at {fmt(r.compute[0])}"
    elif not r.supported:
        needed = "no crossing time" if np.isnan(r.p_at_all) else f"no crossing time ({o.forecast.state.name})"
    elif not r.reachable:
        needed = "not reachable"
    else:
        needed = triple_text(r.compute)
    p = "-" if np.isnan(r.p_at_all) else f"{r.p_at_all:.3f}"
    cond = triple_text(r.if_reached) if np.isfinite(r.if_reached[0]) and not r.already else "-"
    hours = triple_text(r.hours) if r.hours is not None and r.supported else "-"
    return o.name, fmt(r.target), needed, p, cond, hours


def _heldout_row(o: FitOutcome) -> tuple[str, ...]:
    h = o.heldout
    f = h.final
    final = (f"{f['observed']:.3f} in [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}] (width {f['width']:.3f}): "
             + ("covered" if f["covered"] else "NOT covered"))  # fmt: skip
    return (o.name, f"{fmt(h.cut)} ({o.forecast.method})", str(h.compute.size), f"{h.rmse:.4f}",
            f"{h.final_error:+.4f}", f"{h.coverage:.0%}", f"{h.median_width:.3f}", final)  # fmt: skip


def verdict_lines(outcomes: Sequence[FitOutcome]) -> list[str]:
    """The sentences under the tables: each run's state and whose curves its forecast
    follows, the ceiling verdicts and budget advice (a prior's first), calibration and fit
    notes, and the prior's reason, factor and left-out runs."""
    lines = []
    for o in outcomes:
        f, run, a = o.forecast, o.run, o.answer
        if f is not None:
            lines += [state_sentence(f), f"{o.name}: {source_sentence(f)}"]
        if run is None:
            continue
        alone = "" if a is None else f"{ALONE}: "
        if a is not None:
            lines.append(f"{o.name}: {a.label}: {a.ceiling}")
        lines.append(f"{o.name}: {alone}{run.unc.verdict}")
        if run.budget_checked and not run.identified:
            lines.append(f"{o.name}: to pin A to ±{run.unc.margin:g}: {run.budget_text}.")
        if not run.unc.calibration.calibrated:
            lines.append(f"{o.name}: {alone}{run.unc.calibration.message}.")
        if run.fit.bounds_hit or not run.fit.converged or run.fit.binned_from:
            lines.append(f"note: {o.name}: {run.fit.message}")
        if a is not None:
            lines.append(f"prior: {o.name}: calibration: {a.prior.factor_sentence}.")
            lines += [f"prior: {o.name}: left out: {why}." for why in a.prior.left_out]
    return lines


def fit_report(outcomes: Sequence[FitOutcome], caption_text: str, figures: Sequence[Figure] = ()) -> Report:
    """``scalerl fit --html``: the sentences, the tables and the figures."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    paragraphs = (*verdict_lines(outcomes), f"{BANDS} Generated {stamp}.")
    return Report(f"scalerl fit: {metric(outcomes)}", paragraphs, tuple(fit_tables(outcomes, caption_text)),
                  tuple(figures))  # fmt: skip


def fit_figure(outcomes: Sequence[FitOutcome]):
    """One run: the data, the law's fit and the forecast beyond the cut with its band and
    predictive interval, the target computes marked; several runs: each its forecast the same
    way, on one axes (``plot.plot_comparison``), so a run's band does not change with the number
    of runs asked about."""
    y = metric(outcomes)
    if len(outcomes) == 1 and outcomes[0].forecast is not None:
        o = outcomes[0]
        return plot.plot_forecast(o.forecast, o.log.curve, targets=o.targets,
                                  title=f"{o.name}: {y}, the forecast ({o.forecast.method})")  # fmt: skip
    forecasts = {o.name: o.forecast for o in outcomes if o.forecast is not None}
    curves = {o.name: o.log.curve for o in outcomes if o.forecast is not None}
    return plot.plot_comparison(forecasts, curves, title=f"{y}: runs, their fits and forecasts")
