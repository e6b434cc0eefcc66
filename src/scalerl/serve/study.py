"""A study's page and the compare page: runs on one axis, their laws compared (``scalerl compare``'s
rule: A first, then B), each run's forecast beside its curve, and an adaptive study's decisions.

A run that cannot be fitted is listed with its reason, never dropped silently.
"""

from __future__ import annotations

import json

import numpy as np

from scalerl import runfolder as rf
from scalerl.serve.runs import Found, Served

__all__ = ["compare", "study"]


def study(served: Served, found: Found, runs: list[Found]) -> dict:
    """A study's runs (those under its folder), compared, and its decisions when adaptive."""
    inside = {r.path.relative_to(found.path).as_posix(): r for r in runs
              if r.path != found.path and r.path.is_relative_to(found.path)}  # fmt: skip
    try:
        decided = json.loads(served.files.read(found.path / rf.DECISIONS).decode("utf-8"))
    except FileNotFoundError:
        decided = None
    except (rf.BadRunFile, ValueError, RecursionError, UnicodeDecodeError) as err:
        decided = {"error": f"{found.path / rf.DECISIONS} cannot be read ({err})"}
    return {"id": found.id, "folder": str(found.path), **compare(served, inside), "decisions": decided}


def compare(served: Served, picked: dict[str, Found]) -> dict:
    """Runs on one axis: each curve, the table of A, B and C_mid with their intervals and
    ceiling verdicts (``fit.compare.fit_run``), and with two or more fitted runs the compare
    rule's verdict; each run that could not be fitted with its reason (``unfitted``)."""
    from scalerl.fit.compare import compare_runs, fit_run
    from scalerl.fit.errors import CurveError
    from scalerl.fit.options import FitOptions

    options = FitOptions()
    curves, fits, fitted, fit_of, unfitted = {}, [], [], {}, []
    for name, r in picked.items():
        view = served.view(r)
        if view.log is None:
            curves[name] = {"id": r.id, "compute": [], "value": []}
            unfitted.append({"run": name, "reason": view.error or "no evaluation yet"})
            continue
        curve = view.log.curve
        curves[name] = {"id": r.id, "compute": curve.compute.tolist(), "value": curve.reward.tolist()}
        try:
            run = fit_run(curve, options=options)
        except (CurveError, ValueError, np.linalg.LinAlgError) as err:
            unfitted.append({"run": name, "reason": str(err).rstrip(".")})
            continue
        fitted.append(curve)
        fit_of[curve.name] = run.fit
        row = {"run": name}
        for p in ("A", "B", "C_mid"):
            lo, hi = run.intervals.get(p, (None, None))
            row[p] = {"value": float(getattr(run.fit, p)), "lo": _number(lo), "hi": _number(hi)}
        row["verdict"] = run.unc.verdict
        fits.append(row)
    verdict = None
    if len(fitted) >= 2:
        try:
            verdict = compare_runs(fitted, options=options, fits=fit_of).verdict.to_dict()
        except (CurveError, ValueError, np.linalg.LinAlgError) as err:
            verdict = {"error": str(err)}
    return {"curves": curves, "fits": fits, "verdict": verdict, "unfitted": unfitted}


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and np.isfinite(v) else None
