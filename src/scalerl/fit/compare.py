"""Compare runs the way the paper does (§1.4, §3.3, App. A.4).

- :func:`compare_runs`: fit every run (with bootstrap intervals when asked) and apply the
  paper's rule. For two runs: if ``|A1 - A2| <= margin`` (0.02, from the ±0.015 spread of
  three independent ScaleRL runs), refit both with A fixed to their mean and the higher
  B wins; otherwise the higher A wins. For more runs the same rule picks among the
  *contenders*, the runs whose A is within ``margin`` of the best A: one contender wins on
  its asymptote; several are refitted at their mean A and the highest B wins.
- :func:`loo_table`: the Fig. 7 leave-one-out table: C_mid, B, A of the baseline and each
  variant, and B refitted with A fixed to the mean A of all runs (the efficiency plot's
  slopes).
- :func:`extrapolation_errors`: App. A.4's sigmoid-versus-power-law test: fit both laws on
  the same prefix (the first ``fit_frac`` of the compute budget, as the paper fits 8k of
  16k GPU-hours) and score each on the held-out rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import FitResult, fit_sigmoid
from scalerl.fit.forecast import holdout_forecast
from scalerl.fit.io import Curve
from scalerl.fit.power_law import PowerLawResult, fit_power_law
from scalerl.fit.resample import BootstrapResult, bootstrap

PARAMS = ("A", "B", "C_mid")
A_TOL = 1e-9  # grid A values differ by float noise (0.62 - 0.60 = 0.020000000000000018)


@dataclass(frozen=True, eq=False)
class RunFit:
    """One run's fit, its bootstrap intervals (empty without bootstrap) and band."""

    name: str
    curve: Curve
    fit: FitResult
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    boot: BootstrapResult | None = None  # None without bootstrap

    @property
    def band(self):
        """``C -> (lo, hi)`` bootstrap band of the fitted curve, or None."""
        return self.boot.band if self.boot is not None else None

    def row(self) -> dict:
        """Table row: parameters, their intervals, fit quality flags."""
        row = {"run": self.name, **{p: getattr(self.fit, p) for p in (*PARAMS, "R0")}}
        for p in PARAMS:
            row[f"{p}_interval"] = list(self.intervals[p]) if p in self.intervals else None
        row |= {
            "n_points": self.fit.n_points,
            "sse": self.fit.sse,
            "converged": self.fit.converged,
            "bounds_hit": list(self.fit.bounds_hit),
        }
        return row


@dataclass(frozen=True)
class Verdict:
    """Which run scales better under the paper's rule, and why."""

    winner: str
    decided_by: Literal["asymptote", "efficiency"]
    margin: float
    contenders: tuple[str, ...]  # runs whose A is within margin of the best A
    delta_A: float  # best A minus the next-best A over all runs (0 for a single run)
    shared_A: float | None  # mean A of the contenders, when B decided
    refit_B: dict[str, float]  # B of each contender refitted at shared_A

    @property
    def sentence(self) -> str:
        if self.decided_by == "asymptote":
            return (
                f"{self.winner} wins on the asymptote: its A is higher than every other "
                f"run's by more than the {self.margin:g} margin (next best is "
                f"{self.delta_A:.3f} lower)."
            )
        others = ", ".join(f"{n} {b:.3f}" for n, b in self.refit_B.items() if n != self.winner)
        return (
            f"{self.winner} wins on efficiency: the A values of {', '.join(self.contenders)} "
            f"lie within the {self.margin:g} margin, and refitted at their mean "
            f"A = {self.shared_A:.3f} its B = {self.refit_B[self.winner]:.3f} is the highest "
            f"(vs {others})."
        )

    def to_dict(self) -> dict:
        return {
            "winner": self.winner,
            "decided_by": self.decided_by,
            "margin": self.margin,
            "contenders": list(self.contenders),
            "delta_A": self.delta_A,
            "shared_A": self.shared_A,
            "refit_B": dict(self.refit_B),
            "sentence": self.sentence,
        }


@dataclass(frozen=True, eq=False)
class Comparison:
    runs: list[RunFit]
    verdict: Verdict
    refits: dict[str, FitResult]  # the fixed-A refits of the contenders (empty on asymptote)

    def rows(self) -> list[dict]:
        rows = [r.row() for r in self.runs]
        for row in rows:
            refit = self.refits.get(row["run"])
            row["B_at_shared_A"] = refit.B if refit is not None else None
        return rows

    def to_dict(self) -> dict:
        return {"runs": self.rows(), "verdict": self.verdict.to_dict()}


def fit_run(
    curve: Curve,
    *,
    bootstrap_n: int = 0,
    bootstrap_kind: str = "residual",
    seed: int = 0,
    fit: FitResult | None = None,
    **fit_kwargs,
) -> RunFit:
    """Fit one curve (``fit_kwargs`` go to ``fit_sigmoid``; or pass an existing ``fit``),
    bootstrapping it when ``bootstrap_n > 0``."""
    if fit is None:
        fit = fit_sigmoid(curve.compute, curve.reward, source=curve.source, **fit_kwargs)
    if bootstrap_n <= 0:
        return RunFit(curve.name, curve, fit)
    boot = bootstrap(fit, n=bootstrap_n, kind=bootstrap_kind, seed=seed)
    return RunFit(curve.name, curve, fit, boot.intervals, boot)


def refit_at(curve: Curve, A: float, **fit_kwargs) -> FitResult:
    """``curve`` refitted with the asymptote fixed to ``A`` (the paper's B comparison)."""
    kwargs = {k: v for k, v in fit_kwargs.items() if k != "fixed_A"}
    return fit_sigmoid(curve.compute, curve.reward, fixed_A=A, source=curve.source, **kwargs)


def decide(
    fits: dict[str, FitResult], curves: dict[str, Curve], *, margin: float = 0.02, **fit_kwargs
) -> tuple[Verdict, dict[str, FitResult]]:
    """The §1.4 rule over any number of runs; returns the verdict and the fixed-A refits."""
    if not fits:
        raise CurveError("there is no run to compare.")
    ranked = sorted(fits, key=lambda n: fits[n].A, reverse=True)
    best_A = fits[ranked[0]].A
    delta_A = best_A - fits[ranked[1]].A if len(ranked) > 1 else 0.0
    contenders = tuple(n for n in ranked if best_A - fits[n].A <= margin + A_TOL)
    if len(contenders) == 1:
        verdict = Verdict(ranked[0], "asymptote", margin, contenders, delta_A, None, {})
        return verdict, {}
    shared_A = float(np.mean([fits[n].A for n in contenders]))
    refits = {n: refit_at(curves[n], shared_A, **fit_kwargs) for n in contenders}
    refit_B = {n: refits[n].B for n in contenders}
    winner = max(contenders, key=lambda n: refit_B[n])
    verdict = Verdict(winner, "efficiency", margin, contenders, delta_A, shared_A, refit_B)
    return verdict, refits


def _check_names(curves: Sequence[Curve]) -> None:
    names = [c.name for c in curves]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise CurveError(f"two runs are both named {duplicate!r}; rename one file to compare them.")


def compare_runs(
    curves: Sequence[Curve],
    *,
    margin: float = 0.02,
    bootstrap_n: int = 0,
    bootstrap_kind: str = "residual",
    seed: int = 0,
    **fit_kwargs,
) -> Comparison:
    """Fit each run, then apply the paper's compare rule (module docstring)."""
    if len(curves) < 2:
        raise CurveError(f"compare needs at least two runs, got {len(curves)}.")
    _check_names(curves)
    runs = [
        fit_run(c, bootstrap_n=bootstrap_n, bootstrap_kind=bootstrap_kind, seed=seed, **fit_kwargs)
        for c in curves
    ]
    fits = {r.name: r.fit for r in runs}
    verdict, refits = decide(fits, {c.name: c for c in curves}, margin=margin, **fit_kwargs)
    return Comparison(runs, verdict, refits)


@dataclass(frozen=True, eq=False)
class LooTable:
    """Fig. 7: per run C_mid, B, A and B refitted at the mean A of all runs."""

    baseline: str
    shared_A: float
    fits: dict[str, FitResult]
    refits: dict[str, FitResult]  # A fixed to shared_A

    def rows(self) -> list[dict]:
        base_B = self.refits[self.baseline].B
        return [
            {
                "run": name,
                "baseline": name == self.baseline,
                "C_mid": fit.C_mid,
                "B": fit.B,
                "A": fit.A,
                "B_at_shared_A": self.refits[name].B,
                "delta_B_vs_baseline": self.refits[name].B - base_B,
            }
            for name, fit in self.fits.items()
        ]

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "shared_A": self.shared_A, "rows": self.rows()}


def loo_table(curves: Sequence[Curve], baseline: str | None = None, **fit_kwargs) -> LooTable:
    """Leave-one-out table; ``baseline`` names the reference run (default: the first)."""
    _check_names(curves)
    names = [c.name for c in curves]
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise CurveError(f"baseline {baseline!r} is not one of the runs: {', '.join(names)}.")
    by_name = {c.name: c for c in curves}
    fits = {
        n: fit_sigmoid(c.compute, c.reward, source=c.source, **fit_kwargs)
        for n, c in by_name.items()
    }
    shared_A = float(np.mean([f.A for f in fits.values()]))
    refits = {n: refit_at(by_name[n], shared_A, **fit_kwargs) for n in names}
    return LooTable(baseline, shared_A, fits, refits)


@dataclass(frozen=True, eq=False)
class LawScore:
    """Held-out errors of one law fitted on the prefix."""

    rmse: float
    max_abs: float
    final_error: float  # prediction minus reward at the last (largest-compute) point
    A: float


@dataclass(frozen=True, eq=False)
class ExtrapolationScore:
    """Sigmoid vs power law, both fitted on compute <= fit_compute, scored beyond it."""

    name: str
    fit_compute: float
    n_fit: int
    n_heldout: int
    sigmoid: LawScore
    power_law: LawScore
    sigmoid_fit: FitResult
    power_law_fit: PowerLawResult

    def to_dict(self) -> dict:
        def law(s: LawScore) -> dict:
            return {"rmse": s.rmse, "max_abs": s.max_abs, "final_error": s.final_error, "A": s.A}

        return {
            "run": self.name,
            "fit_compute": self.fit_compute,
            "n_fit": self.n_fit,
            "n_heldout": self.n_heldout,
            "sigmoid": law(self.sigmoid),
            "power_law": law(self.power_law),
        }


def _score(predicted: np.ndarray, actual: np.ndarray, A: float) -> LawScore:
    err = predicted - actual
    return LawScore(float(np.sqrt(np.mean(err**2))), float(np.abs(err).max()), float(err[-1]), A)


def extrapolation_errors(
    curve: Curve, *, fit_frac: float = 0.5, min_compute: float = 0.0, **fit_kwargs
) -> ExtrapolationScore:
    """Fit sigmoid and power law on compute <= fit_frac * max compute; score the rest.

    The power law uses the same points with positive compute (it is undefined at C = 0)
    from ``min_compute`` on, i.e. its C0 is the first fitted point's compute (App. A.4).
    """
    hold = holdout_forecast(
        curve.compute,
        curve.reward,
        fit_frac=fit_frac,
        min_compute=min_compute,
        source=curve.source,
        **fit_kwargs,
    )
    prefix = curve.compute <= hold.fit_until
    c0 = min_compute if min_compute > 0 else None
    power = fit_power_law(
        curve.compute[prefix],
        curve.reward[prefix],
        c0=c0,
        bounded=fit_kwargs.get("bounded", True),
        source=curve.source,
    )
    return ExtrapolationScore(
        curve.name,
        hold.fit_until,
        hold.fit.n_points,
        int(hold.compute.size),
        _score(hold.predicted, hold.reward, hold.fit.A),
        _score(power.predict(hold.compute), hold.reward, power.A),
        hold.fit,
        power,
    )
