"""Config sections turned into run parts: the device a run uses and the learner's dtype."""

from __future__ import annotations

import pytest

from scalerl.config import ConfigError, load_config


def test_gpu_settings_without_a_gpu_are_one_sentence(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"train.device=cuda, but no CUDA device is visible"):
        load_config("scalerl", ["train.device=cuda"])
    with pytest.raises(ConfigError, match=r"model.dtype=float16: fp16 training needs CUDA"):
        load_config("scalerl", ["model.dtype=float16"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(ConfigError, match=r"fp16 training needs CUDA"):
        load_config("scalerl", ["model.dtype=float16", "train.device=cpu"])
    assert load_config("scalerl", ["model.dtype=float16"]).model.dtype == "float16"


def test_more_learner_ranks_than_visible_gpus_is_one_sentence(monkeypatch):
    """The CUDA-only rank check (config.runtime), forced on a CPU: one GPU visible, two ranks."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ranks = ["train.device=cuda", "learner.world_size=2", "train.cores=2"]
    with pytest.raises(ConfigError, match=r"learner.world_size=2 is more than the 1 visible GPUs \(one per rank\)"):
        load_config("scalerl", ranks)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert load_config("scalerl", ranks).learner.world_size == 2


def test_device_resolution():
    import torch

    from scalerl.pipeline import build
    from scalerl.pipeline.plan import build_plan

    assert build_plan(load_config("scalerl", ["train.device=cpu"])).device == "cpu"
    auto = build_plan(load_config("scalerl")).device
    assert auto == ("cuda" if torch.cuda.is_available() else "cpu")
    assert build.learner_dtype(load_config("scalerl", ["model.dtype=bfloat16"])) == "float32"  # masters
    assert build.step_rules(load_config("scalerl", ["model.dtype=bfloat16"])).autocast == "bfloat16"


def test_the_step_rules_keep_no_default_of_their_own():
    """The config owns every default: the rules a learner steps by repeat none of them (the
    step rules once wrote 8 a second time), and the builder sets every field from the config."""
    import dataclasses

    from scalerl.pipeline import build
    from scalerl.pipeline.learner.rules import BatchRules, OptimRules, StepRules

    for rules in (BatchRules, StepRules, OptimRules):
        assert [f.name for f in dataclasses.fields(rules)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING] == []
    cfg = load_config("scalerl", ["optim.micro_batch=7", "model.fp32_head_trainer=false"])
    step = build.step_rules(cfg)
    assert (step.micro_batch, step.fp32_head, step.temperature) == (7, False, cfg.sampling.temperature)
