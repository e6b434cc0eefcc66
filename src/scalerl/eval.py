"""Validation during training: mean@k pass rate of the current policy on held-out prompts.

The paper validates every 100 steps on 1,000 held-out prompts × 16 samples and fits the
sigmoid law to (cumulative GPU-hours, mean pass rate) (digest §4.3). Here: ``num_prompts`` ×
``k`` samples through ``scalerl.rollout.validate``, with the training sampling and length
control, and a FIXED sampling seed, so successive evaluations use common random numbers and
the curve's noise reflects the policy rather than the dice.

An :class:`EvalSpec` says what one evaluator measures, picklably, so the same evaluation can
be built on the learner's model (``eval.on=learner``) or inside a generator process
(``eval.on=generator``, ``scalerl.pipeline.evaluation``) from one source of truth.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace

from scalerl.data.tasks.spec import TaskSpec
from scalerl.models.chat import ChatFormat, PromptRenderer
from scalerl.rollout.env import EnvSpec
from scalerl.rollout.rollout import build_rollout
from scalerl.rollout.validate import validate
from scalerl.types import EvalResult, SamplingParams


@dataclass(frozen=True)
class EvalSpec:
    """One evaluator, picklable: which task variant, how it samples, how many samples."""

    prefix: str
    """``val`` for the validation set, ``downstream`` for the harder variant."""
    task: TaskSpec
    params: SamplingParams = SamplingParams()
    k: int = 4
    num_prompts: int | None = None
    seed: int = 0
    """The fixed sampling seed: every evaluation of a run draws the same random numbers."""
    chat: ChatFormat = ChatFormat()
    """How prompts are rendered: as the generators render them."""
    samples: int = 0
    """Samples kept for ``samples.jsonl`` (the validation set's only)."""
    pass_at: tuple[int, ...] = ()
    """k values of the unbiased pass@k logged beside mean@k (each at most ``k``)."""
    env: EnvSpec | None = None
    """The environment trajectories run in, as in training (None: single-turn)."""
    pass_threshold: float = 1.0
    """A sample passes when its reward as returned is at least this (``task.pass_threshold``)."""


def build_evaluators(specs, engine, tokenizer) -> list[Evaluator]:
    """One :class:`Evaluator` per spec, all on ``engine`` (whatever weights it holds)."""
    return [Evaluator(engine, PromptRenderer(tokenizer, s.chat), s.task.build(), s.params, s.k, s.num_prompts,
                      seed=s.seed, prefix=s.prefix, samples=s.samples, pass_at=s.pass_at, env=s.env,
                      pass_threshold=s.pass_threshold) for s in specs]


def run_evaluators(evaluators: list[Evaluator], stop=None) -> tuple[dict[str, float], int, tuple]:
    """Every evaluator's metrics merged, the tokens they processed (prefill + decode),
    which the compute meter counts as generation, and the samples they kept. ``stop()``
    true raises ``RolloutStopped`` (``rollout.validate``)."""
    metrics: dict[str, float] = {}
    tokens, samples = 0, ()
    for evaluator in evaluators:
        result = evaluator(stop)
        tokens += int(result.pop(f"{evaluator.prefix}_tokens"))
        samples += result.pop("samples")
        metrics |= result
    return metrics, tokens, samples


def evaluate(evaluators: list[Evaluator], step: int, version: int, stop=None) -> EvalResult:
    """Run ``evaluators`` on whatever weights their engine holds (policy ``version``, after
    learner step ``step``); timed, and stamped with the process that ran them."""
    start = time.perf_counter()
    metrics, tokens, samples = run_evaluators(evaluators, stop)
    return EvalResult(step, version, metrics, tokens, time.perf_counter() - start, os.getpid(), samples)


class Evaluator:
    """Evaluates whatever weights the engine holds (the learner's own model, in place)."""

    def __init__(self, engine, renderer: PromptRenderer, task, params: SamplingParams, k: int,
                 num_prompts: int | None, seed: int, prefix: str = "val", samples: int = 0,
                 pass_at: tuple[int, ...] = (), env: EnvSpec | None = None, pass_threshold: float = 1.0) -> None:
        self.engine, self.renderer, self.task, self.prefix = engine, renderer, task, prefix
        self.rollout = build_rollout(task, renderer.tokenizer, renderer.fmt, env)
        self.k, self.num_prompts, self.samples, self.pass_at = k, num_prompts, samples, pass_at
        self.params, self.pass_threshold = replace(params, seed=seed), pass_threshold
        examples = task.validation()[:num_prompts]
        self.prompt_tokens = sum(len(renderer.ids(task.prompt(ex))) for ex in examples) * k

    def _pass_at(self, result) -> dict:
        """``<prefix>_pass_at_<k>`` (unbiased) and its ``_stderr`` for every k in ``pass_at``."""
        out = {}
        for k in self.pass_at:
            out[f"{self.prefix}_pass_at_{k}"], out[f"{self.prefix}_pass_at_{k}_stderr"] = result.pass_at(k)
        return out

    def __call__(self, stop=None) -> dict:
        """``<prefix>_pass_rate`` = mean over prompts of the fraction of k samples that pass
        (reward as returned ≥ the pass threshold; ``val_`` for the validation set,
        ``downstream_`` for a harder variant), ``<prefix>_reward_mean`` the mean reward as
        returned, each with its standard error over prompts, and the ``samples`` kept;
        ``stop()`` true abandons it (``RolloutStopped``)."""
        result = validate(self.engine, self.task, params=self.params, renderer=self.renderer, k=self.k,
                          num_prompts=self.num_prompts, samples=self.samples, rollout=self.rollout, stop=stop,
                          pass_threshold=self.pass_threshold)
        p = self.prefix
        return {
            "samples": tuple(dict(s, evaluator=p) for s in result.samples),
            f"{p}_pass_rate": result.mean_at_k,
            f"{p}_stderr": result.stderr,  # over prompts: a prompt's k samples are correlated
            f"{p}_pass_at_k": float((result.pass_rates > 0).mean()) if result.pass_rates.size else math.nan,
            f"{p}_mean_at_k": result.mean_at_k,
            f"{p}_mean_at_k_stderr": result.stderr,
            f"{p}_reward_mean": result.reward_mean,
            f"{p}_reward_stderr": result.reward_stderr,
            **self._pass_at(result),
            f"{p}_truncation_rate": result.truncation_rate,
            f"{p}_len": result.mean_length,
            f"{p}_turns_mean": result.mean_turns,
            # prefill + decoded tokens, for the FLOPs count
            f"{p}_tokens": int(self.prompt_tokens + result.mean_length * result.num_samples),
        }
