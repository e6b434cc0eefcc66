"""What ``scalerl fit`` prints and writes, in one order (issue 29).

With ``--prior-runs`` and a prior that was used, every output gives the forecast under the
prior first and the prior-free fit beside it, each named (``prior_answer.with_prior_label``
and ``ALONE``): the fits table (two rows, the prior's first), the ceiling verdicts, the
budget advice, the forecast, reach and held-out tables, the figure (the prior's curve and
bands in colour, the run alone in grey) and the HTML report. Then one line says what the
calibration factor is and one line names each run left out of the prior and why. Every
caption and title names the fitted metric (the y column).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from scalerl.fit import plot
from scalerl.fit.compare import RunFit
from scalerl.fit.forecast import Forecast, HoldoutForecast, Reach, predict_at
from scalerl.fit.outcome import FitOutcome
from scalerl.fit.prior_answer import ALONE, PriorAnswer
from scalerl.fit.report import (
    BANDS,
    Figure,
    Report,
    Table,
    fits_table,
    fmt,
    fmt_compute,
    interval_text,
    with_interval,
)

__all__ = ["caption", "fit_figure", "fit_report", "fit_tables", "verdict_lines"]

ALONE_COLOUR = "0.45"  # the prior-free fit beside the prior's: grey


def metric(outcomes: Sequence[FitOutcome]) -> str:
    """The fitted y column(s), named in every caption and title."""
    return ", ".join(dict.fromkeys(o.run.curve.y or "reward" for o in outcomes))


def caption(outcomes: Sequence[FitOutcome], fit_frac: float, level: float) -> str:
    """The fits table's caption: the metric, the fitted share, the level and the order."""
    xs = ", ".join(dict.fromkeys(o.run.curve.x or "compute" for o in outcomes))
    text = f"Sigmoid fits (Eq. 1) of {metric(outcomes)} against {xs}"
    if fit_frac < 1:
        text += f", on the first {fit_frac:g} of compute"
    text += f"; intervals at {level:.0%}"
    if any(o.answer is not None for o in outcomes):
        text += "; with a prior, its forecast first and this run alone below it"
    return text


def _name(o: FitOutcome, answer: str | None = None) -> str:
    """The run's name, and which answer a row is when there are two."""
    return o.run.name if o.answer is None else f"{o.run.name} ({answer or ALONE})"


def _prior_fit_row(o: FitOutcome) -> tuple[str, ...]:
    a = o.answer
    iv = a.intervals
    budget = "pinned now" if a.identified else f"A ±{a.A_half_width:.3f} now"
    return (_name(o, a.label), with_interval(a.fit.A, iv["A"]), with_interval(a.fit.B, iv["B"]),
            with_interval(a.fit.C_mid, iv["C_mid"], fmt_compute), fmt(a.fit.R0), str(a.fit.n_points), a.ceiling_text,
            budget, "ok")  # fmt: skip


def fit_tables(outcomes: Sequence[FitOutcome], caption_text: str) -> list[Table]:
    """The fits table (the prior's row first), then forecasts, reaches, hold-out scores and
    the two answers side by side."""
    first = fits_table([o.run for o in outcomes], caption_text)
    rows = []
    for o, row in zip(outcomes, first.rows):
        if o.answer is not None:
            rows.append(_prior_fit_row(o))
        rows.append((_name(o), *row[1:]))
    return [Table(first.caption, first.header, tuple(rows)), *forecast_tables(outcomes)]


def _answers(o: FitOutcome):
    """(name, forecasts, reaches, holdout, reach context) of each answer, the prior's first;
    the context is the answer's curve, A's interval and the compute its intervals are
    calibrated for (None: the prior-free fit's, calibrated for every target)."""
    out = []
    if (a := o.answer) is not None:
        out.append((_name(o, a.label), a.forecasts, a.reaches, a.holdout, (a.fit, a.intervals["A"], a.budget)))
    out.append((_name(o), o.forecasts, o.reaches, o.holdout, (o.run.fit, o.run.unc.A_plausible, None)))
    return out


def forecast_tables(outcomes: Sequence[FitOutcome]) -> list[Table]:
    """Forecasts at target compute, compute to reach targets, hold-out scores, and the two
    answers at the compute the prior was asked for."""
    answers = [ans for o in outcomes for ans in _answers(o)]
    tables = []
    rows = [_forecast_row(name, c, f) for name, forecasts, *_ in answers for c, f in forecasts]
    if rows:
        header = ("run", "target compute", "forecast reward", "band on expected curve", "predictive interval")
        title = "Forecast at target compute"
        if any(c > o.answer.budget for o in outcomes if o.answer is not None for c, _ in o.answer.forecasts):
            title += "; with the prior, intervals only up to the compute they are calibrated for"
        tables.append(Table(title, header, tuple(rows)))
    rows = [_reach_row(name, context, r) for name, _, reaches, _, context in answers for r in reaches]
    if rows:
        header = ("run", "target reward", "compute to reach", "interval")
        tables.append(Table("Compute to reach a target reward", header, tuple(rows)))
    rows = [_holdout_row(name, h) for name, _, _, h, _ in answers if h is not None]
    if rows:
        header = ("run", "fitted up to", "held-out n", "RMSE", "final error", "in predictive interval", "final point")
        tables.append(Table("Held-out forecast (predicted - observed)", header, tuple(rows)))
    rows = [_both_row(o) for o in outcomes if o.answer is not None]
    if rows:
        label = outcomes[0].answer.label if len(rows) == len(outcomes) else "with the prior"
        header = ("run", "forecast at", label, ALONE, "observed")
        tables.append(Table("Forecast with and without the prior (predictive intervals)", header, tuple(rows)))
    return tables


def _forecast_row(name: str, C: float, f: Forecast) -> tuple[str, ...]:
    return name, fmt(C), fmt(f.value), interval_text(f.lo, f.hi), interval_text(f.pred_lo, f.pred_hi)


def _holdout_row(name: str, h: HoldoutForecast) -> tuple[str, ...]:
    f = h.final
    final = f"{f['observed']:.3f} in [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}]: " + (
        "covered" if f["covered"] else "NOT covered")  # fmt: skip
    return (name, fmt(h.fit_until), str(h.compute.size), f"{h.rmse:.4f}", f"{h.final_error:+.4f}",
            f"{h.coverage:.0%}", final)  # fmt: skip


def _reach_row(name: str, context, reach: Reach) -> tuple[str, str, str, str]:
    """Run, target, compute needed (or why none), interval; ``context`` as ``_answers``'."""
    fit, (lo, hi), calibrated_to = context
    if not reach.reachable and reach.target <= hi:
        needed = f"beyond the fitted A={fit.A:.3f}, inside A's interval (up to {hi:.3f})"
    elif not reach.reachable:
        needed = f"unreachable: target above A={fit.A:.3f}"
    elif reach.compute == 0:
        needed = f"0 (already met: R0={fit.R0:.3f})"
    else:
        needed = fmt(reach.compute)
    interval = interval_text(reach.lo, reach.hi)
    if reach.p_unreachable > 0:
        interval += f"; {reach.p_unreachable:.0%} of resamples never reach it"
    if lo < reach.target <= hi:
        interval += "; may never be reached (inside A's interval)"
    if calibrated_to is not None and reach.reachable and reach.compute > calibrated_to:
        interval += f"; past {fmt(calibrated_to)}, where the prior's intervals are calibrated"
    return name, fmt(reach.target), needed, interval


def _both_row(o: FitOutcome) -> tuple[str, ...]:
    """The prior's and the prior-free forecast at the compute the prior was asked for."""
    a = o.answer
    C = a.budget
    free = predict_at(o.run.fit, C, o.run.unc)
    lo, hi = (float(np.ravel(v)[0]) for v in a.prior.predictive(C))
    value = float(np.ravel(a.prior.predict(C))[0])
    observed = "-"
    if o.holdout is not None and o.holdout.compute[-1] == C:
        observed = f"{o.holdout.reward[-1]:.3f}"
    return (o.run.name, fmt(C), f"{value:.3f} in {interval_text(lo, hi)}",
            f"{free.value:.3f} in {interval_text(free.pred_lo, free.pred_hi)}", observed)  # fmt: skip


def _budget_line(run: RunFit, answer: PriorAnswer | None) -> str | None:
    """The budget advice: the prior's first; None when there is nothing to say."""
    head = f"{run.name}: to pin A to ±{run.unc.margin:g}:"
    if answer is not None:
        alone = run.budget_text if run.budget_checked else "not asked (--no-budget)"
        return f"{head} {answer.label}: {answer.budget_text}; {ALONE}: {alone}."
    if run.budget_checked and not run.identified:
        return f"{head} {run.budget_text}."
    return None


def verdict_lines(outcomes: Sequence[FitOutcome]) -> list[str]:
    """The sentences under the tables: ceiling verdicts and budget advice (the prior's
    first), calibration notes, fit notes, and the prior's reason, factor and left-out runs."""
    lines = []
    for o in outcomes:
        run, a = o.run, o.answer
        alone = "" if a is None else f"{ALONE}: "
        if a is not None:
            lines.append(f"{run.name}: {a.label}: {a.ceiling}")
        lines.append(f"{run.name}: {alone}{run.unc.verdict}")
        if (budget := _budget_line(run, a)) is not None:
            lines.append(budget)
        if not run.unc.calibration.calibrated:
            lines.append(f"{run.name}: {alone}{run.unc.calibration.message}.")
        if run.fit.bounds_hit or not run.fit.converged or run.fit.binned_from:
            lines.append(f"note: {run.name}: {run.fit.message}")
        if o.forecasts_from:
            lines.append(f"{run.name}: {alone}the forecasts follow the training reward ({o.forecasts_from}): its "
                         "fit, offset to the validation over the last third of the evaluations.")  # fmt: skip
        if o.prior is not None:
            lines.append(f"prior: {run.name}: {o.prior.reason}.")
        if a is not None:
            lines.append(f"prior: {run.name}: calibration: {a.prior.factor_sentence}.")
            lines += [f"prior: {run.name}: left out: {why}." for why in a.prior.left_out]
    return lines


def fit_report(outcomes: Sequence[FitOutcome], caption_text: str, figures: Sequence[Figure] = ()) -> Report:
    """``scalerl fit --html``: the verdicts, the tables and the figures, the prior's first."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    paragraphs = (*verdict_lines(outcomes), f"{BANDS} Generated {stamp}.")
    title = f"scalerl fit: {metric(outcomes)}"
    return Report(title, paragraphs, tuple(fit_tables(outcomes, caption_text)), tuple(figures))


def fit_figure(outcomes: Sequence[FitOutcome]):
    """One run: the paper-style fit figure, the prior's curve and bands first when there is
    one and the run alone in grey beside it; several runs: the comparison figure, where a
    run with a prior is drawn with the prior's curve and band and beside it its run alone."""
    y = metric(outcomes)
    if len(outcomes) == 1:
        o = outcomes[0]
        if o.answer is None:
            ax = plot.plot_fit(o.run.fit, o.run.curve, unc=o.run.unc)
            ax.set_title(f"{o.run.name}: {y}, sigmoid fit (solid) and extrapolation (dashed)")
            _followed_forecasts(ax, o)
            return ax
        return _figure_with_prior(o, y)
    fits, curves, bands = {}, {}, {}
    for o in outcomes:
        alone = _name(o)
        if o.answer is not None:
            name = _name(o, o.answer.label)
            fits[name], curves[name], bands[name] = o.answer.fit, o.run.curve, o.answer.prior.band
        else:
            curves[alone] = o.run.curve
        fits[alone], bands[alone] = o.run.fit, o.run.band
    return plot.plot_comparison(fits, curves, bands=bands, title=f"{y}: runs and their sigmoid fits")


def _followed_forecasts(ax, o: FitOutcome) -> None:
    """The forecasts at ``--target-compute`` that follow the training reward, each with its
    predictive interval: the table's numbers, where the law's own curve says otherwise."""
    if not o.forecasts_from:
        return
    c = [c for c, _ in o.forecasts]
    v = np.array([f.value for _, f in o.forecasts])
    err = [v - np.array([f.pred_lo for _, f in o.forecasts]), np.array([f.pred_hi for _, f in o.forecasts]) - v]
    ax.errorbar(c, v, yerr=err, fmt="D", color="C3", capsize=4,
                label=f"forecast following the training reward ({o.forecasts_from})")  # fmt: skip
    ax.legend(loc="lower right", fontsize="small")


def _figure_with_prior(o: FitOutcome, y: str):
    """The prior's curve, band and predictive interval in colour with the points; the run
    alone's curve and band in grey, thinner; both named in the legend, the prior's first."""
    a, run = o.answer, o.run
    end = max(float(run.curve.compute.max()), plot.EXTEND * float(run.fit.compute.max()))
    ax = plot.plot_fit(a.fit, run.curve, band=a.prior.band, predictive=a.prior.predictive, level=a.prior.level,
                       label=f"{a.label}: A={a.fit.A:.3f}, B={a.fit.B:.2f}", extend_to=end)  # fmt: skip
    plot.plot_fit(run.fit, ax=ax, band=run.band, color=ALONE_COLOUR, label=f"{ALONE}: A={run.fit.A:.3f}, "
                  f"B={run.fit.B:.2f}", extend_to=end, annotate_asymptote=False, legend_extras=False, weight=0.5)  # fmt: skip
    ax.set_title(f"{run.name}: {y}, {a.label} (colour) and {ALONE} (grey)")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: not labels[i].startswith((a.label, ALONE)))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, loc="lower right")
    return ax
