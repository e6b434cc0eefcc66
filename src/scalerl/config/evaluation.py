"""The ``eval`` and ``forecast`` sections: validation during training, and the live forecast
of Eq. 1 fitted to it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from scalerl.config.base import Frozen as _Frozen


class EvalConfig(_Frozen):
    """Validation: mean@k pass rate on held-out prompts, with its standard error, at the steps
    planned for the forecast (``scalerl.fit.forecast.schedule``).

    **When.** A forecast needs 6 evaluations. Every 50 steps the sixth comes at step 250, after
    a 3-minute run has ended, so the plan is geometric in steps (the law is in log C): step 0,
    then ``first``, ``first x ratio``, ... until the gap reaches ``every``, then every
    ``every`` steps. At the defaults the sixth evaluation is at step 21: a forecast by 20% of
    any run of 105 steps or more, whatever ends it (``train.steps``, ``train.max_minutes``), and
    "not learning" by 30% (``train.no_rise_after`` 0.25 x ``ratio`` 1.2).

    **How many prompts.** ``num_prompts: auto`` sizes each evaluation so that the plan's
    evaluations over ``train.steps`` generate at most ``share`` of the run's samples (its
    training samples are P x G a step; an evaluation's ``num_prompts x k``), never fewer than
    ``MIN_PROMPTS`` nor more than the validation split. The same first prompts every time, so
    that successive evaluations are paired. At the recipe's 8 x 8 and 900 steps that is 33
    evaluations of 436 prompts: 14,400 samples, 20% of the run's (every 50 steps on all 1,200
    prompts was 19 evaluations, 22,800 samples, 28%). One evaluation's standard error at a pass
    rate of 0.5 is then ``sqrt(0.25 / 436)`` = 0.024 (k = 1: the k samples of one prompt are
    correlated, ρ ≈ 0.5, so one sample each of more prompts is the cheapest precision). The
    start of a run says its plan in one line, and what to set where the first forecast would
    come after 25% of the budget or the share is exceeded.
    """

    every: int = Field(50, ge=1)
    """The largest gap between evaluations, in optimiser steps: the geometric plan's steps grow
    until their gap reaches it, then evaluations come every this many steps (``schedule:
    every``: every this many steps from the start). Step 0 and the last step are always
    validated."""
    schedule: Literal["geometric", "every"] = "geometric"
    """The plan of evaluations (the section's docstring): ``geometric`` for an early first
    forecast, ``every`` for every ``every`` steps."""
    first: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """The geometric plan's first evaluation after step 0; ``auto``: the latest step up to 10
    whose plan has its sixth evaluation by 15% of ``train.steps``."""
    ratio: float = Field(1.2, gt=1.0, le=4.0)
    """The growth of the geometric plan's gaps: some evaluation falls in every [x, ratio x]
    below the largest gap, so a share of the budget is read within ``ratio`` times it."""
    every_compute: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Validate also at the first step whose compute (``compute_gpu_hours``) passes a multiple of
    this: an adaptive study sets it so that every rung holds enough evaluations for a forecast
    (``scalerl.experiments.adaptive``). None: by steps only."""
    k: int = Field(1, ge=1)
    """Samples per validation prompt: the logged value is mean@k pass rate."""
    pass_at: tuple[int, ...] = ()
    """k values (each at most ``eval.k``) of the unbiased pass@k ``1 - C(n - c, k) / C(n, k)``
    logged as ``val_pass_at_<k>`` with ``val_pass_at_<k>_stderr`` over prompts."""

    @model_validator(mode="after")
    def _pass_at_within_k(self) -> EvalConfig:
        bad = [k for k in self.pass_at if not 1 <= k <= self.k]
        if bad:
            raise ValueError(f"eval.pass_at {bad[0]} must lie in [1, eval.k = {self.k}]: pass@k needs k samples per prompt")
        return self
    num_prompts: Annotated[int, Field(ge=1)] | Literal["auto"] | None = "auto"
    """Held-out prompts each evaluation scores, the same first ones every time: a number,
    ``auto`` (the section's docstring: within ``share`` of the run's samples) or None (the
    task's whole validation split)."""
    share: float = Field(0.2, gt=0.0, lt=1.0)
    """The share of the samples a run generates that its planned evaluations may take, with
    ``num_prompts: auto``; with a number of prompts, the start of the run says where they
    take more."""
    temperature: float = Field(1.0, gt=0)
    """Validation sampling temperature."""
    on: Literal["auto", "generator", "learner"] = "auto"
    """Where evaluations run: ``generator`` (a generator evaluates a snapshot of the reported
    version between chunks, so the learner trains on; backends whose generators evaluate, ``local``), ``learner``
    (inline on the learner's model, which waits), or ``auto`` (``generator`` where the
    backend can). See ``scalerl.pipeline.evaluation``."""
    downstream_knobs: dict[str, Any] | None = None
    """Task knobs of a harder held-out variant evaluated beside the validation set at every
    evaluation (e.g. ``{min_digits: 3, max_digits: 3}`` for addition), logged as
    ``downstream_pass_rate`` / ``downstream_stderr``: this project's stand-in for the
    paper's AIME-24 check (digest §3), whether gains carry over to a harder distribution.
    None: no downstream evaluation."""


class ForecastConfig(_Frozen):
    """The live forecast: the run's one forecast remade after every evaluation."""

    enabled: bool = True
    """Remake the forecast after every evaluation (in a background thread, off the learner's
    critical path) and log its ``forecast_*`` fields; ``scalerl plan`` reproduces them. Its
    first evaluations carry the state ``too_few_evaluations`` and when a forecast will come."""
    min_compute: float = Field(0.0, ge=0)
    """Fit only evaluations from this compute on (device-hours; the paper drops its first
    ~1.5k of 16k GPU-hours, §1.3); as ``scalerl fit --min-compute``."""
    metric: Literal["pass_rate", "reward_mean"] = "pass_rate"
    """The validation curve the forecast, the run's report and the early stops fit:
    ``val_pass_rate`` (the share of samples whose reward reaches ``task.pass_threshold``,
    mean@k over prompts, as the paper) or ``val_reward_mean`` (the mean reward as returned,
    for a graded reward). ``scalerl fit --y`` chooses the same for a finished run."""
    target: float | None = Field(None, gt=0, le=1)
    """A value of ``metric`` to forecast the compute for (``forecast_compute_to_target``)."""
    level: float = Field(0.95, gt=0, lt=1)
    """Coverage of every forecast interval (``scalerl.fit.options.LEVEL``, which this equals:
    the schema imports nothing of ``fit``, so a test holds the two together)."""
    margin: float = Field(0.02, ge=0)
    """A ceiling is identified when A's interval is within ±margin (paper: 0.02, §1.4;
    ``scalerl.fit.options.MARGIN``, held equal by the same test)."""
    prior_runs: str | None = None
    """Finished runs (a folder, a log file or a glob) to learn a prior for Eq. 1 from; the
    forecast follows it where it accepts the run (``forecast_method`` says so). The live
    record, ``serve``, and ``plan``/``fit`` on the run's folder all forecast under it (the run's
    own folder never part of it; ``--prior-runs`` overrides it, ``none`` turns it off). None:
    no prior."""
