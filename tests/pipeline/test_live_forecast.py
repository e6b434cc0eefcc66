"""The live forecast of ``scalerl train``: the run's one ``Forecast`` after every evaluation, its
fields in a real run reproduced by ``scalerl plan``, one fit of the validation per evaluation;
the early stop fires on a run that plateaus low and never on an unidentified ceiling."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from pipeline_helpers import run_overrides

import scalerl.eval
from scalerl.cli import main
from scalerl.config import load_config
from scalerl.live_forecast import LiveForecast
from scalerl.pipeline.commands.report import final_report
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records

FIELDS = ("forecast_state", "forecast_method", "forecast_final", "forecast_final_lo", "forecast_final_hi",
          "forecast_compute_to_target", "forecast_p_reach")  # fmt: skip


def small_run(model_dir, **extra):
    return load_config("scalerl", run_overrides(model_dir, **{
        "pipeline.backend": "inprocess", "train.steps": 40, "eval.every": 4, "eval.schedule": "every", "eval.num_prompts": 32,
        "eval.k": 2, "pipeline.prompts_per_step": 4, "pipeline.generations": 4,
        "forecast.target": 0.5, **extra}))  # fmt: skip


def test_live_forecast_fields_appear_and_scalerl_plan_reproduces_them(warm_model_dir, tmp_path, capsys):
    # a stop threshold the noisy 24-step curve cannot identify: the run must not stop; nine
    # evaluations, so its forecasts have draws from the sixth on, and a state before
    short = {"train.steps": 24, "eval.every": 3, "eval.schedule": "every"}
    train(small_run(warm_model_dir, **short, **{"train.stop_if_ceiling_below": 0.99}), tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")
    assert records[-1]["step"] == 24 and "stopped_early" not in records[-1]
    assert json.loads((tmp_path / "status.json").read_text())["state"] == "finished"
    with_forecast = [r for r in records if "forecast_step" in r]
    assert with_forecast and with_forecast[-1] is records[-1]  # the last record waits for its forecast
    assert with_forecast[0]["forecast_state"] == "too_few_evaluations"  # said from the first evaluation
    assert "more (about step" in with_forecast[0]["forecast_state_message"]
    evals = {r["step"] for r in records if r.get("val_pass_rate") is not None}
    for r in with_forecast:
        assert r["forecast_step"] in evals and r["forecast_step"] <= r["step"]
    last = records[-1]
    assert all(k in last for k in FIELDS) and last["forecast_final_lo"] <= last["forecast_final"] <= last["forecast_final_hi"]
    out = tmp_path.parent / f"{tmp_path.name}-answer.json"  # plan.json in the run folder is its placement
    argv = ["plan", str(tmp_path), "--max-compute", repr(last["forecast_fit_until"]), "--budget-compute",
            repr(last["forecast_budget"]), "--target", "0.5", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(out.read_text())
    assert plan["forecast"]["method"] == last["forecast_method"] and plan["forecast"]["state"]["name"] == last["forecast_state"]
    at = plan["at_budget"]
    assert [at["value"], at["pred_lo"], at["pred_hi"]] == pytest.approx(
        [last["forecast_final"], last["forecast_final_lo"], last["forecast_final_hi"]], abs=1e-9)
    assert plan["compute"]["median"] == (None if last["forecast_compute_to_target"] is None
                                         else pytest.approx(last["forecast_compute_to_target"], rel=1e-9))  # fmt: skip
    assert plan["p_reach"] == pytest.approx(last["forecast_p_reach"], abs=1e-12)
    if last.get("forecast_A") is not None:
        assert plan["forecast"]["fit"]["A"] == pytest.approx(last["forecast_A"], abs=1e-12)
    # the training report shows the forecast and its verdict, not only the fit
    cfg = small_run(warm_model_dir, **short)
    final_report(tmp_path, cfg, log=lambda *_: None)
    text = (tmp_path / "report.md").read_text()
    assert "predictive interval for one evaluation" in text and "last live forecast (made at step 24)" in text
    # a noisy 24-step curve may or may not support a forecast on its first half: the line is there
    # either way, with its verdict or its reason
    assert re.search(r"^- fit-to-half check: (the forecast from the first half|not possible \()", text, re.M), text
    assert "| its standard error |" in text and all(r["val_stderr"] > 0 for r in records if "val_stderr" in r)


def test_the_live_path_fits_the_validation_once_per_evaluation(monkeypatch):
    """Each evaluation's forecast fits the validation curve once (the training reward's own fit
    is another curve; the calibration's refits fit prefixes): counted on ``FitOptions.fit``."""
    from scalerl.fit.options import FitOptions

    fits = []
    real = FitOptions.fit
    monkeypatch.setattr(FitOptions, "fit", lambda self, c, r, **kw: fits.append((kw.get("source"), len(c)))
                        or real(self, c, r, **kw))  # fmt: skip
    cfg = load_config("scalerl", ["train.steps=200"])
    live = LiveForecast(cfg)
    c = np.linspace(0.0, 2.0, 12)
    y = 0.2 + 0.5 / (1 + (0.8 / np.maximum(c, 1e-9)) ** 1.5) + 0.01 * np.sin(7 * np.arange(12))
    for i in range(12):
        live.observe({"step": 10 * i, "compute_gpu_hours": c[i], "val_pass_rate": y[i],
                      "reward_mean": y[i] + 0.05, "wall_s": 36.0 * i})  # fmt: skip
        live.poll(wait=True)
    live.close()
    validation = [n for source, n in fits if source == "live"]
    assert validation == list(range(6, 13))  # one fit per evaluation from the sixth, none twice


def test_early_stop_fires_on_a_run_built_to_plateau_low(warm_model_dir, tmp_path, monkeypatch, capsys):
    """Real training; the validation curve is replaced by one that saturates at 0.30 with
    little noise, so the forecast can identify its ceiling well below the threshold."""
    calls = {"n": 0}
    rng = np.random.default_rng(0)

    def plateau(evaluators, stop=None):
        i = calls["n"]
        calls["n"] += 1
        return {"val_pass_rate": 0.15 + 0.15 * (1 - np.exp(-i / 2.0)) + rng.normal(0, 0.002)}, 1000, ()

    monkeypatch.setattr(scalerl.eval, "run_evaluators", plateau)  # eval.on=learner: in this process
    cfg = small_run(warm_model_dir, **{"train.steps": 120, "train.stop_if_ceiling_below": 0.6,
                                       "forecast.margin": 0.05, "eval.on": "learner"})  # fmt: skip
    train(cfg, tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")
    last = records[-1]
    assert "stopped_early" in last, [r.get("forecast_A_hi") for r in records if "forecast_step" in r]
    assert last["stopped_early"].startswith("stopping early: the forecast of val_pass_rate identifies the ceiling")
    assert last["forecast_identified"] and last["forecast_A_hi"] < 0.6
    meta = json.loads((tmp_path / "checkpoint" / "meta.json").read_text())
    assert meta["step"] == last["step"]  # it stopped after a checkpoint of that step
    assert "stopping early" in capsys.readouterr().out


def test_a_run_that_does_not_learn_says_so_and_stop_if_no_rise_stops_it(warm_model_dir, tmp_path, monkeypatch,
                                                                      capsys):
    """Real training; the validation is replaced by a flat one (0.12 with noise, seeded), as a
    learning rate too small to move the model gives. The live forecast finds no rise once 30%
    of the budget is read, and ``train.stop_if_no_rise`` stops the run there."""
    rng = np.random.default_rng(0)

    def flat(evaluators, stop=None):
        return {"val_pass_rate": 0.12 + rng.normal(0, 0.01)}, 1000, ()

    monkeypatch.setattr(scalerl.eval, "run_evaluators", flat)  # eval.on=learner: in this process
    cfg = small_run(warm_model_dir, **{"train.steps": 60, "eval.every": 2, "eval.schedule": "every", "train.stop_if_no_rise": True,
                                       "eval.on": "learner"})  # fmt: skip
    train(cfg, tmp_path)
    records = read_records(tmp_path / "metrics.jsonl")
    last = records[-1]
    assert last["step"] < 60 and last["stopped_early"].startswith("stopping early: not learning: after ")
    assert last["forecast_state"] == "not_learning"
    assert last["forecast_fit_until"] >= cfg.train.no_rise_after * last["forecast_budget"]
    assert "optim.lr = " in last["stopped_early"] and "stopping early: not learning" in capsys.readouterr().out


def test_the_not_learning_line_waits_for_its_fraction_and_is_said_once():
    cfg = load_config("scalerl", ["train.no_rise_after=0.5"])
    live = LiveForecast(cfg)
    flat = {"forecast_state": "not_learning", "forecast_rise_z": -0.4, "forecast_rise_first": 0.125,
            "forecast_rise_last": 0.121, "forecast_budget": 10.0}  # fmt: skip
    assert live.no_rise(flat | {"forecast_fit_until": 4.9}) is None  # before half the budget
    assert live.no_rise(flat | {"forecast_state": "rising", "forecast_fit_until": 6.0}) is None  # rising
    line = live.no_rise(flat | {"forecast_fit_until": 6.0})
    assert line.startswith("not learning: after 60% of the run's budget, val_pass_rate shows no rise")
    assert "reads 0.121 against 0.125 in the first third, -0.4 sd" in line and "train.stop_if_no_rise=true" in line
    assert live.no_rise(flat | {"forecast_fit_until": 7.0}) is None  # once
    live.close()


def test_stop_rules_never_stop_on_an_unidentified_ceiling():
    cfg = load_config("scalerl", ["train.stop_if_ceiling_below=0.6", "forecast.target=0.7",
                                  "train.stop_if_target_unreachable=true"])  # fmt: skip
    live = LiveForecast(cfg)
    low = {"forecast_identified": False, "forecast_A_lo": 0.2, "forecast_A_hi": 0.3}
    assert live.stop_reason(low) is None
    assert live.stop_reason({}) is None
    assert "below train.stop_if_ceiling_below = 0.6" in live.stop_reason(low | {"forecast_identified": True})
    mid = {"forecast_identified": True, "forecast_A_lo": 0.62, "forecast_A_hi": 0.66}
    assert "forecast.target = 0.7 is out of reach" in live.stop_reason(mid)
    live.close()


def test_forecast_metric_reward_mean_fits_the_mean_reward_which_may_leave_zero_one():
    """A ±1 user reward's mean climbs from -0.6 to about 0.4: fitted unbounded, and said."""
    from scalerl.config import ForecastConfig
    from scalerl.fit import sigmoid

    cfg = load_config("scalerl", ["forecast.metric=reward_mean"])
    live = LiveForecast(cfg)
    live.observe({"step": 0, "compute_gpu_hours": 0.0, "val_pass_rate": 0.9, "val_reward_mean": -0.6})
    assert live.points == [(0.0, -0.6)]  # the mean reward, not the pass rate
    assert live.stop_reason({"forecast_identified": True, "forecast_A_lo": 0.1, "forecast_A_hi": 0.2}) is None
    live.close()
    grid = np.arange(0.0, 4001.0, 250.0)
    curve = sigmoid(grid, 0.4, 2.0, 1500.0, -0.6) + np.random.default_rng(0).normal(0, 0.01, grid.size)
    fields = _fields(grid, curve, 8000.0, 160, ForecastConfig(metric="reward_mean"), "val_reward_mean")
    assert "forecast_error" not in fields, fields.get("forecast_error")
    assert fields["forecast_metric"] == "val_reward_mean" and 0.2 < fields["forecast_A"] < 0.6


def test_budget_is_the_compute_at_the_deadline_when_it_comes_before_the_last_step(monkeypatch):
    import scalerl.live_forecast as lf

    now = {"t": 0.0}
    monkeypatch.setattr(lf.time, "monotonic", lambda: now["t"])
    cfg = load_config("scalerl", ["train.steps=100", "train.max_minutes=1"])
    live = LiveForecast(cfg)
    live.set_deadline(60.0)  # a fresh run: train.max_minutes=1 from t = 0 (pipeline.time_limit)
    live.observe({"step": 0, "compute_gpu_hours": 0.0, "val_pass_rate": 0.3})
    now["t"] = 30.0
    live.observe({"step": 10, "compute_gpu_hours": 1.0, "val_pass_rate": 0.35})
    # by steps: 1 + 0.1 x 90 = 10; by the 60 s deadline: 1 + (1 / 30 s) x 30 s = 2
    assert live.budget() == pytest.approx(2.0)
    live.set_deadline(45.0)  # a resume whose earlier sessions spent 15 s of the minute: 1 + (1 / 30 s) x 15 s
    assert live.budget() == pytest.approx(1.5)
    cfg = load_config("scalerl", ["train.steps=100", "train.max_minutes=null"])
    live2 = LiveForecast(cfg)
    live2.observe({"step": 0, "compute_gpu_hours": 0.0, "val_pass_rate": 0.3})
    live2.observe({"step": 10, "compute_gpu_hours": 1.0, "val_pass_rate": 0.35})
    assert live2.budget() == pytest.approx(10.0)
    live.close()
    live2.close()


def test_a_finished_forecast_is_never_dropped_by_the_next_evaluation():
    cfg = load_config("scalerl", ["train.steps=100"])
    live = LiveForecast(cfg)
    c = np.linspace(0.0, 1.0, 8)
    r = 0.3 + 0.3 * c / (0.3 + c)
    for i in range(6):
        live.observe({"step": 10 * i, "compute_gpu_hours": c[i], "val_pass_rate": r[i]})
        live.poll(wait=True)
    live._pending = live._pool.submit(lambda: {"forecast_step": 60})  # a forecast finished and not polled
    live._pending.result()
    live.observe({"step": 70, "compute_gpu_hours": c[6], "val_pass_rate": r[6]})
    assert live.poll(wait=False)["forecast_step"] == 60  # kept, whatever the thread's timing
    assert live.poll(wait=True)["forecast_step"] == 70
    assert live.poll(wait=False) == {}
    live.close()


def test_live_forecast_follows_the_prior_of_forecast_prior_runs(tmp_path):
    from scalerl.config import ForecastConfig
    from scalerl.fit import sigmoid

    grid, rng = np.arange(0.0, 16001.0, 400.0), np.random.default_rng(3)
    curves = []
    for _ in range(9):  # finished runs of one population, then a new run of it
        R0, gain, B, c_mid = rng.uniform(0.25, 0.35), rng.uniform(0.2, 0.4), rng.uniform(1.4, 2.4), rng.uniform(2e3, 4.5e3)
        curves.append(np.clip(sigmoid(grid, R0 + gain, B, c_mid, R0) + rng.normal(0, 0.01, grid.size), 0, 1))
    for i, y in enumerate(curves[:8]):
        (tmp_path / f"run{i}").mkdir()
        lines = [json.dumps({"step": 10 * j, "compute_gpu_hours": c, "val_pass_rate": r}) for j, (c, r) in enumerate(zip(grid, y))]
        (tmp_path / f"run{i}" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    cfg = ForecastConfig(prior_runs=str(tmp_path), min_compute=1500.0)
    keep = grid <= 4000.0
    # the run itself writes beneath forecast.prior_runs: its own folder is never part of its prior
    new = tmp_path / "new" / "metrics.jsonl"
    new.parent.mkdir()
    new.write_text("".join(json.dumps({"step": 10 * j, "compute_gpu_hours": c, "val_pass_rate": r}) + "\n"
                           for j, (c, r) in enumerate(zip(grid[keep], curves[8][keep]))))  # fmt: skip
    fields = _fields(grid[keep], curves[8][keep], 16000.0, 100, cfg, "val_pass_rate", run_dir=new.parent)
    assert "forecast_error" not in fields, fields.get("forecast_error")
    assert fields["forecast_method"] == "prior" and "prior from 8 finished runs" in fields["forecast_method_why"]
    # scalerl fit with the same cut, budget, settings and prior runs reproduces the fields
    new.write_text("".join(json.dumps({"step": 10 * j, "compute_gpu_hours": c, "val_pass_rate": r}) + "\n"
                           for j, (c, r) in enumerate(zip(grid, curves[8]))))  # fmt: skip
    out = tmp_path / "fit.json"
    assert main(["fit", str(new), "--max-compute", repr(fields["forecast_fit_until"]), "--target-compute",
                 repr(fields["forecast_budget"]), "--min-compute", "1500", "--prior-runs",
                 str(tmp_path / "run*" / "metrics.jsonl"), "--no-budget", "--json", str(out)]) == 0  # fmt: skip
    run = json.loads(out.read_text())["runs"][0]
    assert run["forecast"]["method"] == "prior"
    (fc,) = run["forecasts"]
    assert [fc["value"], fc["pred_lo"], fc["pred_hi"]] == pytest.approx(
        [fields["forecast_final"], fields["forecast_final_lo"], fields["forecast_final_hi"]], abs=1e-9)


def test_forecast_prior_runs_pointing_nowhere_is_one_sentence_before_the_run(tmp_path):
    from scalerl.config import ConfigError
    from scalerl.pipeline.commands.preflight import check_prior_runs

    cfg = load_config("scalerl", [f"forecast.prior_runs={tmp_path / 'nowhere'}"])
    with pytest.raises(ConfigError) as err:
        check_prior_runs(cfg)
    assert str(err.value) == f"forecast.prior_runs {tmp_path / 'nowhere'}: no such file or folder."


def test_the_fit_to_half_check_scores_the_forecast_from_the_first_half(tmp_path):
    from scalerl.fit.forecast import RunLog
    from scalerl.fit.law import sigmoid
    from scalerl.pipeline.commands.report import _half_check

    c = np.linspace(0.0, 1.0, 41)
    y = sigmoid(c, 0.7, 1.8, 0.3, 0.2) + 0.01 * np.sin(37 * c)  # a sigmoid, its bend in the first half
    line = _half_check(RunLog.of(c, y), tmp_path)
    assert line.startswith("fit-to-half check: the forecast from the first half of the compute (fit), at the end: ")
    assert f"observed {y[-1]:.3f} in [" in line and "(width " in line and "): covered;" in line


def _fields(compute, reward, budget: float, step: int, cfg, y: str, clock=(), trained=(), run_dir=None) -> dict:
    """The fields the forecast thread logs for these evaluations (``live_forecast._forecast``)."""
    from scalerl.live_forecast import Seen, _forecast

    points = list(zip(map(float, compute), map(float, reward)))
    steps = [10 * i for i in range(len(points))]
    return _forecast(Seen(points, list(trained), list(clock), steps, budget, step), cfg, y, run_dir)
