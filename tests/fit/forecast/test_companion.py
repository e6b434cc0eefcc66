"""The training reward as the validation curve's companion (``fit.forecast.companion``): binned
to the evaluations by hand, read from a run folder and a peer's log, followed by the forecast
where it rises (and the validation follows it), and by ``scalerl plan`` unless asked not to."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalerl.cli import main
from scalerl.fit.errors import CurveError
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of, read_logs
from scalerl.fit.forecast.companion import Companion, align
from scalerl.fit.forecast.reach import reach_of
from scalerl.fit.law import sigmoid
from scalerl.fit.readers import Columns
from scalerl.serve.runs import Served

from ..commands.test_plan import _run_folder

A, B, C_MID, R0, GAP = (
    0.8,
    1.5,
    2.0,
    0.2,
    -0.1,
)  # the training reward's curve; the validation sits GAP off it


def test_align_bins_each_reward_to_the_first_evaluation_at_or_after_it():
    # evaluations at 1, 2, 3; rewards at 0.5 and 1 -> bin 1; 1.5 -> bin 2; none in (2, 3]; 3.5 waits
    got = align([1.0, 2.0, 3.0], [0.5, 1.0, 1.5, 3.5], [0.2, 0.4, 0.9, 1.0])
    assert got[0] == pytest.approx(0.3) and got[1] == pytest.approx(0.9) and np.isnan(got[2])
    comp = Companion.of(
        [1.0, 2.0, 3.0], [0.1, 0.2, 0.3], [0.5, 1.0, 1.5, 3.5], [0.2, 0.4, 0.9, 1.0], "r"
    )
    assert (
        comp.compute.tolist() == [1.0, 2.0]
        and comp.val.tolist() == [0.1, 0.2]
        and len(comp.upto(1.0)) == 1
    )


def _steps(
    n_steps: int,
    every: int,
    seed: int,
    val_noise: float = 0.03,
    flat_val: float | None = None,
    flat_train: float | None = None,
) -> list[dict]:
    """Step records of a run whose every step logs a training reward (``reward_mean``) near its
    curve, evaluated every ``every`` steps GAP below it (or flat), 0.01 compute a step."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(n_steps + 1):
        c = 0.01 * (step + 1)
        t = flat_train if flat_train is not None else float(sigmoid(c, A, B, C_MID, R0))
        r = {"step": step, "compute_gpu_hours": c, "wall_s": 36.0 * (step + 1)}
        if step:
            r["reward_mean"] = float(np.clip(t + 0.05 * rng.standard_normal(), 0, 1))
        if step % every == 0:
            v = flat_val if flat_val is not None else t + GAP
            r["val_pass_rate"] = float(np.clip(v + val_noise * rng.standard_normal(), 0, 1))
        out.append(r)
    return out


def _log(records: list[dict]) -> RunLog:
    """The run's log as the trainer's forecast thread holds it: evaluations, training rewards, clock."""
    ev = [r for r in records if "val_pass_rate" in r]
    return RunLog.of([r["compute_gpu_hours"] for r in ev], [r["val_pass_rate"] for r in ev],
                     train=[(r["compute_gpu_hours"], r["reward_mean"]) for r in records if "reward_mean" in r],
                     clock=[(r["compute_gpu_hours"], r["wall_s"]) for r in records])  # fmt: skip


def _forecast(records: list[dict], budget: float, **options):
    return forecast_of(_log(records), options=ForecastOptions(budget=budget, **options))


def test_the_forecast_follows_the_training_reward_offset_to_the_validation():
    # half a run: data to 2.5, past the midpoint at 2; the budget 5
    records = _steps(250, 10, seed=1)
    f = _forecast(records, 5.0)
    assert f.method == "training reward" and f.state.name == "rising" and f.evidence.detected
    truth = float(sigmoid(5.0, A, B, C_MID, R0)) + GAP
    at = f.at(5.0)
    assert at.pred_lo <= truth <= at.pred_hi and abs(at.value - truth) < 0.05
    # the offset is read by hand off the training reward's own fit: g = mean(v_i - t(C_i)) over the last third
    comp = f.log.companion()
    tfit = f.options.fit.fit(comp.compute, comp.train)
    g = comp.offsets(tfit.predict)
    assert g.size == 9 and abs(g.mean() - GAP) < 0.05


def test_a_rise_only_the_training_reward_shows_is_followed_and_said():
    # 8 evaluations at noise 0.15 cannot show the rise; 800 dense training rewards do
    records = _steps(80, 10, seed=3, val_noise=0.15)
    alone = _forecast(records, 2.0, train_reward="none")
    f = _forecast(records, 2.0)
    assert alone.state.name == "not_learning" and not alone.evidence.detected
    assert f.method == "training reward" and f.evidence.detected and f.state.name == "rising"
    assert "training reward (reward_mean)" in f.state.message


def test_a_flat_training_reward_is_not_followed_and_the_reason_is_given():
    f = _forecast(_steps(120, 10, seed=2, flat_val=0.3, flat_train=0.4), 2.0)
    assert f.state.name == "not_learning" and not f.evidence.detected
    assert any(n.startswith("training reward not used: no rise detected") for n in f.notes)


def test_too_few_evaluations_with_a_training_reward_fall_back_to_the_fit():
    records = _steps(120, 10, seed=1)
    log = _log(records)
    (c, w) = log.clock_points
    few = RunLog.of(log.curve.compute, log.curve.reward, train=[(x, v) for x, v in zip(log.train.compute[:50],
                    log.train.reward[:50])], clock=list(zip(c, w)))  # fmt: skip
    f = forecast_of(few, options=ForecastOptions(budget=2.0))
    assert f.method == "fit" and "training reward not used: 5 evaluations have one, below 6" in f.why


def test_read_from_a_run_folder_and_from_a_peers_per_evaluation_log(tmp_path):
    records = _steps(120, 10, seed=1)
    run = _run_folder(tmp_path / "run", records)
    (log,) = read_logs([run])
    comp = log.companion()
    assert comp is not None and comp.column == "reward_mean" and len(comp) == 12  # step 0 logs no reward
    # a peer's log: one row per evaluation, the training reward since the one before (as the corpus keeps them)
    rows = [{"step": r["step"], "compute": c, "pass_rate": v, "train_reward": t}
            for r, c, v, t in zip(records[::10], comp.compute, comp.val, comp.train)]  # fmt: skip
    peer = tmp_path / "peer.jsonl"
    peer.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (other,) = read_logs([peer], Columns())
    assert other.companion().column == "train_reward" and np.allclose(other.companion().train, comp.train)
    with pytest.raises(CurveError, match=r"^--train-reward reward_mean: .*peer.jsonl has no reward column 'reward_mean'"):
        read_logs([peer], Columns(), train="reward_mean")


def test_plan_follows_the_training_reward_unless_told_not_to(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", _steps(120, 10, seed=1))
    assert main(["plan", str(run), "--target", "0.7", "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "intervals from: the training reward's fit (reward_mean)" in out
    got = json.loads((tmp_path / "a.json").read_text())
    assert got["intervals_from"] == "training reward" and got["forecast"]["train_reward_column"] == "reward_mean"
    assert (
        main(
            [
                "plan",
                str(run),
                "--target",
                "0.7",
                "--train-reward",
                "none",
                "--json",
                str(tmp_path / "b.json"),
            ]
        )
        == 0
    )
    assert "intervals from: the fit of the validation" in capsys.readouterr().out
    assert "train_reward_column" not in json.loads((tmp_path / "b.json").read_text())["forecast"]


def test_plan_names_a_training_reward_column_that_is_not_there(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", _steps(120, 10, seed=1))
    assert main(["plan", str(run), "--target", "0.7", "--train-reward", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.count("\n") == 0
        and "--train-reward nosuch" in err
        and "nosuch" in err
        and "Traceback" not in err
    )


def test_the_served_band_follows_the_training_reward(tmp_path):
    run = _run_folder(tmp_path / "run", _steps(120, 10, seed=1))
    served = Served([run])
    try:
        (found,) = served.discover()
        assert served.detail(found, wait=60.0)["band"]["source"] == "training reward"
    finally:
        served.close()


def test_fit_forecasts_at_a_target_compute_follow_the_training_reward(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", _steps(250, 10, seed=1))
    assert main(["fit", str(run), "--target-compute", "5", "--no-budget", "--json", str(tmp_path / "a.json")]) == 0
    assert "intervals from: the training reward's fit (reward_mean)" in " ".join(capsys.readouterr().out.split())
    got = json.loads((tmp_path / "a.json").read_text())["runs"][0]
    assert got["forecast"]["method"] == "training reward"
    truth = float(sigmoid(5.0, A, B, C_MID, R0)) + GAP
    (f,) = got["forecasts"]
    assert f["pred_lo"] <= truth <= f["pred_hi"] and f["lo"] <= f["reward"] <= f["hi"], f
    assert main(["fit", str(run), "--target-compute", "5", "--no-budget", "--train-reward", "none",
                 "--json", str(tmp_path / "b.json")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "b.json").read_text())["runs"][0]["forecast"]["method"] == "fit"


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), steps=st.integers(60, 200), targets=st.lists(st.floats(0.2, 0.95), min_size=3,
       max_size=3), budgets=st.lists(st.floats(0.1, 20.0), min_size=4, max_size=4))  # fmt: skip
def test_the_companions_draws_keep_the_invariants(seed, steps, targets, budgets):
    """P(within a budget) <= P(at all), never falling as the budget grows, when the draws
    follow the training reward too (the same draws answer both)."""
    f = _forecast(_steps(steps, 10, seed=seed), None)
    for target in targets:
        cross = f.crossing(target)
        p = [reach_of(cross, f.clock, budget_hours=h).p_within for h in sorted(budgets)]
        assert all(x <= cross.p_reach + 1e-12 for x in p) and all(np.diff(p) >= -1e-12), (p, cross.p_reach)


def test_the_fit_figure_shows_the_forecasts_the_table_gives(tmp_path, monkeypatch):
    from ..prior.test_prior import _recorded

    run = _run_folder(tmp_path / "run", _steps(250, 10, seed=1))
    figures = _recorded(monkeypatch, "fit_figure")
    assert main(["fit", str(run), "--target-compute", "5", "--no-budget", "--plot", str(tmp_path / "f.png")]) == 0
    (ax,) = figures
    labels = ax.get_legend_handles_labels()[1]
    assert "forecast (training reward)" in labels and any(t.startswith("at 5: ") for t in labels)
    assert (tmp_path / "f.png").stat().st_size > 0


def test_offset_drift_is_the_finished_runs_change_of_offset_from_the_cut_to_the_end():
    from scalerl.fit.forecast.companion import offset_drift
    from scalerl.fit.prior.learn import FinishedRun

    c = np.arange(1.0, 13.0)  # 12 evaluations; a cut at half keeps 6, whose offset is the mean of the last 3
    runs = []
    for d in (0.01, 0.02, 0.03):  # the offset is -0.1 to evaluation 8, then -0.1 + d: the end's last 4 read d
        gaps = np.where(c <= 8, -0.1, -0.1 + d)
        runs.append(FinishedRun(f"d{d}", c, np.full(12, 0.5), val=0.5 + gaps))
    runs.append(FinishedRun("no validation", c, np.full(12, 0.5)))  # a training reward alone has no offset
    drift = offset_drift(runs, 0.5, 0.95)
    assert drift.n == 3 and drift.mean == pytest.approx(0.02)
    # s_d = 0.01; sqrt(1 + 1/3) t_2(0.975) / z(0.975) = 1.1547 x 4.3027 / 1.9600
    assert drift.sd == pytest.approx(0.01 * 1.154701 * 4.302653 / 1.959964, rel=1e-5)
    assert offset_drift(runs[:2], 0.5, 0.95) is None  # two runs are below MIN_DRIFTS
    assert offset_drift(runs, 0.4, 0.95) is None  # a cut with 4 evaluations reads no offset
