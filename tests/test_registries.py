"""Every list of names has one source of truth; the config's choices must equal it."""

from typing import get_args

from scalerl.algo.losses import LOSSES
from scalerl.algo.mismatch import CORRECTIONS
from scalerl.config import EvalConfig, PipelineConfig, RolloutConfig, TaskConfig
from scalerl.config_env import EnvConfig
from scalerl.config_learner import LearnerConfig
from scalerl.config_loss import ISCorrectionConfig, LossConfig
from scalerl.data.tasks.base import REWARD_FORMS
from scalerl.pipeline.actor import ENGINES
from scalerl.pipeline.backends import BACKENDS
from scalerl.pipeline.evaluation import EVAL_ON
from scalerl.pipeline.learner_rank import STRATEGIES
from scalerl.rollout.env import ENV_REWARDS, OBSERVATION_ROLES


def _choices(model, field):
    return set(get_args(model.model_fields[field].annotation))


def test_config_choices_equal_their_registries():
    assert _choices(LossConfig, "name") == set(LOSSES)
    assert _choices(ISCorrectionConfig, "mode") == set(CORRECTIONS)
    assert _choices(RolloutConfig, "engine") == set(ENGINES)
    assert _choices(PipelineConfig, "backend") == set(BACKENDS)  # the table's names
    assert _choices(EvalConfig, "on") == set(EVAL_ON)
    assert _choices(TaskConfig, "reward") == set(REWARD_FORMS)
    assert _choices(EnvConfig, "reward") == set(ENV_REWARDS)
    assert _choices(EnvConfig, "observation_role") == set(OBSERVATION_ROLES)
    assert _choices(LearnerConfig, "strategy") == set(STRATEGIES)


def test_every_loss_has_its_own_hyperparameter_section():
    assert set(LOSSES) <= set(LossConfig.model_fields)
