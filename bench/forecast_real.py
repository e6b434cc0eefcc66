"""Is the forecast right on real runs? The corpus benchmark of issue 36.

    PYTHONPATH=src .venv/bin/python bench/forecast_real.py [--quick] [--markdown] [--json OUT]

Runs: every finished run of the corpus (``bench/corpus/<family>/*.jsonl``, made by
``bench/corpus/make.py``: x = ``compute_gpu_hours``, its own ``wall_s``), and the older runs
in ``bench/data/`` as two more families: ``trl-1000`` (TRL ``GRPOTrainer``, x = step, wall =
its ``seconds``) and ``demo`` (``make demo``'s recipe; no wall time in the log, so its clock
is ``compute x 3600 / 2``, the local backend's two devices, as ``plan_accuracy.py`` does).

Protocol, per run and cut (its first 25% and 50% of compute), each method seeing only the
evaluations inside the cut, **the run itself never in its own prior**. A cut with fewer than 6
evaluations is given the shipped forecast first: where it has no band (below what the ``early``
state can carry), the run counts as not forecast at that cut, with the forecast's own reason
(the first table); where it has one, the cut is scored like the others:

* **Final value.** The 95% predictive interval of one evaluation at the run's last compute
  against its last evaluation: coverage, median width, median |error| of the centre.
  Every forecast is the shipped one, through its one entry point (``fit.forecast.forecast_of``
  on the run's log cut at the share, the run's last compute as its budget), each run under a
  population table (``bench/population.py``) learned without its own family. Methods side by
  side:
  - ``shipped``: the default ``Forecast`` (the training reward where the log has one that
    rises and the validation follows, the late risers of a run not learning, else the fit's
    band with its rolling-origin factors by lead);
  - ``validation alone``: the same with ``train_reward="none"``;
  - ``with the siblings' prior``: the same under the prior learned from the run's siblings (the
    other runs of its family; ``forecast.prior_runs.load_prior``, as ``--prior-runs`` does): the
    validation's own prior first, their training rewards' on the training reward the forecast
    follows where the validation's is not used;
  - ``siblings' prior, validation's only``: the same prior without its training rewards' (as
    before issue 48's item 1: the validation's own fit under the prior);
  - ``with a population prior``: the prior learned from every run of the *other* families, and
    ``population prior, validation's only`` the same without its training rewards';
  - the baselines of ``bench/baselines.py``, each one registered function: App. A.4's power
    law ``R = A - D / C^B``, the learning-curve literature's POW4 and MMF4, the entropy law
    ``R = -a e^H + b`` where a log has entropy (each band by the delta method on its least-squares
    covariance, plus the evaluation noise), and the last value;
  - ``stack``: the two laws' predictive distributions mixed with pseudo-BMA weights, each
    law's Gaussian log score on the last third of the cut when fitted on the first two;
    the last value (the mean of the last 5 evaluations and its noise: the certified
    pruner's predictor) is the one a forecast has to beat on width and coverage both.
* **Time to target** (``plan``'s answer, ``Forecast.reach``, read as the mean of 5
  evaluations): targets at 60, 75 and 90% of the rise the run's smoothed curve still made
  after the cut (``plan_accuracy.targets``); coverage of the 95% interval of hours, how often
  its upper end is ``never`` for a target the run reached, median relative error of the median
  hours split into its two sources (the crossing compute against the run's own, and the clock:
  the forecast's hours at the run's true crossing compute against the hours it took), and the
  coverage of the crossing's interval if reached.
* **P(reach within the run's own budget)** (``plan --budget-compute`` at the run's last
  compute): targets ``s_cut + d`` for the steps ``REACH_STEPS`` (those below 1 and above
  every read inside the cut); the outcome is whether the smoothed curve read it by the end.
  Brier score against the base rate's, and a reliability table.

Every figure is measured in the one invocation; the machine's parallel scaling is printed
(this benchmark is single-threaded numpy; a second core changes nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

import population  # noqa: E402
from baselines import BASELINES, Cut  # noqa: E402
from plan_accuracy import smooth, targets  # noqa: E402

from scalerl.fit import FitOptions  # noqa: E402
from scalerl.fit.errors import CurveError, CurveWarning  # noqa: E402
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of  # noqa: E402
from scalerl.fit.forecast.prior_runs import load_prior  # noqa: E402
from scalerl.fit.forecast.rise import rise  # noqa: E402
from scalerl.fit.readers import Columns, Curve  # noqa: E402
from scalerl.runfolder import read_records  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS, DATA = HERE / "corpus", HERE / "data"
CUTS = (0.25, 0.5)
WINDOW = 5
REACH_STEPS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
LEVEL = 0.95
Z = float(stats.norm.ppf(0.975))
SIBLINGS_VAL, POPULATION_VAL = "siblings' prior, validation's only", "population prior, validation's only"
VARIANTS = ("shipped", "validation alone", "with the siblings' prior", SIBLINGS_VAL, "with a population prior",
            POPULATION_VAL, "prequential mixture")  # scored for time and P(reach)
METHODS = (*VARIANTS, "stack", *BASELINES)
SETTINGS = {"shipped": {}, "validation alone": {"train_reward": "none"}, "with the siblings' prior": {"prior": True},
            SIBLINGS_VAL: {"prior": "validation"}, "with a population prior": {"population_prior": True},
            POPULATION_VAL: {"population_prior": "validation"}}
MIN_POINTS = 6


@dataclass
class Run:
    family: str
    name: str
    path: Path
    siblings: str  # glob of the family's runs (the prior; the run itself is excluded)
    columns: Columns
    x: np.ndarray  # (n,) compute of the evaluations
    y: np.ndarray  # (n,) validation pass rate
    wall_s: np.ndarray  # (n,) seconds since the start
    train: np.ndarray  # (n,) mean training reward since the evaluation before (nan: not logged)
    entropy: np.ndarray | None = None  # (n,) mean policy entropy since the evaluation before (nan: not logged)

    def log(self) -> RunLog:
        """The run's log as ``scalerl plan`` reads it: validation, training reward (one bin per
        evaluation already), clock."""
        ok = np.isfinite(self.train)
        return RunLog.of(self.x, self.y, train=list(zip(self.x[ok], self.train[ok])), clock=list(zip(self.x, self.wall_s)),
                         name=self.name)  # fmt: skip


def _run(family: str, path: Path, siblings: str, x: str, wall: str | None) -> Run:
    recs = [r for r in read_records(path) if isinstance(r.get("val_pass_rate"), int | float)]
    xs = np.array([float(r[x]) for r in recs])
    w = np.array([float(r[wall]) for r in recs]) if wall else xs * 3600.0 / 2.0
    t = np.array([float(r["train_reward"]) if isinstance(r.get("train_reward"), int | float) else np.nan for r in recs])
    h = np.array([float(r["entropy"]) if isinstance(r.get("entropy"), int | float) else np.nan for r in recs])
    return Run(family, path.stem, path, siblings, Columns(x=x, y="val_pass_rate"), xs,
               np.array([float(r["val_pass_rate"]) for r in recs]), w, t, h)  # fmt: skip


def runs(quick: bool) -> list[Run]:
    out = []
    for fam in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        paths = sorted(fam.glob("*.jsonl"))
        out += [_run(fam.name, p, str(fam / "*.jsonl"), "compute_gpu_hours", "wall_s") for p in paths[: 2 if quick else None]]
    legacy = [("trl-1000", "trl_s*.jsonl", "step", "seconds"), ("demo", "demo_seed*.jsonl", "compute_gpu_hours", None)]
    for family, pattern, x, wall in legacy:
        paths = sorted(DATA.glob(pattern))
        out += [_run(family, p, str(DATA / pattern), x, wall) for p in paths[: 2 if quick else None]]
    return out


# --- the laws' predictive intervals at the final compute -------------------------------------------------


def _powerlaw_normal(x, y, C, sigma):
    """(mean, sd) of one evaluation at C under the power law (``baselines.py``)."""
    return BASELINES["power law"](Cut(x, y, sigma), C)


def _sigmoid_normal(x, y, C, options):
    """(mean, sd) from the validation's own forecast at C (for the stack's holdout score)."""
    f = forecast_of(RunLog.of(x, y), options=ForecastOptions(fit=options, budget=C, train_reward="none"))
    a = f.at(C)
    return float(a.value), float((a.pred_hi - a.pred_lo) / (2 * Z))


def _stack_weight(x, y, options, sigma) -> float:
    """The sigmoid's pseudo-BMA weight: exp(log score) of each law on the cut's last third,
    fitted on its first two thirds."""
    m = max(int(len(x) * 2 / 3), MIN_POINTS)
    if len(x) - m < 2:
        return 0.5
    scores = []
    for normal in (lambda C: _sigmoid_normal(x[:m], y[:m], C, options), lambda C: _powerlaw_normal(x[:m], y[:m], C, sigma)):
        try:
            ls = sum(stats.norm.logpdf(y[i], *normal(x[i])) for i in range(m, len(x)))
        except (CurveError, np.linalg.LinAlgError, ValueError):
            ls = -np.inf
        scores.append(ls)
    s = np.array(scores)
    if not np.isfinite(s).any():
        return 0.5
    w = np.exp(s - s[np.isfinite(s)].max())
    return float(w[0] / w.sum())


@dataclass
class Final:
    family: str
    run: str
    cut: float
    method: str
    lo: float
    mid: float
    hi: float
    actual: float
    source: str = ""  # whose draws: the Forecast's method

    @property
    def covered(self) -> bool:
        return self.lo <= self.actual <= self.hi


@dataclass
class Unforecast:
    """A cut the shipped forecast gave no band for, and the forecast's own reason."""

    family: str
    run: str
    cut: float
    evaluations: int
    why: str


def _cut(run: Run, frac: float) -> float:
    """The compute of the last evaluation inside the first ``frac`` of the run's."""
    return float(run.x[run.x <= frac * run.x[-1]][-1])


def _shipped(run: Run, options: FitOptions, table: Path) -> ForecastOptions:
    """The shipped forecast's options for ``run``: its last compute as the budget, the population
    table learned without its family."""
    return ForecastOptions(fit=options, budget=float(run.x[-1]), population=table)


def unforecast(run: Run, frac: float, options: FitOptions, table: Path) -> Unforecast | None:
    """The cut's shipped forecast where it has fewer than ``MIN_POINTS`` evaluations: None where
    it gives a band (the ``early`` state), which is then scored like any other cut."""
    k = run.x <= frac * run.x[-1]
    if k.sum() >= MIN_POINTS:
        return None
    try:
        f = forecast_of(run.log(), cut=_cut(run, frac), options=_shipped(run, options, table))
    except CurveError as err:
        return Unforecast(run.family, run.name, frac, int(k.sum()), str(err))
    return None if f.draws is not None else Unforecast(run.family, run.name, frac, int(k.sum()), f.why)


def forecast_table(finals: list[Final], missing: list[Unforecast]) -> list[tuple]:
    """Per cut: the runs the shipped forecast gave a band for, of all the runs scored at either cut."""
    rows = []
    for frac in CUTS:
        given = {(c.family, c.run) for c in finals if c.cut == frac and c.method == "shipped"}
        none = [m for m in missing if m.cut == frac]
        runs = given | {(m.family, m.run) for m in none}
        why = "; ".join(f"{m.family}/{m.run} ({m.evaluations} evaluations): {m.why}" for m in none) or "-"
        rows.append((f"{frac:.0%}", len(runs), len(given), len(none), why))
    return rows


def forecasts(run: Run, frac: float, options: FitOptions, prior, table: Path, population_prior=None) -> dict:
    """The forecast of each variant, made once per (run, cut): every question is read from it."""
    cut = _cut(run, frac)
    base = _shipped(run, options, table)
    out = {}
    for variant, change in SETTINGS.items():
        if change.get("population_prior"):
            if population_prior is None:
                continue
            change = {"prior": _validations_only(population_prior, change["population_prior"])}
        elif change.get("prior"):
            change = {"prior": _validations_only(prior, change["prior"])}
        out[variant] = forecast_of(run.log(), cut=cut, options=base.with_(**change))
    mixed = prequential(run, cut, base, out)
    if mixed is not None:
        out["prequential mixture"] = mixed
    return out


def _validations_only(prior: tuple, which) -> tuple:
    """``ForecastOptions.prior`` as given, or for ``which == "validation"`` without the
    training rewards' population (the prior before issue 48's item 1)."""
    if which != "validation" or prior[0] is None:
        return prior
    return (replace(prior[0], train=None), *prior[1:])


def prequential(run: Run, cut: float, base: ForecastOptions, made: dict):
    """Issue 48, item 2, beside the fixed order: the shipped forecast's method and the
    validation's own fit mixed by how well each predicted this run's later evaluations from its
    earlier ones (a rolling origin on the run itself: each forecast from the cut's first two
    thirds, scored by the Gaussian log density of the last third under its predictive draws;
    pseudo-BMA weights). Where the shipped forecast is the validation's own, it is itself."""
    from scalerl.fit.forecast.draws import mixture

    shipped, alone = made["shipped"], made["validation alone"]
    if shipped.draws is None or alone.draws is None:
        return None
    if shipped.method == alone.method:
        return replace(shipped, method="prequential mixture: " + shipped.method)
    x = run.x[run.x <= cut]
    m = max(int(x.size * 2 / 3), MIN_POINTS)
    if x.size - m < 2:
        return replace(shipped, method="prequential mixture: " + shipped.method)
    scores = []
    for change in ({}, {"train_reward": "none"}):
        try:
            f = forecast_of(run.log().upto(cut), cut=float(x[m - 1]), options=base.with_(**change))
        except CurveError:
            return None
        if f.draws is None:
            return None
        mu = f.draws.curves(x[m:])  # (n, h) the expected curve at the held-out evaluations
        sd = np.sqrt(mu.var(axis=0) + f.draws.sigma**2)
        scores.append(float(stats.norm.logpdf(run.y[m:x.size], mu.mean(axis=0), sd).sum()))
    s = np.array(scores)
    w = np.exp(s - s.max())
    w = w / w.sum()
    draws = mixture([(w[0], shipped.draws), (w[1], alone.draws)])
    return replace(shipped, draws=draws, method="prequential mixture",
                   weights={shipped.method: float(w[0]), "fit": float(w[1])})  # fmt: skip


def final_cases(run: Run, frac: float, options: FitOptions, made: dict) -> list[Final]:
    k = run.x <= frac * run.x[-1]
    x, y, C = run.x[k], run.y[k], float(run.x[-1])
    sigma = rise(y, rho=0.0).sigma
    out = []

    def add(method, lo, mid, hi, source=""):
        out.append(Final(run.family, run.name, frac, method, float(lo), float(mid), float(hi), float(run.y[-1]), source))

    draws = {}
    for variant, f in made.items():
        if f.draws is None:
            continue
        mu = f.draws.curves(np.array([C]))[:, 0] + np.random.default_rng(0).standard_normal(f.draws.n) * f.draws.sigma
        draws[variant] = mu
        add(variant, *np.quantile(mu, [0.025, 0.5, 0.975]), source=f.method)
    cut = Cut(x, y, sigma, None if run.entropy is None else run.entropy[k])
    for name, fn in BASELINES.items():  # bench/baselines.py: each one function, scored on the same cut
        try:
            m, sd = fn(cut, C)
            if np.isfinite(m) and np.isfinite(sd):  # a rate: its interval within [0, 1], as the forecast's
                add(name, max(m - Z * sd, 0.0), m, min(m + Z * sd, 1.0))
        except (CurveError, np.linalg.LinAlgError, ValueError) as err:
            print(f"  {run.name} cut {frac:.0%}: {name}: {err}", file=sys.stderr)
    try:
        m, sd = _powerlaw_normal(x, y, C, sigma)
        w = _stack_weight(x, y, options, sigma)
        rng = np.random.default_rng(1)
        if "validation alone" not in draws:  # an early forecast's cut: the validation alone has none
            raise ValueError("no validation-alone draws to stack with")
        n = draws["validation alone"].size
        pick = rng.random(n) < w
        mix = np.where(pick, draws["validation alone"], rng.normal(m, sd, n))
        add("stack", *np.quantile(mix, [0.025, 0.5, 0.975]))
    except (CurveError, np.linalg.LinAlgError, ValueError) as err:
        print(f"  {run.name} cut {frac:.0%}: power law: {err}", file=sys.stderr)
    return out


# --- time to target and P(reach), read off plan's own draws -----------------------------------------------


@dataclass
class Timed:
    family: str
    run: str
    cut: float
    variant: str
    target: float
    actual_h: float
    pred: tuple[float, float, float]  # median, lo, hi hours (inf: never)
    actual_c: float = float("nan")  # the compute at which the run's read crossed the target
    pred_c: float = float("nan")  # the forecast's median crossing compute
    clock_h: float = float("nan")  # the forecast's clock at the run's own crossing compute
    if_reached: tuple[float, float] = (float("nan"), float("nan"))  # the crossing's compute interval if reached

    @property
    def covered(self) -> bool:
        return self.pred[1] <= self.actual_h <= self.pred[2]


@dataclass
class Reach:
    family: str
    run: str
    cut: float
    variant: str
    target: float
    p: float
    reached: bool


def _crossed(run: Run, i_cut: int, target: float) -> float:
    """The compute at which the run's read first reached ``target`` after the cut (interpolated)."""
    s = smooth(run.y)
    j = i_cut + 1 + int(np.argmax(s[i_cut + 1:] >= target))
    a = (target - s[j - 1]) / (s[j] - s[j - 1])
    return float(run.x[j - 1] + a * (run.x[j] - run.x[j - 1]))


def timed_cases(run: Run, frac: float, made: dict):
    cut = frac * run.x[-1]
    k = run.x <= cut
    C = float(run.x[-1])
    i_cut = int(np.flatnonzero(k)[-1])
    timed, reach = [], []
    goals, _ = targets(run, cut)
    for variant, f in made.items():
        if f.draws is None or f.clock is None:
            continue
        for target, _f, actual in goals:
            r = f.reach(target)
            c_true = _crossed(run, i_cut, target)
            clock_h = float(f.clock.hours(np.array([c_true]))[0])
            hours = r.hours if r.supported else (np.inf, np.inf, np.inf)
            timed.append(Timed(run.family, run.name, frac, variant, target, actual, tuple(hours), c_true,
                               float(r.compute[0]), clock_h, (float(r.if_reached[1]), float(r.if_reached[2]))))  # fmt: skip
        s = smooth(run.y)
        for d in REACH_STEPS:
            target = float(s[i_cut] + d)
            if target >= 1.0 or (s[: i_cut + 1] >= target).any():
                continue
            p = f.reach(target, budget_compute=C).p_within
            reach.append(Reach(run.family, run.name, frac, variant, target, float(p),
                               bool((s[i_cut + 1:] >= target).any())))  # fmt: skip
    return timed, reach


# --- tables -----------------------------------------------------------------------------------------------


def _pct(v: float) -> str:
    return "never" if v == np.inf else "-" if not np.isfinite(v) else f"{v:.1%}"


def final_table(cases: list[Final]) -> list[tuple]:
    rows = []
    for frac in CUTS:
        for fam in sorted({c.family for c in cases}) + ["all"]:
            for method in METHODS:
                sel = [c for c in cases if c.cut == frac and c.method == method and fam in ("all", c.family)]
                if sel:
                    named = method in VARIANTS
                    used = ", ".join(f"{m} {n}" for m, n in sorted(_count(c.source for c in sel).items())) if named else ""
                    rows.append(_final_row(frac, fam, method + (f" ({used})" if used else ""), sel))
    return rows


def _count(items) -> dict:
    out: dict = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def _final_row(frac: float, fam: str, label: str, sel: list[Final]) -> tuple:
    return (f"{frac:.0%}", fam, label, len(sel), f"{np.mean([c.covered for c in sel]):.1%}",
            f"{np.median([c.hi - c.lo for c in sel]):.3f}", f"{np.median([abs(c.mid - c.actual) for c in sel]):.3f}")


def timed_table(cases: list[Timed]) -> list[tuple]:
    rows = []
    for variant in VARIANTS:
        for frac in CUTS:
            for fam in sorted({c.family for c in cases}) + ["all"]:
                sel = [c for c in cases if c.cut == frac and c.variant == variant and fam in ("all", c.family)]
                if not sel:
                    continue
                rel = [abs(c.pred[0] - c.actual_h) / c.actual_h for c in sel]
                rel_c = [abs(c.pred_c - c.actual_c) / c.actual_c for c in sel]
                rel_clock = [abs(c.clock_h - c.actual_h) / c.actual_h for c in sel]
                cond = [c.if_reached[0] <= c.actual_c <= c.if_reached[1] for c in sel if np.isfinite(c.if_reached[0])]
                rows.append((variant, f"{frac:.0%}", fam, len(sel),
                             f"{np.mean([c.covered for c in sel]):.1%}",
                             f"{np.mean([np.isfinite(c.pred[2]) for c in sel]):.1%}",
                             _pct(float(np.median(rel))), _pct(float(np.median(rel_c))),
                             _pct(float(np.median(rel_clock))), f"{np.mean(cond):.1%}" if cond else "-"))  # fmt: skip
    return rows


def reach_table(cases: list[Reach]) -> tuple[list[tuple], list[tuple]]:
    rows, bins = [], []
    edges = np.linspace(0.0, 1.0, 11)
    for variant in VARIANTS:
        for frac in (*CUTS, None):
            sel = [c for c in cases if c.variant == variant and frac in (None, c.cut)]
            if not sel:
                continue
            p = np.array([c.p for c in sel])
            o = np.array([c.reached for c in sel], dtype=float)
            base = o.mean()
            rows.append((variant, "all" if frac is None else f"{frac:.0%}", len(sel), f"{base:.3f}",
                         f"{np.mean((p - o) ** 2):.4f}", f"{np.mean((base - o) ** 2):.4f}"))  # fmt: skip
            if frac is None:
                for lo, hi in zip(edges[:-1], edges[1:]):
                    m = (p >= lo) & ((p < hi) | (hi == 1.0))
                    if m.any():
                        bins.append((variant, f"[{lo:.1f}, {hi:.1f}{']' if hi == 1.0 else ')'}",
                                     int(m.sum()), f"{p[m].mean():.3f}", f"{o[m].mean():.3f}",
                                     "ok" if m.sum() < 10 or abs(p[m].mean() - o[m].mean()) <= 0.10 else "OFF"))  # fmt: skip
    return rows, bins


def _print(title: str, header: tuple, rows: list[tuple], markdown: bool) -> None:
    print(f"\n{title}")
    if markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(str(v) for v in r) + " |")
        return
    widths = [max(len(str(v)) for v in col) for col in zip(header, *rows)]
    for r in (header, *rows):
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))


def _scaling() -> str:
    """Two copies of one single-threaded workload, serial and on two processes: the machine's
    parallel scaling at this moment (2.0 on two idle cores). Pure Python, so BLAS threads
    cannot oversubscribe the cores and read as a busy machine."""
    import multiprocessing as mp

    def work(_=None):
        x = 0
        for i in range(3_000_000):
            x = (x + i * i) % 1_000_003

    t = time.perf_counter()
    work(), work()
    serial = time.perf_counter() - t
    t = time.perf_counter()
    ps = [mp.get_context("fork").Process(target=work) for _ in range(2)]
    [p.start() for p in ps]
    [p.join() for p in ps]
    return f"parallel scaling {serial / (time.perf_counter() - t):.2f}x on 2 processes"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two runs a family")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", type=Path, help="write every case here")
    ap.add_argument("--cases", type=Path, help="print the tables of a --json written before (no fitting)")
    args = ap.parse_args()
    if args.cases is not None:
        data = json.loads(args.cases.read_text())
        _tables([Final(**c) for c in data["final"]], [Timed(**{**c, "pred": tuple(c["pred"])}) for c in data["timed"]],
                [Reach(**c) for c in data["reach"]], args.markdown,
                [Unforecast(**c) for c in data.get("unforecast", [])])  # fmt: skip
        return 0
    print(_scaling())
    import os

    print(f"load average at start {os.getloadavg()[0]:.2f}")
    t0 = time.perf_counter()
    options = FitOptions(max_points=200)
    finals, timed, reach, missing = [], [], [], []
    all_runs = runs(args.quick)
    tables = _tables_without_each_family(sorted({r.family for r in all_runs}))
    populations = _priors_without_each_family(all_runs if not args.quick else runs(False), options)
    for run in all_runs:
        for frac in CUTS:
            k = run.x <= frac * run.x[-1]
            if k.sum() < 2:
                continue
            if (none := unforecast(run, frac, options, tables[run.family])) is not None:
                missing.append(none)
                continue
            head = Curve(run.name, run.x[k], run.y[k], str(run.path))
            try:  # the prior too: an early forecast's cut may be too short for the siblings' prior
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", CurveWarning)
                    prior = load_prior(run.siblings, options, run.columns, exclude=(str(run.path),), forecast=[head])
                made = forecasts(run, frac, options, prior, tables[run.family], populations.get(run.family))
                finals += final_cases(run, frac, options, made)
                t, r = timed_cases(run, frac, made)
                timed += t
                reach += r
            except CurveError as err:
                print(f"  {run.family}/{run.name} cut {frac:.0%}: {err}", file=sys.stderr)
    families = sorted({r.family for r in all_runs})
    print(f"{len(all_runs)} runs in {len(families)} families ({', '.join(families)}); "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    _tables(finals, timed, reach, args.markdown, missing)
    if args.json:
        args.json.write_text(json.dumps({"final": [asdict(c) for c in finals], "timed": [asdict(c) for c in timed],
                                         "reach": [asdict(c) for c in reach],
                                         "unforecast": [asdict(c) for c in missing]}, default=float))  # fmt: skip
    return 0


def _priors_without_each_family(every: list[Run], options: FitOptions) -> dict:
    """Issue 48, item 1, as a variant: the prior of Eq. 1's shape learned from every finished
    run of the *other* families (``prior.learn``'s unit-free z = (A - R0, log B, log(C_mid /
    budget)), so trainers that log steps and ones that log core-hours pool), with the same
    runs' training rewards' beside it (``Prior.train``, as ``--prior-runs`` learns it), as
    ``ForecastOptions.prior`` takes it: (prior, why none, runs)."""
    from scalerl.fit.prior.learn import learn_prior, learn_train_prior

    out = {}
    for fam in sorted({r.family for r in every}):
        others = [r for r in every if r.family != fam]
        kept = [(r, ok) for r in others if (ok := np.isfinite(r.train)).sum() >= MIN_POINTS]
        trained = [(f"{r.family}/{r.name}", r.x[ok], r.train[ok]) for r, ok in kept]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CurveWarning)
            prior, why = learn_prior([(f"{r.family}/{r.name}", r.x, r.y) for r in others], options)
            if prior is not None:
                train, train_why = learn_train_prior(trained, [r.y[ok] for r, ok in kept], options)
                prior = replace(prior, train=train, train_why=train_why)
        out[fam] = (prior, why, len(others))
    return out


def _tables_without_each_family(families: list[str]) -> dict[str, Path]:
    """The population table learned without each family (``population.py --leave-out``), so no
    run's forecast reads its own family's late risers."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="scalerl-population-"))
    corpus = population.corpus_runs()
    every, drifts = population.late_cases(corpus), population.drift_cases(corpus)
    out = {}
    for fam in families:
        out[fam] = folder / f"without-{fam}.json"
        out[fam].write_text(json.dumps(population.table(corpus, fam, every, drifts)))
    return out


def _tables(finals, timed, reach, markdown: bool, missing=()) -> None:
    _print("Runs forecast at each cut (shipped)", ("cut", "runs", "forecast", "no forecast", "why not"),
           forecast_table(finals, list(missing)), markdown)  # fmt: skip
    _print("Final value: 95% predictive interval of the last evaluation", ("cut", "family", "method", "cases",
           "coverage", "median width", "median |error|"), final_table(finals), markdown)  # fmt: skip
    _print("Time to target (plan, mean of 5 evaluations)", ("method", "cut", "family", "cases", "95% coverage",
           "hi finite", "median rel. err (hours)", "of the compute", "of the clock", "if-reached coverage"),
           timed_table(timed), markdown)  # fmt: skip
    rows, bins = reach_table(reach)
    _print("P(reach within the run's budget): Brier", ("method", "cut", "cases", "base rate", "Brier",
           "Brier of the base rate"), rows, markdown)  # fmt: skip
    _print("Reliability (both cuts)", ("method", "P bin", "cases", "mean P", "observed", "within 0.10"), bins,
           markdown)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
