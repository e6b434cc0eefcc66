"""Construct the parts of a run from the config: model, pool, actor spec, backend, sinks.

Each function turns one config section into one object, so ``run.py`` reads as a story.
Where a part runs (devices, cores, ranks, nodes) is the run plan's (``scalerl.pipeline.plan``),
which the builders take, never decide.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from scalerl.config import Config, ConfigError
from scalerl.config.runtime import env_spec, lora_spec, task_spec
from scalerl.pipeline.backends import Backend, backend_class
from scalerl.pipeline.context import chat_format
from scalerl.pipeline.plan import RunPlan
from scalerl.pipeline.queues import LagPolicy
from scalerl.pipeline.restarts import GeneratorDeaths
from scalerl.pipeline.scheduler import Scheduler
from scalerl.runfolder import BASE_MODEL, METRICS, SAMPLES, SFT_RESULT, TENSORBOARD
from scalerl.types import SamplingParams


def sampling_params(cfg: Config, temperature: float | None = None) -> SamplingParams:
    """Training sampling + length control: interruptions only when ``length.control=interrupt``."""
    interrupt = cfg.length.control == "interrupt"
    return SamplingParams(
        max_new_tokens=cfg.sampling.max_new_tokens,
        temperature=cfg.sampling.temperature if temperature is None else temperature,
        top_p=cfg.sampling.top_p,
        interrupt_range=tuple(cfg.length.interrupt_range) if interrupt else None,
        answer_budget=cfg.length.answer_budget,
    )


def prepare_base_model(cfg: Config, task, run_dir: Path, log=print) -> Path:
    """The HF directory the run starts from: ``model.base``, or a tiny model built from
    ``model.preset`` and SFT-warmed into ``model.sft.target_band``, cached in ``RUN_DIR/base_model``."""
    if cfg.model.base is not None:
        return Path(cfg.model.base)
    cached = run_dir / BASE_MODEL
    if (cached / "config.json").is_file():
        return checked_band(cfg, cached, log)
    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.pipeline.sft import SFTSpec, engine_pass_rate, sft_warmup

    tokenizer = build_task_tokenizer()
    model = build_model(cfg.model.preset, len(tokenizer), arch=cfg.model.arch, seed=cfg.train.seed,
                        tokenizer=tokenizer)
    sft = cfg.model.sft
    net = "" if sft.max_seconds is None else f", {sft.max_seconds:.0f} s as a safety net"
    log(f"SFT warm-up of a fresh '{cfg.model.preset}' model into pass-rate band {tuple(sft.target_band)} "
        f"(at most {sft.max_steps} steps{net}) ...")
    tmp = run_dir / f"{BASE_MODEL}.tmp"
    # probe the band the way RL samples (same lengths and interruptions)
    spec = SFTSpec(tuple(sft.target_band), sft.max_steps, sft.max_seconds, seed=cfg.train.seed)
    result = sft_warmup(task, model, tokenizer, spec, output_dir=tmp,
                        pass_rate_fn=partial(engine_pass_rate, params=sampling_params(cfg), env=env_spec(cfg),
                                             fp32_head=cfg.model.fp32_head_generator))  # fmt: skip
    log(f"SFT warm-up: pass rate {result.pass_rate:.3f} after {result.steps} steps, {result.seconds:.0f} s"
        + (f"; ended by model.sft.max_seconds = {sft.max_seconds:g}, so this model depends on the machine's speed"
           if result.timed_out else ""))
    tmp.rename(cached)  # whole directory or nothing: a kill mid-SFT redoes it
    return checked_band(cfg, cached, log)


def checked_band(cfg: Config, model_dir: Path, log=print) -> Path:
    """``model_dir``, where its SFT warm-up (``sft_result.json`` beside it) reached its band; a
    warm-up that missed it is one sentence (``ConfigError``) naming the band, the pass rate and
    what to change, or with ``model.sft.force`` a warning line (on the console and in the log)."""
    import json

    try:
        result = json.loads((model_dir / SFT_RESULT).read_text())
    except (OSError, ValueError):
        return model_dir
    if not isinstance(result, dict) or result.get("reached_band", True):
        return model_dir
    lo, hi = cfg.model.sft.target_band
    said = (f"the SFT warm-up in {model_dir} ended at pass rate {float(result.get('pass_rate', 0)):.3f} after "
            f"{result.get('steps', '?')} steps and {float(result.get('seconds', 0)):.0f} s, outside its band "
            f"[{lo:g}, {hi:g}]")  # fmt: skip
    if cfg.model.sft.force:
        log(f"warning: {said}; training from it anyway (--force).")
        return model_dir
    sft = cfg.model.sft
    more = (f"model.sft.max_seconds={2 * sft.max_seconds:g}" if result.get("timed_out") and sft.max_seconds
            else f"model.sft.max_steps={2 * sft.max_steps}")
    raise ConfigError(f"{said}, so RL would start from a model that does not do the task; give it more "
                      f"(--set {more}) and delete {model_dir}, or train from it anyway with --force.")


def load_model(cfg: Config, model_dir: Path, device_name: str, log=None):
    """``(model, tokenizer)``, with LoRA adapters when configured (the layers they adapt said
    to ``log`` in one line); a ``model.base`` that does not load is one sentence
    (ConfigError). On ``device_name`` (the plan's)."""
    from scalerl.models import load_pretrained
    from scalerl.models.load import without_dropout

    try:
        model, tokenizer = load_pretrained(model_dir, learner_dtype(cfg))
    except Exception as err:  # transformers and safetensors raise assorted errors on a bad model
        if cfg.model.base is None:
            raise
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"model.base {model_dir} does not load as a model ({text.rstrip('.')}).") from None
    without_dropout(model)  # the learner's train-mode forward must score as the generators sample
    if cfg.model.lora is not None:  # adapters on the frozen base: only they train and travel
        from scalerl.models.lora import apply_lora, resolve_targets

        try:
            spec = resolve_targets(model, lora_spec(cfg), "the model")
        except ValueError as err:  # targets or a rank the model cannot take (preflight says it first)
            raise ConfigError(f"{str(err).rstrip('.')}.") from None
        if log is not None:
            how = "auto: the decoder blocks' projections" if cfg.model.lora.targets == "auto" else "model.lora.targets"
            log(f"LoRA rank {spec.rank} on {', '.join(spec.targets)} ({how})")
        model = apply_lora(model, spec)
    return model.to(device_name), tokenizer


def resolved_lora(cfg: Config, model_dir: Path):
    """``model.lora`` resolved on ``model_dir``'s model (``models.lora.resolve_targets``): the
    targets and layouts the learner's peft model has, for roles that never build it."""
    if cfg.model.lora is None:
        return None
    from scalerl.models.lora import resolve_targets_of

    try:
        return resolve_targets_of(model_dir, lora_spec(cfg))
    except ValueError as err:  # preflight says it first, on model.base or the preset
        raise ConfigError(f"{str(err).rstrip('.')}.") from None


def learner_dtype(cfg: Config) -> str:
    """The learner's parameter dtype: always float32 master weights (and AdamW state). bf16
    and fp16 runs compute under autocast (``StepRules.autocast``; fp16 with loss scaling): a
    bf16 parameter would round away every AdamW update below half its spacing — at lr 5e-5,
    every weight with |w| ≥ 0.0156 and every norm gain (``gpu-review.md`` #7)."""
    return "float32"


def eval_specs(cfg: Config) -> tuple:
    """The validation evaluator, and the downstream one (the same task with
    ``eval.downstream_knobs``) when configured; both with fixed sampling seeds."""
    from scalerl.eval import EvalSpec
    from scalerl.eval_plan import eval_prompts

    e = cfg.eval
    val = EvalSpec("val", task_spec(cfg), sampling_params(cfg, e.temperature), e.k, eval_prompts(cfg),
                   seed=cfg.train.seed + 10_007, chat=chat_format(cfg), samples=cfg.log.samples,
                   pass_at=tuple(e.pass_at), env=env_spec(cfg), pass_threshold=cfg.task.pass_threshold)
    if e.downstream_knobs is None:
        return (val,)
    return val, replace(val, prefix="downstream", task=task_spec(cfg, dict(e.downstream_knobs)),
                        seed=cfg.train.seed + 20_011, samples=0)


def evaluators(cfg: Config, model, tokenizer) -> list:
    """The :func:`eval_specs` evaluators on the learner's own model (``eval.on=learner``),
    decoding on the device the model is on."""
    from scalerl.eval import build_evaluators
    from scalerl.rollout.torch_engine import engine_for

    engine = engine_for(model, tokenizer, fp32_head=cfg.model.fp32_head_generator)
    return build_evaluators(eval_specs(cfg), engine, tokenizer)


def make_pool(cfg: Config, task):
    from scalerl.data.curriculum import PromptPool

    c = cfg.curriculum
    return PromptPool(task.num_train, seed=cfg.train.seed,
                      retire_threshold=c.retire_threshold if c.no_positive_resampling else None,
                      history=c.history)


def make_scheduler(cfg: Config, pool) -> Scheduler:
    """Dispatch over ``pool`` under the lag policy (``pipeline.mode``, ``k``, P prompts a step)."""
    p = cfg.pipeline
    return Scheduler(LagPolicy(p.mode, p.k, p.prompts_per_step), pool, p.prompts_per_chunk)


def actor_spec(cfg: Config, plan: RunPlan, model_dir: Path, seed: int):
    """Every generator's spec: what it decodes and scores, on the plan's device and threads."""
    from scalerl.pipeline.generators.actor import ActorSpec

    return ActorSpec(
        model_dir=str(model_dir), task=task_spec(cfg), chat=chat_format(cfg),
        lora=resolved_lora(cfg, model_dir), params=sampling_params(cfg), generations=cfg.pipeline.generations,
        engine=cfg.rollout.engine, device=plan.generator_device, dtype=cfg.model.dtype,
        fp32_head=cfg.model.fp32_head_generator, seed=seed,
        threads=plan.generator_threads, evals=eval_specs(cfg) if plan.eval_on == "generator" else (),
        engine_kwargs=cfg.rollout.vllm.llm_kwargs() if cfg.rollout.engine == "vllm" else {},
        env=env_spec(cfg),
    )


def check_gpu_sharing(cfg: Config, plan: RunPlan, n_params: int) -> None:
    """Refuse, in one sentence, a vLLM generator and the learner that the plan puts on one GPU
    but that cannot share it (``pipeline.plan.gpus.shared_gpu_problem``)."""
    if cfg.rollout.engine != "vllm" or not set(plan.learner_gpus) & set(plan.generator_gpus):
        return
    from scalerl.pipeline.plan.gpus import shared_gpu_problem

    vllm = cfg.rollout.vllm
    problem = shared_gpu_problem(torch.cuda.get_device_properties(0).total_memory, n_params,
                                 vllm.gpu_memory_utilization, vllm.kv_cache_memory_bytes,
                                 4 if cfg.model.dtype == "float32" else 2)
    if problem:
        raise ConfigError(problem[0].upper() + problem[1:] + ".")


def make_backend(cfg: Config, plan: RunPlan, spec, layout, clock=lambda: 0, n_params: int = 0) -> Backend:
    """The plan's backend (``backends.BACKENDS``), built from the generators' spec, the
    published weights' ``layout`` and the plan. ``clock``: the learner's step, which the
    window rule of generator deaths counts in; ``n_params``: the learner's, for the GPU check."""
    check_gpu_sharing(cfg, plan, n_params)
    deaths = GeneratorDeaths(cfg.pipeline.generator_deaths, cfg.pipeline.generator_death_window, clock)
    return backend_class(plan.backend)(spec, layout, plan, deaths)


def validation_lines(cfg: Config, task) -> list[str]:
    """Where a task read from a file takes its validation prompts from (a generated task's
    validation set is drawn apart by design), and the evaluation plan (``eval_plan``)."""
    from scalerl.eval_plan import start_line

    note = getattr(task, "validation_note", None)  # a user's reward function wraps the task
    return [*([] if note is None else [note]), start_line(cfg, len(task.validation()))]


def make_logger(cfg: Config, run_dir: Path, start_step: int):
    from scalerl.metrics import (
        JsonlSink,
        MetricsLogger,
        SamplesSink,
        TensorBoardSink,
        WandbSink,
    )
    from scalerl.progress import progress_sink

    sinks: list = [JsonlSink(run_dir / METRICS)]
    if cfg.log.samples:
        sinks.append(SamplesSink(run_dir / SAMPLES))
    if cfg.log.tensorboard:
        sinks.append(TensorBoardSink(run_dir / TENSORBOARD, start_step))
    if cfg.log.wandb:
        sinks.append(WandbSink(cfg.log.wandb_project, cfg.name, cfg.model_dump(mode="json"), run_dir))
    if cfg.log.progress:
        sinks.append(progress_sink(cfg.train.steps, start_step, cfg.name, cfg.log.progress_every_s))
    return MetricsLogger(sinks)


def saved_template(cfg: Config, tokenizer) -> str | None:
    """The template an exported tokenizer must carry: a ``.jinja`` file the run rendered with
    (None: the tokenizer's own, or none)."""
    from scalerl.models.chat import template_text

    return None if cfg.model.chat_template in ("auto", "none") else template_text(chat_format(cfg), tokenizer)


def exporter(cfg: Config, run_dir: Path, model: torch.nn.Module, tokenizer):
    """``export(learner_state)``: write ``RUN_DIR/model`` from a checkpoint's learner state
    (its model weights; the adapters alone with LoRA, laid over the frozen base the live
    model holds)."""
    from scalerl.models.export import write_model_dir
    from scalerl.models.lora import is_lora

    template = saved_template(cfg, tokenizer)

    def export(learner_state: dict) -> None:
        state = learner_state["model"]
        full = model.state_dict() | dict(state) if is_lora(model) else state
        write_model_dir(run_dir / "model", model, tokenizer, state=full, dtype=cfg.export.dtype,
                        chat_template=template)

    return export



def batch_rules(cfg: Config):
    """What ``prepare_batch`` decides with (``pipeline.learner.rules``)."""
    from scalerl.pipeline.learner.rules import BatchRules

    length, adv = cfg.length, cfg.advantages
    return BatchRules(reward_form=cfg.reward_form, truncation_is_failure=cfg.truncation_fails,
                      pass_threshold=cfg.task.pass_threshold,
                      length_control=length.control, penalty_max_len=length.penalty_max_len,
                      penalty_cache=length.penalty_cache, truncation=length.truncation,
                      zero_variance=cfg.filters.zero_variance, advantage_norm=adv.norm, advantage_eps=adv.eps,
                      aggregation=cfg.loss.aggregation)


def step_rules(cfg: Config):
    """What ``backward_and_step`` computes with (``pipeline.learner.rules``)."""
    from scalerl.pipeline.learner.rules import StepRules

    o, correction = cfg.optim, cfg.loss.is_correction
    return StepRules(loss=cfg.loss.name, loss_hparams=cfg.loss.hparams(), correction_mode=correction.mode,
                     autocast=None if cfg.model.dtype == "float32" else cfg.model.dtype,
                     correction_band=correction.band(), temperature=cfg.sampling.temperature,
                     fp32_head=cfg.model.fp32_head_trainer, micro_batch=o.micro_batch,
                     micro_batch_tokens=o.micro_batch_tokens, head_chunk=o.head_chunk_tokens,
                     shared_prompt=o.shared_prompt, grad_clip=o.grad_clip)


def learner_rules(cfg: Config, pad_id: int):
    """Every rule a learner steps by (``pipeline.learner.rules``)."""
    from scalerl.pipeline.learner.rules import LearnerRules, OptimRules

    o = cfg.optim
    optim = OptimRules(lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay,
                       warmup_steps=o.warmup_steps)
    return LearnerRules(batch=batch_rules(cfg), step=step_rules(cfg), optim=optim, pad_id=pad_id,
                        float16=cfg.model.dtype == "float16")


def make_learner(cfg: Config, plan: RunPlan, model_dir: Path, log=print):
    """``(learner, tokenizer)``: the model in this process (``learner.world_size = 1``), or a
    :class:`~scalerl.pipeline.learner.group.ShardedLearner` whose ranks start with
    ``learner.start(sink)`` once the backend's sink exists (a CPU copy of the model stays here
    for evaluation and export); on the plan's devices, threads and nodes. ``log`` says the
    layers LoRA adapts."""
    from scalerl.compute import matmul_peak
    from scalerl.pipeline.learner.role import Learner

    world = plan.learner_ranks
    model, tokenizer = load_model(cfg, model_dir, device_name="cpu" if world > 1 else plan.device, log=log)
    rules = learner_rules(cfg, tokenizer.pad_token_id)
    bucket = cfg.learner.sync_bucket_mb << 20
    if world == 1:
        return Learner(model, rules, bucket), tokenizer
    from scalerl.pipeline.learner.group import ShardedLearner, free_port
    from scalerl.pipeline.learner.rank import RankSpec

    kind = plan.device
    spec = RankSpec(model_dir=str(model_dir), rules=rules, strategy=cfg.learner.strategy, world=world, device=kind,
                    dtype=learner_dtype(cfg), lora=resolved_lora(cfg, model_dir),
                    threads=plan.rank_threads, bucket_bytes=bucket, master_addr="127.0.0.1", master_port=free_port(),
                    seed=cfg.train.seed, timeout_s=max(1800.0, 2 * cfg.learner.sync_timeout_s))
    # the ranks compute under autocast over float32 masters: the peak is the compute dtype's
    peak = matmul_peak(kind, rules.step.autocast_dtype or model.dtype)
    learner = ShardedLearner(spec, model, transport=plan.rank_transport, peak_flop_s=peak,
                             sync_timeout_s=cfg.learner.sync_timeout_s, nodes=plan.rank_nodes)
    return learner, tokenizer
