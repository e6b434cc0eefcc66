"""The siblings' prior on the training reward (issue 48, item 1): ``--prior-runs`` learns the
shape of the finished runs' training rewards beside their validation's, and the forecast that
follows a run's training reward fits it under that prior."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit import FitOptions
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of
from scalerl.fit.forecast.prior_runs import load_prior
from scalerl.fit.forecast.words import source_sentence
from scalerl.fit.law import sigmoid

STEPS, EVERY, PER_STEP = 400, 10, 0.01  # 41 evaluations; the budget is 4.01 compute
BUDGET = PER_STEP * (STEPS + 1)
OPTIONS = FitOptions(max_points=200)


def _records(seed: int, *, train: bool = True, val_noise: float = 0.02) -> list[dict]:
    """Step records of one run: a training reward (``reward_mean``) every step on a sigmoid
    drawn from one population, the validation every ``EVERY`` steps an offset below it."""
    rng = np.random.default_rng(seed)
    R0, gain = rng.uniform(0.15, 0.25), rng.uniform(0.5, 0.6)
    B, c_mid, gap = rng.uniform(1.6, 2.2), rng.uniform(1.0, 1.6), rng.uniform(-0.12, -0.08)
    out = []
    for step in range(STEPS + 1):
        c = PER_STEP * (step + 1)
        t = float(sigmoid(c, R0 + gain, B, c_mid, R0))
        r = {"step": step, "compute_gpu_hours": c, "wall_s": 36.0 * (step + 1)}
        if step and train:
            r["reward_mean"] = float(np.clip(t + 0.05 * rng.standard_normal(), 0, 1))
        if step % EVERY == 0:
            r["val_pass_rate"] = float(np.clip(t + gap + val_noise * rng.standard_normal(), 0, 1))
        out.append(r)
    return out


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _siblings(tmp_path, *, train: bool = True, n: int = 8):
    folder = tmp_path / ("done" if train else "done_no_train")
    folder.mkdir()
    for i in range(n):
        _write(folder / f"run{i}.jsonl", _records(i + 1, train=train))
    return folder


def _log(records) -> RunLog:
    ev = [r for r in records if "val_pass_rate" in r]
    return RunLog.of([r["compute_gpu_hours"] for r in ev], [r["val_pass_rate"] for r in ev],
                     train=[(r["compute_gpu_hours"], r["reward_mean"]) for r in records if "reward_mean" in r],
                     clock=[(r["compute_gpu_hours"], r["wall_s"]) for r in records])  # fmt: skip


def test_prior_runs_learn_the_training_rewards_shape_beside_the_validations(tmp_path):
    prior, why, n = load_prior(str(_siblings(tmp_path)), OPTIONS)
    assert prior is not None and n == 8, why
    assert prior.train is not None and prior.train.n_runs == 8 and prior.train_why == ""
    # the training rewards' gain A - R0 is drawn from [0.5, 0.6]; the validation's is the same
    # rise (its offset is constant), each read through its own fit and noise
    assert 0.45 < prior.train.mean[0] < 0.65 and 0.45 < prior.mean[0] < 0.65
    # binned to the evaluations: 40 bins of 10 steps' rewards (sd 0.05 / sqrt(10) ~ 0.016)
    assert np.sqrt(prior.train.sigma2) < 0.03
    assert prior.to_dict()["train_reward"]["n_runs"] == 8
    # leaving a run out leaves it out of both populations
    assert prior.leaving_out(prior.runs[0].name).train.n_runs == 7


def test_runs_without_a_training_reward_give_the_validations_prior_only(tmp_path):
    prior, why, _ = load_prior(str(_siblings(tmp_path, train=False)), OPTIONS)
    assert prior is not None, why
    assert prior.train is None
    assert prior.train_why == "no prior run logs a training reward beside its evaluations"


@pytest.fixture(scope="module")
def quarter(tmp_path_factory):
    """A new run of the same population cut at a quarter of its budget, its validation four
    times as noisy as theirs (a smaller validation set), so that its own rise is not yet shown
    and the validation's prior is not the method: its forecast with the siblings' prior, and
    without any."""
    tmp_path = tmp_path_factory.mktemp("train_prior")
    prior = load_prior(str(_siblings(tmp_path)), OPTIONS)
    records = _records(99, val_noise=0.08)
    cut = BUDGET / 4.0
    options = ForecastOptions(fit=OPTIONS, budget=BUDGET)
    log = _log(records)
    with_prior = forecast_of(log, cut=cut, options=options.with_(prior=prior))
    without = forecast_of(log, cut=cut, options=options)
    final = [r for r in records if "val_pass_rate" in r][-1]["val_pass_rate"]
    return with_prior, without, final, prior


def test_the_forecast_follows_the_training_reward_under_its_prior_and_says_so(quarter):
    f, free, _, _ = quarter
    assert f.method == "training reward" and free.method == "training reward"
    assert f.evidence.of == "the training reward (reward_mean)"  # the rise it follows is the training reward's
    assert f.train_prior is not None and f.train_prior.used and free.train_prior is None
    assert f.prior is None  # the validation's own prior was not the method
    sentence = source_sentence(f)
    assert "under the prior of 8 finished runs' training rewards" in sentence
    # the last evaluation inside the quarter is at step 90: compute 0.91 of 4.01, 23%
    assert "training reward: prior from 8 finished runs; intervals calibrated on 8 of them cut at 23%" in sentence
    # each finished run's offset is constant: it moves by noise only, said with the runs it was read on
    assert re.search(r"the validation's offset from it moved by [+-]0\.0[0-2]\d \(sd 0\.0[0-3]\d\) from the cut "
                     r"to the end on 8 of them", sentence)  # fmt: skip
    assert f.to_dict()["train_reward_prior"]["n_runs"] == 8


def test_where_the_validation_shows_its_rise_its_own_prior_comes_first(quarter):
    *_, prior = quarter
    f = forecast_of(_log(_records(99)), cut=0.4 * BUDGET, options=ForecastOptions(fit=OPTIONS, budget=BUDGET,
                                                                                 prior=prior))  # fmt: skip
    assert f.method == "prior" and f.prior.used and f.train_prior is None


def test_the_training_rewards_prior_sharpens_a_quarter_and_covers_the_final_value(quarter):
    f, free, final, _ = quarter
    at, alone = f.at(BUDGET), free.at(BUDGET)
    assert at.pred_lo <= final <= at.pred_hi
    assert at.pred_hi - at.pred_lo < alone.pred_hi - alone.pred_lo


def test_a_run_the_training_rewards_prior_refuses_says_why_and_keeps_its_own_fit(quarter, tmp_path):
    _, _, _, prior = quarter
    # a run far faster than the population: its midpoint at a tenth of theirs, the validation 0.1
    # below its training reward (the noise deterministic)
    records = _records(99)
    for r in records:
        fast = float(sigmoid(r["compute_gpu_hours"], 0.95, 3.0, 0.15, 0.2))
        if "reward_mean" in r:
            r["reward_mean"] = fast + 0.05 * np.sin(31.0 * r["step"])
        if "val_pass_rate" in r:
            r["val_pass_rate"] = fast - 0.1 + 0.02 * np.sin(17.0 * r["step"])
    f = forecast_of(_log(records), cut=BUDGET / 4.0, options=ForecastOptions(fit=OPTIONS, budget=BUDGET,
                                                                             prior=prior))  # fmt: skip
    assert f.method == "training reward", f.why
    assert f.train_prior is not None and not f.train_prior.used
    assert "training reward: the run is unlike the prior" in source_sentence(f)
    assert "under the prior" not in f.source_sentence


def test_plan_with_prior_runs_says_which_prior_in_one_line(tmp_path, capsys):
    folder = _siblings(tmp_path)
    run = _write(tmp_path / "new.jsonl", [r for r in _records(99, val_noise=0.08) if r["compute_gpu_hours"] <= BUDGET / 4.0])
    assert main(["plan", run, "--target", "0.5", "--prior-runs", str(folder),
                 "--budget-compute", f"{BUDGET}"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "intervals from:" in line]
    assert len(lines) == 1 and "under the prior of 8 finished runs' training rewards" in lines[0]
