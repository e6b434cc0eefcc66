"""Learn the population table the forecast ships with (``src/scalerl/fit/forecast/population.json``).

    PYTHONPATH=src .venv/bin/python bench/population.py [--out FILE] [--leave-out FAMILY]

From every finished run of the corpus (``bench/corpus/<family>/*.jsonl`` and the older runs in
``bench/data/``, the families ``forecast_real.py`` scores), cut at each share ``s`` of its
compute in ``SHARES``:

- **late risers** (``fit.forecast.late``): where the run's forecast at the cut is in the state
  ``not_learning`` (the shipped ``forecast_of``, validation alone: the same test a user's run
  gets), its later path: at each later evaluation, ``C / cut`` and the trailing mean of
  ``WINDOW`` evaluations minus its level at the cut (the mean of the cut's last third), and
  how long it had been flat: its evaluations up to the cut;
- **offset drift** (``fit.forecast.companion.population_drift``, the early forecast's): where
  the run logs a training reward, how the validation's offset from it moved from the cut to
  the end: the offset over the last third of the evaluations at the end
  (``companion.tail``) less the offset over every evaluation up to the cut (at least 2).

``--leave-out FAMILY`` writes the table without that family (``forecast_real.py`` scores each
run under a table that never saw its family). The file records its provenance: the corpus
index's runs and commit, the date, the shares and this script's settings. The figures it is
made from are computed, not timed: the machine's load does not change them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of  # noqa: E402
from scalerl.fit.forecast.late import TABLE  # noqa: E402
from scalerl.fit.forecast.reach import trailing_mean  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

SHARES = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
WINDOW = 5
MAX_PATH = 40  # later evaluations kept per case (thinned evenly)


def corpus_runs() -> list[tuple[str, str, np.ndarray, np.ndarray]]:
    """(family, run, compute, validation) of every finished run ``forecast_real.py`` scores."""
    out = []
    for fam in sorted(p for p in (HERE / "corpus").iterdir() if p.is_dir()):
        for path in sorted(fam.glob("*.jsonl")):
            recs = [r for r in read_records(path) if isinstance(r.get("val_pass_rate"), int | float)]
            out.append((fam.name, path.stem, np.array([r["compute_gpu_hours"] for r in recs], float),
                        np.array([r["val_pass_rate"] for r in recs], float), _train(recs)))  # fmt: skip
    for family, pattern, x in (("trl-1000", "trl_s*.jsonl", "step"), ("demo", "demo_seed*.jsonl", "compute_gpu_hours")):
        for path in sorted((HERE / "data").glob(pattern)):
            recs = [r for r in read_records(path) if isinstance(r.get("val_pass_rate"), int | float)]
            out.append((family, path.stem, np.array([r[x] for r in recs], float),
                        np.array([r["val_pass_rate"] for r in recs], float), _train(recs)))  # fmt: skip
    return out


def _train(recs: list[dict]) -> np.ndarray:
    """(n,) each evaluation's training reward since the one before (nan where none was logged)."""
    return np.array([float(r["train_reward"]) if isinstance(r.get("train_reward"), int | float) else np.nan
                     for r in recs])  # fmt: skip


def late_cases(runs) -> list[dict]:
    """The module docstring's late risers."""
    cases = []
    options = ForecastOptions(train_reward="none", population=Path("/nonexistent"))  # no table while learning it
    for family, name, c, y, _ in runs:
        reads = trailing_mean(y, WINDOW)
        for share in SHARES:
            cut = share * c[-1]
            seen = c <= cut
            if seen.sum() < 6 or seen.all():
                continue
            f = forecast_of(RunLog.of(c[seen], y[seen], name=name), options=options.with_(budget=float(c[-1])))
            if f.state.name != "not_learning":
                continue
            level = f.evidence.last
            later = np.flatnonzero(~seen)
            keep = later[np.unique(np.linspace(0, later.size - 1, min(MAX_PATH, later.size)).round().astype(int))]
            path = [[round(float(c[i] / c[seen][-1]), 5), round(float(reads[i] - level), 5)] for i in keep]
            cases.append({"family": family, "run": name, "share": share, "evals": int(seen.sum()),
                          "level": round(float(level), 5), "path": path})  # fmt: skip
    return cases


def drift_cases(runs) -> list[dict]:
    """The module docstring's offset drift, per run with a training reward and share."""
    from scalerl.fit.forecast.companion import tail

    cases = []
    for family, name, c, y, t in runs:
        ok = np.isfinite(t)
        if ok.sum() < 6:
            continue
        gaps, cc = (y - t)[ok], c[ok]
        end = float(gaps[-tail(gaps.size):].mean())
        for share in SHARES:
            seen = cc <= share * c[-1]
            if seen.sum() < 2 or seen.all():
                continue
            cases.append({"family": family, "run": name, "share": share,
                          "drift": round(end - float(gaps[seen].mean()), 5)})  # fmt: skip
    return cases


def table(runs, leave_out: str | None = None, cases: list[dict] | None = None, drifts: list[dict] | None = None
          ) -> dict:
    """The table without ``leave_out``'s runs; ``cases``, ``drifts``: ``late_cases(runs)`` and
    ``drift_cases(runs)`` made before (a family left out only drops its own cases, so one pass
    serves every family)."""
    cases = [k for k in (late_cases(runs) if cases is None else cases) if k["family"] != leave_out]
    drifts = [k for k in (drift_cases(runs) if drifts is None else drifts) if k["family"] != leave_out]
    index = json.loads((HERE / "corpus" / "index.json").read_text())
    commits = sorted({v.get("commit", "") for v in index.values()})
    families = sorted({f for f, *_ in runs} - {leave_out})
    return {
        "provenance": {"made_by": "bench/population.py", "date": time.strftime("%Y-%m-%d"),
                       "runs": sum(1 for f, *_ in runs if f != leave_out), "families": families,
                       "left_out": leave_out, "corpus_commits": commits, "shares": list(SHARES),
                       "window": WINDOW},  # fmt: skip
        "late_risers": {"about": "runs not learning at a share of their budget, the evaluations they had by then, "
                                 "and their later path: [C / cut, the trailing mean of 5 evaluations minus the "
                                 "level at the cut]",
                        "cases": cases},
        "offset_drift": {"about": "how the validation's offset from the training reward moved from a share of the "
                                  "budget to the end: the last third's mean offset at the end less the mean offset "
                                  "of every evaluation up to the cut",
                         "cases": drifts},
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=TABLE)
    p.add_argument("--leave-out", metavar="FAMILY", default=None)
    args = p.parse_args()
    data = table(corpus_runs(), args.leave_out)
    args.out.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    cases = data["late_risers"]["cases"]
    rose = sum(1 for k in cases if max(d for _, d in k["path"]) >= 0.05)
    print(f"wrote {args.out}: {len(cases)} late-riser cases from {data['provenance']['runs']} runs "
          f"({rose} rose by 0.05 or more later), {len(data['offset_drift']['cases'])} offset-drift cases")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
