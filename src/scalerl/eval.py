"""Validation: mean@k pass rate of the current policy on held-out prompts (digest §4.3).

The paper validates every 100 steps on 1,000 held-out prompts × 16 samples and fits the
sigmoid law to (cumulative GPU-hours, mean pass rate). Here: ``num_prompts`` × ``k`` samples,
same sampling (and length control) as training, and a FIXED sampling seed, so successive
evaluations use common random numbers and the curve's noise reflects the policy, not the dice.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from scalerl.types import SamplingParams


class Evaluator:
    """Evaluates whatever weights the engine holds (the learner's own model, in place)."""

    def __init__(self, engine, tokenizer, task, params: SamplingParams, k: int,
                 num_prompts: int | None, seed: int) -> None:
        self.engine, self.task, self.k = engine, task, k
        examples = task.validation()
        self.examples = examples if num_prompts is None else examples[:num_prompts]
        if not self.examples:
            raise ValueError(f"task {task.name!r} has no validation prompts")
        self.prompts = [tokenizer.encode(task.prompt(ex)) for ex in self.examples]
        self.params = replace(params, seed=seed)

    def __call__(self) -> dict[str, float]:
        """``val_pass_rate`` = mean over prompts of the fraction of k samples that are correct."""
        flat = [p for p in self.prompts for _ in range(self.k)]
        completions = self.engine.generate(flat, self.params)
        correct = np.array([
            self.task.reward(c.text, self.examples[i // self.k]) > 0 for i, c in enumerate(completions)
        ]).reshape(len(self.examples), self.k)
        return {
            "val_pass_rate": float(correct.mean()),
            "val_pass_at_k": float(correct.any(axis=1).mean()),
            "val_truncation_rate": float(np.mean([c.finish_reason == "length" for c in completions])),
            "val_len": float(np.mean([c.num_tokens for c in completions])),
            "val_tokens": int(sum(c.num_tokens + len(c.prompt_tokens) for c in completions)),
        }
