"""The one typed trainer config: every default of ``scalerl train`` lives here.

A run is described by one YAML file (a *recipe*). A recipe may ``extends:`` another recipe by
name (``src/scalerl/recipes/NAME.yaml``) or by path; the child is deep-merged over the parent,
so a leave-one-out variant is a few lines that revert one axis. ``--set key.sub=value``
overrides are parsed as YAML scalars (so ``1e-5`` is a float and ``null`` is None) and
merged last (the layering lives in ``scalerl.config.layers``). The merged mapping is validated by pydantic v2 with ``extra="forbid"`` and
frozen models, so an unknown or mistyped key is an error that names the key and the file
(or ``--set``) it came from; ``ConfigError`` carries that one sentence. A whole-config check
names the layers that set the fields it is about (``scalerl.config.errors``), and the YAML
itself is read with bounds on aliases and nesting, without repeated keys or non-plain tags
(``scalerl.yaml_io``), so a hostile recipe is a sentence too, not a memory blow-up.

Paths are absolute once loaded. A relative path is read from the folder of the YAML file that
names it (in a chain of ``extends``, each file's paths from that file's folder), and from the
working folder in a ``--set``; ``~`` is expanded; built-in names and ``package.module:NAME``
specs stay as they are. The fields that hold paths (``model.base``, ``model.chat_template``,
the file of a ``FILE.py:NAME`` in ``task.name``, ``task.reward_fn(s)`` and ``env.name``, the knobs
named ``path`` or ``*_path``, ``*_file``, ``*_dir``, ``forecast.prior_runs``) are listed once,
in ``scalerl.config.paths``. ``RUN_DIR/config.yaml`` therefore means the same from any folder.

The ``loss`` section lives in ``scalerl.config.loss``: each loss and each mismatch correction
keeps its own hyperparameter names there.

Task knobs belong to their task: a recipe, or the ``--set`` overrides taken together, that
switch ``task.name`` without giving ``task.knobs`` start from the new task's own defaults, never from the knobs
of the task it replaced; unknown or missing knobs are errors at load. NaN and inf are
rejected in every number.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Strict, model_validator

from scalerl.config.base import Frozen as _Frozen
from scalerl.config.env import EnvConfig
from scalerl.config.evaluation import EvalConfig, ForecastConfig
from scalerl.config.learner import LearnerConfig
from scalerl.config.loss import LossConfig
from scalerl.config.model import ExportConfig, ModelConfig
from scalerl.config.paths import absolute_layer
from scalerl.config.pipeline import PipelineConfig
from scalerl.config.rollout import LengthConfig, RolloutConfig, SamplingConfig
from scalerl.config.task import TaskConfig, users_code
from scalerl.config.train import LogConfig, TrainConfig
from scalerl.config.training import AdvantageConfig, CurriculumConfig, FilterConfig, OptimConfig


class Config(_Frozen):
    """A whole ``scalerl train`` run."""

    name: Annotated[str, Strict()] = "scalerl"
    """Recipe name, copied into metrics and reports."""
    description: Annotated[str, Strict()] = ""
    """One line on what this recipe reverts or changes."""
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    env: EnvConfig = EnvConfig()
    rollout: RolloutConfig = RolloutConfig()
    sampling: SamplingConfig = SamplingConfig()
    length: LengthConfig = LengthConfig()
    loss: LossConfig = LossConfig()
    advantages: AdvantageConfig = AdvantageConfig()
    filters: FilterConfig = FilterConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    optim: OptimConfig = OptimConfig()
    pipeline: PipelineConfig = PipelineConfig()
    eval: EvalConfig = EvalConfig()
    forecast: ForecastConfig = ForecastConfig()
    log: LogConfig = LogConfig()
    export: ExportConfig = ExportConfig()
    learner: LearnerConfig = LearnerConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="before")
    @classmethod
    def _absolute_paths(cls, data: Any) -> Any:
        # loading made every path absolute against its layer's file already; a Config built
        # in code is read against the working folder
        return absolute_layer(data, Path.cwd()) if isinstance(data, dict) else data

    @property
    def user_reward(self) -> bool:
        """Whether a user's code gives the rewards: ``task.reward_fn``, a user task factory or
        a user environment (not one of this package's own, ``scalerl.…``)."""
        return self.task.user_scored or users_code(self.env.name)

    @property
    def reward_form(self) -> str:
        """``task.reward`` with ``auto`` decided: ``as_is`` for a user's reward, else ``pm1``."""
        if self.task.reward != "auto":
            return self.task.reward
        return "as_is" if self.user_reward else "pm1"

    @property
    def truncation_fails(self) -> bool:
        """``length.truncation_is_failure`` with ``auto`` decided: off for a user's reward."""
        fails = self.length.truncation_is_failure
        return not self.user_reward if fails == "auto" else fails

    @property
    def fitted_metric(self) -> str:
        """The metrics column the forecast fits (``forecast.metric``)."""
        return f"val_{self.forecast.metric}"

    @model_validator(mode="after")
    def _consistent(self) -> Config:
        lo, hi = self.length.interrupt_range
        if not 0 < lo <= hi:
            raise ValueError("length.interrupt_range must satisfy 0 < lo <= hi")
        if self.length.control == "interrupt" and hi >= self.sampling.max_new_tokens:
            raise ValueError("length.interrupt_range must end below sampling.max_new_tokens")
        if self.train.stop_if_target_unreachable and self.forecast.target is None:
            raise ValueError("train.stop_if_target_unreachable needs forecast.target")
        if self.train.stop_if_p_reach_below is not None and self.forecast.target is None:
            raise ValueError("train.stop_if_p_reach_below needs forecast.target")
        if self.learner.world_size > 1:
            self._check_learner_world()
        return self

    def _check_learner_world(self) -> None:
        """A ``learner.world_size`` the batch, the devices and the cores can serve."""

        n = self.learner.world_size
        if n > self.pipeline.prompts_per_step:
            raise ValueError(f"learner.world_size={n} is more than pipeline.prompts_per_step="
                             f"{self.pipeline.prompts_per_step}: a rank would get no group to train")
        if self.model.lora is not None:
            raise ValueError("model.lora with learner.world_size > 1 is not supported yet; use world_size 1")
        cores = self.train.cores or len(os.sched_getaffinity(0))
        if n > cores:
            raise ValueError(f"learner.world_size={n} is more than the {cores} cores this run has "
                             "(train.cores, or the CPUs this process may use)")
