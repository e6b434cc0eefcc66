"""Validation during training: mean@k pass rate of the current policy on held-out prompts.

The paper validates every 100 steps on 1,000 held-out prompts × 16 samples and fits the
sigmoid law to (cumulative GPU-hours, mean pass rate) (digest §4.3). Here: ``num_prompts`` ×
``k`` samples through ``scalerl.rollout.validate``, with the training sampling and length
control, and a FIXED sampling seed, so successive evaluations use common random numbers and
the curve's noise reflects the policy rather than the dice.
"""

from __future__ import annotations

from dataclasses import replace

from scalerl.rollout.validate import validate
from scalerl.types import SamplingParams


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
