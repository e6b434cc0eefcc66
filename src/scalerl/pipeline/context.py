"""The model's context window, and how every role renders prompts into it.

``model.base``'s (or the preset's) declared context, the tokens a completion may add, and so
the room a prompt has; and the :class:`~scalerl.models.chat.ChatFormat` built from the config
(``task.long_prompts: cut`` keeps a long prompt's last tokens within that room). The preflight
checks and the builders both read these, so they live apart from both.
"""

from __future__ import annotations

import json
from pathlib import Path

from scalerl.config import Config, ConfigError

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def _model_context(base: Path) -> int | None:
    """The context length ``base/config.json`` declares; ConfigError if it is no model."""
    if not base.is_dir():
        raise ConfigError(f"model.base {base} is not a folder (it should be a Hugging Face model directory).")
    config = base / "config.json"
    if not config.is_file():
        raise ConfigError(f"model.base {base} is not a Hugging Face model directory (no config.json in it).")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"model.base {config} is not valid JSON ({str(err).splitlines()[0]}).") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ConfigError(f"model.base {config} has no 'model_type', so it does not describe a model.")
    if not any(next(base.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        raise ConfigError(f"model.base {base} holds no weights (*.safetensors or pytorch_model*.bin).")
    found = [data[k] for k in CONTEXT_KEYS if isinstance(data.get(k), int)]
    return found[0] if found else None


def model_context(cfg: Config) -> tuple[int | None, str]:
    """The context length of ``model.base`` (or ``model.preset``), None when it declares none,
    and how to name the model; ConfigError if it is no model."""
    if cfg.model.base is not None:
        return _model_context(Path(cfg.model.base)), f"model.base {cfg.model.base}"
    from scalerl.models.build import PRESETS

    if cfg.model.preset not in PRESETS:
        raise ConfigError(f"unknown model.preset {cfg.model.preset!r}; choose one of {', '.join(PRESETS)}.")
    return PRESETS[cfg.model.preset].max_position_embeddings, f"model.preset {cfg.model.preset!r}"


def completion_budget(cfg: Config) -> int:
    """Tokens a trajectory may add after its prompt: ``env.max_tokens`` with an environment,
    else ``sampling.max_new_tokens``."""
    return cfg.env.max_tokens if cfg.env.name is not None else cfg.sampling.max_new_tokens


def prompt_room(cfg: Config) -> int | None:
    """The most prompt tokens the model's context leaves beside the completion, or None
    (no declared context)."""
    context = model_context(cfg)[0]
    return None if context is None else context - completion_budget(cfg)


def chat_format(cfg: Config):
    """How every role renders prompts (``scalerl.models.chat``)."""
    from scalerl.models.chat import ChatFormat

    room = None
    if cfg.task.long_prompts == "cut":  # prompts too long for the context keep their last tokens
        room = prompt_room(cfg)
        room = None if room is None else max(room, 1)
    return ChatFormat(cfg.model.chat_template, cfg.task.system_prompt, dict(cfg.model.chat_template_kwargs),
                      max_prompt_tokens=room)
