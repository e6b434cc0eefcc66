"""scalerl.fit.choose: P(best at the budget) by hand, the rungs, and replays of written curves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from scalerl.fit import law
from scalerl.fit.choose import THRESHOLD, Standing, p_best, replay, rungs
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import RunLog
from scalerl.fit.paper import TABLE1


def _normal(name: str, mean: float, sd: float, n: int = 4000) -> Standing:
    return Standing(name, 1.0, mean + sd * stats.norm.ppf((np.arange(n) + 0.5) / n), "fit")


def test_p_best_of_two_normals_is_phi_of_their_gap():
    # X ~ N(0.6, 0.05), Y ~ N(0.5, 0.05), independent: P(X > Y) = Phi(0.1 / (0.05 sqrt 2)) =
    # Phi(1.414) = 0.921. Draws paired in their stored (sorted) order would say 1.0.
    p = p_best([_normal("a", 0.6, 0.05), _normal("b", 0.5, 0.05)])
    assert p["a"] == pytest.approx(0.921, abs=0.015)
    assert p["a"] + p["b"] == pytest.approx(1.0)


def test_p_best_shares_ties_and_gives_a_clear_leader_everything():
    flat = [Standing(n, 1.0, np.full(100, 0.3), "flat") for n in ("x", "y")]
    assert p_best(flat) == {"x": 0.5, "y": 0.5}
    p = p_best([_normal("top", 0.9, 0.01), _normal("mid", 0.5, 0.01), _normal("low", 0.2, 0.01)])
    assert p == {"top": 1.0, "mid": 0.0, "low": 0.0}
    assert p_best([_normal("alone", 0.5, 0.1)]) == {"alone": 1.0}


def test_rungs_double_from_the_first_and_end_at_the_budget():
    assert rungs(8.0, 1.0) == [1.0, 2.0, 4.0, 8.0]
    assert rungs(10.0, 1.0) == [1.0, 2.0, 4.0, 8.0, 10.0]
    assert rungs(8.0) == [1.0, 2.0, 4.0, 8.0]  # the first rung defaults to budget / 8
    with pytest.raises(CurveError, match="first rung"):
        rungs(1.0, 2.0)


def _run(name: str, A: float, B: float, C_mid: float, end: float, seed: int, sd: float = 0.01, n: int = 48) -> RunLog:
    c = np.linspace(end / n, end, n)
    y = law.sigmoid(c, A, B, C_mid, 0.0) + np.random.default_rng(seed).normal(0.0, sd, n)
    log = RunLog.of(c, np.clip(y, 0.0, 1.0), name=name)
    return RunLog(dataclasses.replace(log.curve, source=f"{name}.jsonl"))


def test_replay_stops_a_clear_loser_early_and_keeps_the_winner():
    curves = [_run("good", 0.8, 1.5, 0.2, 1.0, seed=0), _run("poor", 0.4, 1.5, 0.2, 1.0, seed=1)]
    d = replay(curves, 1.0).to_dict()
    assert d["winner"] == "good" and d["full"]["winner"] == "good"
    (stop,) = d["stopped"]
    assert stop["point"] == "poor" and stop["at_compute"] <= 0.5 and stop["p_best"] < THRESHOLD
    assert set(stop["forecast"]) == {"median", "lo", "hi"} and "P(best at the budget)" in stop["reason"]
    # compute: the loser ran to its rung, the winner to the budget (the runs' own last points)
    assert d["compute_used"] == pytest.approx(stop["at_compute"] + 1.0)
    assert d["compute_full"] == pytest.approx(2.0)
    assert [r["point"] for r in d["full"]["ranking"]] == ["good", "poor"]


def test_replay_keeps_the_late_winner_of_the_papers_batch_sizes():
    """Table 1: bs512 leads early (C_mid 2818) and bs2048 overtakes it (A 0.645 against 0.605).
    At 100k GPU-hours bs2048 is ahead by 0.026; at the first rung, 12.5k, it trails by 0.2."""
    table = {p.name: p for p in TABLE1}
    small, large = table["ScaleRL-bs512"], table["ScaleRL-bs2048"]
    curves = [_run("bs512", small.A, small.B, small.C_mid, 1e5, seed=2, sd=0.005),
              _run("bs2048", large.A, large.B, large.C_mid, 1e5, seed=3, sd=0.005)]  # fmt: skip
    early = {c.name: float(c.curve.head(12_500).reward[-3:].mean()) for c in curves}
    assert early["bs512"] > early["bs2048"] + 0.1  # the early values point the wrong way
    d = replay(curves, 1e5).to_dict()
    assert d["winner"] in ("bs2048", ["bs2048", "bs512"])
    assert all(s["point"] != "bs2048" for s in d["stopped"])


def test_replay_of_two_runs_of_one_law_is_a_tie():
    curves = [_run("s0", 0.7, 1.5, 0.2, 1.0, seed=4, sd=0.02), _run("s1", 0.7, 1.5, 0.2, 1.0, seed=5, sd=0.02)]
    d = replay(curves, 1.0).to_dict()
    assert d["stopped"] == [] and sorted(d["winner"]) == ["s0", "s1"]
    assert d["compute_used"] == pytest.approx(d["compute_full"])


def test_replay_refuses_a_run_that_ends_before_the_budget():
    curves = [_run("long", 0.7, 1.5, 0.2, 1.0, seed=0), _run("short", 0.7, 1.5, 0.2, 0.5, seed=1)]
    with pytest.raises(CurveError, match=r"short\.jsonl ends at compute 0\.5, before the budget 1"):
        replay(curves, 1.0)


def test_a_study_reads_each_points_training_reward(tmp_path):
    """Each point's forecast follows its own training reward where its log has one, in the
    replay and through ``scalerl sweep --replay``'s reader."""
    from scalerl.experiments.replay import replay_logs
    from scalerl.fit.choose import standing
    from scalerl.fit.forecast import ForecastOptions

    from .commands.test_plan import _run_folder
    from .forecast.test_companion import _log, _steps

    runs = {f"p{seed}": _steps(250, 10, seed=seed) for seed in (1, 2)}
    logs = [dataclasses.replace(_log(records), curve=dataclasses.replace(_log(records).curve, name=name))
            for name, records in runs.items()]  # fmt: skip
    s = standing(logs[0], 5.0, ForecastOptions())
    assert s.source == "training reward"
    with_t = replay(logs, 2.5).to_dict()
    alone = replay(logs, 2.5, options=ForecastOptions(train_reward="none")).to_dict()
    assert with_t["full"]["ranking"] != alone["full"]["ranking"]  # read off other draws
    folders = [_run_folder(tmp_path / name, records) for name, records in runs.items()]
    read = {log.name: log for log in replay_logs(folders)}
    assert set(read) == {"p1", "p2"} and np.allclose(read["p1"].companion().train, logs[0].companion().train)


def test_every_rung_says_for_every_point_whether_it_was_stopped_kept_or_undecided():
    """n = 48 evaluations to compute 1: the first rung (1/8) holds 6, so it decides; a rung at
    1/16 holds 3, and every point there is undecided, with how many a forecast needs."""
    from scalerl.fit.choose import Study

    logs = {"good": _run("good", 0.8, 1.5, 0.2, 1.0, seed=0), "poor": _run("poor", 0.4, 1.5, 0.2, 1.0, seed=1)}
    study = Study(list(logs), 1.0, first_rung=1.0 / 16)
    assert study.step(1.0 / 16, {n: g.upto(1.0 / 16) for n, g in logs.items()}) == []
    assert study.decisions.rounds[0]["lines"] == [
        f"rung 1/5 at compute 0.0625: {n} undecided: 3 evaluation(s) so far; a forecast needs 6" for n in logs]
    stops = []
    for rung in study.decisions.rungs[1:]:
        stops += study.step(rung, {n: g.upto(rung) for n, g in logs.items() if n in study.alive})
    d = study.finish().to_dict()
    (stop,) = stops
    line = next(x for x in study.decisions.lines() if " poor stopped: " in x)
    f, lead = stop["forecast"], stop["leader_forecast"]
    assert line == (f"rung {1 + d['rungs'].index(stop_rung(d, 'poor'))}/5 at compute {stop_rung(d, 'poor'):.4g}: poor stopped: "
                    f"P(best) {stop['p_best']:.2f}, forecast {f['median']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}] "
                    f"against the leader's {lead['median']:.3f} [{lead['lo']:.3f}, {lead['hi']:.3f}]")  # fmt: skip
    assert any(" good kept: leader, forecast " in x for x in study.decisions.lines())
    assert d["done"] is True and d["winner"] == "good"


def stop_rung(d: dict, point: str) -> float:
    """The rung at which ``point`` was stopped (the round whose lines stop it)."""
    return next(r["at_compute"] for r in d["rounds"] if any(f" {point} stopped: " in x for x in r["lines"]))


def test_a_point_that_is_not_learning_stops_at_the_first_rung_that_shows_it():
    """A flat run is stopped for being flat, whatever its P(best): it stands level with where
    the leader is now, so its P(best) alone would keep it."""
    from scalerl.fit.choose import Study

    rng = np.random.default_rng(7)
    c = np.linspace(1.0 / 48, 1.0, 48)
    flat = RunLog.of(c, np.clip(0.35 + rng.normal(0.0, 0.01, 48), 0, 1), name="flat")
    logs = {"rising": _run("rising", 0.6, 1.5, 0.12, 1.0, seed=3, sd=0.01), "flat": flat}
    study = Study(list(logs), 1.0, threshold=0.05)  # its P(best), 0.07, would keep it at this threshold
    rung = study.decisions.rungs[1]
    stops = study.step(study.decisions.rungs[0], {n: g.upto(study.decisions.rungs[0]) for n, g in logs.items()})
    stops += study.step(rung, {n: g.upto(rung) for n, g in logs.items() if n in study.alive})
    assert [s["point"] for s in stops] == ["flat"] and stops[0]["reason"].startswith("not learning, the leader rising: ")
    assert stops[0]["p_best"] >= study.decisions.threshold  # stopped for being flat, not for its P(best)
    assert any(x.endswith("(not learning)") and " flat stopped: " in x for x in study.decisions.lines())


def test_the_guard_holds_a_stop_until_two_rungs_in_a_row_agree():
    """confirm=2 stops the loser one rung later than confirm=1, and says why it waited."""
    curves = [_run("good", 0.8, 1.5, 0.2, 1.0, seed=0), _run("poor", 0.4, 1.5, 0.2, 1.0, seed=1)]
    once, twice = replay(curves, 1.0).to_dict(), replay(curves, 1.0, confirm=2).to_dict()
    (a,), (b,) = once["stopped"], twice["stopped"]
    assert b["at_compute"] == pytest.approx(2 * a["at_compute"], rel=0.1)  # the next rung (eta = 2)
    held = [x for r in twice["rounds"] for x in r["lines"] if " poor undecided: " in x]
    assert held and "held until 2 rungs in a row agree (1 so far)" in held[0]
    assert twice["compute_used"] > once["compute_used"] and twice["winner"] == once["winner"] == "good"


def test_a_study_under_way_names_its_rung_and_no_verdict():
    from scalerl.fit.choose import Study

    study = Study(["a", "b", "c"], 8.0, first_rung=1.0)
    study.under_way(2.0, ["a", "c"])
    d = study.finish(done=False).to_dict()
    assert d["done"] is False and d["under_way"] == {"rung": 2, "of": 4, "at_compute": 2.0, "running": ["a", "c"]}
    assert study.finish().to_dict()["under_way"] is None


def test_a_rising_points_forecast_at_the_budget_is_never_below_what_it_has_shown():
    """Issue 49's report: the leader's lower bound (0.270) sat below its own starting value.
    The floor is the forecast's own (``draws.shown``: the mean of the last 5 evaluations less
    one standard error of it), so the study's draws are ``plan``'s at the budget."""
    from scalerl.fit.choose import standing
    from scalerl.fit.forecast import ForecastOptions, forecast_of
    from scalerl.fit.forecast.draws import shown

    log = _run("up", 0.8, 1.5, 0.2, 1.0, seed=3, sd=0.02)
    s = standing(log.upto(0.25), 1.0, ForecastOptions())
    fc = forecast_of(log.upto(0.25), options=ForecastOptions(budget=1.0))
    at_budget = fc.draws_at(1.0)
    floor = shown(log.curve.head(0.25).reward, fc.draws.sigma)
    assert s.state == "rising" and np.array_equal(s.sample, at_budget)  # one answer: the forecast's draws
    at = fc.at(1.0)
    assert (s.median, *s.interval(0.95)) == (at.value, at.lo, at.hi)  # and its band, Forecast.at's
    assert at_budget.min() >= floor and (at_budget == floor).any()  # the floor did lift some draws
    lo, _ = fc.draws.band(np.array([1.0]))
    assert lo[0] >= floor


def test_flat_points_beside_a_flat_leader_are_not_stopped_for_being_flat():
    """Where nobody learns, a flat point is not stopped for it: the study cannot tell them apart."""
    from scalerl.fit.choose import Study

    c = np.linspace(1.0 / 48, 1.0, 48)
    logs = {n: RunLog.of(c, np.clip(0.35 + np.random.default_rng(i).normal(0.0, 0.01, 48), 0, 1), name=n)
            for i, n in enumerate(("a", "b", "c"))}  # fmt: skip
    study = Study(list(logs), 1.0)
    stopped = []
    for rung in study.decisions.rungs:
        stopped += study.step(rung, {n: g.upto(rung) for n, g in logs.items() if n in study.alive})
    assert not any(s["reason"].startswith("not learning") for s in stopped)


def test_every_line_that_compares_p_best_with_the_threshold_says_it_truly():
    """A point held by the guard until the budget ends "not the winner", never "P(best) 0.00 >= 0.1"
    (a live study's last rung printed that)."""
    import re

    curves = [_run("good", 0.8, 1.5, 0.2, 1.0, seed=0), _run("poor", 0.4, 1.5, 0.2, 1.0, seed=1)]
    d = replay(curves, 1.0, first_rung=0.5, confirm=3).to_dict()
    lines = [x for r in d["rounds"] for x in r["lines"]]
    assert any(" poor final: " in x and ", not the winner" in x for x in lines), lines
    for x in lines:
        for p, sign, t in re.findall(r"P\(best\) ([0-9.]+) (>=|<) ([0-9.]+)", x):
            assert (float(p) >= float(t)) == (sign == ">="), x
