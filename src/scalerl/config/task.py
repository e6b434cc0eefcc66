"""The ``task`` section: what the model is trained on, and how a user's reward function is called.

A task is built in every process that scores (``scalerl.data.tasks.spec.TaskSpec``); a user's
task factory or reward function is checked when the config loads, so a missing file or name is
one sentence before anything is written. A user's reward function runs under a time limit
(``reward_timeout_s``, ``scalerl.user_code``); prompts too long for the model's context are
refused before training or cut (``long_prompts``, ``scalerl.pipeline.commands.preflight``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scalerl.config.base import Frozen as _Frozen
from scalerl.config.paths import absolute_knobs


def users_code(name: str | None) -> bool:
    """Whether a task or environment name is a user's plug-in (``FILE.py:NAME`` or
    ``package.module:NAME`` outside this package's own ``scalerl.…``), not a built-in."""
    return name is not None and ":" in name and not name.startswith("scalerl.")


class TaskConfig(_Frozen):
    name: str = "addition"
    """A built-in task (``addition``, ``multiplication``, ``calculator``: tool use with ``env``,
    ``math``, ``code``, ``dataset``: a user's JSONL / parquet / ``datasets`` directory) or a
    user's task factory as ``FILE.py:NAME`` / ``package.module:NAME``, loaded in every process
    that builds the task."""
    knobs: dict[str, Any] = Field(default_factory=lambda: {"min_digits": 1, "max_digits": 2})
    """Keyword arguments passed to the task constructor (difficulty, sizes, seed ...)."""
    reward: Literal["auto", "as_is", "pm1"] = "auto"
    """What the loss trains on, from the reward the task or ``reward_fn`` returned: ``as_is``
    (unchanged), ``pm1`` (the paper's ``2r − 1``, digest §2.1: a {0, 1} reward becomes ±1), or
    ``auto``: ``pm1`` for the built-in verifiable tasks, ``as_is`` for a user's reward
    (``reward_fn``, a user task or environment). Batch-normalised advantages are equal either
    way (an affine map); the logs show the reward as returned (``reward_mean``) beside what the
    loss trained on (``trained_reward_mean``). ``length.truncation_is_failure`` is the other
    transform; both are printed at start (docs/design/rollout.md, "The user's reward, as written")."""
    pass_threshold: float = 1.0
    """A sample passes when its reward, as returned, is at least this (``pass_rate``,
    ``val_pass_rate`` and the curriculum alike; to within 1e-6, as rewards travel as float32).
    The default 1.0 is "correct" for {0, 1} and ±1 rewards and "full marks" for a graded
    reward in [0, 1]; a graded reward gets one warning at start. ``forecast.metric=reward_mean``
    forecasts the mean reward instead."""
    reward_fn: str | None = None
    """The user's reward ``FILE.py:NAME`` / ``package.module:NAME``, called as
    ``NAME(completion, **fields) -> float | None`` with the record's columns and ``prompt``,
    or, when it names ``completions``, as TRL calls its reward functions, on a batch:
    ``NAME(prompts, completions, completion_ids, trainer_state, **columns) -> list[float | None]``
    (``scalerl.data.tasks.user_reward``, ``trl_reward``); replaces the task's own reward. Its value is logged
    as returned (``reward_mean``); see ``reward`` for what the loss trains on."""
    reward_fns: list[str] = Field(default_factory=list)
    """Several reward functions, each in either form ``reward_fn`` takes (TRL's
    ``reward_funcs``); a sample's reward is ``Σ_f w_f r_f`` over the functions that scored it
    (None skipped, as TRL's ``nansum``; none did: not scored), and each function's own reward
    is logged as ``reward/<NAME>`` and ``reward/<NAME>_std`` (``NAME_<position>`` where two share
    a name). Exclusive with ``reward_fn``, which is the one-function case: each config has one
    spelling, and a saved run's ``reward_fn`` keeps meaning what it meant."""
    reward_weights: list[float] | None = None
    """One weight ``w_f`` per ``reward_fns`` entry, in order (TRL's ``reward_weights``); None: all 1."""
    system_prompt: str | None = None
    """Put first as a system message (as text before the prompt without a chat template)."""
    reward_timeout_s: float | None = Field(30.0, gt=0)
    """Seconds one call of ``reward_fn`` may take; past it the sample scores 0 as an error
    (``reward_errors``) and the call is abandoned on its worker thread, where it may keep
    running (``scalerl.user_code``: too many still running stop the run). None calls the
    function on the main thread without a limit (for code that sets its own signal alarm)."""
    long_prompts: Literal["refuse", "cut"] = "refuse"
    """A prompt that, with ``sampling.max_new_tokens``, does not fit the model's context
    (``max_position_embeddings``): ``refuse`` names its record before training; ``cut`` keeps
    its last tokens (the question's end and the assistant header) and warns once."""

    @field_validator("reward", mode="before")
    @classmethod
    def _old_reward_form(cls, form: Any) -> Any:
        return "as_is" if form == "binary" else form  # the name before 0.x: {0, 1} kept as is

    @model_validator(mode="after")
    def _reward_fns_agree(self) -> TaskConfig:
        if self.reward_fn is not None and self.reward_fns:
            raise ValueError("set task.reward_fn (one function) or task.reward_fns (a list), not both")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_fns):
            raise ValueError(f"task.reward_weights has {len(self.reward_weights)} weights for "
                             f"{len(self.reward_fns)} task.reward_fns; give one weight per function, in order")
        return self

    @property
    def reward_specs(self) -> tuple[str, ...]:
        """Every reward function the run uses: ``reward_fns``, or ``reward_fn`` alone; empty
        when the task's own reward scores."""
        return tuple(self.reward_fns) or ((self.reward_fn,) if self.reward_fn is not None else ())

    @field_validator("knobs")
    @classmethod
    def _absolute_paths(cls, knobs: dict[str, Any]) -> dict[str, Any]:
        """The path knobs (``path``, ``validation_path``, ...) as absolute paths: a Ray worker's
        cwd, or a ``--resume`` from elsewhere, must read the same file. Loading made them
        absolute against their recipe's folder already (``scalerl.config.paths``)."""
        return absolute_knobs(knobs, Path.cwd())

    @model_validator(mode="after")
    def _scored(self) -> TaskConfig:
        # the task's knobs and the reward functions are checked last at load (config.runtime)
        if not self.reward_specs and self.name == "dataset":
            raise ValueError("task 'dataset' is scored by your own function: set task.reward_fn "
                             "to FILE.py:NAME or package.module:NAME")
        return self

    @property
    def user_scored(self) -> bool:
        """Whether a user's code scores the samples (``reward_fn(s)``, or a user task factory:
        a ``FILE.py:NAME`` / ``package.module:NAME`` name outside this package's own)."""
        return bool(self.reward_specs) or users_code(self.name)
