"""Which rule stops a study's losers soonest and keeps its winner? Issue 49's side by side.

    PYTHONPATH=src .venv/bin/python bench/pruners.py [--resplits 20] [--seeds 10] [--markdown] [--quick]

**Studies.** Each family of real finished runs (``bench/corpus/<family>/*.jsonl``, and
``bench/data``'s ``trl-1000`` and ``demo``) is a pool; a study draws ``STUDY_SIZE`` of its runs
(all of them where it has fewer) in a random order, ``--resplits`` times. Its budget is the
family's shortest run's last compute, so every run reaches it. The paper's Table 1 study
(five fits of App. A.13 drawn as runs of 48 evaluations with noise sd 0.01, ``--seeds`` noise
draws) is the study whose early leader is not the final one.

**Truth.** A run's value at the budget is the mean of its last ``SMOOTH`` evaluations up to
it; the best is the largest. A point is *good* when its value is within ``WITHIN`` (0.01)
of the best. A rule **keeps the winner** when a good point is not stopped; a **false stop** is
a good point stopped (its rate: false stops over all stops, and over all points, the certified
pruner's "good and stopped"). **Compute** is what the study spent (each point up to where it
stopped, the survivors to the budget) over the same study run to the end.

**Rules**, each fed the same curves:

* ``scalerl``: ``fit.choose.Study`` (the policy of ``scalerl sweep --adaptive``): rungs at
  budget/8, /4, /2 and the budget, stop once P(best at the budget) < the threshold or the
  point is not learning; ``scalerl (guard)``: the same, a stop held until two rungs agree.
  Every forecast uses a population table learned without the study's own family.
* ``scalerl, shared shape``: the same rule with P(best) read from the points' draws paired by
  one fit of them all with one shape (``fit.shared_shape``, ``pairing="shared-shape"``), at
  0.1 and at its own calibrated threshold.
* ``hindsight``: the floor of every rule on these rungs: each point that is not good at the
  budget stopped at budget/8, every good one run to the budget (it knows the end).
* ``top-2 at rung 1``: keep the two best by their last value at budget/8, stop the rest.
* ``last value (delta)``: at each rung, stop a point whose last value trails the leader's by
  more than ``delta``, calibrated like the certified pruner: the smallest ``delta`` whose
  false-stop rate is at most 5% on the *past* families (``PAST``: the corpus split in time,
  the older half of the first ten families by when their runs were made), scored on the
  *future* ones (the rest, and every family made since).
* Optuna's own pruners (``optuna.pruners``), through ``trial.report``/``should_prune``, the
  trials one after another as Optuna runs them: ``MedianPruner``, ``SuccessiveHalvingPruner``
  (ASHA), ``HyperbandPruner``, ``WilcoxonPruner``, ``PatientPruner`` (around the median), and
  scalerl's ``ForecastPruner``. Trials report at ``GRID`` steps of budget/``GRID`` each (Optuna
  compares trials at equal steps): the newest evaluation at or before each step. Their
  settings match the rungs where they have one (first decision at budget/8, halving).

The calibrated thresholds of ``scalerl`` (each pairing) are chosen the same way as ``delta`` (past families;
the largest threshold of ``THRESHOLDS`` at or below 5% false stops) and reported on the future
ones. Every figure is measured in this one invocation; the machine's parallel scaling is
printed first (single-threaded numpy: a second core changes nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from forecast_real import _print, _scaling, _tables_without_each_family, runs  # noqa: E402

from scalerl.fit import law  # noqa: E402
from scalerl.fit.choose import Study, shape_pairing, standing  # noqa: E402
from scalerl.fit.forecast import ForecastOptions, RunLog  # noqa: E402
from scalerl.fit.paper import TABLE1  # noqa: E402

STUDY_SIZE, SMOOTH, WITHIN, GRID = 4, 3, 0.01, 32
THRESHOLDS = (0.01, 0.02, 0.05, 0.1, 0.2)
DELTAS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
TABLE1_STUDY = ("ScaleRL", "ScaleRL-32k", "ScaleRL-bs512", "ScaleRL-bs2048", "ScaleRL-8gen")


@dataclass
class Pool:
    """One family's runs (or one Table 1 seed's): logs by name, the budget, the population."""

    family: str
    logs: dict[str, RunLog]
    budget: float
    options: ForecastOptions
    cache: dict = field(default_factory=dict)  # (run, compute seen) -> Standing, and pruner draws

    def value(self, name: str) -> float:
        """The run's value at the budget: the mean of its last SMOOTH evaluations up to it."""
        return float(self.logs[name].curve.head(self.budget).reward[-SMOOTH:].mean())

    def standing(self, log: RunLog, budget: float, options: ForecastOptions):
        key = ("standing", log.name, float(log.curve.compute[-1]))
        if key not in self.cache:
            self.cache[key] = standing(log, budget, options)
        return self.cache[key]

    def good(self, names: list[str]) -> set[str]:
        """The points whose value at the budget is within WITHIN of the best of ``names``."""
        values = {n: self.value(n) for n in names}
        best = max(values.values())
        return {n for n, v in values.items() if v >= best - WITHIN}

    def pairing(self, logs: list[RunLog], budget: float):
        key = ("pairing", *((g.name, float(g.curve.compute[-1])) for g in logs))
        if key not in self.cache:
            self.cache[key] = shape_pairing(logs, budget)
        return self.cache[key]


@dataclass
class Outcome:
    rule: str
    family: str
    kept: bool
    used: float  # fraction of the full study's compute
    stops: int
    false_stops: int
    points: int
    at: list[float] = field(default_factory=list)  # each stop's compute as a fraction of the budget


def outcome(rule: str, pool: Pool, names: list[str], stopped: dict[str, float]) -> Outcome:
    """Score a study: ``stopped`` maps each stopped point to the compute it had spent."""
    good = pool.good(names)
    spent = sum(stopped.get(n, pool.budget) for n in names)
    return Outcome(rule, pool.family, bool(good - set(stopped)), spent / (pool.budget * len(names)), len(stopped),
                   len(good & set(stopped)), len(names), [c / pool.budget for c in stopped.values()])  # fmt: skip


# --- the rung rules ---------------------------------------------------------------------------------


def scalerl_rule(pool: Pool, names: list[str], threshold: float = 0.05, confirm: int = 1,
                 pairing: str = "independent") -> dict[str, float]:  # fmt: skip
    study = Study(names, pool.budget, threshold=threshold, options=pool.options, confirm=confirm,
                  pairing=pairing, standing_of=pool.standing, pairing_of=pool.pairing)  # fmt: skip
    stopped = {}
    for rung in study.decisions.rungs:
        for s in study.step(rung, {n: pool.logs[n].upto(rung) for n in study.alive}):
            stopped[s["point"]] = float(pool.logs[s["point"]].curve.head(rung).compute[-1])
    return stopped


def _last(pool: Pool, name: str, rung: float) -> tuple[float, float]:
    seen = pool.logs[name].curve.head(rung)
    return float(seen.reward[-SMOOTH:].mean()), float(seen.compute[-1])


def hindsight(pool: Pool, names: list[str]) -> dict[str, float]:
    """The floor of every rule on these rungs: each point that is not good at the budget
    (which only the end shows) stopped at the first rung, every good one run to the budget."""
    good = pool.good(names)
    return {n: _last(pool, n, pool.budget / 8)[1] for n in names if n not in good}


def top_k(pool: Pool, names: list[str], k: int = 2) -> dict[str, float]:
    rung = pool.budget / 8
    last = {n: _last(pool, n, rung) for n in names}
    keep = sorted(names, key=lambda n: -last[n][0])[:k]
    return {n: last[n][1] for n in names if n not in keep}


def last_value(pool: Pool, names: list[str], delta: float) -> dict[str, float]:
    alive, stopped, rung = list(names), {}, pool.budget / 8
    while rung < pool.budget * (1 - 1e-9):
        last = {n: _last(pool, n, rung) for n in alive}
        lead = max(v for v, _ in last.values())
        for n in list(alive):
            if last[n][0] < lead - delta:
                stopped[n] = last[n][1]
                alive.remove(n)
        rung *= 2
    return stopped


# --- Optuna's pruners, trials one after another -----------------------------------------------------


def optuna_pruners(pool: Pool) -> dict[str, Callable]:
    import optuna

    from scalerl.integrations.optuna import ForecastPruner

    first = GRID // 8

    class Cached(ForecastPruner):
        def draws(self, seen, name="trial"):
            key = ("pruner", name, seen.shape[0], float(seen[-1, 1]))
            if key not in pool.cache:
                pool.cache[key] = super().draws(seen, name)
            return pool.cache[key]

    median = dict(n_startup_trials=1, n_warmup_steps=first)
    return {
        "optuna MedianPruner": lambda: optuna.pruners.MedianPruner(**median),
        "optuna SuccessiveHalving (ASHA)": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=first, reduction_factor=2, min_early_stopping_rate=0),
        "optuna HyperbandPruner": lambda: optuna.pruners.HyperbandPruner(min_resource=first, max_resource=GRID,
                                                                          reduction_factor=2),
        "optuna WilcoxonPruner": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1, n_startup_steps=first),
        "optuna PatientPruner (median, patience 2)": lambda: optuna.pruners.PatientPruner(
            optuna.pruners.MedianPruner(**median), patience=2),
        "scalerl ForecastPruner": lambda: Cached(budget=GRID, options=pool.options),
    }  # fmt: skip


def grid_reports(pool: Pool, name: str) -> list[tuple[int, float]]:
    """(step, value) at each of GRID steps: the newest evaluation at or before step x budget/GRID."""
    curve = pool.logs[name].curve
    out = []
    for k in range(1, GRID + 1):
        seen = curve.head(pool.budget * k / GRID)
        if len(seen):
            out.append((k, float(seen.reward[-1])))
    return out


def sequential(pool: Pool, names: list[str], make_pruner: Callable) -> dict[str, float]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # HyperbandPruner puts a trial in a bracket by a hash of the study's name and the trial's
    # number: a random name (Optuna's default) changed its rows from one run of this script to
    # the next, and one name for every study put every study's trials in the same brackets; the
    # study's own points name it
    study = optuna.create_study(direction="maximize", pruner=make_pruner(),
                                study_name=f"{pool.family}: {', '.join(names)}",
                                sampler=optuna.samplers.RandomSampler(seed=0))  # fmt: skip
    stopped: dict[str, float] = {}
    for name in names:
        trial = study.ask()
        reports = grid_reports(pool, name)
        pruned = False
        for step, value in reports:
            trial.report(value, step)
            if trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                stopped[name] = pool.budget * step / GRID
                pruned = True
                break
        if not pruned:
            study.tell(trial, pool.value(name))
    return stopped


# --- the studies ----------------------------------------------------------------------------------


def corpus_pools(quick: bool) -> list[Pool]:
    by_family: dict[str, list] = {}
    for run in runs(quick=False):
        by_family.setdefault(run.family, []).append(run)
    families = sorted(f for f, rs in by_family.items() if len(rs) >= 3)
    tables = _tables_without_each_family(families)
    pools = []
    for fam in families[: 3 if quick else None]:
        logs = {r.name: r.log() for r in by_family[fam]}
        budget = min(float(g.curve.compute[-1]) for g in logs.values())
        pools.append(Pool(fam, logs, budget, ForecastOptions(population=tables[fam])))
    return pools


def table1_pools(seeds: int) -> list[Pool]:
    fits = {p.name: p for p in TABLE1}
    budget, n = 1e5, 48
    c = np.linspace(budget / n, budget, n)
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        logs = {k: RunLog.of(c, np.clip(law.sigmoid(c, fits[k].A, fits[k].B, fits[k].C_mid, 0.0)
                                        + rng.normal(0, 0.01, n), 0, 1), name=k) for k in TABLE1_STUDY}  # fmt: skip
        out.append(Pool(f"table1 seed {seed}", logs, budget, ForecastOptions()))
    return out


# The past families, fixed (bench/corpus/README.md, "Fixed splits"): the older half of the ten
# families of 2026-12-04 by when their first run was made. Every family made since is future, so
# growing the corpus never moves a family into the calibration set.
PAST = ("demo", "trl-1000", "scalerl-addition", "grpo-addition", "scalerl-multiplication")


def splits(pool: Pool, resplits: int) -> list[list[str]]:
    rng = np.random.default_rng(zlib.crc32(pool.family.encode()))
    names = sorted(pool.logs)
    size = min(STUDY_SIZE, len(names))
    return [list(rng.permutation(names)[:size]) for _ in range(resplits)]


def run_rules(pool: Pool, studies: list[list[str]], rules: dict[str, Callable]) -> list[Outcome]:
    out = []
    for names in studies:
        for rule, apply in rules.items():
            out.append(outcome(rule, pool, names, apply(pool, names)))
    return out


def summary(outcomes: list[Outcome], rule: str, families: set[str] | None = None) -> tuple:
    sel = [o for o in outcomes if o.rule == rule and (families is None or o.family in families)]
    if not sel:
        return (rule, 0, "–", "–", "–", "–", "–")
    stops = sum(o.stops for o in sel)
    false = sum(o.false_stops for o in sel)
    points = sum(o.points for o in sel)
    at = np.concatenate([o.at for o in sel]) if stops else np.empty(0)
    bins = [int(((at > lo) & (at <= hi)).sum()) for lo, hi in ((0, 1 / 8), (1 / 8, 1 / 4), (1 / 4, 1 / 2), (1 / 2, 1))]
    return (rule, len(sel), f"{100 * np.mean([o.kept for o in sel]):.0f}%",
            f"{100 * np.median([o.used for o in sel]):.0f}% ({100 * np.mean([o.used for o in sel]):.0f}%)",
            f"{100 * false / stops:.1f}%" if stops else "no stops", f"{100 * false / points:.1f}%",
            " / ".join(str(b) for b in bins))  # fmt: skip


def calibrate(pools: list[Pool], studies: dict[str, list], past: set[str], grid, make) -> tuple[float, list]:
    """The calibrated setting: the most stopping one (first in ``grid`` order that is ok is the
    most cautious; the last ok is the most aggressive) whose false stops on the past families
    are at most 5% of the points, and every setting's (rate, compute) there."""
    rows, chosen = [], grid[0]
    for g in grid:
        sel = [outcome("x", p, n, make(g)(p, n)) for p in pools if p.family in past for n in studies[p.family]]
        rate = sum(o.false_stops for o in sel) / max(sum(o.points for o in sel), 1)
        rows.append((g, rate, float(np.median([o.used for o in sel]))))
        if rate <= 0.05:
            chosen = g
    return chosen, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resplits", type=int, default=20, help="studies drawn from each family")
    ap.add_argument("--seeds", type=int, default=10, help="noise draws of the Table 1 study")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--quick", action="store_true", help="three families, 3 resplits, 2 seeds")
    args = ap.parse_args()
    if args.quick:
        args.resplits, args.seeds = 3, 2
    print(_scaling())
    print(f"load average at start {os.getloadavg()[0]:.2f}")
    t0 = time.perf_counter()
    warnings.simplefilter("ignore")
    pools = corpus_pools(args.quick)
    studies = {p.family: splits(p, args.resplits) for p in pools}
    past, future = set(PAST) & set(studies), set(studies) - set(PAST)
    threshold, t_rows = calibrate(pools, studies, past, THRESHOLDS,
                                  lambda t: lambda p, n: scalerl_rule(p, n, threshold=t))  # fmt: skip
    shared_t, j_rows = calibrate(pools, studies, past, THRESHOLDS,
                                 lambda t: lambda p, n: scalerl_rule(p, n, threshold=t, pairing="shared-shape"))  # fmt: skip
    delta, d_rows = calibrate(pools, studies, past, DELTAS[::-1], lambda d: lambda p, n: last_value(p, n, d))
    rules: dict[str, Callable] = {
        "scalerl (threshold 0.05)": lambda p, n: scalerl_rule(p, n),
        "scalerl (guard: 2 rungs agree)": lambda p, n: scalerl_rule(p, n, confirm=2),
        f"scalerl (calibrated threshold {threshold:g})": lambda p, n: scalerl_rule(p, n, threshold=threshold),
        f"scalerl, shared shape (calibrated threshold {shared_t:g})":
            lambda p, n: scalerl_rule(p, n, threshold=shared_t, pairing="shared-shape"),
        "scalerl, shared shape (threshold 0.1)": lambda p, n: scalerl_rule(p, n, threshold=0.1, pairing="shared-shape"),
        "hindsight (losers stopped at rung 1)": hindsight,
        "top-2 at rung 1": top_k,
        f"last value (calibrated delta {delta:g})": lambda p, n: last_value(p, n, delta),
    }
    outcomes = []
    for pool in pools:
        outcomes += run_rules(pool, studies[pool.family], rules)
        optunas = {k: (lambda make: lambda p, n: sequential(p, n, make))(m) for k, m in optuna_pruners(pool).items()}
        outcomes += run_rules(pool, studies[pool.family], optunas)
    t1 = [p for p in table1_pools(args.seeds)]
    for pool in t1:
        study = [list(TABLE1_STUDY)]
        outcomes += run_rules(pool, study, rules)
        optunas = {k: (lambda make: lambda p, n: sequential(p, n, make))(m) for k, m in optuna_pruners(pool).items()}
        outcomes += run_rules(pool, study, optunas)
    names = list(dict.fromkeys(o.rule for o in outcomes))
    header = ("rule", "studies", "winner kept", "compute used: median (mean)", "false stops / stops",
              "false stops / points", "stops by rung (<=1/8, 1/4, 1/2, <1)")  # fmt: skip
    print(f"\n{len(pools)} families, {args.resplits} studies of {STUDY_SIZE} runs each; past {sorted(past)}, "
          f"future {sorted(future)}; {time.perf_counter() - t0:.0f} s")  # fmt: skip
    _print("Calibration on the past families: scalerl's threshold (false stops / points, median compute)",
           ("threshold", "false stops / points", "compute used"),
           [(f"{g:g}", f"{100 * r:.1f}%", f"{100 * u:.0f}%") for g, r, u in t_rows], args.markdown)  # fmt: skip
    _print("Calibration on the past families: scalerl's threshold with the shared shape",
           ("threshold", "false stops / points", "compute used"),
           [(f"{g:g}", f"{100 * r:.1f}%", f"{100 * u:.0f}%") for g, r, u in j_rows], args.markdown)  # fmt: skip
    _print("Calibration on the past families: the last-value rule's delta",
           ("delta", "false stops / points", "compute used"),
           [(f"{g:g}", f"{100 * r:.1f}%", f"{100 * u:.0f}%") for g, r, u in d_rows], args.markdown)  # fmt: skip
    fams = {p.family for p in pools}
    _print("The corpus, all families", header, [summary(outcomes, r, fams) for r in names], args.markdown)
    _print("The corpus, future families only (the calibrated rules' test)", header,
           [summary(outcomes, r, future) for r in names], args.markdown)  # fmt: skip
    _print(f"Table 1 ({', '.join(TABLE1_STUDY)}), {args.seeds} noise draws", header,
           [summary(outcomes, r, {p.family for p in t1}) for r in names], args.markdown)  # fmt: skip
    rows = [(fam, *summary(outcomes, r, {fam})[1:]) for fam in sorted(fams) for r in names[:1]]
    _print("scalerl (threshold 0.05) by family", ("family", *header[1:]), rows, args.markdown)
    print(f"\n{time.perf_counter() - t0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
