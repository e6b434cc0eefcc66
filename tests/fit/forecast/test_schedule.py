"""The evaluations planned for the forecast (``fit.forecast.schedule``): the geometric plan by
hand, its first forecast by 20% of any budget the time limit picks, and "not learning" by 30%."""

from __future__ import annotations

import numpy as np
import pytest

from scalerl.fit.forecast.schedule import FIRST_SHARE, EvalPlan, from_config
from scalerl.fit.forecast.states import MIN_EVALS


def test_the_default_plan_by_hand():
    plan = EvalPlan(900, 50, "geometric", None, 1.2)
    assert plan.first_step == 10  # FIRST_MAX: the sixth evaluation at 21 <= 15% of 900
    # round(10 x 1.2^i): 10, 12, 14.4, 17.28, 20.7, 24.9, 29.9, 35.8, ... until a gap would reach 50
    assert plan.planned[:8].tolist() == [0, 10, 12, 14, 17, 21, 25, 30]
    assert plan.first_forecast == 21 and plan.nth(MIN_EVALS) == 21
    gaps = np.diff(plan.planned)
    assert gaps.max() <= 50 and plan.planned[-1] == 900
    assert [s for s in plan.planned if s > 266][:3] == [300, 350, 400]  # then every 50
    assert all(plan.evaluates(int(s)) for s in plan.planned) and not plan.evaluates(11)
    assert plan.evaluates(950) and not plan.evaluates(951)  # past the plan (a resume raised the steps): every 50


@pytest.mark.parametrize("steps", [60, 105, 400, 900, 2000])
def test_a_forecast_by_20_percent_and_not_learning_by_30_of_any_run_the_time_limit_ends(steps):
    plan = EvalPlan(steps, 50, "geometric", None, 1.2)
    assert plan.first_forecast <= FIRST_SHARE * steps  # "auto": by 15% of train.steps
    for ended in range(5 * plan.first_forecast, steps + 1):  # wherever train.max_minutes ends it
        assert plan.first_forecast <= 0.2 * ended
        seen = plan.planned[plan.planned <= ended]
        # the first evaluation past train.no_rise_after (0.25) of its steps comes by 30% (+ a step's rounding)
        past = seen[seen >= 0.25 * ended]
        assert past.size == 0 or past[0] <= 0.3 * ended + 1, (ended, past[:1])


def test_every_is_the_old_plan_and_a_config_says_which():
    assert EvalPlan(300, 50, "every", None, 1.0).planned.tolist() == [0, 50, 100, 150, 200, 250, 300]
    old = from_config({"train": {"steps": 300}, "eval": {"every": 50}})  # written before plans
    assert old.schedule == "every" and old.first_forecast == 250
    new = from_config({"train": {"steps": 900}, "eval": {"every": 50, "schedule": "geometric", "first": "auto",
                                                          "ratio": 1.2}})
    assert new.planned.tolist() == EvalPlan(900, 50, "geometric", None, 1.2).planned.tolist()
    for bad in ({"eval": {"every": 50}}, {"train": {"steps": 9}, "eval": {"every": "x"}},
                {"train": {"steps": 9}, "eval": {"every": 5, "schedule": "geometric", "ratio": 0.5}},
                {"train": {"steps": 9}, "eval": {"every": 5, "schedule": "sometimes"}}):
        assert from_config(bad) is None
