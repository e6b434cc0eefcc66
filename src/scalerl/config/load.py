"""Loading a run's config: the recipe's layers merged, validated, checked; and saving it."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from scalerl.config.errors import explain
from scalerl.config.layers import ConfigError, merged_layers
from scalerl.config.model import BUILT_MODEL_FIELDS
from scalerl.config.paths import absolute_layer
from scalerl.config.runtime import check
from scalerl.config.schema import Config
from scalerl.config.task import TaskConfig

DEFAULT_RECIPE = "scalerl"





def load_config(
    recipe: str | Path | None = DEFAULT_RECIPE, overrides: list[str] | tuple[str, ...] = ()
) -> Config:
    """Load a recipe (name or path), apply ``--set`` overrides, validate, return a frozen Config.

    Raises ``ConfigError`` with one sentence naming the offending key and its file.
    """
    layers, merged = merged_layers(recipe, overrides, TaskConfig.model_fields["name"].default)
    try:
        cfg = Config.model_validate(merged)
        check(cfg)  # the checks that need runtime code, last (config.runtime)
        return cfg
    except ValidationError as err:
        raise ConfigError(explain(err, layers, Config)) from err


def dump_config(cfg: Config) -> str:
    """The fully-resolved config as YAML, written into every run directory: every path
    absolute, and without the model-building fields when ``model.base`` is set (they load
    back as the defaults they hold, so the file loads back to an equal config)."""
    unused = {"model": set(BUILT_MODEL_FIELDS)} if cfg.model.base is not None else None
    # a config copied with a relative path (``model_copy`` skips validation) is read from the
    # working folder it was made in, not from the folder the file is loaded from later
    data = absolute_layer(cfg.model_dump(mode="json", exclude=unused), Path.cwd())
    return yaml.safe_dump(data, sort_keys=False)
