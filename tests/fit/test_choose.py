"""scalerl.fit.choose: P(best at the budget) by hand, the rungs, and replays of written curves."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from scalerl.fit import law
from scalerl.fit.choose import Standing, p_best, replay, rungs
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
    assert stop["point"] == "poor" and stop["at_compute"] <= 0.5 and stop["p_best"] < 0.05
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
