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

import os
import time
from dataclasses import dataclass, field, replace

from scalerl.rollout.validate import validate
from scalerl.types import EvalResult, SamplingParams


@dataclass(frozen=True)
class EvalSpec:
    """One evaluator, picklable: which task variant, how it samples, how many samples."""

    prefix: str
    """``val`` for the validation set, ``downstream`` for the harder variant."""
    task_name: str
    task_knobs: dict = field(default_factory=dict)
    params: SamplingParams = SamplingParams()
    k: int = 4
    num_prompts: int | None = None
    seed: int = 0
    """The fixed sampling seed: every evaluation of a run draws the same random numbers."""


def build_evaluators(specs, engine, tokenizer) -> list[Evaluator]:
    """One :class:`Evaluator` per spec, all on ``engine`` (whatever weights it holds)."""
    from scalerl.data.tasks import get_task

    return [Evaluator(engine, tokenizer, get_task(s.task_name, **s.task_knobs), s.params, s.k, s.num_prompts,
                      seed=s.seed, prefix=s.prefix) for s in specs]


def run_evaluators(evaluators: list[Evaluator]) -> tuple[dict[str, float], int]:
    """Every evaluator's metrics merged, and the tokens they processed (prefill + decode),
    which the compute meter counts as generation."""
    metrics: dict[str, float] = {}
    tokens = 0
    for evaluator in evaluators:
        result = evaluator()
        tokens += int(result.pop(f"{evaluator.prefix}_tokens"))
        metrics |= result
    return metrics, tokens


def evaluate(evaluators: list[Evaluator], step: int, version: int) -> EvalResult:
    """Run ``evaluators`` on whatever weights their engine holds (policy ``version``, after
    learner step ``step``); timed, and stamped with the process that ran them."""
    start = time.perf_counter()
    metrics, tokens = run_evaluators(evaluators)
    return EvalResult(step, version, metrics, tokens, time.perf_counter() - start, os.getpid())


class Evaluator:
    """Evaluates whatever weights the engine holds (the learner's own model, in place)."""

    def __init__(self, engine, tokenizer, task, params: SamplingParams, k: int,
                 num_prompts: int | None, seed: int, prefix: str = "val") -> None:
        self.engine, self.tokenizer, self.task, self.prefix = engine, tokenizer, task, prefix
        self.k, self.num_prompts = k, num_prompts
        self.params = replace(params, seed=seed)
        examples = task.validation()[:num_prompts]
        self.prompt_tokens = sum(len(tokenizer.encode(task.prompt(ex))) for ex in examples) * k

    def __call__(self) -> dict[str, float]:
        """``<prefix>_pass_rate`` = mean over prompts of the fraction of k samples that are
        correct (``val_`` for the validation set, ``downstream_`` for a harder variant)."""
        result = validate(self.engine, self.task, params=self.params, tokenizer=self.tokenizer,
                          k=self.k, num_prompts=self.num_prompts)
        p = self.prefix
        return {
            f"{p}_pass_rate": result.mean_at_k,
            f"{p}_stderr": result.stderr,  # over prompts: a prompt's k samples are correlated
            f"{p}_pass_at_k": float((result.pass_rates > 0).mean()),
            f"{p}_truncation_rate": result.truncation_rate,
            f"{p}_len": result.mean_length,
            # prefill + decoded tokens, for the FLOPs count
            f"{p}_tokens": int(self.prompt_tokens + result.mean_length * result.num_samples),
        }
