"""A prior from finished runs (``scalerl.fit.prior``: ``learn``, ``posterior``, ``runs``) and
``scalerl fit --prior-runs``: the forecast follows the prior where it accepts the run.

Populations are small (12 runs), seeded, and on the calibration bench's grid (an evaluation
every 400 GPU-hours to 16k, AR(1) noise), so the module runs in about ten seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit import FitOptions, sigmoid
from scalerl.fit.calibrate import assess
from scalerl.fit.commands import fit_output
from scalerl.fit.prior.learn import MIN_RUNS, learn_prior
from scalerl.fit.prior.posterior import calibrate, conformal_factor, forecast_with_prior

from .._files import write_csv

GRID = np.arange(0.0, 16001.0, 400.0)
OPTIONS = FitOptions(min_compute=1500.0, max_points=None)
POPULATION = {"gain": (0.20, 0.40), "B": (1.4, 2.4), "C_mid": (2000.0, 4500.0)}  # uniform ranges


def _ar1(sigma: float, rho: float, n: int, rng) -> np.ndarray:
    e = np.empty(n)
    e[0] = rng.normal(0.0, sigma)
    for i in range(1, n):
        e[i] = rho * e[i - 1] + rng.normal(0.0, sigma * np.sqrt(1.0 - rho**2))
    return e


def population(n: int, seed: int, *, C_mid=POPULATION["C_mid"], gain=POPULATION["gain"]):
    """``n`` runs (name, compute, reward) with R0 0.25-0.35 and AR(1) noise (sd 0.01, rho 0.6)."""
    rng = np.random.default_rng(seed)
    runs = []
    for i in range(n):
        R0, g = rng.uniform(0.25, 0.35), rng.uniform(*gain)
        B, c_mid = rng.uniform(*POPULATION["B"]), rng.uniform(*C_mid)
        y = sigmoid(GRID, R0 + g, B, c_mid, R0) + _ar1(0.01, 0.6, GRID.size, rng)
        runs.append((f"run{i}", GRID, np.clip(y, 0.0, 1.0)))
    return runs


@pytest.fixture(scope="module")
def prior():
    learned, why = learn_prior(population(12, seed=1), OPTIONS)
    assert learned is not None, why
    return learned


def test_prior_recovers_the_population(prior):
    # z = (gain, log B, log(C_mid / 16000)); uniform ranges give these means and sds
    lo = np.array([0.20, np.log(1.4), np.log(2000.0 / 16000)])
    hi = np.array([0.40, np.log(2.4), np.log(4500.0 / 16000)])
    true_mean, true_sd = (lo + hi) / 2.0, (hi - lo) / np.sqrt(12.0)
    assert prior.n_runs == 12
    # 12 draws: the mean is known to about sd / sqrt(12) ~ 0.3 sd; allow 1 sd
    np.testing.assert_array_less(np.abs(prior.mean - true_mean), true_sd)
    sd = np.sqrt(np.diag(prior.cov))
    assert np.all(sd > 0.5 * true_sd) and np.all(sd < 2.0 * true_sd)
    assert np.sqrt(prior.sigma2) == pytest.approx(0.01, rel=0.5)


def _quarter(run):
    _, c, y = run
    keep = c <= 0.25 * c[-1]
    return OPTIONS.fit(c[keep], y[keep]), c, y


def test_a_run_of_the_population_gets_a_narrower_covering_forecast(prior):
    covered, narrower = 0, 0
    for run in population(4, seed=5):
        fit, c, y = _quarter(run)
        pf = forecast_with_prior(fit, fit_until=4000.0, budget=16000.0, prior=prior, options=OPTIONS)
        assert pf.used, pf.reason
        lo, hi = (float(v[0]) for v in pf.predictive([16000.0]))
        free_lo, free_hi = assess(fit, horizon=4.0).predictive(16000.0)
        covered += lo <= y[-1] <= hi
        narrower += (hi - lo) < (free_hi - free_lo)
    assert covered >= 3 and narrower == 4


def test_a_run_from_another_population_is_refused(prior):
    # the bend lies far past the data (C_mid 25k-40k): its early points barely rise
    for run in population(3, seed=9, C_mid=(25000.0, 40000.0)):
        fit, _, _ = _quarter(run)
        pf = forecast_with_prior(fit, fit_until=4000.0, budget=16000.0, prior=prior, options=OPTIONS)
        assert not pf.used
        assert "unlike the prior" in pf.reason and "prior-free" in pf.reason
        assert pf.to_dict()["used"] is False and pf.to_dict()["n_runs"] == 12


def test_runs_with_a_lower_ceiling_are_refused_or_covered(prior):
    # gains 0.04-0.10 against the population's 0.20-0.40: a quarter of such a run can pass
    # for a late bend, so the guard may let one through; the conformal factor (one score per
    # finished run, at its final point) must then still cover it. Issue 21's goal: >= 90%.
    ok = 0
    for run in population(10, seed=21, gain=(0.04, 0.10)):
        fit, _, y = _quarter(run)
        pf = forecast_with_prior(fit, fit_until=4000.0, budget=16000.0, prior=prior, options=OPTIONS)
        if not pf.used:
            assert "unlike the prior" in pf.reason and "prior-free" in pf.reason
            ok += 1
            continue
        lo, hi = (float(v[0]) for v in pf.predictive([16000.0]))
        ok += lo <= y[-1] <= hi
    assert ok >= 9


def test_conformal_factor_is_the_order_statistic_or_the_student_bound_below_19_scores():
    # 20 scores at 95%: the ceil(21 * 0.95) = 20th smallest, the largest
    assert conformal_factor(np.r_[np.full(19, 1.0), 3.0], 0.95) == 3.0
    # 40 scores: the ceil(41 * 0.95) = 39th smallest
    assert conformal_factor(np.arange(1.0, 41.0), 0.95) == 39.0
    # 5 scores of 1: no 6th order statistic; tau_hat = 1, t_5(0.975) = 2.5706 (tables)
    assert conformal_factor(np.ones(5), 0.95) == pytest.approx(2.5706, abs=1e-4)
    # 5 scores, one large: tau_hat = sqrt((4 + 36) / 5) = 2.828, times 2.5706 = 7.27 > 6
    assert conformal_factor(np.array([1.0, 1.0, 1.0, 1.0, 6.0]), 0.95) == pytest.approx(2.8284 * 2.5706, rel=1e-4)


def test_runs_without_a_shape_still_calibrate_the_intervals():
    # A finished run that collapses halfway (a policy that fell over) has no z, but a new
    # run may end like it: its forecast error is scored, and the factor grows to cover it.
    runs = population(12, seed=1)
    name, c, y = population(1, seed=33)[0]
    fallen = np.where(c > 8000.0, y - 0.6 * (c - 8000.0) / 8000.0, y).clip(0.0, 1.0)
    with_fall, _ = learn_prior([*runs, ("fallen", c, fallen)], OPTIONS)
    assert with_fall.n_runs == 12 and [r.name for r in with_fall.unshaped] == ["fallen"]
    assert with_fall.leaving_out("fallen").unshaped == () and with_fall.leaving_out("run3").n_runs == 11
    alone, _ = learn_prior(runs, OPTIONS)
    cal, cal_alone = calibrate(with_fall, 0.25, OPTIONS, 0.95), calibrate(alone, 0.25, OPTIONS, 0.95)
    assert cal.n_scores == cal_alone.n_scores + 1
    assert cal.scale > cal_alone.scale
    assert cal.conflicts == cal_alone.conflicts  # only the population's own runs set the guard


def test_fewer_than_five_usable_runs_give_no_prior():
    learned, why = learn_prior(population(MIN_RUNS - 1, seed=2), OPTIONS)
    assert learned is None
    assert why == f"only 4 of the 4 prior runs could be fitted with a known shape, fewer than the {MIN_RUNS} a prior needs, so the fit is prior-free"


def _finished_runs_and_a_new_one(tmp_path):
    """Eight finished runs in ``done/`` and a new run beside it: (folder, new run's file, its curve)."""
    folder = tmp_path / "done"
    folder.mkdir()
    for name, c, y in population(8, seed=1):
        write_csv(folder / f"{name}.csv", c, y)
    (_, c, y), = population(1, seed=5)
    return folder, write_csv(tmp_path / "new.csv", c, y), (c, y)


def _recorded(monkeypatch, name: str) -> list:
    """What ``fit_output.<name>`` returns in each call, recorded while the CLI runs."""
    seen, real = [], getattr(fit_output, name)
    monkeypatch.setattr(fit_output, name, lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


@pytest.fixture(scope="module")
def with_prior(tmp_path_factory):
    """One ``scalerl fit --prior-runs`` of the new run cut at 25% under the eight finished
    runs, shared by the output-order tests: (stdout, JSON row, HTML page, printed tables,
    figure axes)."""
    tmp_path = tmp_path_factory.mktemp("with_prior")
    folder, run, _ = _finished_runs_and_a_new_one(tmp_path)
    out, page, alone = tmp_path / "fit.json", tmp_path / "fit.html", tmp_path / "alone.json"
    with pytest.MonkeyPatch.context() as m, contextlib.redirect_stdout(io.StringIO()) as stdout:
        tables, figures = _recorded(m, "fit_tables"), _recorded(m, "fit_figure")
        rc = main(["fit", str(run), "--prior-runs", str(folder), "--fit-frac", "0.25", "--min-compute", "1500",
                   "--no-budget", "--json", str(out), "--html", str(page), "--plot", str(tmp_path / "fit.png")])  # fmt: skip
        assert main(["fit", str(run), "--fit-frac", "0.25", "--min-compute", "1500", "--no-budget", "--json",
                     str(alone)]) == 0  # fmt: skip
    assert rc == 0
    (row,) = json.loads(out.read_text())["runs"]
    (free,) = json.loads(alone.read_text())["runs"]
    return stdout.getvalue(), row | {"without_prior": free}, page.read_text(), tables[0], figures[0]


def test_cli_prior_runs_json_the_forecast_follows_the_prior_and_the_law_beside_it(with_prior):
    _, row, _, _, _ = with_prior
    assert row["answer"] == "prior" and row["forecast"]["method"] == "prior"
    prior = row["prior"]
    assert prior["label"] == "with the prior of 8 finished runs"
    assert prior["fit"]["prior"]["n_runs"] == 8 and prior["fit"]["prior"]["used"] is True
    assert prior["fit"]["A"] == prior["fit"]["prior"]["A"] and prior["fit"]["method"].endswith("MAP under the prior")
    assert row["fit"]["A"] != prior["fit"]["A"]  # the run's own law, beside the prior's
    free = row["without_prior"]
    assert free["forecast"]["method"] != "prior"
    final, alone = row["holdout"]["final"], free["holdout"]["final"]
    assert final["width"] < alone["width"]  # the prior sharpens the forecast
    lo, hi = prior["intervals"]["A"]
    assert lo < prior["fit"]["A"] < hi and prior["fit"]["A_plausible"] == [lo, hi]
    assert prior["uncertainty"]["calibration"] == prior["fit"]["prior"]["scale_means"]
    assert prior["uncertainty"]["calibration_factor"] == prior["fit"]["prior"]["scale"]


def test_cli_prior_runs_text_puts_the_prior_first_and_the_held_out_row_matches_the_json(with_prior):
    stdout, row, _, tables, _ = with_prior
    fits, held_out = tables[0], tables[1]
    assert fits.caption.startswith("Sigmoid fits (Eq. 1) of val_pass_rate against gpu_hours")
    assert [r[0] for r in fits.rows] == ["new (with the prior of 8 finished runs)", "new (this run alone)"]
    assert fits.rows[0][1].startswith(f"{row['prior']['fit']['A']:.3f} [")
    assert held_out.caption.startswith("Held-out check of the forecast")
    f = row["holdout"]["final"]
    assert [r[0] for r in held_out.rows] == ["new"] and "(prior)" in held_out.rows[0][1]
    assert held_out.rows[0][-1] == (f"{f['observed']:.3f} in [{f['pred_lo']:.3f}, {f['pred_hi']:.3f}] "
                                    f"(width {f['width']:.3f}): covered")  # fmt: skip
    text = " ".join(stdout.split())  # rich wraps long lines; words stay in order
    assert text.index("new: with the prior of 8 finished runs: ceiling") < text.index("new: this run alone: ceiling")
    assert "new: intervals from: the prior learned from finished runs" in text
    assert ("prior: new: calibration: the prior's intervals are its own (Laplace) spread times "
            f"{row['prior']['fit']['prior']['scale']:.2f}: the factor that makes 95% intervals cover the final "
            "values of the 8 finished runs it could score, each cut at 25% of its compute and forecast under the "
            "prior of the others.") in text


def test_cli_prior_runs_html_and_figure_show_the_forecast_under_the_prior(with_prior):
    _, row, page, _, ax = with_prior
    assert "<title>scalerl fit: val_pass_rate</title>" in page
    paragraphs = re.findall(r"<p>(.*?)</p>", page)
    first = next(i for i, p in enumerate(paragraphs) if p.startswith("new: with the prior of 8 finished runs: ceiling"))
    assert paragraphs[first + 1].startswith("new: this run alone: ceiling")
    first_rows = re.search(r"<tbody>(.*?)</tbody>", page).group(1)
    assert first_rows.index("new (with the prior of 8 finished runs)") < first_rows.index("new (this run alone)")
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "forecast (prior)" in labels and "predictive interval (95%)" in labels
    assert "prior" in ax.get_title() and ax.get_ylabel() == "val_pass_rate"


def test_prior_parameter_intervals_meet_the_band_far_out(prior):
    """A's interval is the calibrated band's limit: the same factor on the same spread."""
    run = population(1, seed=5)[0]
    fit, _, _ = _quarter(run)
    pf = forecast_with_prior(fit, fit_until=4000.0, budget=16000.0, prior=prior, options=OPTIONS)
    lo, hi = pf.band(np.array([1e12]))
    assert pf.intervals()["A"] == pytest.approx((float(lo[0]), float(hi[0])), abs=1e-4)
    B, C_mid = pf.mode.params()[1:3]
    assert pf.intervals()["B"][0] < B < pf.intervals()["B"][1]
    assert pf.intervals()["C_mid"][0] < C_mid < pf.intervals()["C_mid"][1]


def test_cli_prior_runs_too_few_is_one_sentence_and_the_prior_free_fit(tmp_path, capsys):
    for name, c, y in population(2, seed=1):
        write_csv(tmp_path / f"{name}.csv", c, y)
    (_, c, y), = population(1, seed=5)
    run = write_csv(tmp_path / "new.csv", c, y)
    out = tmp_path / "fit.json"
    rc = main(["fit", str(run), "--prior-runs", str(tmp_path / "run*.csv"), "--fit-frac", "0.5", "--no-budget",
               "--json", str(out)])  # fmt: skip
    assert rc == 0
    assert "fewer than the 5 a prior needs, so the fit is prior-free" in " ".join(capsys.readouterr().out.split())
    (row,) = json.loads(out.read_text())["runs"]
    assert row["answer"] != "prior" and row["prior"] is None
    assert "fewer than the 5 a prior needs" in row["forecast"]["why"]


@pytest.mark.parametrize("spec, says", [("nowhere", "no such file or folder"), ("nowhere/*.csv", "no file matches it")])
def test_cli_prior_runs_pointing_nowhere_is_exit_2_and_one_sentence(tmp_path, capsys, spec, says):
    (_, c, y), = population(1, seed=5)
    run = write_csv(tmp_path / "new.csv", c, y)
    rc = main(["fit", str(run), "--prior-runs", str(tmp_path / spec), "--fit-frac", "0.5", "--no-budget"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err == f"scalerl fit: error: --prior-runs {tmp_path / spec}: {says}.\n"


def test_cli_prior_runs_leave_out_a_copy_of_the_forecast_run(tmp_path, capsys):
    """A copy of the run being forecast (its own future) is no prior run: left out, said once.
    Every run or file left out is named with its reason, one line each."""
    folder, run, (c, y) = _finished_runs_and_a_new_one(tmp_path)
    write_csv(folder / "copy.csv", c, y)
    flat = 0.3 + np.random.default_rng(0).normal(0.0, 0.01, GRID.size)  # no bend: B ends on the box
    write_csv(folder / "flat.csv", GRID, flat)
    (folder / "notes.jsonl").write_text('{"note": "no curve here"}\n')
    out = tmp_path / "fit.json"
    rc = main(["fit", str(run), "--prior-runs", str(folder), "--fit-frac", "0.25", "--min-compute", "1500",
               "--no-budget", "--json", str(out)])  # fmt: skip
    assert rc == 0
    captured = capsys.readouterr()
    assert captured.err == (f"scalerl fit: warning: --prior-runs: {folder / 'copy.csv'} holds the same curve as "
                            f"{run}, the run being forecast, so it is left out of the prior (a run's own future "
                            "would otherwise inform its forecast).\n")
    (row,) = json.loads(out.read_text())["runs"]
    left_out = row["prior"]["fit"]["prior"]["left_out"]
    assert left_out[0] == f"{folder / 'copy.csv'}: the same curve as {run}, the run being forecast"
    assert left_out[1].startswith(f"no curve read: {folder / 'notes.jsonl'} has no reward column")
    assert left_out[2] == f"{folder / 'flat.csv'}: B ended on the search box, so its shape is not known"
    assert len(left_out) == 3 and row["prior"]["fit"]["prior"]["n_runs"] == 8
    text = " ".join(captured.out.split())  # rich wraps long lines
    assert all(f"prior: new: left out: {' '.join(why.split())}." in text for why in left_out)
    assert text.count("prior: new: left out: ") == 3
    # the flat run has no shape for the prior, but its forecast error still calibrates the intervals
    assert "prior from 8 finished runs; intervals calibrated on 9 of them" in text


def test_cli_prior_runs_naming_only_the_forecast_run_say_so(tmp_path, capsys):
    (_, c, y), = population(1, seed=5)
    run = write_csv(tmp_path / "new.csv", c, y)
    rc = main(["fit", str(run), "--prior-runs", str(tmp_path / "new*.csv"), "--fit-frac", "0.5", "--no-budget"])
    assert rc == 0
    out = capsys.readouterr().out
    assert (f"--prior-runs {tmp_path / 'new*.csv'}: it holds only the run being forecast, which is never part of "
            "its own prior, so the fit is prior-free") in " ".join(out.split()), out
