"""A study's page and the compare page: runs on one axis, their laws compared (``scalerl compare``'s
rule: A first, then B), each run's forecast beside its curve, and an adaptive study's decisions.

A run that cannot be fitted is listed with its reason, never dropped silently.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np

from scalerl import runfolder as rf
from scalerl.serve.runs import MAX_FITS, Found, Served

NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
BAND_POINTS = 30  # points of each run's law on the chart
STUDY_WAIT = 5.0  # seconds a study page waits for its runs' laws before it answers with those made
MAX_VERDICT = 20  # runs the page's verdict compares (each pair's refit at a shared A)

__all__ = ["compare", "order", "study"]


def study(served: Served, found: Found, runs: list[Found], baseline: str | None = None) -> dict:
    """A study's runs (those under its folder), compared, and its decisions when adaptive: while
    the study runs (``decisions.json``'s ``done`` is false) the rung under way and the decisions
    so far, and no winner."""
    inside = {r.path.relative_to(found.path).as_posix(): r for r in runs
              if r.path != found.path and r.path.is_relative_to(found.path)}  # fmt: skip
    try:
        decided = json.loads(served.files.read(found.path / rf.DECISIONS).decode("utf-8"))
    except FileNotFoundError:
        decided = None
    except (rf.BadRunFile, ValueError, RecursionError, UnicodeDecodeError) as err:
        decided = {"error": f"{found.path / rf.DECISIONS} cannot be read ({err})"}
    if isinstance(decided, dict) and "error" not in decided:
        decided = _progress(decided)
    return {"id": found.id, "folder": str(found.path), **compare(served, inside, baseline), "decisions": decided}


def _progress(d: dict) -> dict:
    """``decisions.json`` as the page shows it: a study not done has no winner, and says its rung."""
    from scalerl.fit.choose import winner_text

    done = d.get("done", True)  # a file from before ``done`` existed is a finished study's
    out = dict(d, done=bool(done), winner_text=winner_text(d) if done else None)
    if not done:
        out["winner"] = None
        u = d.get("under_way") or {}
        running = u.get("running") or []
        out["progress"] = (f"rung {u.get('rung', '?')} of {u.get('of', '?')} under way (to compute "
                           f"{_fmt(u.get('at_compute'))}); {len(running)} point(s) running")  # fmt: skip
    return out


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) else "?"


def order(names) -> list[str]:
    """Names sorted with their numbers read as numbers (0.0003 after 5e-05, seed10 after seed9)."""
    def key(name: str):
        parts = NUMBER.split(name)
        return [(0, float(p), "") if i % 2 else (1, 0.0, p) for i, p in enumerate(parts) if p != ""]

    return sorted(names, key=lambda n: ([(t, v, w) for t, v, w in key(n)], n))


def compare(served: Served, picked: dict[str, Found], baseline: str | None = None) -> dict:
    """Runs on one axis: each curve with its law and its forecast band, the table of A, B and
    C_mid with their intervals and ceiling verdicts (``fit.compare.fit_run`` of each run's one
    ``Forecast``, the one its page shows: no second fit), and with two or more fitted runs the
    compare rule's verdict; each run that could not be fitted (yet) with its reason
    (``unfitted``); with a ``baseline``, every other run's differences from it
    (``fit.versus``). A study of more than ``MAX_FITS`` runs fits the first of them and says so."""
    from scalerl.fit.compare import compare_runs, fit_run
    from scalerl.fit.errors import CurveError
    from scalerl.fit.options import FitOptions

    options = FitOptions()  # the compare rule's level and margin, the paper's; each run's law is its forecast's
    curves, fits, fitted, fit_of, unfitted, laws, made = {}, [], [], {}, [], {}, {}
    deadline = time.monotonic() + STUDY_WAIT
    served.prefetch(list(picked.values()))  # every run's files read at once, never one after another
    for i, name in enumerate(order(picked)):
        r = picked[name]
        left = max(deadline - time.monotonic(), 0.0)
        view = served.view(r, wait=left, first_wait=left)
        if view.log is None:
            curves[name] = {"id": r.id, "compute": [], "value": []}
            unfitted.append({"run": name, "reason": view.error or "no evaluation yet"})
            continue
        curve = view.log.curve
        drawn = served.forecast(r, view, wait=max(deadline - time.monotonic(), 0.0)).forecast
        made[name] = None if drawn is None else drawn.forecast
        curves[name] = {"id": r.id, "compute": curve.compute.tolist(), "value": curve.reward.tolist(),
                        "band": _band(drawn)}  # fmt: skip
        if i >= MAX_FITS:
            unfitted.append({"run": name, "reason": f"not fitted: a study page fits its first {MAX_FITS} runs; "
                                                    "compare the rest in smaller groups"})  # fmt: skip
            continue
        if made[name] is None or made[name].fit is None:
            reason = "being forecast" if made[name] is None else f"no law: {made[name].state.message}"
            unfitted.append({"run": name, "reason": reason})
            continue
        run = fit_run(curve, forecast=made[name])
        laws[name] = run
        fitted.append(curve)
        fit_of[curve.name] = run.fit
        curves[name]["law"] = _law_curve(run, float(curve.compute[-1]))
        row = {"run": name}
        for p in ("A", "B", "C_mid"):
            lo, hi = run.intervals.get(p, (None, None))
            row[p] = {"value": float(getattr(run.fit, p)), "lo": _number(lo), "hi": _number(hi)}
        row["verdict"] = run.unc.verdict
        fits.append(row)
    verdict = None
    if len(fitted) > MAX_VERDICT:
        verdict = {"error": f"{len(fitted)} runs: the verdict compares {MAX_VERDICT} at most (scalerl compare "
                            "reads any number)"}  # fmt: skip
    elif len(fitted) >= 2:
        try:
            verdict = compare_runs(fitted, options=options, fits=fit_of,
                                   forecasts={c.name: made[n] for n, c in zip(laws, fitted)}).verdict.to_dict()
        except (CurveError, ValueError, np.linalg.LinAlgError) as err:
            verdict = {"error": str(err)}
    units = sorted({served.unit(r) for r in picked.values()})
    unit = units[0] if len(units) == 1 else "mixed: " + ", ".join(units) if units else "device-hours"
    metrics = sorted({served.metric(served.view(r, wait=0.0).config) for r in picked.values()})
    return {"curves": curves, "order": list(curves), "unit": unit, "metric": metrics[0] if len(metrics) == 1 else None,
            "fits": fits, "verdict": verdict, "unfitted": unfitted,
            "baseline": baseline, "versus": _versus(baseline, laws, made, options.level)}  # fmt: skip


def _band(drawn) -> dict | None:
    """The run's forecast band ahead of its data (its one ``Forecast``, drawn in the
    background: ``runs.Drawn``), None before it has one."""
    if drawn is None or drawn.band is None:
        return None
    a = drawn.band
    return {"compute": drawn.grid.tolist(), "median": np.asarray(a.value).tolist(), "lo": np.asarray(a.lo).tolist(),
            "hi": np.asarray(a.hi).tolist()}  # fmt: skip


def _law_curve(run, end: float) -> dict:
    """Eq. 1 with the run's fitted A, B, C_mid and R0 over its own range."""
    from scalerl.fit.law import sigmoid

    grid = np.linspace(end / BAND_POINTS, end, BAND_POINTS)
    f = run.fit
    return {"compute": grid.tolist(), "value": np.asarray(sigmoid(grid, f.A, f.B, f.C_mid, f.R0)).tolist()}


def _versus(baseline: str | None, laws: dict, made: dict, level: float) -> dict | None:
    """Each run against ``baseline``: ΔA, ΔB, ΔC_mid and the gap of the forecasts at the
    baseline's budget (``fit.versus``); the reason where there is none."""
    from scalerl.fit.versus import forecast_gap, parameter_gaps

    if baseline is None:
        return None
    if baseline not in laws:
        return {"error": f"the baseline {baseline} has no fit yet"}
    base_fc = made.get(baseline)
    at = None if base_fc is None else (base_fc.budget or 2.0 * base_fc.cut)
    rows = []
    for name, run in laws.items():
        if name == baseline:
            continue
        gap = None if at is None or made.get(name) is None else forecast_gap(made[name], base_fc, at, level)
        rows.append({"run": name, **parameter_gaps(run, laws[baseline]), "forecast": gap})
    return {"at": at, "rows": rows}


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and np.isfinite(v) else None
