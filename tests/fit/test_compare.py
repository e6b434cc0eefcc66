"""The paper's compare rule (§1.4), the LOO table (Fig. 7) and the extrapolation check."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.fit.compare import compare_runs, decide, extrapolation_errors, fit_run, loo_table
from scalerl.fit.errors import CurveError
from scalerl.fit.fitting import fit_sigmoid
from scalerl.fit.options import FitOptions
from scalerl.fit.readers import Curve

from ._files import synthetic_curve


def run(name, A, B, C_mid=2542.0, *, seed=0, noise=0.002, n=41) -> Curve:
    c, r = synthetic_curve(A, B, C_mid, n=n, noise=noise, seed=seed)
    return Curve(name, c, r, f"{name}.csv")


def test_within_margin_fixed_A_refit_picks_higher_B_even_with_lower_A():
    # A differ by 0.012 <= 0.02, so A does not decide; "steep" has the lower A but B 2.3 vs 1.5
    steep, flat = run("steep", 0.600, 2.3), run("flat", 0.612, 1.5, seed=1)
    result = compare_runs([flat, steep])
    v = result.verdict
    assert (v.winner, v.decided_by) == ("steep", "efficiency")
    assert set(v.contenders) == {"steep", "flat"}
    assert v.shared_A == pytest.approx((result.runs[0].fit.A + result.runs[1].fit.A) / 2)
    assert all(f.A == v.shared_A and f.fixed_A == v.shared_A for f in result.refits.values())
    assert v.refit_B["steep"] > v.refit_B["flat"]
    assert "wins on efficiency" in v.sentence and "steep" in v.sentence


def test_outside_margin_higher_A_wins_even_with_lower_B():
    high, efficient = run("high", 0.650, 1.5), run("efficient", 0.600, 2.4, seed=1)
    v = compare_runs([efficient, high]).verdict
    assert (v.winner, v.decided_by, v.contenders) == ("high", "asymptote", ("high",))
    assert v.delta_A == pytest.approx(0.05, abs=0.01) and v.shared_A is None and v.refit_B == {}


def test_margin_is_inclusive_despite_float_noise():
    # 0.62 - 0.60 = 0.020000000000000018 in floats; the paper's |dA| <= 0.02 must hold
    a, b = run("a", 0.62, 2.0), run("b", 0.60, 1.7, seed=1)
    runs = [fit_run(c, fit=fit_sigmoid(c.compute, c.reward, fixed_A=A)) for c, A in ((a, 0.62), (b, 0.60))]
    verdict, refits = decide(runs, {"a": a, "b": b}, options=FitOptions(margin=0.02))
    assert verdict.decided_by == "efficiency" and verdict.shared_A == pytest.approx(0.61)
    verdict, _ = decide(runs, {"a": a, "b": b}, options=FitOptions(margin=0.019))
    assert (verdict.decided_by, verdict.winner) == ("asymptote", "a")


def test_many_runs_only_contenders_within_margin_of_best_are_refitted():
    runs = [
        run("best_A", 0.615, 1.6),
        run("close", 0.605, 2.2, seed=1),
        run("far", 0.55, 3.0, seed=2),
    ]
    result = compare_runs(runs)
    v = result.verdict
    assert set(v.contenders) == {"best_A", "close"} and v.winner == "close"
    assert set(result.refits) == {"best_A", "close"}
    rows = {row["run"]: row for row in result.rows()}
    assert rows["far"]["B_at_shared_A"] is None
    for row in rows.values():
        for p in ("A", "B", "C_mid"):
            lo, hi = row[f"{p}_interval"]
            assert lo < hi


def test_loo_table_refits_everything_at_the_mean_A():
    runs = [run("scalerl", 0.61, 2.0), run("loo-dapo", 0.60, 1.77, seed=1), run("loo-x", 0.62, 1.7, seed=2)]  # fmt: skip
    table = loo_table(runs, baseline="scalerl")
    assert table.shared_A == pytest.approx(np.mean([f.A for f in table.fits.values()]))
    rows = {r["run"]: r for r in table.rows()}
    assert rows["scalerl"]["baseline"] and rows["scalerl"]["delta_B_vs_baseline"] == 0.0
    assert all(table.refits[n].A == table.shared_A for n in rows)
    assert rows["scalerl"]["B_at_shared_A"] > rows["loo-dapo"]["B_at_shared_A"]
    with pytest.raises(CurveError, match="baseline 'nope' is not one of the runs"):
        loo_table(runs, baseline="nope")


def test_extrapolation_scores_are_the_held_out_errors_and_sigmoid_beats_power_law():
    curve = run("scalerl", 0.61, 1.92, n=41, noise=0.003)  # every 400 GPU-h to 16k
    score = extrapolation_errors(curve, fit_frac=0.5)
    held = curve.compute > 8000.0
    assert score.fit_compute == 8000.0 and score.n_heldout == held.sum() == 20
    assert score.n_fit == 20  # 21 points up to 8k, less the step-0 point that fixes R0
    err = score.sigmoid_fit.predict(curve.compute[held]) - curve.reward[held]
    assert score.sigmoid.rmse == pytest.approx(np.sqrt(np.mean(err**2)))
    assert score.sigmoid.final_error == pytest.approx(err[-1])
    assert score.sigmoid.rmse < 0.01 < score.power_law.rmse  # App. A.4: power law is fragile
    assert score.power_law_fit.c0 == curve.compute[1]  # its C0: first positive compute


def test_a_long_prefix_is_binned_for_both_laws_and_the_table_says_so():
    # compare --fit-frac on a per-step log: both laws are fitted on means of the prefix, so
    # neither builds a (grid, n) array on the raw points (a limit of 200 keeps this quick)
    from scalerl.fit.report import extrapolation_table

    curve = run("long", 0.61, 1.92, n=1201, noise=0.02)  # every 13.3 GPU-h to 16k
    score = extrapolation_errors(curve, fit_frac=0.5, options=FitOptions(max_points=200))
    # 600 prefix points after the step-0 one, in 200 means of 3
    assert (score.sigmoid_fit.binned_from, score.sigmoid_fit.n_points) == (600, 200)
    assert (score.power_law_fit.binned_from, score.power_law_fit.n_points) == (600, 200)
    data = score.to_dict()
    assert data["sigmoid"]["binned_from"] == data["power_law"]["binned_from"] == 600
    caption = extrapolation_table([score]).caption
    assert caption.endswith("; long: sigmoid binned 600 -> 200, power law binned 600 -> 200"), caption
    unbinned = extrapolation_errors(curve, fit_frac=0.5, options=FitOptions(max_points=None))
    assert "binned" not in extrapolation_table([unbinned]).caption


def test_compare_needs_two_distinct_runs():
    with pytest.raises(CurveError, match="at least two runs"):
        compare_runs([run("a", 0.6, 2.0)])
    with pytest.raises(CurveError, match="both named 'a'"):
        compare_runs([run("a", 0.6, 2.0), run("a", 0.6, 2.0, seed=1)])


def test_a_run_against_its_own_prefix_is_undecided_and_says_what_the_data_decide():
    full = run("full", 0.61, 1.92, noise=0.01, n=81)
    prefix = Curve("prefix", full.compute[:13], full.reward[:13], "prefix.csv")  # first 15%
    result = compare_runs([prefix, full])
    v = result.verdict
    assert not result.runs[0].identified
    assert (v.decided_by, v.winner) == ("undecided", None)
    assert any("not identified" in r for r in v.reasons)
    assert any("What the data decide" in r for r in v.reasons)
    assert any("differ by" in r and "not comparable" in r for r in v.reasons)  # 6.7x ranges
    assert v.equal_compute["compute"] == pytest.approx(prefix.compute[-1])
    data = v.to_dict()
    assert data["decided_by"] == "undecided" and isinstance(data["reasons"], list)


def test_paper_mode_cannot_flip_an_undecided_comparison_into_a_verdict():
    full = run("full", 0.61, 1.92, noise=0.01, n=81)
    prefix = Curve("prefix", full.compute[:13], full.reward[:13], "prefix.csv")
    v = compare_runs([prefix, full], options=FitOptions(method="paper")).verdict
    assert v.decided_by == "undecided"


def test_an_identified_ceiling_above_every_other_interval_wins_even_if_another_is_unidentified():
    high = run("high", 0.75, 2.0, noise=0.003, n=81)
    low = run("low", 0.40, 2.0, C_mid=3000.0, noise=0.01)  # measured: A in [0.394, 0.448]
    result = compare_runs([high, low])
    assert result.runs[0].identified and not result.runs[1].identified
    assert result.runs[1].unc.A_plausible[1] < result.runs[0].unc.A_plausible[0]
    v = result.verdict
    assert v.decided_by == "asymptote" and v.winner == "high", v.to_dict()


def test_no_efficiency_verdict_from_a_shared_A_on_the_bound():
    runs = []
    for name, B, seed in (("a", 2.0, 0), ("b", 1.6, 1)):  # both saturate at a pass rate of 1
        runs.append(run(name, 1.0, B, C_mid=1500.0, noise=0.003, seed=seed))
    result = compare_runs(runs)
    assert any("A" in r.fit.bounds_hit for r in result.runs)
    v = result.verdict
    assert v.decided_by == "undecided" and v.winner is None
    assert any("sits on a bound of the search box" in r for r in v.reasons)


def test_paper_mode_reaches_an_efficiency_verdict_on_identified_runs():
    steep, flat = run("steep", 0.600, 2.3), run("flat", 0.612, 1.5, seed=1)
    result = compare_runs([flat, steep], options=FitOptions(method="paper"))
    assert all(r.identified for r in result.runs)
    assert (result.verdict.decided_by, result.verdict.winner) == ("efficiency", "steep")


def test_the_laws_holdout_on_an_exact_curve_has_no_error():
    from scalerl.fit import sigmoid
    from scalerl.fit.compare import holdout_forecast

    C = np.linspace(0.0, 16000.0, 81)
    hold = holdout_forecast(C, sigmoid(C, 0.61, 1.92, 2542.0, 0.3))  # fit on <= 8k, forecast 8k..16k (§1.5)
    h = hold.heldout
    assert h.cut == 8000.0 and hold.fit.compute.max() <= 8000.0
    assert h.compute.size == 40 and h.compute.min() > 8000.0
    assert h.rmse < 1e-6 and h.max_error < 1e-6 and abs(h.final_error) < 1e-6
    assert h.extrapolation_ratio == pytest.approx(2.0)


def test_the_laws_holdout_scores_a_noisy_curve_and_needs_points_to_forecast():
    from scalerl.fit.compare import holdout_forecast

    from .conftest import make_curve

    C, R = make_curve(0.645, 1.70, 10909.0, seed=32)
    hold = holdout_forecast(C, R, fit_until=30000.0, options=FitOptions(min_compute=1500.0))
    h = hold.heldout
    err = h.predicted - h.reward
    assert hold.fit.compute.min() >= 1500.0 and h.cut == 30000.0
    assert h.rmse == pytest.approx(np.sqrt(np.mean(err**2))) and h.mae == pytest.approx(np.mean(np.abs(err)))
    assert h.max_error == pytest.approx(np.abs(err).max()) and h.final_error == err[-1] and h.rmse < 0.01
    with pytest.raises(CurveError, match="nothing to forecast"):
        holdout_forecast(C, R, fit_until=C[-1], source="runs/a.csv")
    with pytest.raises(CurveError, match="fit_frac"):
        holdout_forecast(C, R, fit_frac=1.5)
