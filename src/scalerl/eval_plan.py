"""A run's evaluations, planned from its config for the forecast: which steps are validated
(``fit.forecast.schedule``), how many held-out prompts each scores (``eval.num_prompts``,
``auto`` within ``eval.share`` of the run's samples), and the one line that says both at the
start of the run, with when its first forecast comes (``EvalConfig``'s docstring).
"""

from __future__ import annotations

import math

from scalerl.config import Config
from scalerl.fit.forecast.schedule import EvalPlan

__all__ = ["MIN_PROMPTS", "eval_prompts", "plan_of", "start_line"]

MIN_PROMPTS = 200
"""The fewest prompts ``auto`` scores: one evaluation's standard error is then at most
``sqrt(0.25 / 200)`` = 0.035, about the rise of a few dozen steps on the built-in task."""
LATE = 0.25
"""A first forecast after this share of ``train.steps`` is said at the start, with what to set."""


def plan_of(cfg: Config) -> EvalPlan:
    """The steps ``cfg`` validates at (``fit.forecast.schedule``)."""
    e = cfg.eval
    return EvalPlan(cfg.train.steps, e.every, e.schedule, None if e.first == "auto" else e.first, e.ratio)


def _samples_per_step(cfg: Config) -> int:
    return cfg.pipeline.prompts_per_step * cfg.pipeline.generations


def eval_prompts(cfg: Config) -> int | None:
    """The prompts each evaluation scores (None: the whole validation split): ``auto`` is the
    most whose planned evaluations over ``train.steps`` take at most ``eval.share`` of the
    run's samples, ``n k E <= share / (1 - share) x P G S``, never below ``MIN_PROMPTS``."""
    e = cfg.eval
    if e.num_prompts != "auto":
        return e.num_prompts
    n_evals = plan_of(cfg).planned.size
    allowed = e.share / (1.0 - e.share) * _samples_per_step(cfg) * cfg.train.steps / (e.k * n_evals)
    return max(MIN_PROMPTS, int(math.floor(allowed)))


def _sooner(plan: EvalPlan) -> str:
    """What to set for an earlier first forecast: the geometric plan (from its "auto" first step,
    else from step 1) where it is sooner, else the steps a run needs for one by ``LATE`` of them."""
    now = plan.first_forecast or plan.steps + 1
    for first, setting in ((None, "eval.schedule=geometric eval.first=auto"), (1, "eval.schedule=geometric eval.first=1")):
        sooner = EvalPlan(plan.steps, plan.every, "geometric", first, plan.ratio).first_forecast
        if sooner is not None and sooner < now:
            return f"{setting} brings it to step {sooner}"
    need = next(s for s in range(plan.steps, 100 * plan.steps + 100)
                if (f := EvalPlan(s, plan.every, "geometric", 1, plan.ratio).first_forecast) is not None
                and f <= LATE * s)
    return f"a run needs {need} steps or more (train.steps) for a forecast by {LATE:.0%} of them"


def start_line(cfg: Config, held: int) -> str:
    """The plan in one line (``held``: the validation split's prompts), with what to set where
    the first forecast comes after ``LATE`` of the budget or evaluation takes more than its share."""
    plan = plan_of(cfg)
    scored = held if (n := eval_prompts(cfg)) is None else min(n, held)
    steps = cfg.train.steps
    eval_samples = plan.planned.size * scored * cfg.eval.k
    share = eval_samples / (eval_samples + _samples_per_step(cfg) * steps)
    how = (f"geometric from step {plan.first_step}, x{plan.ratio:g}, at most every {plan.every}"
           if plan.schedule == "geometric" else f"every {plan.every}")
    until = f"step {steps}"
    if (most := cfg.train.max_compute) is not None:  # a study point: its rung's compute ends it, long before its steps
        until += f" or train.max_compute = {most:g} of compute, whichever comes first"
    text = (f"evaluation plan: {plan.planned.size} evaluations of {scored:,} of the {held:,} held-out prompts (the "
            f"same ones each time) up to {until} ({how}), {share:.0%} of the run's samples")
    if (every := cfg.eval.every_compute) is not None:  # a study's cadence, on top of the plan (LoopRules.evaluates)
        text += f", and at the first step past each {every:g} of compute (eval.every_compute; not in that share)"
    first = plan.first_forecast
    if first is None:
        text += (f"; no forecast within train.steps = {steps}: a forecast needs 6 evaluations and the plan has "
                 f"{plan.planned.size}")
    else:
        no_rise = plan.first_at_or_after(cfg.train.no_rise_after * steps)
        text += f"; first forecast at step {first} ({first / steps:.0%} of the budget)"
        if no_rise is not None:
            text += f", 'not learning' can be said from step {no_rise} ({no_rise / steps:.0%})"
        if plan.schedule == "geometric":
            text += f"; by 20% of any run of {5 * first} steps or more, whatever ends it"
        if first > LATE * steps:
            text += f"; that is after {LATE:.0%} of the budget: " + _sooner(plan)
    if cfg.eval.num_prompts != "auto" and share > cfg.eval.share + 1e-9:
        text += (f"; that is more than eval.share = {cfg.eval.share:g}: eval.num_prompts=auto would score "
                 f"{min(eval_prompts(cfg.model_copy(update={'eval': cfg.eval.model_copy(update={'num_prompts': 'auto'})})), held):,}")  # noqa: E501
    return text + "."
