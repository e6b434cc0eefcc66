"""Pipeline test fixtures: one torch thread per test process (the machine has two cores)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


ONE_DIGIT = {"min_digits": 1, "max_digits": 1}
"""A task small enough that SFT reaches a useful band in seconds on one core."""


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory):
    """A nano model SFT-warmed on one-digit addition (shared by the run-level tests)."""
    from scalerl.data.tasks import get_task
    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.models.sft import sft_warmup

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm") / "model"
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), seed=0, tokenizer=tokenizer)
    sft_warmup(get_task("addition", **ONE_DIGIT), model, tokenizer, target_band=(0.15, 0.45),
               max_seconds=60, seed=0, output_dir=out)
    return out


def run_overrides(model_dir, **extra) -> list[str]:
    """``--set`` overrides for a cheap run on the warm model and the one-digit task."""
    base = {
        "model.base": str(model_dir),
        "task.knobs": "{min_digits: 1, max_digits: 1}",
        "sampling.max_new_tokens": 40,
        "length.interrupt_range": "[22, 26]",
        "length.answer_budget": 4,
        "eval.num_prompts": "null",
        "eval.k": 8,
        "log.progress": "false",
        "log.tensorboard": "false",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]
