"""The ``eval`` and ``forecast`` sections: validation during training, and the live forecast
of Eq. 1 fitted to it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from scalerl.config.base import Frozen as _Frozen


class EvalConfig(_Frozen):
    """Validation: mean@k pass rate on held-out prompts, with its standard error.

    The defaults are sized so one evaluation's standard error is ≤ 0.015 at a pass rate of
    0.5, below the differences the fits must resolve. The k samples of one prompt are
    correlated (intra-prompt correlation ρ ≈ 0.5, measured on the built-in task from the
    0.032–0.037 error of 128 prompts × 4), so ``SE ≈ sqrt(p(1 − p)(ρ + (1 − ρ)/k) / P)``:
    at p = 0.5 that needs P ≥ 1,111 prompts at k = 1 (1,111 samples), 833 at k = 2 (1,666)
    or 694 at k = 4 (2,776). With correlated samples one sample each of more prompts is the
    cheapest, so the default is k = 1 on the task's whole validation split (the arithmetic
    tasks draw 1,200 iid held-out prompts: SE ≤ 0.0144; a data set's split is its own size). Every 50 steps (the paper
    validates every 100) that is 1,200 evaluation samples per 3,200 training ones at the
    recipe's 8 × 8, about 1.2× what 128 × 4 every 25 steps cost; on the ``local`` backend a
    generator runs it (``on``), not the learner. ``bench/paper_claims/RESULTS.md`` has the
    measured errors.
    """

    every: int = Field(50, ge=1)
    """Validate every this many optimiser steps (and at step 0 and the last step)."""
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
    num_prompts: int | None = Field(None, ge=1)
    """Held-out prompts used (None: the task's whole validation split)."""
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
