"""What ``scalerl serve`` shows, read from what runs already write (no torch, no web server).

A **run** is a folder with ``metrics.jsonl`` (``scalerl train --out``); a **study** is a
folder holding runs (a sweep folder: ``sweep.yaml``, and ``decisions.json`` when adaptive).
Every function here reads files only, so a page can be served before, during or after a run,
and many runs share one server.

A run's **state**, as its files say: ``stopped`` (a record has ``stopped_early``),
``finished`` (its last record is ``train.steps``, or past ``train.max_compute``), ``running``
(its log was written within ``LIVE_S`` seconds), ``failed`` (its ``train.log`` ends with
``scalerl train``'s one-sentence error or a traceback), else ``paused`` (it can be resumed:
the page gives the command).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scalerl.metric_names import COMPUTE, TRAIN_REWARD, VAL_PASS_RATE, WALL
from scalerl.metrics import read_records

LIVE_S = 120.0
"""A run whose ``metrics.jsonl`` changed this recently counts as running."""
SKIP = ("_base", "base_model", "checkpoint", "checkpoint.old", "model", "tb")
"""Folders under a study that hold no run of their own."""
TRAINING = (TRAIN_REWARD, "pass_rate", "completion_len", "truncation_rate", "entropy", "staleness_mean",
            "mismatch_kl", "loss", "grad_norm")  # fmt: skip
"""The training curves a run page draws (those its records have), besides each reward function's."""
NOT_FUNCTIONS = (TRAIN_REWARD, "reward_none", "reward_errors")


@dataclass(frozen=True)
class Found:
    """A run or a study under one of the served folders; ``id`` is its URL path."""

    id: str
    path: Path
    kind: str  # "run" or "study"


def _is_run(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file()


def discover(roots: Sequence[Path]) -> list[Found]:
    """Every run and study under ``roots`` (each root's index starts its ids: ``0/lr=1e-4/seed0``)."""
    out: list[Found] = []
    for i, root in enumerate(roots):
        root = Path(root).resolve()
        if _is_run(root):
            out.append(Found(f"{i}", root, "run"))
            continue
        runs = sorted(p.parent for p in root.rglob("metrics.jsonl")
                      if not set(p.relative_to(root).parts[:-1]) & set(SKIP))  # fmt: skip
        for run in runs:
            out.append(Found(f"{i}/{run.relative_to(root).as_posix()}", run, "run"))
        studies = {root} if runs and ((root / "sweep.yaml").is_file() or len(runs) > 1) else set()
        studies |= {p.parent for p in root.rglob("sweep.yaml")}
        out += [Found(f"{i}" if s == root else f"{i}/{s.relative_to(root).as_posix()}", s, "study")
                for s in sorted(studies)]  # fmt: skip
    return out


_CACHE: dict[tuple, object] = {}
_CACHE_MAX = 512


def cached(path: Path, key: str, make):
    """``make()``, remembered until ``path`` changes (its size or modification time): a page
    polls every few seconds, and a run's log changes once an evaluation."""
    try:
        st = path.stat()
        stamp = (str(path), key, st.st_mtime_ns, st.st_size)
    except OSError:
        return make()
    if stamp not in _CACHE:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.pop(next(iter(_CACHE)))  # the oldest entry
        _CACHE[stamp] = make()
    return _CACHE[stamp]


def read_jsonl(path: Path) -> list[dict]:
    """The whole lines of a JSONL file a writer may be appending to (a torn last line is
    skipped); read once per change of the file."""
    return cached(path, "lines", lambda: read_records(path))


def _config(run: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load((run / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _section(cfg: dict, name: str) -> dict:
    value = cfg.get(name)
    return value if isinstance(value, dict) else {}


def state(run: Path, records: list[dict], cfg: dict, now: float | None = None) -> str:
    """The run's state (module docstring)."""
    if any("stopped_early" in r for r in records):
        return "stopped"
    train = _section(cfg, "train")
    last = records[-1] if records else {}
    if last and (last.get("step") == train.get("steps") or (
            train.get("max_compute") and (last.get(COMPUTE) or 0) >= train["max_compute"])):
        return "finished"
    metrics = run / "metrics.jsonl"
    now = time.time() if now is None else now
    if metrics.is_file() and now - metrics.stat().st_mtime < LIVE_S:
        return "running"
    log = run / "train.log"
    if log.is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        if any(t.startswith(("scalerl train:", "Traceback")) or "Error" in t.split(":")[0] for t in tail):
            return "failed"
    return "paused"


def _number(v) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def summary(found: Found, now: float | None = None) -> dict:
    """One row of the runs list."""
    records = read_jsonl(found.path / "metrics.jsonl")
    cfg = _config(found.path)
    evals = [r for r in records if _number(r.get(VAL_PASS_RATE)) is not None]
    fc = next((r for r in reversed(records) if "forecast_step" in r), {})
    last = records[-1] if records else {}
    return {
        "id": found.id, "folder": str(found.path), "recipe": cfg.get("name", ""), "state": state(found.path, records, cfg, now),
        "step": last.get("step"), "steps": _section(cfg, "train").get("steps"),
        "reward": _number(next((r[TRAIN_REWARD] for r in reversed(records) if TRAIN_REWARD in r), None)),
        "val": _number(evals[-1][VAL_PASS_RATE]) if evals else None, "val_step": evals[-1]["step"] if evals else None,
        "forecast": {k: _number(fc.get(f"forecast_final{s}")) for k, s in (("median", ""), ("lo", "_lo"), ("hi", "_hi"))}
        | {"budget": _number(fc.get("forecast_budget"))},
        "target": _number(_section(cfg, "forecast").get("target")),
        "hours_to_target": {k: _number(fc.get(f"forecast_time_to_target_h{s}")) for k, s in (("median", ""), ("lo", "_lo"), ("hi", "_hi"))},
        "p_reach": _number(fc.get("forecast_p_reach")),
    }  # fmt: skip


def _series(records: list[dict], key: str) -> dict:
    pts = [(r["step"], _number(r.get(key))) for r in records if "step" in r and _number(r.get(key)) is not None]
    return {"step": [p[0] for p in pts], "value": [p[1] for p in pts]}


BAND_POINTS = 200
"""A curve is fitted from at most this many evaluations (consecutive means, ``fit_sigmoid``'s
binning): a page's band needs the shape, and a 1000-evaluation fit took 15 s here."""
GRID = 40  # the band's compute points ahead of the data


def forecast_band(compute: list[float], reward: list[float], budget: float | None, target: float | None,
                  trained: list[tuple[float, float]] = ()) -> dict:
    """The forecast ahead of the data, from the one predictive distribution ``scalerl plan``
    reads (``fit.time.answer.forecast_draws``): the draws of the expected curve on a grid from
    the last evaluation to the budget (2x the compute so far without one), their median and
    95% band, and with a target the compute at which the draws' curves first reach it
    (median and interval; null where beyond the grid). Empty when the curve is too short.
    ``trained``: (compute, ``reward_mean``) of the step records, the companion the draws
    follow where it fits (``fit.companion``)."""
    import numpy as np

    from scalerl.fit.companion import Companion
    from scalerl.fit.errors import CurveError
    from scalerl.fit.options import FitOptions
    from scalerl.fit.time.answer import forecast_draws

    if len(compute) < 6:
        return {}
    last = float(compute[-1])
    end = max(float(budget or 0.0), 2.0 * last)
    options = FitOptions(r0="first", max_points=BAND_POINTS)
    grid = np.linspace(last, end, GRID)
    try:
        fit = options.fit(np.asarray(compute), np.asarray(reward))
        companion = Companion.from_points(compute, reward, trained, TRAIN_REWARD)
        pred, source, _, evidence = forecast_draws(fit, options, None, end, None, end, companion=companion)
        mu = pred.curves(grid)  # (draws, GRID): one projection of the band serves every number below
    except (CurveError, ValueError, np.linalg.LinAlgError) as err:
        return _flat(np.asarray(reward), grid, options.level, str(err))
    tail = (1.0 - options.level) / 2.0
    lo, mid, hi = np.quantile(mu, [tail, 0.5, 1.0 - tail], axis=0)
    out = {"compute": grid.tolist(), "median": mid.tolist(), "lo": lo.tolist(), "hi": hi.tolist(),
           "source": source, "rise": evidence.message}  # fmt: skip
    if target is not None:
        hit = mu >= target
        at = np.where(hit.any(axis=1), grid[np.argmax(hit, axis=1)], np.inf)
        q = np.quantile(at, [0.5, tail, 1.0 - tail], method="inverted_cdf")
        out["crossing"] = {k: (float(v) if np.isfinite(v) else None) for k, v in zip(("median", "lo", "hi"), q)}
    return out


def _flat(reward, grid, level: float, why: str) -> dict:
    """A curve the law cannot take (a flat one, say): the flat forecast ``scalerl plan``
    gives a run with no rise (``fit.rise.flat_band``), said with the reason."""
    from scalerl.fit.rise import flat_band, rise

    centre, band = flat_band(rise(reward, rho=0.0, level=level), rho=0.0, level=level)
    lo, hi = band(grid)
    return {"compute": grid.tolist(), "median": centre(grid).tolist(), "lo": list(map(float, lo)),
            "hi": list(map(float, hi)), "source": "flat", "rise": f"forecast flat: {why}"}  # fmt: skip


_POOL = None
_LATEST: dict[str, tuple[tuple, dict]] = {}  # log -> (its stamp, the newest band fitted for it)
_RUNNING: dict[str, tuple[tuple, object]] = {}  # log -> (the stamp being fitted, its future)


def band(log: Path, make, wait: bool = False) -> dict:
    """The band for ``log`` as it is now, fitted in one background thread: a poll never waits
    for a fit. While the newest evaluations are being fitted, the band of the ones before is
    returned, marked ``"stale": true``; a run seen for the first time (or ``wait``) waits for
    its first."""
    global _POOL
    from concurrent.futures import ThreadPoolExecutor

    try:
        st = log.stat()
    except OSError:
        return make()
    key, stamp = str(log), (st.st_mtime_ns, st.st_size)
    latest = _LATEST.get(key)
    if latest is not None and latest[0] == stamp:
        return latest[1]
    running = _RUNNING.pop(key, None)
    if running is not None and running[1].done():  # keep what the last fit found, whatever came since
        latest = _LATEST[key] = (running[0], running[1].result())
        running = None
        if latest[0] == stamp:
            return latest[1]
    if running is None:
        _POOL = _POOL or ThreadPoolExecutor(max_workers=1, thread_name_prefix="serve-fit")
        running = (stamp, _POOL.submit(make))
    _RUNNING[key] = running
    if wait or latest is None:
        latest = _LATEST[key] = (running[0], running[1].result())
        del _RUNNING[key]
        return latest[1] if latest[0] == stamp else latest[1] | {"stale": True}
    return latest[1] | {"stale": True}


def shutdown() -> None:
    """Stop the fitting thread and forget every band and read (the server's shutdown; tests)."""
    global _POOL
    if _POOL is not None:
        _POOL.shutdown(wait=True, cancel_futures=True)
        _POOL = None
    _LATEST.clear()
    _RUNNING.clear()
    _CACHE.clear()


def detail(found: Found, wait: bool = False) -> dict:
    """Everything a run's page draws: the validation curve against compute and hours with the
    forecast ahead of it, the training curves, where the roles ran, the config and the resume
    command."""
    records = read_jsonl(found.path / "metrics.jsonl")
    evals = [r for r in records if _number(r.get(VAL_PASS_RATE)) is not None and _number(r.get(COMPUTE)) is not None]
    compute = [float(r[COMPUTE]) for r in evals]
    val = [float(r[VAL_PASS_RATE]) for r in evals]
    hours = [(_number(r.get(WALL)) or 0.0) / 3600.0 for r in evals]
    trained = [(float(r[COMPUTE]), float(r[TRAIN_REWARD])) for r in records
               if _number(r.get(TRAIN_REWARD)) is not None and _number(r.get(COMPUTE)) is not None]
    head = summary(found)
    keys = [k for k in TRAINING if any(k in r for r in records)]
    keys += sorted({k for r in records for k in r if k.startswith("reward_") and k not in NOT_FUNCTIONS
                    and _number(r.get(k)) is not None})  # fmt: skip
    plan = found.path / "plan.json"
    try:
        placed = json.loads(plan.read_text()) if plan.is_file() else None
    except ValueError:
        placed = None
    config = (found.path / "config.yaml").read_text() if (found.path / "config.yaml").is_file() else ""
    return head | {
        "validation": {"compute": compute, "hours": hours, "value": val, "step": [r["step"] for r in evals]},
        "band": band(found.path / "metrics.jsonl", lambda: forecast_band(compute, val, head["forecast"]["budget"],
                                                                           head["target"], trained), wait),
        "training": {k: _series(records, k) for k in keys},
        "plan": placed, "config": config, "resume": f"scalerl train --resume {found.path}",
    }  # fmt: skip


def samples(found: Found, query: str = "", limit: int = 50) -> list[dict]:
    """The newest ``limit`` samples whose prompt or completion holds ``query`` (any case)."""
    q = query.lower()
    rows = read_jsonl(found.path / "samples.jsonl")
    hits = [r for r in rows if not q or q in str(r.get("prompt", "")).lower() or q in str(r.get("completion", "")).lower()]
    return hits[-limit:][::-1]


def study(found: Found, runs: list[Found]) -> dict:
    """A study's runs on one axis, the fits table and verdict (``compare``) and, for an
    adaptive study, its decisions."""
    inside = {r.path.relative_to(found.path).as_posix(): r for r in runs
              if r.path != found.path and r.path.is_relative_to(found.path)}  # fmt: skip
    decisions = found.path / "decisions.json"
    try:
        decided = json.loads(decisions.read_text()) if decisions.is_file() else None
    except ValueError:
        decided = None
    return {"id": found.id, "folder": str(found.path), **compare(inside), "decisions": decided}


def compare(picked: dict[str, Found]) -> dict:
    """Runs on one axis: each curve, the paper-style table of A, B and C_mid with their
    intervals and ceiling verdicts (``fit.compare.fit_run``), and with two or more fitted
    runs the compare rule's verdict (|A_i - A_j| within the margin: compare B)."""
    import numpy as np

    from scalerl.fit.compare import compare_runs, fit_run
    from scalerl.fit.errors import CurveError
    from scalerl.fit.options import FitOptions
    from scalerl.fit.readers import Curve

    options = FitOptions(r0="first")
    curves, fits, fitted, fit_of = {}, [], [], {}
    for name, r in picked.items():
        evals = [x for x in read_jsonl(r.path / "metrics.jsonl")
                 if _number(x.get(VAL_PASS_RATE)) is not None and _number(x.get(COMPUTE)) is not None]  # fmt: skip
        c, y = [float(x[COMPUTE]) for x in evals], [float(x[VAL_PASS_RATE]) for x in evals]
        curves[name] = {"id": r.id, "compute": c, "value": y}
        curve = Curve(name, np.asarray(c), np.asarray(y), name)
        def fitted_run(curve=curve):
            try:
                return fit_run(curve, options=options)
            except (CurveError, ValueError, np.linalg.LinAlgError):
                return None

        run = cached(r.path / "metrics.jsonl", "fit", fitted_run)
        if run is None:
            continue
        fitted.append(curve)
        fit_of[name] = run.fit
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
    return {"curves": curves, "fits": fits, "verdict": verdict}
