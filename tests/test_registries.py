"""Every list of names has one source of truth; the config's choices must equal it."""

from typing import get_args

from scalerl.algo.advantages import NORMALISATIONS
from scalerl.algo.aggregate import AGGREGATION_MODES
from scalerl.algo.losses import LOSSES
from scalerl.algo.mismatch import CORRECTIONS
from scalerl.config import (
    AdvantageConfig,
    CurriculumConfig,
    EvalConfig,
    PipelineConfig,
    RolloutConfig,
    TaskConfig,
)
from scalerl.config.env import EnvConfig
from scalerl.config.learner import LearnerConfig
from scalerl.config.loss import ISCorrectionConfig, LossConfig
from scalerl.config.model import ModelConfig
from scalerl.config.rollout import LengthConfig
from scalerl.data.curriculum import HISTORY_RULES
from scalerl.data.filters import TRUNCATION_MODES
from scalerl.data.tasks.base import REWARD_FORMS
from scalerl.models.build import ARCHS
from scalerl.pipeline.backends import BACKENDS
from scalerl.pipeline.evaluation import EVAL_ON
from scalerl.pipeline.generators.actor import ENGINES
from scalerl.pipeline.learner.rank import STRATEGIES
from scalerl.pipeline.queues import MODES
from scalerl.rollout.env import ENV_REWARDS, OBSERVATION_ROLES


def _choices(model, field):
    return set(get_args(model.model_fields[field].annotation))


def test_config_choices_equal_their_registries():
    assert _choices(LossConfig, "name") == set(LOSSES)
    assert _choices(ISCorrectionConfig, "mode") == set(CORRECTIONS)
    assert _choices(RolloutConfig, "engine") == set(ENGINES)
    assert _choices(PipelineConfig, "backend") == set(BACKENDS)  # the table's names
    assert _choices(EvalConfig, "on") == set(EVAL_ON)
    assert _choices(TaskConfig, "reward") == {"auto", *REWARD_FORMS}  # auto: decided per task (Config.reward_form)
    assert _choices(EnvConfig, "reward") == set(ENV_REWARDS)
    assert _choices(EnvConfig, "observation_role") == set(OBSERVATION_ROLES)
    assert _choices(LearnerConfig, "strategy") == set(STRATEGIES)
    assert _choices(AdvantageConfig, "norm") == set(NORMALISATIONS)
    assert _choices(LossConfig, "aggregation") == set(AGGREGATION_MODES)
    assert _choices(LengthConfig, "truncation") == set(TRUNCATION_MODES)
    assert _choices(PipelineConfig, "mode") == set(MODES)
    assert _choices(CurriculumConfig, "history") == set(HISTORY_RULES)
    assert _choices(ModelConfig, "arch") == set(ARCHS)


def test_every_loss_has_its_own_hyperparameter_section():
    assert set(LOSSES) <= set(LossConfig.model_fields)
