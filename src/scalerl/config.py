"""The one typed trainer config: every default of ``scalerl train`` lives here.

A run is described by one YAML file (a *recipe*). A recipe may ``extends:`` another recipe by
name (``src/scalerl/recipes/NAME.yaml``) or by path; the child is deep-merged over the parent,
so a leave-one-out variant is a few lines that revert one axis. ``--set key.sub=value``
overrides are parsed as YAML scalars (so ``1e-5`` is a float and ``null`` is None) and
merged last (the layering lives in ``scalerl.config_layers``). The merged mapping is validated by pydantic v2 with ``extra="forbid"`` and
frozen models, so an unknown or mistyped key is an error that names the key and the file
(or ``--set``) it came from; ``ConfigError`` carries that one sentence. A whole-config check
names the layers that set the fields it is about (``scalerl.config_errors``), and the YAML
itself is read with bounds on aliases and nesting, without repeated keys or non-plain tags
(``scalerl.config_yaml``), so a hostile recipe is a sentence too, not a memory blow-up.

Paths are absolute once loaded. A relative path is read from the folder of the YAML file that
names it (in a chain of ``extends``, each file's paths from that file's folder), and from the
working folder in a ``--set``; ``~`` is expanded; built-in names and ``package.module:NAME``
specs stay as they are. The fields that hold paths (``model.base``, ``model.chat_template``,
the file of a ``FILE.py:NAME`` in ``task.name``, ``task.reward_fn(s)`` and ``env.name``, the knobs
named ``path`` or ``*_path``, ``*_file``, ``*_dir``, ``forecast.prior_runs``) are listed once,
in ``scalerl.config_paths``. ``RUN_DIR/config.yaml`` therefore means the same from any folder.

The ``loss`` section lives in ``scalerl.config_loss``: each loss and each mismatch correction
keeps its own hyperparameter names there.

Task knobs belong to their task: a recipe, or the ``--set`` overrides taken together, that
switch ``task.name`` without giving ``task.knobs`` start from the new task's own defaults, never from the knobs
of the task it replaced; unknown or missing knobs are errors at load. NaN and inf are
rejected in every number.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, Strict, ValidationError, field_validator, model_validator

from scalerl.config_base import Frozen as _Frozen
from scalerl.config_env import EnvConfig
from scalerl.config_errors import explain

# the loading API is this module's: re-exported
from scalerl.config_layers import RECIPE_DIR as RECIPE_DIR
from scalerl.config_layers import ConfigError as ConfigError
from scalerl.config_layers import merged_layers
from scalerl.config_layers import parse_override as parse_override
from scalerl.config_layers import recipe_names as recipe_names
from scalerl.config_layers import resolve_recipe as resolve_recipe
from scalerl.config_learner import LearnerConfig
from scalerl.config_loss import LossConfig
from scalerl.config_model import ExportConfig, LoraConfig
from scalerl.config_paths import TEMPLATE_NAMES, absolute_layer
from scalerl.config_rollout import LengthConfig as LengthConfig
from scalerl.config_rollout import RolloutConfig as RolloutConfig
from scalerl.config_rollout import SamplingConfig as SamplingConfig
from scalerl.config_rollout import VLLMConfig as VLLMConfig
from scalerl.config_task import TaskConfig as TaskConfig

DEFAULT_RECIPE = "scalerl"
"""The recipe ``scalerl train`` runs when none is named."""


# ---------------------------------------------------------------------------- model / task


BUILT_MODEL_FIELDS = ("preset", "arch", "sft")
"""The ``model`` fields used only to build a model, none of them when ``model.base`` is set."""


class SFTConfig(_Frozen):
    """Supervised warm-up of a freshly built tiny model into a useful starting band."""

    target_band: tuple[float, float] = (0.2, 0.4)
    """Stop SFT once the validation pass rate lies in [lo, hi]; RL then has room to climb."""
    max_seconds: float = Field(120.0, gt=0)
    """Wall-clock cap on the warm-up; the model at that point is used whatever its pass rate."""


class ModelConfig(_Frozen):
    """The model a run starts from. With ``base`` set, ``preset``, ``arch`` and ``sft`` (which
    only build and warm up a model) are unused: they keep their defaults whatever a layer
    says, and ``RUN_DIR/config.yaml`` leaves them out (:data:`BUILT_MODEL_FIELDS`)."""

    base: str | None = None
    """Directory of a local Hugging Face causal LM to start from; None builds ``preset`` and
    runs the SFT warm-up (cached in the run directory)."""
    preset: str = "nano"
    """Size preset of ``scalerl.models.build_model`` used when ``base`` is None."""
    arch: Literal["llama", "qwen2"] = "llama"
    """Architecture family of the built model (used when ``base`` is None)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Dtype the model body computes in (the LM head follows ``fp32_head_*``). The learner
    always keeps float32 master weights and AdamW state: ``bfloat16`` computes its forward and
    backward under bf16 autocast and generators decode bf16 copies of each version;
    ``float16`` (CUDA only) the same in fp16, with dynamic loss scaling."""
    chat_template: str = "auto"
    """How prompts are rendered (``scalerl.models.chat``): ``auto`` applies the tokenizer's
    chat template whenever it has one (plain text otherwise), ``none`` never does, and a
    ``PATH.jinja`` file replaces the tokenizer's."""
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keywords passed to the chat template, e.g. ``{enable_thinking: false}``."""

    @model_validator(mode="before")
    @classmethod
    def _unused_when_based(cls, data: Any) -> Any:
        # dropped rather than refused: a recipe a user extends may set them for built models
        if isinstance(data, dict) and data.get("base") is not None:
            return {k: v for k, v in data.items() if k not in BUILT_MODEL_FIELDS}
        return data

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str) -> str:
        if value in TEMPLATE_NAMES:
            return value
        path = Path(value).expanduser()
        if path.suffix != ".jinja" or not path.is_file():
            raise ValueError(f"{value!r} is neither auto, none, nor an existing .jinja file")
        return str(path.resolve())
    fp32_head_trainer: bool = True
    """Compute the trainer's LM-head logits in FP32 (digest §2.4)."""
    fp32_head_generator: bool = True
    """Compute the generator's LM-head logits in FP32 (digest §2.4); both on is the recipe."""
    sft: SFTConfig = SFTConfig()
    """Warm-up settings, used only when ``base`` is None."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of every weight (``{rank, alpha, dropout, targets}``)."""


# ---------------------------------------------------------------------------- learner


class AdvantageConfig(_Frozen):
    norm: Literal["batch", "prompt", "none"] = "batch"
    """Advantage normalisation (digest §2.6): batch-level std is the recipe."""
    eps: float = 1e-6
    """Added to the std before dividing, so a tiny spread cannot blow up."""


class FilterConfig(_Frozen):
    zero_variance: bool = True
    """Drop prompts whose G rewards are all equal from the loss (digest §2.7)."""


class CurriculumConfig(_Frozen):
    no_positive_resampling: bool = True
    """Retire prompts whose historical pass rate reaches ``retire_threshold`` (digest §2.8);
    False samples all prompts uniformly every epoch (loo-npr)."""
    retire_threshold: float = Field(0.9, gt=0, le=1)
    """Pass rate at or above which a prompt is retired from later epochs."""
    history: Literal["last", "mean"] = "last"
    """Pass-rate history rule: the most recent visit, or the mean over visits."""


class OptimConfig(_Frozen):
    """AdamW (digest §2.1): constant LR after a linear warm-up, tiny eps, wd 0.01, no KL."""

    lr: float = Field(5e-5, gt=0)
    """Peak (constant) learning rate; the paper's 5e-7 is for an 8B model. For the nano model,
    1e-3 and 5e-4 collapsed within ~50 steps; 2e-4 climbed but collapsed by 0.1–0.23 within
    50 steps after its rise (1–3 of 8 prompts survive the zero-variance filter there, so a
    step is a noisy gradient); 1e-4 fell back 2.2–2.4 SE; 5e-5 rose and saturated on every
    seed (``bench/paper_claims/RESULTS.md``, stability)."""
    warmup_steps: int = Field(10, ge=0)
    """Linear warm-up length in optimiser steps (paper: 100)."""
    eps: float = 1e-15
    """Adam epsilon, tiny to avoid the epsilon-underflow effective clipping (paper)."""
    weight_decay: float = 0.01
    """Decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam moment decay rates."""
    grad_clip: float | None = 1.0
    """Max global gradient norm; None disables clipping (the paper gives no value)."""
    micro_batch: int = Field(64, ge=1)
    """Completions per forward/backward micro-batch; gradients accumulate over the batch."""
    micro_batch_tokens: int | None = Field(2048, ge=1)
    """On the CPU with ``shared_prompt``, also cap a micro-batch's forwarded token positions
    (padding included; ``pipeline.packing.forward_slots``), so long completions go in smaller
    micro-batches and activations stay cache-sized (a GPU ignores it); None: rows only."""
    shared_prompt: bool = True
    """Learner forward runs each distinct prompt once per micro-batch (its KV cache shared by
    the completions) on reordered, length-bucketed micro-batches; False: the plain
    prompt+completion forward of every row."""


# ---------------------------------------------------------------------------- pipeline


class PipelineConfig(_Frozen):
    mode: Literal["pipeline-rl", "ppo-off-policy", "sync"] = "pipeline-rl"
    """Off-policy scheme (digest §2.2): streaming with in-flight weights, k frozen-policy
    updates per generation round, or on-policy."""
    k: int = Field(8, ge=1)
    """Maximum lag: the learner never trains on a group more than k versions older than
    itself (pipeline-rl), or takes k updates per round (ppo-off-policy). Ignored by sync."""
    backend: Literal["local", "inprocess", "ray"] = "local"
    """``local``: generator and learner in separate spawned processes with shared-memory
    weights; ``inprocess``: one process, for tests and debugging; ``ray``: actors on the nodes
    of a Ray cluster (joined through ``RAY_ADDRESS``). The names are
    ``scalerl.pipeline.backends.BACKENDS``; what each can do is checked by the run plan."""
    num_generators: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """Generator roles (processes or actors); ``auto``: half the cores with ``local``
    (``scalerl.pipeline.cores``, printed at start), 1 otherwise."""
    generator_threads: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """torch threads of each generator; ``auto``: 1."""
    prompts_per_step: int = Field(8, ge=1)
    """P: prompts per optimiser step (paper: 48)."""
    generations: int = Field(8, ge=2)
    """G: completions per prompt (paper: 16)."""
    prompts_per_chunk: int = Field(4, ge=1)
    """Prompts a generator decodes together in one engine call."""
    generator_deaths: int = Field(3, ge=1)
    generator_death_window: int = Field(20, ge=1)
    """A generator that dies (``kill -9``, ``os._exit`` in a reward function or environment) is
    replaced from the newest published weights and given its unfinished prompts again
    (``generator_restarts`` in the records), until ``generator_deaths`` deaths fall within
    ``generator_death_window`` learner steps: then the run stops with one sentence naming
    the cause (``scalerl.pipeline.restarts``). ``generator_deaths: 1`` stops at the first."""


class EvalConfig(_Frozen):
    """Validation: mean@k pass rate on held-out prompts, with its standard error.

    The defaults are sized so one evaluation's standard error is ≤ 0.015 at a pass rate of
    0.5, below the differences the fits must resolve. The k samples of one prompt are
    correlated (intra-prompt correlation ρ ≈ 0.5, measured on the built-in task from the
    0.032–0.037 error of 128 prompts × 4), so ``SE ≈ sqrt(p(1 − p)(ρ + (1 − ρ)/k) / P)``:
    at p = 0.5 that needs P ≥ 1,111 prompts at k = 1 (1,111 samples), 833 at k = 2 (1,666)
    or 694 at k = 4 (2,776). With correlated samples one sample each of more prompts is the
    cheapest, so the default is k = 1 on the task's whole validation split (the arithmetic
    tasks draw 1,200 iid held-out prompts: SE ≤ 0.0144; a data set's split is its own size). Every 50 steps (the paper
    validates every 100) that is 1,200 evaluation samples per 3,200 training ones at the
    recipe's 8 × 8, about 1.2× what 128 × 4 every 25 steps cost; on the ``local`` backend a
    generator runs it (``on``), not the learner. ``bench/paper_claims/RESULTS.md`` has the
    measured errors.
    """

    every: int = Field(50, ge=1)
    """Validate every this many optimiser steps (and at step 0 and the last step)."""
    k: int = Field(1, ge=1)
    """Samples per validation prompt: the logged value is mean@k pass rate."""
    pass_at: tuple[int, ...] = ()
    """k values (each at most ``eval.k``) of the unbiased pass@k ``1 - C(n - c, k) / C(n, k)``
    logged as ``val_pass_at_<k>`` with ``val_pass_at_<k>_stderr`` over prompts."""

    @model_validator(mode="after")
    def _pass_at_within_k(self) -> EvalConfig:
        bad = [k for k in self.pass_at if not 1 <= k <= self.k]
        if bad:
            raise ValueError(f"eval.pass_at {bad[0]} must lie in [1, eval.k = {self.k}]: pass@k needs k samples per prompt")
        return self
    num_prompts: int | None = Field(None, ge=1)
    """Held-out prompts used (None: the task's whole validation split)."""
    temperature: float = Field(1.0, gt=0)
    """Validation sampling temperature."""
    on: Literal["auto", "generator", "learner"] = "auto"
    """Where evaluations run: ``generator`` (a generator evaluates a snapshot of the reported
    version between chunks, so the learner trains on; backends whose generators evaluate, ``local``), ``learner``
    (inline on the learner's model, which waits), or ``auto`` (``generator`` where the
    backend can). See ``scalerl.pipeline.evaluation``."""
    downstream_knobs: dict[str, Any] | None = None
    """Task knobs of a harder held-out variant evaluated beside the validation set at every
    evaluation (e.g. ``{min_digits: 3, max_digits: 3}`` for addition), logged as
    ``downstream_pass_rate`` / ``downstream_stderr``: this project's stand-in for the
    paper's AIME-24 check (digest §3), whether gains carry over to a harder distribution.
    None: no downstream evaluation."""


class ForecastConfig(_Frozen):
    """The live forecast: Eq. 1 refitted on the run so far after every evaluation."""

    enabled: bool = True
    """Refit the law after every evaluation (in a background thread, off the learner's
    critical path) and log ``forecast_*`` fields; ``scalerl fit`` reproduces them."""
    min_points: int = Field(6, ge=4)
    """Evaluations after step 0 before the first forecast (fewer cannot hold the law's
    three parameters plus a noise estimate)."""
    min_compute: float = Field(0.0, ge=0)
    """Fit only evaluations from this compute on (device-hours; the paper drops its first
    ~1.5k of 16k GPU-hours, §1.3); as ``scalerl fit --min-compute``."""
    metric: Literal["pass_rate", "reward_mean"] = "pass_rate"
    """The validation curve the forecast, the run's report and the early stops fit:
    ``val_pass_rate`` (the share of samples whose reward reaches ``task.pass_threshold``,
    mean@k over prompts, as the paper) or ``val_reward_mean`` (the mean reward as returned,
    for a graded reward). ``scalerl fit --y`` chooses the same for a finished run."""
    target: float | None = Field(None, gt=0, le=1)
    """A value of ``metric`` to forecast the compute for (``forecast_compute_to_target``)."""
    level: float = Field(0.95, gt=0, lt=1)
    """Coverage of every forecast interval."""
    margin: float = Field(0.02, ge=0)
    """A ceiling is identified when A's interval is within ±margin (paper: 0.02, §1.4)."""
    prior_runs: str | None = None
    """Finished runs (a folder, a log file or a glob) to learn a prior for Eq. 1 from; each
    forecast then also logs ``forecast_prior_*``, its forecast under that prior, as
    ``scalerl fit --prior-runs``. None: prior-free forecasts only."""


class LogConfig(_Frozen):
    tensorboard: bool = True
    """Also write TensorBoard event files under ``RUN_DIR/tb``."""
    wandb: bool = False
    """Also log to Weights & Biases (imported lazily; needs the ``wandb`` extra)."""
    wandb_project: str = "scalerl"
    """W&B project name."""
    progress: bool = True
    """Show the run's progress (step, reward, latest validation pass rate, pace, ETA): rich's
    live bar when stdout is a terminal, else plain lines (``progress_every_s``)."""
    progress_every_s: float = Field(30.0, ge=0)
    """With stdout not a terminal (a batch job, ``nohup``, ``> log``): print one whole progress
    line at most this often as steps are logged, the line again (with how long no step came)
    when this long passes without one, and the last state at the end; 0 prints every step."""
    samples: int = Field(8, ge=0)
    """Samples each evaluation appends to ``RUN_DIR/samples.jsonl`` (and TensorBoard's text)."""


class TrainConfig(_Frozen):
    steps: int = Field(900, ge=1)
    """Optimiser steps to train for."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the learner, the evaluator and the ``torch`` generators run; ``auto`` is
    ``cuda`` when a GPU is visible, else ``cpu``."""
    max_minutes: float | None = Field(6.5, gt=0)
    """Stop RL early (after a final eval and checkpoint) once it has run this many minutes
    (the SFT warm-up is not counted); None trains for all ``steps``."""
    checkpoint_every: int = Field(50, ge=1)
    """Write an atomic checkpoint every this many steps (and at the end)."""
    stop_wait_s: float = Field(30.0, ge=0)
    """After SIGTERM/SIGINT, how long the stop waits for evaluations still running on a
    generator before it ends without them (its checkpoint keeps them: a resume runs them
    again). An evaluation on the learner is abandoned between decode steps at once."""
    seed: int = Field(0, ge=0, lt=2**32)
    """Seed of model init, prompt order and sampling; in [0, 2^32), the range numpy's and
    torch's seeding both accept (-1 and 2^70 failed there, after the run folder was written)."""
    threads: Annotated[int, Field(ge=1)] | Literal["auto"] = "auto"
    """torch threads of the learner; ``auto``: the cores the generators leave
    (``scalerl.pipeline.cores``: 1 on two cores, so the two roles overlap)."""
    cores: int | None = Field(None, ge=1)
    """Cores this run splits between its roles; None: the CPUs this process may run on."""
    stop_if_ceiling_below: float | None = Field(None, gt=0, le=1)
    """Stop early (after a checkpoint) once the live forecast identifies the ceiling and
    its whole interval lies below this value of ``forecast.metric``. Never on an unidentified
    ceiling."""
    stop_if_target_unreachable: bool = False
    """Stop early once the live forecast identifies the ceiling and its whole interval lies
    below ``forecast.target``."""
    stop_if_p_reach_below: float | None = Field(None, gt=0, lt=1)
    """Stop early once the live forecast gives less than this probability that the expected
    curve reaches ``forecast.target`` within the run's budget (the compute at ``train.steps``
    or the ``train.max_minutes`` deadline; logged as ``forecast_p_reach``, ``scalerl plan``'s
    ``p_reach``). Unlike the two rules above it also acts on an unidentified ceiling: the
    probability already spreads over A's whole interval. None: never."""


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
        return self.task.user_scored or (self.env.name is not None and not self.env.name.startswith("scalerl."))

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
        if self.train.device == "cuda" or self.model.dtype == "float16":
            self._check_cuda()
        if self.eval.downstream_knobs is not None:
            from scalerl.data.tasks.registry import check_task

            try:
                check_task(self.task.name, self.eval.downstream_knobs)
            except ValueError as err:
                raise ValueError(f"eval.downstream_knobs: {err}") from None
        if self.learner.world_size > 1:
            self._check_learner_world()
        return self

    def _check_learner_world(self) -> None:
        """A ``learner.world_size`` the batch, the devices and the cores can serve."""
        import os

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
        if self.train.device == "cuda":
            import torch

            if torch.cuda.is_available() and n > torch.cuda.device_count():
                raise ValueError(f"learner.world_size={n} is more than the {torch.cuda.device_count()} "
                                 "visible GPUs (one per rank)")

    def _check_cuda(self) -> None:
        import torch  # only for runs that ask for a GPU

        fp16 = ("model.dtype=float16: fp16 training needs CUDA (dynamic loss scaling on a GPU); on CPU "
                "use bfloat16 or float32")
        if self.model.dtype == "float16" and self.train.device == "cpu":
            raise ValueError(fp16)
        if torch.cuda.is_available():
            return
        if self.train.device == "cuda":
            raise ValueError("train.device=cuda, but no CUDA device is visible (torch.cuda.is_available() "
                             "is False); use train.device=auto or cpu")
        raise ValueError(fp16)


# ---------------------------------------------------------------------------- loading


def load_config(
    recipe: str | Path | None = DEFAULT_RECIPE, overrides: list[str] | tuple[str, ...] = ()
) -> Config:
    """Load a recipe (name or path), apply ``--set`` overrides, validate, return a frozen Config.

    Raises ``ConfigError`` with one sentence naming the offending key and its file.
    """
    layers, merged = merged_layers(recipe, overrides, TaskConfig.model_fields["name"].default)
    try:
        return Config.model_validate(merged)
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
