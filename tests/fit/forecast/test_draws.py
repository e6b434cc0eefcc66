"""One predictive distribution: every probability ``scalerl plan`` prints is read from the same
draws, so none contradicts another (P(within 1 h) = 0.777 was once printed above P(at all) =
0.745), and a run that shows no rise gets no crossing time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalerl.cli import main
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.draws import band_draws, curve_draws, mixture
from scalerl.fit.forecast.reach import reach_of
from scalerl.fit.forecast.rise import rise
from scalerl.fit.law import sigmoid
from scalerl.fit.time.timing import Clock

from ..commands.test_plan import _run_folder

STEP_S, DEVICES = 60.0, 2


def _run(a: float, b: float, c_mid: float, n: int, seed: int, flat: float | None = None) -> list[dict]:
    """A run evaluated every 10 steps on 256 prompts: binomial reads of its curve (or ``flat``)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        step = 10 * i
        wall = 1.0 + STEP_S * step
        c = DEVICES * wall / 3600.0
        p = flat if flat is not None else float(sigmoid(c, a, b, c_mid, 0.1))
        out.append({"step": step, "wall_s": wall, "compute_gpu_hours": c, "val_pass_rate": rng.binomial(256, p) / 256})
    return out


def _forecast(records: list[dict], budget: float | None = None):
    c = np.array([r["compute_gpu_hours"] for r in records])
    y = np.array([r["val_pass_rate"] for r in records])
    log = RunLog.of(c, y, clock=[(r["compute_gpu_hours"], r["wall_s"]) for r in records])
    f = forecast_of(log, options=ForecastOptions(budget=budget))
    return f, f.clock


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.floats(0.5, 0.95), b=st.floats(0.8, 3.0), mid=st.floats(2.0, 12.0), cut=st.integers(20, 40),
       seed=st.integers(0, 10_000), targets=st.lists(st.floats(0.15, 0.99), min_size=3, max_size=3),
       budgets=st.lists(st.floats(0.1, 50.0), min_size=4, max_size=4))  # fmt: skip
def test_within_a_budget_never_exceeds_at_all_and_grows_with_the_budget(a, b, mid, cut, seed, targets, budgets):
    f, clock = _forecast(_run(a, b, mid, cut, seed))
    for target in targets:
        cross = f.crossing(target)
        p = [reach_of(cross, clock, budget_hours=h).p_within for h in sorted(budgets)]
        at_all = cross.p_reach
        assert all(x <= at_all + 1e-12 for x in p), (p, at_all)
        assert all(np.diff(p) >= -1e-12), p  # the same draws: a larger budget keeps every earlier crossing
        answer = reach_of(cross, clock)
        for triple in (answer.compute, answer.hours):
            med, lo, hi = triple
            assert lo <= med <= hi
        data = answer.to_dict()
        for key in ("compute", "hours", "device_hours"):  # never is null, never a number
            assert all((v is None) == (not np.isfinite(x)) for v, x in zip(data[key].values(),
                                                                            getattr(answer, key)))  # fmt: skip
        json.dumps(data, allow_nan=False)


def test_the_reported_contradiction_cannot_happen_through_the_command(tmp_path, capsys):
    """A run part way up, a target above it, asked within 1 hour: the two probabilities the
    command prints are of one distribution (the first within the second)."""
    run = _run_folder(tmp_path / "run", _run(0.9, 1.5, 6.0, 30, 3))
    assert main(["plan", str(run), "--target", "0.85", "--budget-hours", "1", "--json", str(tmp_path / "p.json")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["p_reach"] <= data["p_reach_at_all"]
    assert data["horizon_compute"] >= 10 * data["clock"]["now_compute"] * (1 - 1e-9)
    assert "P(reached within" in capsys.readouterr().out


def test_a_flat_run_is_not_given_a_rise_but_timed_by_the_runs_that_looked_as_flat(tmp_path, capsys):
    """The reported case: a run flat at 0.125 asked about 0.2 was given 42% from its own flat
    fit. Its forecast is "not learning": the chance, and the time where it has one, are read
    from finished runs that looked as flat (the late risers), never from a rise of its own;
    with the flat band (no such runs) it has no crossing time at all."""
    records = _run(0.0, 1.0, 1.0, 30, 0, flat=0.125)
    f, clock = _forecast(records)
    answer = f.reach(0.2, budget_hours=10.0)
    assert f.state.name == "not_learning" and f.method in ("late risers", "flat")
    assert answer.note.startswith("not learning: no rise detected") and answer.p_within <= answer.p_at_all
    data = answer.to_dict()
    if f.method == "late risers":  # the chance is the share of finished runs as flat that rose that far
        assert 0.0 < answer.p_at_all < 1.0 and "finished runs that looked as flat" in f.state.message
        assert answer.supported and answer.compute[2] == np.inf  # [lo, never]: some never rose
        lo, hi = answer.if_reached[1:]
        assert np.isfinite(lo) and np.isfinite(hi) and lo <= answer.compute[1] * (1 + 1e-9)
        assert data["hours"]["hi"] is None and data["hours"]["lo"] is not None
    else:
        assert not answer.supported and answer.compute == (np.inf, np.inf, np.inf)
        assert data["hours"] == {"median": None, "lo": None, "hi": None}
    run = _run_folder(tmp_path / "run", records)
    assert main(["plan", str(run), "--target", "0.2"]) == 0
    assert "not learning: no rise detected" in capsys.readouterr().out


def test_the_rise_evidence_by_hand():
    """First third 0.2, last third 0.3 exactly, alternating +-0.01 noise: successive differences
    of 0.02 (and the 0.1 step), so the rise is many sds; the same series reversed is no rise."""
    y = np.r_[np.full(6, 0.2), np.full(6, 0.25), np.full(6, 0.3)] + 0.01 * (-1.0) ** np.arange(18)
    up = rise(y, rho=0.0)
    assert up.detected and up.first == pytest.approx(0.2, abs=1e-12) and up.last == pytest.approx(0.3, abs=1e-12)
    diffs = np.diff(y)
    assert up.sigma == pytest.approx(np.std(diffs, ddof=1) / np.sqrt(2.0))
    assert up.z == pytest.approx(0.1 / (up.sigma * np.sqrt(2.0 / 6)))
    down = rise(y[::-1], rho=0.0)
    assert not down.detected and down.z < 0 and "no rise detected" in down.message


def test_a_clock_turns_the_same_draws_into_hours():
    """Hours are the crossing draws through the clock: at a fixed rate, hours = C * s / 3600."""
    f, _ = _forecast(_run(0.9, 1.5, 6.0, 30, 1))
    cross = f.crossing(0.6, 0)
    clock = Clock(np.array([0.0, 1.0]), np.array([0.0, 1800.0]), 1800.0, 0.0, 2.0)
    answer = reach_of(cross, clock)
    assert answer.hours[0] == pytest.approx(cross.interval[0] * 0.5, rel=1e-9)


def test_the_noise_of_an_evaluation_does_not_depend_on_how_far_the_horizon_reaches():
    """One forecast asked about a further budget answers every nearer question the same: the
    schedule and the noise of the first evaluations do not change with the horizon."""
    c = np.linspace(0.0, 1.0, 21)
    y = sigmoid(c, 0.8, 1.5, 0.6, 0.2)
    kw = dict(observed_compute=c, observed=y, sigma=0.02, rho=0.5, level=0.95)
    near = band_draws(lambda C: sigmoid(C, 0.8, 1.5, 0.6, 0.2), lambda C: (sigmoid(C, 0.75, 1.5, 0.6, 0.2),
                      sigmoid(C, 0.85, 1.5, 0.6, 0.2)), horizon=3.0, **kw)  # fmt: skip
    far = band_draws(lambda C: sigmoid(C, 0.8, 1.5, 0.6, 0.2), lambda C: (sigmoid(C, 0.75, 1.5, 0.6, 0.2),
                     sigmoid(C, 0.85, 1.5, 0.6, 0.2)), horizon=30.0, **kw)  # fmt: skip
    t = near.schedule.size
    assert np.array_equal(far.schedule[:t], near.schedule) and np.array_equal(far.evals[:, :t], near.evals)


def test_a_mixture_takes_each_method_s_share_of_the_draws():
    """Weights 0.25 / 0.75 of two flat families at 0.2 and 0.6: a quarter of the curves at 0.2."""
    c = np.linspace(0.1, 1.0, 10)
    y = np.full(10, 0.4)
    kw = dict(observed_compute=c, observed=y, sigma=0.0, rho=0.0, level=0.95, horizon=5.0)
    low = curve_draws(lambda C: np.full((2000, np.size(C)), 0.2), **kw)
    high = curve_draws(lambda C: np.full((2000, np.size(C)), 0.6), **kw)
    mixed = mixture([(1.0, low), (3.0, high)])
    at = mixed.curves(np.array([2.0]))[:, 0]
    assert np.mean(at == 0.2) == pytest.approx(0.25, abs=1e-3) and np.mean(at == 0.6) == pytest.approx(0.75, abs=1e-3)
    assert mixed.evals.shape == low.evals.shape


def test_a_pass_rates_draws_stay_in_its_range_and_answer_every_target_in_it_the_same():
    """A curve near 0.97 with a band of +-0.1: unbounded, its band and evaluations pass 1; a
    pass rate's never do; the crossing of 0.95 or 1.0 by the expected curve or one evaluation is
    the same, and by a mean of five never earlier (a mean of clipped evaluations is lower)."""
    c = np.linspace(0.1, 1.0, 10)
    kw = dict(observed_compute=c, observed=np.full(10, 0.95), sigma=0.03, rho=0.3, level=0.95, horizon=5.0)
    centre = lambda C: np.full(np.shape(C), 0.97)  # noqa: E731
    band = lambda C: (np.full(np.shape(C), 0.87), np.full(np.shape(C), 1.07))  # noqa: E731
    free, rate = band_draws(centre, band, **kw), band_draws(centre, band, bounds=(0.0, 1.0), **kw)
    assert free.band(np.array([3.0]))[1][0] > 1.0 and free.evals.max() > 1.0
    assert rate.band(np.array([3.0]))[1][0] == 1.0 and rate.predictive(np.array([3.0]))[1][0] == 1.0
    assert 0.0 <= rate.evals.min() and rate.evals.max() == 1.0
    for target in (0.95, 1.0):
        for window in (0, 1):
            assert np.array_equal(rate.first_crossing(target, window), free.first_crossing(target, window))
        assert np.all(rate.first_crossing(target, 5) >= free.first_crossing(target, 5))


def test_a_rising_runs_curves_are_floored_at_what_it_has_shown_from_now_on():
    """Observed 0.1 .. 0.6 (last five 0.2 .. 0.6, mean 0.4), sigma 0.05: the floor is
    0.4 - 0.05 / sqrt(5) = 0.37764. A band of 0.2 .. 0.8 about 0.5 is held there from now on,
    unchanged before now, and a forecast not rising keeps its own lower draws."""
    from scalerl.fit.forecast.draws import shown

    c = np.linspace(0.1, 0.6, 6)
    kw = dict(observed_compute=c, observed=np.linspace(0.1, 0.6, 6), sigma=0.05, rho=0.0, level=0.95, horizon=3.0)
    centre = lambda C: np.full(np.shape(C), 0.5)  # noqa: E731
    band = lambda C: (np.full(np.shape(C), 0.2), np.full(np.shape(C), 0.8))  # noqa: E731
    floor = 0.4 - 0.05 / np.sqrt(5)
    assert shown(kw["observed"], 0.05) == pytest.approx(floor, rel=1e-12)
    held, free = band_draws(centre, band, rising=True, **kw), band_draws(centre, band, **kw)
    later, before = held.curves(np.array([0.6, 2.0])), held.curves(np.array([0.3]))
    assert later.min() == pytest.approx(floor, rel=1e-12) and free.curves(np.array([2.0])).min() < 0.3
    assert np.array_equal(before, free.curves(np.array([0.3])))  # the past is the fit's
    above = free.curves(np.array([2.0]))[:, 0] > floor
    assert np.array_equal(later[above, 1], free.curves(np.array([2.0]))[above, 0])  # only the low draws move
    assert held.band(np.array([2.0]))[0][0] == pytest.approx(floor, rel=1e-12)


def test_the_schedule_is_sized_by_a_fixed_number_of_points_whatever_the_horizon(tmp_path, capsys):
    """Probe FIT/PLAN-compute-1e6..1e308: ``fit --target-compute 1e6`` on data to 100 asked for a
    (2000, 389961) array; ``plan --budget-compute 1e9`` for 390 million evaluations."""
    from scalerl.cli import main
    from scalerl.fit.forecast.draws import FAR_EVALS, MAX_EVALS, schedule

    from .._files import synthetic_curve, write_csv

    c = np.array([0.0, 10.0, 20.0, 50.0, 100.0])
    near = schedule(c, 1000.0)
    for horizon in (1e6, 1e9, 1e20, 1e308):
        s = schedule(c, horizon)
        assert s.size <= MAX_EVALS + FAR_EVALS and s[-1] == pytest.approx(horizon) and np.all(np.diff(s) > 0)
        assert np.array_equal(s[s <= 1000.0], near)  # the part within 10x the data: as for a nearer horizon
    x, y = synthetic_curve(n=21)
    path = write_csv(tmp_path / "base.csv", x / x[-1] * 100.0, y)  # the data reach compute 100
    assert main(["fit", str(path), "--target-compute", "1e6", "--no-budget"]) == 0
    assert main(["plan", str(path), "--target", "0.55", "--budget-compute", "1e9"]) == 0
    assert "Traceback" not in capsys.readouterr().err
