"""A study's page and the compare page: runs on one axis, their laws compared (``scalerl compare``'s
rule: A first, then B), each run's forecast beside its curve, and an adaptive study's decisions.

A run that cannot be fitted is listed with its reason, never dropped silently.
"""

from __future__ import annotations

import json
import time

import numpy as np

from scalerl import runfolder as rf
from scalerl.serve.runs import MAX_FITS, Found, Served

STUDY_WAIT = 5.0  # seconds a study page waits for its runs' laws before it answers with those made
MAX_VERDICT = 20  # runs the page's verdict compares (each pair's refit at a shared A)

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
    ceiling verdicts (``fit.compare.fit_run``, fitted in the background once per change of a
    log: ``Served.law``), and with two or more fitted runs the compare rule's verdict; each run
    that could not be fitted (yet) with its reason (``unfitted``). A study of more than
    ``MAX_FITS`` runs fits the first of them and says so."""
    from scalerl.fit.compare import compare_runs
    from scalerl.fit.errors import CurveError
    from scalerl.fit.options import FitOptions

    options = FitOptions()
    curves, fits, fitted, fit_of, unfitted = {}, [], [], {}, []
    deadline = time.monotonic() + STUDY_WAIT
    for i, (name, r) in enumerate(picked.items()):
        view = served.view(r, wait=max(deadline - time.monotonic(), 0.0))
        if view.log is None:
            curves[name] = {"id": r.id, "compute": [], "value": []}
            unfitted.append({"run": name, "reason": view.error or "no evaluation yet"})
            continue
        curve = view.log.curve
        curves[name] = {"id": r.id, "compute": curve.compute.tolist(), "value": curve.reward.tolist()}
        if i >= MAX_FITS:
            unfitted.append({"run": name, "reason": f"not fitted: a study page fits its first {MAX_FITS} runs; "
                                                    "compare the rest in smaller groups"})  # fmt: skip
            continue
        made = served.law(r, view, wait=max(deadline - time.monotonic(), 0.0))
        if made.forecast is None:
            unfitted.append({"run": name, "reason": made.error or "being fitted"})
            continue
        run = made.forecast
        fitted.append(curve)
        fit_of[curve.name] = run.fit
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
            verdict = compare_runs(fitted, options=options, fits=fit_of).verdict.to_dict()
        except (CurveError, ValueError, np.linalg.LinAlgError) as err:
            verdict = {"error": str(err)}
    return {"curves": curves, "fits": fits, "verdict": verdict, "unfitted": unfitted}


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and np.isfinite(v) else None
