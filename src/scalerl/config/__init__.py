"""The one typed trainer config: every default of ``scalerl train`` lives in this package.

- the schema: one module per section (``model``, ``task``, ``env``, ``rollout`` with sampling
  and length, ``loss``, ``training`` with advantages, filters, curriculum and the optimiser,
  ``pipeline``, ``evaluation`` with the forecast, ``train`` with logging, ``learner``) and the
  root :class:`~scalerl.config.schema.Config`; these import only pydantic and the standard
  library;
- the YAML and its layers (``yaml_io``, ``layers``), the paths made absolute (``paths``) and
  the one-sentence errors (``errors``);
- ``runtime``: the checks that need the rest of the package (a user's plug-in loads, a task's
  knobs, vLLM, CUDA), run last at load, and the picklable specs built from the sections;
- ``load``: :func:`load_config` and :func:`dump_config`.
"""

from scalerl.config.env import EnvConfig
from scalerl.config.evaluation import EvalConfig, ForecastConfig
from scalerl.config.layers import (
    RECIPE_DIR,
    ConfigError,
    parse_override,
    recipe_names,
    resolve_recipe,
)
from scalerl.config.learner import LearnerConfig
from scalerl.config.load import DEFAULT_RECIPE, dump_config, load_config
from scalerl.config.loss import ISCorrectionConfig, LossConfig
from scalerl.config.model import (
    BUILT_MODEL_FIELDS,
    ExportConfig,
    LoraConfig,
    ModelConfig,
    SFTConfig,
)
from scalerl.config.pipeline import PipelineConfig
from scalerl.config.rollout import LengthConfig, RolloutConfig, SamplingConfig, VLLMConfig
from scalerl.config.schema import Config
from scalerl.config.task import TaskConfig
from scalerl.config.train import LogConfig, TrainConfig
from scalerl.config.training import AdvantageConfig, CurriculumConfig, FilterConfig, OptimConfig

__all__ = [
    "BUILT_MODEL_FIELDS", "DEFAULT_RECIPE", "RECIPE_DIR", "AdvantageConfig", "Config", "ConfigError",
    "CurriculumConfig", "EnvConfig", "EvalConfig", "ExportConfig", "FilterConfig", "ForecastConfig",
    "ISCorrectionConfig", "LearnerConfig", "LengthConfig", "LogConfig", "LoraConfig", "LossConfig", "ModelConfig",
    "OptimConfig", "PipelineConfig", "RolloutConfig", "SFTConfig", "SamplingConfig", "TaskConfig", "TrainConfig",
    "VLLMConfig", "dump_config", "load_config", "parse_override", "recipe_names", "resolve_recipe",
]
