"""The ``log`` and ``train`` sections: where a run writes, and how long and where it runs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from scalerl.config.base import Frozen as _Frozen


class LogConfig(_Frozen):
    tensorboard: bool = True
    """Also write TensorBoard event files under ``RUN_DIR/tb``."""
    wandb: bool = False
    """Also log to Weights & Biases (imported lazily; needs the ``wandb`` extra)."""
    wandb_project: str = "scalerl"
    """W&B project name."""
    progress: bool = True
    """Show the run's progress (step, reward, latest validation pass rate, pace, ETA): rich's
    live bar when stdout is a terminal, else plain lines (``progress_every_s``)."""
    progress_every_s: float = Field(30.0, ge=0)
    """With stdout not a terminal (a batch job, ``nohup``, ``> log``): print one whole progress
    line at most this often as steps are logged, the line again (with how long no step came)
    when this long passes without one, and the last state at the end; 0 prints every step."""
    samples: int = Field(8, ge=0)
    """Samples each evaluation appends to ``RUN_DIR/samples.jsonl`` (and TensorBoard's text)."""


class TrainConfig(_Frozen):
    steps: int = Field(900, ge=1)
    """Optimiser steps to train for."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the learner, the evaluator and the ``torch`` generators run; ``auto`` is
    ``cuda`` when a GPU is visible, else ``cpu``."""
    max_minutes: float | None = Field(6.5, gt=0)
    """Stop RL early (after a final eval and checkpoint) once it has run this many minutes
    (the SFT warm-up is not counted); None trains for all ``steps``. The whole run's minutes:
    a ``--resume`` gets what the earlier sessions left (the records' ``wall_s`` is the clock,
    ``scalerl.pipeline.time_limit``), so extending a run takes a larger limit too."""
    max_compute: float | None = Field(None, gt=0)
    """Stop RL (after a final eval and checkpoint) at the first step whose compute
    (``compute_gpu_hours``, the whole run's, resumes included) reaches this; None: no limit.
    ``scalerl sweep --adaptive`` trains its points rung by rung with it, and a ``--resume``
    with a larger value goes on."""
    checkpoint_every: int = Field(50, ge=1)
    """Write an atomic checkpoint every this many steps (and at the end)."""
    stop_wait_s: float = Field(30.0, ge=0)
    """After SIGTERM/SIGINT, how long the stop waits for evaluations still running on a
    generator before it ends without them (its checkpoint keeps them: a resume runs them
    again). An evaluation on the learner is abandoned between decode steps at once."""
    seed: int = Field(0, ge=0, lt=2**32)
    """Seed of model init, prompt order and sampling; in [0, 2^32), the range numpy's and
    torch's seeding both accept (-1 and 2^70 failed there, after the run folder was written)."""
    threads: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """torch threads of the learner; ``auto``: the cores the generators leave
    (``scalerl.pipeline.plan.cores``: 1 on two cores, so the two roles overlap)."""
    cores: int | None = Field(None, ge=1)
    """Cores this run splits between its roles; None: the CPUs this process may run on."""
    stop_if_ceiling_below: float | None = Field(None, gt=0, le=1)
    """Stop early (after a checkpoint) once the live forecast identifies the ceiling and
    its whole interval lies below this value of ``forecast.metric``. Never on an unidentified
    ceiling."""
    stop_if_target_unreachable: bool = False
    """Stop early once the live forecast identifies the ceiling and its whole interval lies
    below ``forecast.target``."""
    no_rise_after: float = Field(0.25, gt=0, le=1)
    """Once the live forecast has read this fraction of the run's budget (``forecast_fit_until
    / forecast_budget``; the evaluation plan's ratio, 1.2, puts the first such evaluation by
    30%) and its validation shows no rise (``scalerl.fit.forecast.rise``: the last third
    of the evaluations against the first, in sd of their noise), the run says so in one line,
    with the evidence and what usually helps (the learning rate, or the reward's signal on the
    task); once per session."""
    stop_if_no_rise: bool = False
    """Stop early (after a checkpoint) on that finding, instead of only saying it."""
    stop_if_p_reach_below: float | None = Field(None, gt=0, lt=1)
    """Stop early once the live forecast gives less than this probability that the expected
    curve reaches ``forecast.target`` within the run's budget (the compute at ``train.steps``
    or the ``train.max_minutes`` deadline; logged as ``forecast_p_reach``, ``scalerl plan``'s
    ``p_reach``). Unlike the two rules above it also acts on an unidentified ceiling: the
    probability already spreads over A's whole interval. None: never."""
