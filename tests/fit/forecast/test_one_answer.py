"""One question, one answer: every surface that forecasts a run reads the one ``Forecast``.

The same question ("when does the run reach R, and how likely within B?"; "what is it at
compute C?") is put to ``scalerl plan``, ``scalerl fit``, the ``Forecast`` itself, ``serve``'s
JSON and a study's replay, for a real ``scalerl train`` run's log, a real TRL run's CSV, a
TensorBoard folder and a flat run, each cut at several points. They must give the same
numbers to the precision they print (here: to 1e-9, since every one is the same draws).
The live record's side is ``tests/pipeline/test_live_forecast.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerl.cli import main
from scalerl.fit.choose import standing, through
from scalerl.fit.forecast import ForecastOptions, RunLog, forecast_of, read_logs
from scalerl.fit.readers import Columns

from .._files import synthetic_curve, write_jsonl, write_tensorboard

DATA = Path(__file__).parents[1] / "data"
SCALERL = DATA / "scalerl_addition_s0_lr5e-05.jsonl"
TRL = DATA / "trl_log_history.csv"


def _flat(tmp_path: Path) -> Path:
    """A run at lr 1e-9: its validation exactly 0.3125 at every evaluation, 300 steps."""
    path = tmp_path / "flat" / "metrics.jsonl"
    path.parent.mkdir()
    rows = [{"step": 50 * i, "compute_gpu_hours": 0.001 + 0.01 * i, "wall_s": 1.0 + 30.0 * i,
             "val_pass_rate": 0.3125, "reward_mean": 0.31 + 0.03 * i} for i in range(7)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _tensorboard(tmp_path: Path) -> Path:
    c, r = synthetic_curve(n=21, noise=0.01)
    return write_tensorboard(tmp_path / "tb", c, r)


LOGS = {  # name -> (path maker, x column, target, cut shares)
    "scalerl": (lambda d: SCALERL, None, 0.85, (0.3, 0.6, 1.0)),
    "trl": (lambda d: TRL, "step", 0.3, (0.5, 1.0)),
    "tensorboard": (_tensorboard, None, 0.58, (0.5,)),
    "flat": (_flat, None, 0.5, (1.0,)),
}


def _json(tmp_path: Path, argv: list[str]) -> dict:
    out = tmp_path / f"out{len(list(tmp_path.glob('out*.json')))}.json"
    assert main([*argv, "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", sorted(LOGS))
def test_plan_fit_the_forecast_and_a_replay_give_one_answer(tmp_path, name, capsys):
    make, x, target, shares = LOGS[name]
    path = make(tmp_path)
    xs = ["--x", x] if x else []
    (log,) = read_logs([path], Columns(x=x))
    end = float(log.curve.compute[-1])
    for share in shares:
        cut = float(log.curve.compute[log.curve.compute <= share * end][-1])
        budget = 2.0 * end
        plan = _json(tmp_path, ["plan", str(path), *xs, "--target", str(target), "--max-compute", repr(cut),
                                "--budget-compute", repr(budget)])  # fmt: skip
        fit = _json(tmp_path, ["fit", str(path), *xs, "--max-compute", repr(cut), "--target-compute", repr(budget),
                               "--target-reward", str(target), "--no-budget"])["runs"][0]  # fmt: skip
        f = forecast_of(log, cut=cut, options=ForecastOptions(budget=budget))
        reach = f.reach(target, budget_compute=budget)
        at = f.at(budget)
        # the one forecast: its method and state, printed by both commands
        assert plan["forecast"]["method"] == fit["forecast"]["method"] == f.method
        assert plan["forecast"]["state"]["name"] == fit["forecast"]["state"]["name"] == f.state.name
        # "when does it reach the target?": plan, fit and the forecast agree
        for key in ("median", "lo", "hi"):
            v = dict(zip(("median", "lo", "hi"), reach.compute))[key]
            expected = None if not np.isfinite(v) else pytest.approx(v, rel=1e-9)
            assert plan["compute"][key] == expected and fit["compute_to_reach"][0]["compute"][key] == expected
        assert plan["p_reach_at_all"] == pytest.approx(fit["compute_to_reach"][0]["p_reach_at_all"], abs=1e-12)
        assert plan["p_reach"] == pytest.approx(reach.p_within, abs=1e-12)
        # "what is it at the budget?": plan's at-budget, fit's --target-compute and the forecast agree
        (fc,) = fit["forecasts"]
        for key, value in zip(("value", "lo", "hi", "pred_lo", "pred_hi"), at):
            assert plan["at_budget"][key] == pytest.approx(value, abs=1e-9) == fc[key]
        # a page's hover reads the median alone at every evaluation: the same number as ``at``
        grid = log.curve.compute
        assert np.array_equal(f.median_at(grid), f.at(grid).value, equal_nan=True)
        # a study's replay reads the same draws at its budget: its band is plan's, floor and all
        if f.draws is not None and len(through(log.curve, cut)) >= 6:
            s = standing(log.upto(cut), budget, ForecastOptions())
            assert s.median == pytest.approx(at.value, abs=1e-9) and s.source == f.method
            assert s.interval(f.level) == pytest.approx((at.lo, at.hi), abs=1e-9)


def test_fit_frac_checks_the_default_forecast_and_says_how_wide(tmp_path, capsys):
    """The held-out check is the forecast the commands print: on the real TRL log it follows
    the training reward, and its numbers are ``fit --max-compute <half> --target-compute <end>``'s."""
    (log,) = read_logs([TRL], Columns(x="step"))
    end = float(log.curve.compute[-1])
    held = _json(tmp_path, ["fit", str(TRL), "--x", "step", "--fit-frac", "0.5", "--no-budget"])["runs"][0]
    text = " ".join(capsys.readouterr().out.split())
    cut = float(log.curve.compute[log.curve.compute <= 0.5 * end][-1])
    ahead = _json(tmp_path, ["fit", str(TRL), "--x", "step", "--max-compute", repr(cut), "--target-compute",
                             repr(end), "--no-budget"])["runs"][0]  # fmt: skip
    assert held["forecast"]["method"] == ahead["forecast"]["method"] == "training reward"
    final, (fc,) = held["holdout"]["final"], ahead["forecasts"]
    assert [final["predicted"], final["pred_lo"], final["pred_hi"]] == pytest.approx(
        [fc["value"], fc["pred_lo"], fc["pred_hi"]], abs=1e-9)
    assert final["covered"] and final["width"] == pytest.approx(final["pred_hi"] - final["pred_lo"])
    assert f"width {final['width']:.3f}" in text and "covered" in text
    # the validation alone is another question, asked by name, with its own answer
    alone = _json(tmp_path, ["fit", str(TRL), "--x", "step", "--fit-frac", "0.5", "--no-budget",
                             "--train-reward", "none"])["runs"][0]  # fmt: skip
    assert alone["forecast"]["method"] != "training reward"


def test_the_step_400_question_has_one_answer_and_it_holds(tmp_path, capsys):
    """Asked at step 400 of a real scalerl run: "compute to reach 0.85?" The default plan and
    ``fit --target-reward`` give one answer, and the run's own later crossing lies in it."""
    (log,) = read_logs([SCALERL])
    steps = log.steps
    cut = float(log.curve.compute[steps <= 400][-1])
    plan = _json(tmp_path, ["plan", str(SCALERL), "--target", "0.85", "--max-compute", repr(cut)])
    fit = _json(tmp_path, ["fit", str(SCALERL), "--target-reward", "0.85", "--max-compute", repr(cut),
                           "--no-budget"])["runs"][0]  # fmt: skip
    assert plan["compute"] == fit["compute_to_reach"][0]["compute"]
    reads = np.convolve(log.curve.reward, np.ones(5) / 5, "valid")
    crossed = float(log.curve.compute[4:][np.argmax(reads >= 0.85)])
    lo, hi = plan["compute"]["lo"], plan["compute"]["hi"]
    assert lo <= crossed and (hi is None or crossed <= hi), (crossed, plan["compute"])


def test_a_forecast_from_six_evaluations_says_in_its_intervals_that_they_are_not_calibrated(tmp_path, capsys):
    """The newcomer's step-250 case: from 6 evaluations a run's forecast was narrow and the run
    passed its interval later; a forecast whose calibration cannot be checked says so beside
    every interval it prints, not only in a warning line, and in its JSON and record."""
    (log,) = read_logs([SCALERL])
    cut = float(log.curve.compute[log.steps <= 250][-1])  # its 6th evaluation
    end = float(log.curve.compute[-1])
    f = forecast_of(log, cut=cut, options=ForecastOptions(budget=end))
    assert f.n_evaluations == 6 and not f.calibrated and "6 fit points are too few" in f.uncalibrated
    plan = _json(tmp_path, ["plan", str(SCALERL), "--target", "0.8", "--max-compute", repr(cut),
                            "--budget-compute", repr(end)])  # fmt: skip
    assert plan["forecast"]["calibrated"] is False
    out = " ".join(capsys.readouterr().out.split())
    assert "95% intervals, not calibrated: 6 fit points are too few" in out
    assert "predictive interval for one evaluation" in out and "(95%, not calibrated: " in out
    later = forecast_of(log, options=ForecastOptions(budget=end))
    assert later.calibrated  # the whole run: checked on its own history


def test_a_flat_run_is_not_learning_with_exit_0_and_a_chance_not_an_error(tmp_path, capsys):
    path = _flat(tmp_path)
    assert main(["plan", str(path), "--target", "0.6", "--budget-hours", "1"]) == 0
    assert main(["fit", str(path), "--target-reward", "0.6", "--no-budget"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "not learning: no rise detected" in out
    # the flat band: no time; the late risers: their time, or a target none of them reached
    assert "no crossing time" in out or "if it gets there: compute" in out or "0.6 is not reachable" in out
    assert "no sigmoid to fit" not in out and "inf" not in out.replace("finished", "")


def test_a_validation_that_does_not_follow_its_rising_training_reward_is_diverging(tmp_path):
    """Flat at 0.125 while the training reward rises 0.1 -> 0.5: the forecast does not follow it."""
    c = np.linspace(0.0, 0.1, 13)
    y = 0.125 + np.random.default_rng(0).normal(0.0, 0.004, c.size)
    train = [(float(ci), 0.1 + 4.0 * float(ci)) for ci in c]
    f = forecast_of(RunLog.of(c, y, train=train), options=ForecastOptions(budget=0.2))
    assert f.state.name == "diverging" and f.method != "training reward"
    assert "did not follow" in f.state.message
    assert f.reach(0.2).p_within < 0.2


def test_too_few_evaluations_say_how_many_more_and_when(tmp_path, capsys):
    c, r = synthetic_curve(n=21)
    path = write_jsonl(tmp_path / "m.jsonl", c[:3], r[:3])
    assert main(["plan", str(path), "--target", "0.5", "--speeds", str(_speeds(tmp_path))]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "too few evaluations of val_pass_rate for a forecast: 3 of the 6 it needs, 3 more" in out


def _speeds(tmp_path: Path) -> Path:
    path = tmp_path / "speeds.json"
    path.write_text(json.dumps({"seconds_per_compute": 2.0, "devices": 8}))
    return path
