"""Does ``scalerl plan`` say when a run reaches a target? The time-to-target benchmark of issue 31.

    PYTHONPATH=src .venv/bin/python bench/plan_accuracy.py [--quick] [--markdown]

Runs: the finished runs in ``bench/data/`` that have a clock.

* ``tools``: ``scalerl-tools-curve.csv`` (x = device-hours, its own ``wall_s``);
* ``trl``: the eight TRL ``GRPOTrainer`` runs (x = optimiser step, wall time = their ``seconds``
  column: seconds since the run's start, evaluations included);
* ``demo``: the five demo seeds. Their logs hold **no wall time**, only ``compute_gpu_hours``,
  which on scalerl's own runs *is* devices x wall hours (``scalerl.compute``). Their clock is
  therefore ``wall_s = compute_gpu_hours * 3600 / 2`` (the local backend: one generator and
  the learner, the tools run's own ratio), a rate without spread, so their rows test the
  compute to the target only; the device count cancels out of every relative error.

Protocol, per run and cut (the first 25% and 50% of the run's compute, x <= cut):

* **Smoothed curve**: the trailing mean of the last 5 evaluations (of all there are at the
  start): the read ``scalerl plan`` forecasts (``--window 5``, its default), the only one a
  live run can show.
* **Targets**: ``s_cut + f * (max(s after the cut) - s_cut)`` for f = 0.6, 0.75, 0.9, where
  ``s_cut`` is the smoothed value at the last evaluation inside the cut: 60/75/90% of the rise
  the smoothed curve still made. A (run, cut) whose remaining rise is below 0.03 (about one
  evaluation's binomial sd at 256 prompts) gives no target: its "crossing" would be noise.
* **Actual time**: the first evaluation after the cut whose smoothed value is at or above the
  target; its hours are interpolated linearly between that evaluation and the one before on
  the smoothed values. A target the smoothed curve had already reached inside the cut is
  left out (counted as "already reached").
* **Plan**: the run's ``Forecast`` (``scalerl.fit.forecast.forecast_of``) on the cut curve and the
  clock of the records inside the cut, its ``reach`` of the target: what ``scalerl plan RUN
  --target R`` does with no other flag (a log here has no training reward beside it). **With the prior**: the planner's
  ``--prior-runs`` path (``prior_runs.load_prior``) over the other runs of the same family,
  the run itself left out; fewer than 5 other runs (the demo seeds, the one tools run) give
  no prior and the prior-free answer, as the command does. Each case is planned with every
  ``--windows`` value side by side: ``5`` (the default: when the mean of the last 5
  evaluations reads the target, the quantity measured) and ``0`` (the expected curve's own
  crossing, what ``scalerl plan`` answered before it modelled the reads' noise).

Reported per window, prior choice, family and cut (and over all families per target fraction): cases, coverage of
the 95% interval of hours (an upper bound of ``never`` covers; "not reachable" is a miss), the
median relative error of the median hours ``|pred - actual| / actual`` (hours since the run's
start, what the planner prints; a median of ``never`` is an infinite error, so the median
error is ``never`` when more than half the medians are), the same of the *remaining* hours
``|pred - actual| / (actual - now)`` (the harder number), how many medians are ``never``
and the median error over the finite ones only (a flattering number: it drops the misses).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalerl.fit import FitOptions
from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.prior_runs import load_prior
from scalerl.fit.forecast.reach import trailing_mean
from scalerl.fit.readers import Columns, load_runs
from scalerl.runfolder import read_records

DATA = Path(__file__).resolve().parent / "data"
CUTS = (0.25, 0.5)
FRACS = (0.6, 0.75, 0.9)
WINDOW = 5
MIN_RISE = 0.03
DEMO_DEVICES = 2.0


@dataclass
class Run:
    family: str
    path: Path
    columns: Columns
    x: np.ndarray  # compute of the evaluations
    y: np.ndarray
    wall_s: np.ndarray  # seconds since the start at each evaluation
    clock_note: str


def _records(path: Path) -> list[dict]:
    if path.suffix == ".csv":
        import csv

        with path.open() as f:
            return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(f)]
    return read_records(path)


def runs(quick: bool) -> list[Run]:
    out = []
    specs = [("tools", sorted(DATA.glob("scalerl-tools-curve.csv")), None, "wall_s", "own wall_s"),
             ("trl", sorted(DATA.glob("trl_s*.jsonl")), "step", "seconds", "its seconds column"),
             ("demo", sorted(DATA.glob("demo_seed*.jsonl")), None, None,
              f"compute x 3600 / {DEMO_DEVICES:g} (no wall time in the log)")]  # fmt: skip
    for family, paths, x, wall, note in specs:
        for path in paths[:1] if quick else paths:
            columns = Columns(x=x)
            (curve,) = load_runs([str(path)], columns)
            recs = [r for r in _records(path) if isinstance(r.get(curve.x), int | float)]
            xs = np.array([float(r[curve.x]) for r in recs])
            if not np.allclose(xs, curve.compute):
                raise SystemExit(f"{path}: records and curve disagree")
            w = (np.array([float(r[wall]) for r in recs]) if wall else xs * 3600.0 / DEMO_DEVICES)
            out.append(Run(family, path, columns, curve.compute, curve.reward, w, note))
    return out


def smooth(y: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """The planner's read: the trailing mean of the last ``window`` evaluations."""
    return trailing_mean(y, window)


def targets(run: Run, cut: float) -> tuple[list[tuple[float, float, float]], int]:
    """[(target, fraction of the rise, actual hours)] for one cut, and how many were already reached inside it."""
    s = smooth(run.y)
    inside = run.x <= cut
    i_cut = int(np.flatnonzero(inside)[-1])
    rise = s[i_cut + 1:].max(initial=-np.inf) - s[i_cut]
    if not rise >= MIN_RISE:
        return [], 0
    out, already = [], 0
    for f in FRACS:
        r = s[i_cut] + f * rise
        if (s[: i_cut + 1] >= r).any():
            already += 1
            continue
        j = i_cut + 1 + int(np.argmax(s[i_cut + 1:] >= r))
        a = (r - s[j - 1]) / (s[j] - s[j - 1])
        out.append((float(r), f, float((run.wall_s[j - 1] + a * (run.wall_s[j] - run.wall_s[j - 1])) / 3600.0)))
    return out, already


@dataclass
class Case:
    family: str
    run: str
    cut: float
    prior: bool
    target: float
    frac: float  # of the remaining rise
    actual_h: float
    now_h: float
    pred: tuple[float, float, float]  # median, lo, hi hours (inf: never)
    reachable: bool
    source: str  # "fit" | "prior"
    window: int  # the planner's --window (0: the expected curve)

    @property
    def covered(self) -> bool:
        return self.reachable and self.pred[1] <= self.actual_h <= self.pred[2]

    @property
    def rel(self) -> float:
        return abs(self.pred[0] - self.actual_h) / self.actual_h if self.reachable else np.inf

    @property
    def rel_left(self) -> float:
        return abs(self.pred[0] - self.actual_h) / (self.actual_h - self.now_h) if self.reachable else np.inf


def plan_cases(run: Run, frac: float, options: FitOptions, with_prior: bool, windows: list[int]) -> tuple[list[Case], int]:
    cut = frac * run.x[-1]
    goals, already = targets(run, cut)
    if not goals:
        return [], already
    (curve,) = load_runs([str(run.path)], run.columns)
    curve = curve.head(cut)
    k = run.x <= cut
    log = RunLog.of(curve.compute, curve.reward, clock=list(zip(run.x[k], run.wall_s[k])), name=run.path.stem)
    prior = None
    if with_prior:
        pattern = {"trl": "trl_s*.jsonl", "demo": "demo_seed*.jsonl", "tools": "scalerl-tools-curve.csv"}[run.family]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CurveWarning)
            prior = load_prior(str(DATA / pattern), options, run.columns, exclude=(str(run.path),), forecast=[curve])
    cases = []
    for (target, f, actual), window in ((g, w) for g in goals for w in windows):
        try:
            fc = forecast_of(log, options=ForecastOptions(fit=options, prior=prior, window=window))
        except CurveError as err:
            print(f"  {run.path.name} cut {frac:.0%} target {target:.3f}: {err}", file=sys.stderr)
            continue
        a = fc.reach(target)
        hours = a.hours if a.supported else (np.inf, np.inf, np.inf)
        cases.append(Case(run.family, run.path.stem, frac, with_prior, target, f, actual, fc.clock.anchor[1] / 3600.0,
                          hours, a.reachable, fc.method, window))  # fmt: skip
    return cases, already


def _pct(v: float) -> str:
    return "never" if v == np.inf else "-" if not np.isfinite(v) else f"{v:.1%}"


def _median(v) -> float:
    return float(np.median(np.asarray(v, dtype=float))) if len(v) else float("nan")


def summary_rows(cases: list[Case], already: dict) -> list[tuple]:
    rows = []
    groups = [(fam, None) for fam in ("tools", "trl", "demo", "all")] + [("all", f) for f in FRACS]
    for window, prior in sorted({(c.window, c.prior) for c in cases}, key=lambda k: (-k[0], k[1])):
        for frac in CUTS:
            for fam, rise in groups:
                sel = [c for c in cases if c.window == window and c.prior == prior and c.cut == frac
                       and fam in ("all", c.family) and rise in (None, c.frac)]  # fmt: skip
                if not sel:
                    continue
                n_prior = sum(c.source == "prior" for c in sel)
                skipped = sum(v for (f, p, fr), v in already.items() if p == prior and fr == frac and fam in ("all", f))
                finite = [c for c in sel if np.isfinite(c.pred[0])]
                rows.append((
                    window, "yes" if prior else "no", f"{frac:.0%}", fam if rise is None else f"all, {rise:.0%} of rise",
                    len(sel), "-" if rise is not None else skipped, f"{n_prior}/{len(sel)}",
                    f"{np.mean([c.covered for c in sel]):.1%}", _pct(_median([c.rel for c in sel])),
                    _pct(_median([c.rel_left for c in sel])), len(sel) - len(finite),
                    _pct(_median([c.rel for c in finite])), sum(not np.isfinite(c.pred[2]) for c in sel),
                    sum(not c.reachable for c in sel),
                ))  # fmt: skip
    return rows


HEADER = ("--window", "--prior-runs", "cut", "runs", "cases", "already reached", "prior used", "95% cov.",
          "median rel. err (hours)", "median rel. err (remaining hours)", "median = never",
          "median rel. err (finite medians)", "hi = never", "not reachable")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one run per family")
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--cases", action="store_true", help="print every case")
    ap.add_argument("--windows", type=int, nargs="+", default=[WINDOW, 0],
                    help="the planner's --window values, side by side (0: the expected curve's crossing)")
    args = ap.parse_args()
    warnings.simplefilter("ignore", CurveWarning)
    options = FitOptions(max_points=200)
    t0 = time.perf_counter()
    cases, already = [], {}
    for run in runs(args.quick):
        for prior in (False, True):
            for frac in CUTS:
                got, skipped = plan_cases(run, frac, options, prior, args.windows)
                cases += got
                key = (run.family, prior, frac)
                already[key] = already.get(key, 0) + skipped
    if args.cases:
        print("run | window | cut | prior | target | actual h | now h | median [lo, hi] h | source")
        for c in cases:
            print(f"{c.run} | {c.window} | {c.cut:.0%} | {'yes' if c.prior else 'no'} | {c.target:.3f} | {c.actual_h:.4g} | "
                  f"{c.now_h:.4g} | {c.pred[0]:.4g} [{c.pred[1]:.4g}, {c.pred[2]:.4g}] | "
                  f"{c.source}{'' if c.reachable else ' (not reachable)'}{'' if c.covered else ' MISS'}")
    rows = summary_rows(cases, already)
    if args.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for r in rows:
            print("| " + " | ".join(str(v) for v in r) + " |")
    else:
        widths = [max(len(str(v)) for v in col) for col in zip(HEADER, *rows)]
        for r in (HEADER, *rows):
            print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
    print("clocks: " + "; ".join(sorted({f'{r.family}: {r.clock_note}' for r in runs(args.quick)})))
    print(f"planned {len(cases)} cases in {time.perf_counter() - t0:.1f} s; nominal level 95%; "
          f"targets at {', '.join(f'{f:.0%}' for f in FRACS)} of the smoothed curve's remaining rise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
