"""Pipeline test fixtures: one torch thread per test process (the machine has two cores)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


SMALL_TASK = {"min_digits": 1, "max_digits": 2}
"""Addition small enough for SFT to reach a useful band in about a minute on one core, yet
with validation problems whose column facts also occur in training problems (with one-digit
operands only, every validation fact would be unseen in training and RL could not help)."""


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory):
    """A nano model SFT-warmed on small additions (shared by the run-level tests)."""
    from scalerl.data.tasks import get_task
    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.models.sft import sft_warmup

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("warm") / "model"
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), seed=0, tokenizer=tokenizer)
    sft_warmup(get_task("addition", **SMALL_TASK), model, tokenizer, target_band=(0.15, 0.4),
               max_seconds=120, seed=0, output_dir=out)
    return out


def run_overrides(model_dir, **extra) -> list[str]:
    """``--set`` overrides for a cheap run on the warm model and the small task."""
    base = {
        "model.base": str(model_dir),
        "task.knobs": "{min_digits: 1, max_digits: 2}",
        "sampling.max_new_tokens": 66,
        "length.interrupt_range": "[34, 40]",
        "length.answer_budget": 6,
        "eval.num_prompts": 64,
        "eval.k": 4,
        "log.progress": "false",
        "log.tensorboard": "false",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@pytest.fixture(scope="session")
def nano_dir(tmp_path_factory):
    """An untrained nano model with the task tokenizer: a real run, seconds long."""
    import torch

    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.models.load import save_pretrained

    torch.set_num_threads(1)
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), seed=0, tokenizer=tokenizer)
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("nano") / "model")
