"""Checks ``scalerl train`` makes before it builds or writes anything.

The config is already valid on its own (``scalerl.config``); these checks need the world
around it: the task can be built from its knobs and has validation problems, ``model.base``
is a model directory (or ``model.preset`` a known preset), ``sampling.max_new_tokens`` fits
the model's context, ``model.lora`` targets its linear layers, and the run folder is a
folder we can write in. Each failure is a ``ConfigError`` with one
sentence naming the field or the folder. Torch is imported only for a preset's context.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from scalerl.config import Config, ConfigError
from scalerl.config.runtime import lora_spec, task_spec
from scalerl.pipeline.context import chat_format, completion_budget, model_context, prompt_room
from scalerl.runfolder import CONFIG


def check(cfg: Config, run_dir: Path, flag: str = "--out") -> None:
    """Every check below, cheapest first; the run folder (named by ``flag``) is created last."""
    task = check_task(cfg)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{flag} {run_dir} is a file, not a folder.")
    check_model(cfg)
    check_lora(cfg)
    check_prompts(cfg, task)
    check_prior_runs(cfg)
    check_run_dir(run_dir, flag)


def check_prior_runs(cfg: Config) -> None:
    """``forecast.prior_runs`` names at least one log file or TensorBoard folder."""
    if cfg.forecast.prior_runs is None:
        return
    from scalerl.fit.errors import CurveError
    from scalerl.fit.forecast.prior_runs import find_prior_files

    try:
        find_prior_files(cfg.forecast.prior_runs, what="forecast.prior_runs")
    except CurveError as err:
        raise ConfigError(str(err)) from None


def check_path(run_dir: Path, flag: str = "--out") -> None:
    """The run folder's path can be looked up at all: a name too long for the file system or a
    parent we may not search fails here as one sentence, not in a later ``exists()``."""
    try:
        (run_dir / CONFIG).exists()  # ignores only "not there" (ENOENT, ENOTDIR, ELOOP)
    except OSError as err:
        raise ConfigError(f"{flag} {run_dir} cannot be used as a run folder ({err.strerror or err}).") from None


def check_task(cfg: Config):
    """The task builds from ``task.knobs`` (values the constructor rejects, unreadable files,
    a record without its fields or with a prompt of the wrong kind); returns it."""
    try:
        task = task_spec(cfg).build()
    except (TypeError, ValueError, OSError, LookupError) as err:
        text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        text = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        raise ConfigError(f"task {cfg.task.name!r} cannot be built from task.knobs "
                          f"{dict(cfg.task.knobs)}: {text.rstrip('.')}.") from None
    if not task.validation():  # every run evaluates at step 0
        raise ConfigError(f"task {cfg.task.name!r} cannot be evaluated: {_no_validation(cfg, task)}.")
    return task


def _no_validation(cfg: Config, task) -> str:
    knobs = cfg.task.knobs
    if knobs.get("validation_path"):
        return f"the validation file {knobs['validation_path']} holds no records"
    if knobs.get("path"):
        records = "1 record" if task.num_train == 1 else f"{task.num_train} records"
        return (f"no validation problem is held out of {knobs['path']} ({records} left for training; "
                "task.knobs.num_validation holds out at most half of the file), so give it more records "
                "or name a validation file in task.knobs.validation_path")
    return "it has no validation problems"


def check_prompts(cfg: Config, task) -> None:
    """Prompts render with the model's tokenizer: the first training and validation ones in
    full, and every one's kind (chat messages need a template); a built model, whose SFT
    warm-up trains on plain prompts, takes no chat format and has demonstrations; the reward
    function takes the fields it will be given."""
    import jinja2

    from scalerl.models.chat import ChatTemplateError, PromptRenderer

    if cfg.model.base is None:
        _check_built_model_format(cfg)
        from scalerl.data.tasks.tokenizer import build_task_tokenizer

        tokenizer = build_task_tokenizer()
    else:
        from scalerl.models.load import load_tokenizer

        try:
            tokenizer = load_tokenizer(Path(cfg.model.base))
        except Exception:  # noqa: BLE001 - a model that does not load is said when it is loaded
            return
    warned = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):  # transformers' own "longer than the maximum" line would precede ours
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True
    examples = [task.train_example(0), *task.validation()[:1]]
    where = f"model.base {cfg.model.base}" if cfg.model.base else f"the built model.preset {cfg.model.preset!r}"
    try:
        renderer = PromptRenderer(tokenizer, chat_format(cfg))
        for example in examples:  # rendered, not tokenized: a huge prompt is measured below
            renderer.text(task.prompt(example))
        if not renderer.chat and _prompts_may_vary(cfg, task):
            _all_plain(task)
        if cfg.model.base is None:
            task.demonstration(examples[0])
    except (ChatTemplateError, TypeError, ValueError, jinja2.TemplateError) as err:
        raise ConfigError(f"task {cfg.task.name!r} on {where}: {str(err).rstrip('.')}.") from None
    if cfg.task.long_prompts == "refuse":
        _check_prompt_lengths(cfg, task, renderer, examples)
    _check_reward_fields(cfg, task, examples[0])


def _check_prompt_lengths(cfg: Config, task, renderer, examples) -> None:
    """Every prompt of a task read from a file (a generated task's first ones: they are short
    by construction), rendered, leaves the completion its room in the model's context
    (``task.long_prompts=refuse``); else one sentence naming the record."""
    from scalerl.data.tasks.records import FileTask

    room = prompt_room(cfg)
    if room is None:
        return
    inner = getattr(task, "inner", task)  # a user's reward function wraps the task
    if isinstance(inner, FileTask):
        splits = (("training", map(task.train_example, range(task.num_train))), ("validation", task.validation()))
    else:
        splits = (("training", examples[:1]), ("validation", examples[1:]))
    for split, items in splits:
        for i, example in enumerate(items):
            n, exact = renderer.measure(task.prompt(example), room)  # never a 30 MB prompt's token list
            if n > room:
                where = example.meta.get("where") or f"{split} prompt {i}"
                size = f"{n} tokens" if exact else f"more than {n} tokens"
                raise ConfigError(
                    f"{where}: the prompt is {size}, and with {completion_budget(cfg)} completion tokens "
                    f"it does not fit the {room + completion_budget(cfg)}-token context of {model_context(cfg)[1]}; "
                    f"shorten it, or set task.long_prompts=cut to keep its last {max(room, 0)} tokens.")


def _check_built_model_format(cfg: Config) -> None:
    if cfg.task.system_prompt is not None or cfg.model.chat_template not in ("auto", "none"):
        field = "task.system_prompt" if cfg.task.system_prompt is not None else "model.chat_template"
        raise ConfigError(f"{field} needs model.base: a model built from model.preset is warmed up on "
                          "plain prompts, which a chat format would change after the fact.")


def _prompts_may_vary(cfg: Config, task) -> bool:
    """Whether prompts can differ in kind: read from a file, or made by a user's code. A
    built-in generated task makes every prompt the same way, which the first ones show (a
    walk over its 100 000 examples cost every run seconds)."""
    from scalerl.config.task import users_code
    from scalerl.data.tasks.records import FileTask

    return isinstance(getattr(task, "inner", task), FileTask) or users_code(cfg.task.name)


def _all_plain(task) -> None:
    """Without a template every prompt must be text: one chat-message prompt deep in a file
    would otherwise stop a generator mid-run."""
    from scalerl.models.chat import ChatTemplateError

    splits = (("training", map(task.train_example, range(task.num_train))), ("validation", task.validation()))
    for split, examples in splits:
        for i, example in enumerate(examples):
            if not isinstance(task.prompt(example), str):
                raise ChatTemplateError(f"{split} prompt {i} is chat messages, which need a chat template, "
                                        "and the tokenizer has none (set model.chat_template to a .jinja file)")


def _check_reward_fields(cfg: Config, task, example) -> None:
    """Every reward function (``task.reward_fn`` / ``task.reward_fns``) accepts the fields of a
    record in its form: a signature that cannot would make every sample's reward an error."""
    from scalerl.data.tasks.user_reward import UserRewardTask

    if not isinstance(task, UserRewardTask):
        return
    _check_named_columns(task)
    try:
        task.check_call(example)
    except TypeError as err:
        raise ConfigError(str(err)) from None


def _check_named_columns(task) -> None:
    """A column a reward function names as a parameter (without a default) is in every row of
    a dataset task's files; else one sentence naming the first row without it. A row lacking it
    would otherwise reach the function as None (or, before, as ``answer=''``), a silent zero
    reward (newcomer trial 3, F3)."""
    from scalerl.data.tasks.dataset import DatasetTask, required_columns

    data = task.inner
    if not isinstance(data, DatasetTask):
        return
    first = data.first_row
    for fn in task.functions:
        for column in required_columns(fn.fn, fn.batch):
            if column in data.columns and column not in data.partial_columns:
                continue
            count, where = data.partial_columns.get(column, (None, first))
            rows = "no row has it" if count is None else f"{count} rows lack it"
            raise ConfigError(f"{where}: the row has no column {column!r}, which {fn.what} {fn.spec} takes as a "
                              f"parameter ({rows}); add it to every row (null where there is no value), or give "
                              "the parameter a default.")


def check_model(cfg: Config) -> None:
    """``model.base`` is a model (or ``model.preset`` a preset) whose context holds the completions."""
    context, where = model_context(cfg)
    wanted = cfg.sampling.max_new_tokens
    if context is not None and wanted >= context:
        raise ConfigError(f"sampling.max_new_tokens={wanted} does not fit the context of {context} tokens "
                          f"of {where}, which must also hold the prompt.")


def check_lora(cfg: Config) -> None:
    """``model.lora``'s targets (``auto`` finds some) and rank fit the model, checked on a copy
    of it without weights (the meta device): one sentence listing the linear (or ``Conv1D``)
    layers of its decoder blocks, not peft's traceback, before the run folder exists."""
    if cfg.model.lora is None:
        return
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from scalerl.models.lora import resolve_targets

    if cfg.model.base is not None:
        where = f"model.base {cfg.model.base}"
        try:
            config = AutoConfig.from_pretrained(cfg.model.base, local_files_only=True)
        except Exception:  # noqa: BLE001 - a model that does not load is said when it is loaded
            return
    else:
        from scalerl.models.build import model_config

        where = f"model.preset {cfg.model.preset!r}"
        config = model_config(cfg.model.preset, vocab_size=256, arch=cfg.model.arch)
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - a model transformers cannot build is said when it is loaded
        return
    try:
        resolve_targets(model, lora_spec(cfg), where)
    except ValueError as err:
        raise ConfigError(f"{str(err).rstrip('.')}.") from None


def check_run_dir(run_dir: Path, flag: str = "--out") -> None:
    """Create the run folder (and its parents) and prove a file can be written in it."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=run_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        if isinstance(err, FileExistsError | NotADirectoryError):
            raise ConfigError(f"{flag} {run_dir} cannot be created: a file stands in its path.") from None
        raise ConfigError(f"{flag} {run_dir}: the run folder cannot be written ({err.strerror or err}).") from None
