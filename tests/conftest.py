"""Model fixtures shared by the run-level tests (pipeline and experiments)."""

from __future__ import annotations

import math

import pytest
import torch

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
    # stopped by steps, never by the clock: a busy machine gets the same warm model (the band
    # is reached at step ~175 here)
    sft_warmup(get_task("addition", **SMALL_TASK), model, tokenizer, target_band=(0.15, 0.4),
               max_seconds=math.inf, max_steps=1000, seed=0, output_dir=out)
    return out


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
