"""The CUDA path of the learner and of ``TorchEngine`` (marked ``gpu``; skipped without one).

Run by ``scripts/gpu_check.sh`` on a GPU machine; on CPU every test here is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scalerl.config import load_config
from scalerl.data.curriculum import PromptPool
from scalerl.models import build_model, build_task_tokenizer, save_pretrained
from scalerl.pipeline import build
from scalerl.pipeline.learner.batch import prepare_batch
from scalerl.pipeline.learner.train_step import backward_and_step
from scalerl.pipeline.run import train
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.runfolder import read_records
from scalerl.types import Group, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def learner_step(model, opt, sched, groups, cfg, pool, version, pad_id, scaler=None):
    batch = prepare_batch(groups, build.batch_rules(cfg), version, pad_id)
    return backward_and_step(model, opt, sched, batch, build.step_rules(cfg), pad_id, scaler)


TOKENIZER = build_task_tokenizer()


def _rollouts(model, fp32_head: bool):
    engine = TorchEngine(model, TOKENIZER, fp32_head=fp32_head, device="cuda", seed=0)
    prompts = [TOKENIZER.encode(f"add {i}+{i + 5} =") for i in range(2) for _ in range(4)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=1))
    return [Group(p, outs[4 * p: 4 * p + 4], np.array([1, -1, 1, -1], dtype=np.float32)) for p in range(2)]


@pytest.mark.parametrize("dtype, fp32_head, max_kl", [(torch.float32, True, 1e-6), (torch.bfloat16, True, 1e-3)])
def test_engine_and_learner_on_cuda_agree_and_train(dtype, fp32_head, max_kl):
    model = build_model("micro", len(TOKENIZER), seed=0, tokenizer=TOKENIZER, dtype=dtype).to("cuda")
    groups = _rollouts(model, fp32_head)
    assert all(c.num_tokens > 0 for g in groups for c in g.completions)
    cfg = load_config("scalerl", [f"model.fp32_head_trainer={fp32_head}", "length.truncation_is_failure=false",
                                  "length.truncation=keep", "filters.zero_variance=false"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = learner_step(model, opt, sched, groups, cfg, PromptPool(2, seed=0), 0, TOKENIZER.pad_token_id)
    assert np.isfinite(metrics["loss"]) and metrics["mismatch_kl"] < max_kl
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_float16_learner_with_loss_scaling_on_cuda():
    model = build_model("micro", len(TOKENIZER), seed=0, tokenizer=TOKENIZER).to("cuda")
    groups = _rollouts(model, True)
    cfg = load_config("scalerl", ["model.dtype=float16", "filters.zero_variance=false"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    metrics = learner_step(model, opt, sched, groups, cfg, PromptPool(2, seed=0), 0, TOKENIZER.pad_token_id,
                         scaler=torch.amp.GradScaler("cuda"))
    assert metrics["loss_scale"] > 0 and np.isfinite(metrics["grad_norm"])


def test_a_short_run_on_cuda(tmp_path):
    model = build_model("nano", len(TOKENIZER), seed=0, tokenizer=TOKENIZER)
    model_dir = save_pretrained(model, TOKENIZER, tmp_path / "model")
    cfg = load_config("scalerl", [f"model.base={model_dir}", "train.device=cuda", "pipeline.backend=inprocess",
                                  "train.steps=2", "eval.every=1000", "eval.schedule=every", "eval.num_prompts=4", "eval.k=1",
                                  "log.progress=false", "log.tensorboard=false", "pipeline.prompts_per_step=2",
                                  "pipeline.generations=4"])
    last = train(cfg, tmp_path / "run", log=lambda *_: None)
    assert last["step"] == 2 and all("mismatch_kl" in r for r in read_records(tmp_path / "run" / "metrics.jsonl")[1:])
