"""The config's one door to the rest of the package: the checks that need runtime code, run
last at load (after the schema, which imports only pydantic and the standard library), and
the picklable specs every process builds from a section.

Each check raises what pydantic would have, a ``ValidationError`` located at the field it is
about, so ``scalerl.config.errors.explain`` names the key and the layer that set it exactly as
for a schema error. The order is the schema's field order: the first failure is the one said.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from scalerl.config.schema import Config


def _refuse(loc: tuple[str, ...], value: Any, message: str) -> ValidationError:
    return ValidationError.from_exception_data(
        "Config", [{"type": "value_error", "loc": loc, "input": value, "ctx": {"error": ValueError(message)}}])


def check(cfg: Config) -> None:
    """Every runtime check of ``cfg``; the first failure as a located ``ValidationError``."""
    for loc, value, test in _checks(cfg):
        try:
            test()
        except ValueError as err:  # PluginError, a task's knob error, vLLM missing, no CUDA ...
            raise _refuse(loc, value, str(err)) from None


def _checks(cfg: Config):
    """(location, the value there, the check) in the schema's field order."""
    from scalerl.data.tasks.registry import check_task  # tasks import lazily
    from scalerl.data.tasks.user_reward import load_reward_fn

    task, whole = cfg.task, cfg.model_dump()  # the input a whole-config check names
    if cfg.train.device == "cuda" or cfg.model.dtype == "float16":
        yield (), whole, lambda: _cuda(cfg)
    yield ("task",), task.model_dump(), lambda: check_task(task.name, task.knobs)
    if task.reward_fn is not None:  # a missing file or name, or no `completion(s)` parameter
        yield ("task", "reward_fn"), task.reward_fn, lambda: load_reward_fn(task.reward_fn)
    for spec in task.reward_fns:
        yield ("task", "reward_fns"), spec, lambda spec=spec: load_reward_fn(spec, "task.reward_fns")
    if cfg.env.name is not None:  # the file, the name and the methods: refused now, not in a generator
        yield ("env", "name"), cfg.env.name, lambda: _env(cfg.env.name)
    if cfg.rollout.engine == "vllm":
        yield ("rollout",), cfg.rollout.model_dump(), _vllm
    if cfg.eval.downstream_knobs is not None:
        yield (), whole, lambda: _downstream(task.name, cfg.eval.downstream_knobs)
    if cfg.learner.world_size > 1 and cfg.train.device == "cuda":
        yield (), whole, lambda: _rank_gpus(cfg.learner.world_size)


def _env(name: str) -> None:
    from scalerl.rollout.env import load_env

    load_env(name)


def _vllm() -> None:
    from scalerl.rollout.vllm_support import check_vllm

    check_vllm()


def _downstream(task: str, knobs: dict) -> None:
    from scalerl.data.tasks.registry import check_task

    try:
        check_task(task, knobs)
    except ValueError as err:
        raise ValueError(f"eval.downstream_knobs: {err}") from None


def _rank_gpus(n: int) -> None:
    import torch

    if torch.cuda.is_available() and n > torch.cuda.device_count():
        raise ValueError(f"learner.world_size={n} is more than the {torch.cuda.device_count()} "
                         "visible GPUs (one per rank)")


def _cuda(cfg: Config) -> None:
    import torch  # only for runs that ask for a GPU

    fp16 = ("model.dtype=float16: fp16 training needs CUDA (dynamic loss scaling on a GPU); on CPU "
            "use bfloat16 or float32")
    if cfg.model.dtype == "float16" and cfg.train.device == "cpu":
        raise ValueError(fp16)
    if torch.cuda.is_available():
        return
    if cfg.train.device == "cuda":
        raise ValueError("train.device=cuda, but no CUDA device is visible (torch.cuda.is_available() "
                         "is False); use train.device=auto or cpu")
    raise ValueError(fp16)


def task_spec(cfg: Config, knobs: dict[str, Any] | None = None):
    """The picklable :class:`~scalerl.data.tasks.spec.TaskSpec` every process builds the task
    from (``knobs``: another variant's, e.g. ``eval.downstream_knobs``)."""
    from scalerl.data.tasks.spec import TaskSpec

    task = cfg.task
    return TaskSpec(task.name, dict(task.knobs if knobs is None else knobs), task.reward_specs,
                    task.reward_timeout_s,
                    tuple(task.reward_weights) if task.reward_weights is not None else None,
                    "task.reward_fns" if task.reward_fns else "task.reward_fn")


def env_spec(cfg: Config):
    """The picklable :class:`~scalerl.rollout.env.EnvSpec` every role builds its episodes
    from, or None when single-turn."""
    env = cfg.env
    if env.name is None:
        return None
    from scalerl.rollout.env import EnvSpec

    return EnvSpec(env.name, dict(env.knobs), env.max_turns, env.max_tokens, env.reward,
                   env.observation_role, tuple(env.stop_strings), env.timeout_s, env.max_observation_chars)


def lora_spec(cfg: Config):
    """The :class:`~scalerl.models.lora.LoraSpec` of ``model.lora`` (None without LoRA); targets
    ``auto`` are None, found from the model at start."""
    lora = cfg.model.lora
    if lora is None:
        return None
    from scalerl.models.lora import LoraSpec

    return LoraSpec(lora.rank, lora.alpha, lora.dropout, None if lora.targets == "auto" else tuple(lora.targets))
