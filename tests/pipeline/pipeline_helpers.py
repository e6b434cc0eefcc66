"""Helpers shared by the pipeline tests: record builders, a cheap run's overrides, one learner step."""

from __future__ import annotations

import numpy as np
import torch

from scalerl.types import Completion, Group


def make_group(prompt_id: int, versions: list[int], rewards: list[float], seq: int | None = None,
               length: int = 3) -> Group:
    """A group whose completion g has all tokens at ``versions[g]``."""
    completions = [
        Completion(
            prompt_tokens=np.array([1, 2], dtype=np.int64),
            tokens=np.full(length, 5, dtype=np.int64),
            logprobs=np.full(length, -1.0, dtype=np.float32),
            versions=np.full(length, v, dtype=np.int64),
            loss_mask=np.ones(length, dtype=bool),
            finish_reason="stop",
        )
        for v in versions
    ]
    return Group(prompt_id, completions, np.array(rewards, dtype=np.float32),
                 seq=prompt_id if seq is None else seq)


def run_overrides(model_dir, **extra) -> list[str]:
    """``--set`` overrides for a cheap run on the warm model and the small task."""
    base = {
        "model.base": str(model_dir),
        "task.knobs": "{min_digits: 1, max_digits: 2}",
        "sampling.max_new_tokens": 66,
        "length.interrupt_range": "[34, 40]",
        "length.answer_budget": 6,
        "eval.num_prompts": 64,
        "eval.schedule": "every",  # the tests' own eval.every cadence, not the forecast's plan
        "eval.k": 4,
        "log.progress": "false",
        "log.tensorboard": "false",
        "train.cores": 2,  # the roles split as on the 2-core machine, whatever CI runs on
        "train.max_minutes": "null",  # steps end a test run, never the wall clock
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


class CaptureGrads(torch.optim.SGD):
    """An optimiser that records the accumulated gradient and leaves the weights alone."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.grads = None

    def step(self, closure=None):
        self.grads = [p.grad.clone() if p.grad is not None else None for g in self.param_groups for p in g["params"]]


def learner_step(model, opt, sched, groups, cfg, pool=None, version: int = 0, pad_id: int = 0, scaler=None):
    """One learner step the way ``Learner.step`` takes it: ``prepare_batch`` with the config's
    :class:`BatchRules`, its pass rates into ``pool``, then ``backward_and_step`` with its
    :class:`StepRules`; the step's metrics."""
    from scalerl.pipeline import build
    from scalerl.pipeline.learner.batch import prepare_batch
    from scalerl.pipeline.learner.train_step import backward_and_step

    batch = prepare_batch(groups, build.batch_rules(cfg), version, pad_id)
    for prompt_id, rate in batch.pass_rates:
        if pool is not None:
            pool.record(prompt_id, rate)
    return backward_and_step(model, opt, sched, batch, build.step_rules(cfg), pad_id, scaler)

