"""Where the shipped forecast's low centre comes from, on the corpus's real runs.

    PYTHONPATH=src .venv/bin/python bench/train_reward_bias.py

The shipped forecast of a run that logs a training reward is ``v(C) = t(C) + g``
(``fit.forecast.companion``): ``t`` the training reward's own sigmoid fit (Eq. 1) on the cut,
``g`` the validation's offset from it over the cut's last third. Its error at the run's last
compute ``C`` splits exactly into the two parts, each read against the run's own end (the mean
of its last 5 evaluations, ``v_end`` and ``t_end``):

    (t(C) + g) - v_end = [t(C) - t_end] + [g - (v_end - t_end)]
                           the fit's part    the offset's part

Per cut (25% and 50% of the run's compute) and family: the median of each part and the share
of runs where it is below zero (a part that reads runs low). Runs with at least 12 evaluations
that carry a training reward; a cut with fewer than 6 such evaluations is left out (the
companion's ``MIN_POINTS``). Single-threaded numpy; the machine's parallel scaling is printed
as every benchmark does, though a second core changes nothing here.
"""

from __future__ import annotations

import collections
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workload import parallel_scaling  # noqa: E402
from forecast_real import CUTS, runs  # noqa: E402

from scalerl.fit import FitOptions  # noqa: E402
from scalerl.fit.errors import CurveError  # noqa: E402
from scalerl.fit.forecast.companion import MIN_POINTS, tail  # noqa: E402

END = 5  # evaluations the run's end is read over (``plan``'s window)


def parts(run, frac: float, options: FitOptions) -> tuple[float, float] | None:
    """(the fit's part, the offset's part) of the error at the run's end (module docstring)."""
    ok = np.isfinite(run.train)
    k = (run.x <= frac * run.x[-1]) & ok
    if k.sum() < MIN_POINTS or not ok[-END:].all():
        return None
    try:
        fit = options.fit(run.x[k], run.train[k], source=run.name)
    except (CurveError, ValueError, np.linalg.LinAlgError):
        return None
    t_end, v_end = float(run.train[-END:].mean()), float(run.y[-END:].mean())
    gaps = run.y[k] - fit.predict(run.x[k])
    g = float(gaps[-tail(gaps.size):].mean())
    return float(fit.predict(np.array([run.x[-1]]))[0]) - t_end, g - (v_end - t_end)


def main() -> int:
    print(f"parallel scaling {parallel_scaling():.2f}x (two single-thread processes against one)", flush=True)
    warnings.simplefilter("ignore")
    options = FitOptions()
    rows = collections.defaultdict(list)
    for run in runs(quick=False):
        if np.isfinite(run.train).sum() < 12:
            continue
        for frac in CUTS:
            if (p := parts(run, frac, options)) is not None:
                rows[frac, run.family].append(p)
                rows[frac, "all"].append(p)
    print(f"{'cut':>4}  {'family':<28} {'runs':>4}  {'fit part':>9} {'low':>5}  {'offset part':>11} {'low':>5}  "
          f"{'sum':>7}")  # fmt: skip
    for (frac, fam), got in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1] == "all", kv[0][1])):
        a = np.array(got)  # (runs, 2)
        print(f"{frac:>4.0%}  {fam:<28} {len(a):>4}  {np.median(a[:, 0]):>+9.3f} {np.mean(a[:, 0] < 0):>5.0%}  "
              f"{np.median(a[:, 1]):>+11.3f} {np.mean(a[:, 1] < 0):>5.0%}  {np.median(a.sum(axis=1)):>+7.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
