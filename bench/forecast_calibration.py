"""Do the forecast intervals cover what they claim? The calibration benchmark of issue 8.

    .venv/bin/python bench/forecast_calibration.py [--seeds 4] [--markdown]

The suite:

* synthetic curves from Eq. 1 (A 0.55-0.75, B 1.3-2.5, C_mid 1.5k-5k, R0 0.25-0.40, an
  evaluation every 200 GPU-hours up to 16k) with realistic evaluation noise:
  ``iid`` (sigma 0.005, 0.015, 0.03), ``ar1`` (rho 0.5 and 0.8, marginal sigma 0.01 and
  0.02: the policy moves slowly between evaluations), ``evalset`` (one per-eval-set offset
  of sd 0.02 on every point, step 0 included, plus iid sigma 0.01 or 0.02);
* ``unreachable``: the same with C_mid 20k-40k, so the data never see the bend and the
  ceiling is out of their reach;
* ``demo``: real runs of this trainer, ``make demo``'s recipe with seeds 0-4
  (``bench/data/demo_seed*.jsonl``, eval records of ``metrics.jsonl``);
* ``trl``: real runs of another trainer, TRL's ``GRPOTrainer``, 1000 steps each with
  different seeds and learning rates (``bench/data/trl_s*.jsonl``, made by ``trl_runs.py``).

* ``saturating``: iid sigma 0.005 and 0.01 with C_mid 800-2000, curves that reach their
  ceiling inside the budget (where a fit can and should say "identified");

Each curve is fitted on its first 25% and 50% of compute with the paper's protocol (R0
from the step-0 point, fit points from 1.5k of 16k GPU-hours on, §1.3) and scored on the
rest: coverage of the 95% predictive interval on
the held-out points and on the final point, the median interval width, the median
absolute forecast error at the final budget against the last value carried forward and
the App. A.4 power law, and, for synthetic curves whose fit says "identified", how often
A's interval holds the true A.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scalerl.fit import FitOptions, bootstrap, fit_power_law, fit_sigmoid, sigmoid  # noqa: E402
from scalerl.fit.calibrate import assess  # noqa: E402
from scalerl.fit.errors import CurveError  # noqa: E402
from scalerl.fit.prior.learn import MIN_RUNS, learn_prior  # noqa: E402
from scalerl.fit.prior.posterior import forecast_with_prior  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
GRID = np.arange(0, 16001, 200.0)
FRACS = (0.25, 0.5)
LEVEL = 0.95
EARLY = 1.5 / 16.0  # the paper's fits start after ~1.5k of 16k GPU-hours (§1.3)


@dataclass
class Curve:
    group: str
    name: str
    compute: np.ndarray
    reward: np.ndarray
    true_A: float | None


def _noise(kind: str, sigma: float, rho: float, n: int, rng) -> np.ndarray:
    if kind == "ar1":
        e = np.empty(n)
        e[0] = rng.normal(0, sigma)
        for i in range(1, n):
            e[i] = rho * e[i - 1] + rng.normal(0, sigma * np.sqrt(1 - rho**2))
        return e
    e = rng.normal(0, sigma, n)
    return e + rng.normal(0, 0.02) if kind == "evalset" else e


def synthetic(seeds: int) -> list[Curve]:
    specs = [("iid", s, 0.0) for s in (0.005, 0.015, 0.03)]
    specs += [("ar1", s, r) for s in (0.01, 0.02) for r in (0.5, 0.8)]
    specs += [("evalset", s, 0.0) for s in (0.01, 0.02)]
    curves = []
    for kind, sigma, rho in specs:
        for seed in range(seeds):
            rng = np.random.default_rng(zlib.crc32(f"{kind} {sigma} {rho} {seed}".encode()))
            A, B, C_mid, R0 = rng.uniform(0.55, 0.75), rng.uniform(1.3, 2.5), rng.uniform(1500, 5000), rng.uniform(0.25, 0.4)
            y = np.clip(sigmoid(GRID, A, B, C_mid, R0) + _noise(kind, sigma, rho, GRID.size, rng), 0, 1)
            curves.append(Curve(kind, f"{kind} s={sigma} rho={rho} #{seed}", GRID, y, A))
    curves += _iid_family("saturating", (0.005, 0.01), (800, 2000), seeds, 2000)
    curves += _iid_family("unreachable", (0.01, 0.02), (20000, 40000), seeds, 1000)
    return curves


def _iid_family(group: str, sigmas, c_mid_range, seeds: int, seed_base: int) -> list[Curve]:
    """iid-noise curves whose C_mid is drawn from ``c_mid_range`` (where the bend lies)."""
    curves = []
    for sigma in sigmas:
        for seed in range(seeds):
            rng = np.random.default_rng(seed_base + seed + int(sigma * 1000))
            A, B = rng.uniform(0.55, 0.75), rng.uniform(1.3, 2.5)
            C_mid, R0 = rng.uniform(*c_mid_range), rng.uniform(0.25, 0.4)  # the draws' order fixes the suite
            y = np.clip(sigmoid(GRID, A, B, C_mid, R0) + rng.normal(0, sigma, GRID.size), 0, 1)
            curves.append(Curve(group, f"{group} s={sigma} #{seed}", GRID, y, A))
    return curves


def _jsonl(path: Path, x: str) -> tuple[np.ndarray, np.ndarray]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return np.array([r[x] for r in rows], dtype=float), np.array([r["val_pass_rate"] for r in rows])


def real() -> list[Curve]:
    curves = []
    for path in sorted(DATA.glob("demo_seed*.jsonl")):
        c, y = _jsonl(path, "compute_gpu_hours")
        curves.append(Curve("demo", path.stem, c - c[0], y, None))  # compute 0 = the step-0 eval
    return curves


def trl() -> list[Curve]:
    """TRL ``GRPOTrainer`` runs (``bench/trl_runs.py``): compute is the optimiser step, every
    step the same P x G completions."""
    return [Curve("trl", path.stem, *_jsonl(path, "step"), None) for path in sorted(DATA.glob("trl_s*.jsonl"))]


@dataclass
class Score:
    covered: np.ndarray  # per held-out point
    final_covered: bool
    width: float  # median over held-out points
    err_sigmoid: float
    err_last: float
    err_power: float
    identified: bool
    A_covered: bool | None
    boot_covered: np.ndarray  # per held-out point, by the residual bootstrap's band (before)
    seconds: float  # fit + assess (with calibration)
    boot_seconds: float  # 1000-resample residual bootstrap


def score(curve: Curve, frac: float) -> Score | None:
    c, y = curve.compute, curve.reward
    cut = frac * c[-1]
    k = c <= cut
    t0 = time.perf_counter()
    try:
        fit = fit_sigmoid(c[k], y[k], min_compute=EARLY * c[-1])
    except CurveError:
        return None
    unc = assess(fit, level=LEVEL, horizon=c[-1] / cut)
    seconds = time.perf_counter() - t0
    held_c, held_y = c[~k], y[~k]
    lo, hi = unc.predictive(held_c)
    covered = (held_y >= lo) & (held_y <= hi)
    power = fit_power_law(c[k], y[k], c0=EARLY * c[-1])
    final = float(held_y[-1])
    A_lo, A_hi = unc.A_plausible
    A_cov = None if curve.true_A is None or not unc.identified else bool(A_lo <= curve.true_A <= A_hi)
    t0 = time.perf_counter()
    boot = bootstrap(fit, 1000, seed=0)  # what the tool reported before issue 8
    b_lo, b_hi = boot.band(held_c)
    boot_seconds = time.perf_counter() - t0
    return Score(
        covered, bool(covered[-1]), float(np.median(hi - lo)),
        abs(float(fit.predict(held_c[-1])) - final), abs(float(y[k][-1]) - final),
        abs(float(power.predict(held_c[-1])) - final), unc.identified, A_cov,
        (held_y >= b_lo) & (held_y <= b_hi), seconds, boot_seconds,
    )  # fmt: skip


def summarise(rows: list[Score]) -> dict:
    ident = [s for s in rows if s.identified]
    a_cov = [s.A_covered for s in rows if s.A_covered is not None]
    return {
        "n": len(rows),
        "held": float(np.mean(np.concatenate([s.covered for s in rows]))),
        "final": float(np.mean([s.final_covered for s in rows])),
        "width": float(np.median([s.width for s in rows])),
        "width_ident": float(np.median([s.width for s in ident])) if ident else float("nan"),
        "identified": len(ident),
        "err": float(np.median([s.err_sigmoid for s in rows])),
        "err_last": float(np.median([s.err_last for s in rows])),
        "err_power": float(np.median([s.err_power for s in rows])),
        "A_cov": f"{sum(a_cov)}/{len(a_cov)}" if a_cov else "-",
        "boot": float(np.mean(np.concatenate([s.boot_covered for s in rows]))),
    }


HEADER = ("curves", "fit on", "n", "held-out cov.", "final cov.", "median width",
          "width (identified)", "identified", "final err", "last value", "power law", "true A in interval",
          "bootstrap band cov. (before)")  # fmt: skip


# --- the prior from finished runs (issue 21) -------------------------------------------

POPULATION = {"A": (0.55, 0.75), "B": (1.3, 2.5), "C_mid": (1500.0, 5000.0)}
OTHER = {  # populations the prior was not learned from: the guard must keep coverage
    "other: bend past the data": {"C_mid": (20000.0, 40000.0)},
    "other: low ceiling": {"A": (0.30, 0.45)},
}


def population(n: int, seed: int, **ranges) -> list[Curve]:
    """``n`` runs of one population: A, B, C_mid uniform over ``POPULATION`` (or ``ranges``),
    R0 0.25-0.40; odd runs AR(1) noise (sd 0.01-0.02, rho 0.5-0.8), even runs iid (sd 0.005-0.03)."""
    box = POPULATION | ranges
    rng, curves = np.random.default_rng(seed), []
    for i in range(n):
        A, B, C_mid = (rng.uniform(*box[k]) for k in ("A", "B", "C_mid"))
        R0 = rng.uniform(0.25, 0.40)
        if i % 2:
            e = _noise("ar1", rng.uniform(0.01, 0.02), rng.uniform(0.5, 0.8), GRID.size, rng)
        else:
            e = _noise("iid", rng.uniform(0.005, 0.03), 0.0, GRID.size, rng)
        y = np.clip(sigmoid(GRID, A, B, C_mid, R0) + e, 0, 1)
        curves.append(Curve("population", f"run{i}", GRID, y, A))
    return curves


def score_prior(curve: Curve, frac: float, prior, why: str) -> dict | None:
    """The prior's forecast (the prior-free one where it is refused), the prior-free fit's and
    the power law's, at the final budget; coverage also over every held-out point."""
    c, y = curve.compute, curve.reward
    options = FitOptions(min_compute=EARLY * c[-1])
    k = c <= frac * c[-1]
    try:
        fit = options.fit(c[k], y[k])
    except CurveError:
        return None
    unc = assess(fit, level=LEVEL, horizon=1 / frac)
    pf = forecast_with_prior(fit, fit_until=frac * c[-1], budget=c[-1], prior=prior, options=options,
                             n_runs=0 if prior is None else prior.n_runs, why_none=why)  # fmt: skip
    held_c, held_y = c[~k], y[~k]
    out = {"used": pf.used}
    for name, (lo, hi), pred in (
        ("free", unc.predictive(held_c), fit.predict(held_c[-1])),
        ("prior", pf.predictive(held_c) if pf.used else unc.predictive(held_c),
         pf.predict(held_c[-1]) if pf.used else fit.predict(held_c[-1])),
    ):  # fmt: skip
        lo, hi = np.ravel(lo), np.ravel(hi)
        out[name] = ((held_y >= lo) & (held_y <= hi), hi[-1] - lo[-1], abs(float(np.ravel(pred)[-1]) - held_y[-1]))
    out["power"] = abs(float(fit_power_law(c[k], y[k], c0=EARLY * c[-1]).predict(held_c[-1])) - held_y[-1])
    return out


def _loo(curves: list[Curve], frac: float) -> list[dict]:
    """Leave-one-run-out: each run forecast under the prior learned from the others."""
    options = FitOptions(min_compute=EARLY * curves[0].compute[-1])
    prior, why = learn_prior([(c.name, c.compute, c.reward) for c in curves], options)
    rows = []
    for curve in curves:
        others = prior
        if prior is not None:
            others = prior.leaving_out(curve.name)
            if others.n_runs < MIN_RUNS:
                others, why = None, f"only {others.n_runs} other runs"
        rows.append(score_prior(curve, frac, others, why))
    return [r for r in rows if r is not None]


def prior_rows(n_runs: int) -> list[tuple[str, float, list[dict]]]:
    table = []
    base = population(n_runs, 21)
    options = FitOptions(min_compute=EARLY * GRID[-1])
    prior, _ = learn_prior([(c.name, c.compute, c.reward) for c in base], options)
    for frac in FRACS:
        table.append((f"population ({n_runs} runs, leave-one-run-out)", frac, _loo(base, frac)))
        for name, ranges in OTHER.items():
            curves = population(max(n_runs // 2, 10), 99 + len(name), **ranges)
            table.append((name, frac, [s for c in curves if (s := score_prior(c, frac, prior, "")) is not None]))
        table.append(("demo (5 real runs, leave-one-run-out)", frac, _loo(real(), frac)))
        runs = trl()
        table.append((f"TRL GRPO ({len(runs)} real runs, leave-one-run-out)", frac, _loo(runs, frac)))
    return table


PRIOR_HEADER = ("runs", "fit on", "n", "prior used", "final cov. (prior / free)", "held-out cov. (prior / free)",
                "median width (prior / free)", "final err (prior / free / power law)")  # fmt: skip


def print_prior_table(table) -> None:
    print("| " + " | ".join(PRIOR_HEADER) + " |")
    print("|" + "---|" * len(PRIOR_HEADER))
    for name, frac, rows in table:
        def col(key, i, f=np.mean, rows=rows):
            return f([r[key][i] for r in rows])

        held = {k: np.mean(np.concatenate([r[k][0] for r in rows])) for k in ("prior", "free")}
        final = {k: np.mean([r[k][0][-1] for r in rows]) for k in ("prior", "free")}
        cells = (name, f"{frac:.0%}", str(len(rows)), f"{sum(r['used'] for r in rows)}/{len(rows)}",
                 f"{final['prior']:.1%} / {final['free']:.1%}", f"{held['prior']:.1%} / {held['free']:.1%}",
                 f"{col('prior', 1, np.median):.3f} / {col('free', 1, np.median):.3f}",
                 f"{col('prior', 2, np.median):.3f} / {col('free', 2, np.median):.3f} / "
                 f"{np.median([r['power'] for r in rows]):.3f}")  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="synthetic curves per noise setting")
    ap.add_argument("--no-scaling", action="store_true", help="skip the parallel-scaling probe")
    ap.add_argument("--prior-runs", type=int, default=30, help="finished runs in the prior's population")
    ap.add_argument("--prior-only", action="store_true", help="only the prior's table (issue 21)")
    args = ap.parse_args()
    if args.prior_only:
        t0 = time.perf_counter()
        print_prior_table(prior_rows(args.prior_runs))
        print(f"scored in {time.perf_counter() - t0:.1f} s; nominal level {LEVEL:.0%}")
        return
    if not args.no_scaling:
        from _workload import parallel_scaling

        print(f"machine parallel scaling now (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    curves = synthetic(args.seeds) + real() + trl()
    groups = ["iid", "ar1", "evalset", "saturating", "unreachable", "synthetic (all)", "demo", "trl"]
    t0 = time.perf_counter()
    table, times, boot_times = [], [], []
    for frac in FRACS:
        scored = [(c.group, s) for c in curves if (s := score(c, frac)) is not None]
        times += [s.seconds for _, s in scored]
        boot_times += [s.boot_seconds for _, s in scored]
        for g in groups:
            rows = [s for grp, s in scored if grp == g or (g == "synthetic (all)" and grp not in ("demo", "trl"))]
            if rows:
                table.append((g, frac, summarise(rows)))
    seconds = time.perf_counter() - t0
    print(f"{len(curves)} curves x {len(FRACS)} cut-offs scored in {seconds:.1f} s; nominal level {LEVEL:.0%}")
    print(f"time per curve: honest intervals (fit + profile + calibration) {np.median(times):.3f} s, "
          f"1000-resample bootstrap {np.median(boot_times):.3f} s (median)")
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "---|" * len(HEADER))
    for g, frac, s in table:
        cells = (g, f"{frac:.0%}", str(s["n"]), f"{s['held']:.1%}", f"{s['final']:.1%}", f"{s['width']:.3f}",
                 f"{s['width_ident']:.3f}", f"{s['identified']}/{s['n']}", f"{s['err']:.3f}",
                 f"{s['err_last']:.3f}", f"{s['err_power']:.3f}", s["A_cov"], f"{s['boot']:.1%}")  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    print_prior_table(prior_rows(args.prior_runs))


if __name__ == "__main__":
    main()
