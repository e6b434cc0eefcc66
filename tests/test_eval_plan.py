"""A run's evaluation plan from its config (``scalerl.eval_plan``): the prompts ``auto`` scores
by hand, and the start-of-run line."""

from __future__ import annotations

from scalerl.config import load_config
from scalerl.eval_plan import MIN_PROMPTS, eval_prompts, plan_of, start_line


def test_auto_prompts_keep_evaluation_within_its_share_by_hand():
    cfg = load_config("scalerl")
    assert plan_of(cfg).planned.size == 33
    # 0.2 / 0.8 x (8 x 8 samples a step) x 900 steps / (k = 1 x 33 evaluations) = 436.4
    assert eval_prompts(cfg) == 436
    short = load_config("scalerl", ["train.steps=100"])  # 0.25 x 64 x 100 / 17 = 94: the floor
    assert eval_prompts(short) == MIN_PROMPTS
    assert eval_prompts(load_config("scalerl", ["eval.num_prompts=64"])) == 64
    assert eval_prompts(load_config("scalerl", ["eval.num_prompts=null"])) is None


def test_the_start_line_says_when_the_first_forecast_comes_and_what_to_set():
    line = start_line(load_config("scalerl"), 1200)
    assert line.startswith("evaluation plan: 33 evaluations of 436 of the 1,200 held-out prompts")
    assert "first forecast at step 21 (2% of the budget)" in line and "from step 266 (30%)" in line
    # the old cadence: the sixth evaluation at step 250 of 400 and all 1,200 prompts, said with what to set
    old = start_line(load_config("scalerl", ["eval.schedule=every", "eval.num_prompts=null", "train.steps=400"]), 1200)
    assert "first forecast at step 250 (62% of the budget)" in old
    assert "that is after 25% of the budget: eval.schedule=geometric eval.first=auto brings it to step 21" in old
    tiny = start_line(load_config("scalerl", ["train.steps=12", "eval.first=4"]), 1200)  # 0, 4, 5, 6, 7, 8
    assert "first forecast at step 8 (67% of the budget)" in tiny
    assert "eval.schedule=geometric eval.first=auto brings it to step 5" in tiny  # 0, 1, 2, 3, 4, 5
    assert "more than eval.share = 0.2: eval.num_prompts=auto would score" in old


def test_the_start_line_names_a_studys_compute_cadence_beside_the_plan():
    """An adaptive study sets ``eval.every_compute`` (``LoopRules.evaluates``: the plan's steps and
    the first step past each multiple): the line says both, not the plan alone."""
    line = start_line(load_config("scalerl", ["eval.every_compute=0.00078125"]), 1200)
    assert "33 evaluations" in line
    assert "and at the first step past each 0.00078125 of compute (eval.every_compute; not in that share)" in line
    assert "eval.every_compute" not in start_line(load_config("scalerl"), 1200)


def test_the_start_line_says_a_compute_limit_ends_the_run_before_its_steps():
    """A study's point stops at ``train.max_compute`` (its rung), long before ``train.steps``:
    the line names both ends, not the steps alone."""
    line = start_line(load_config("scalerl", ["train.max_compute=0.0167"]), 1200)
    assert "up to step 900 or train.max_compute = 0.0167 of compute, whichever comes first (" in line
    assert "max_compute" not in start_line(load_config("scalerl"), 1200)
