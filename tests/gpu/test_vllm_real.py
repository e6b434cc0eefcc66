"""``VLLMEngine`` against a real vLLM on a real GPU (skipped unless both are there).

The stand-in tests prove the trainer's bookkeeping; these prove vLLM itself behaves as the
stand-in claims: version 0 loads and decodes, a weight swap mid-generation lands between
engine steps (tokens before and after carry their versions, and each token's log-prob is the
trainer's under the weights of its version), and three ``local`` pipeline steps run."""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (make install-gpu)")]


def _trainer_logprobs(model, prompt, tokens):  # (len(tokens),)
    from scalerl.models.forward import forward_logits

    ids = torch.tensor([list(prompt) + list(tokens)], device=model.device)
    with torch.no_grad():
        logits, _ = forward_logits(model, ids, fp32_head=True)
    logp = torch.log_softmax(logits[0, len(prompt) - 1 : -1].float(), dim=-1)
    return logp.gather(1, torch.tensor(tokens, device=model.device)[:, None])[:, 0].cpu()


def test_a_swap_mid_generation_lands_between_engine_steps(nano_dir):
    from scalerl.models import load_pretrained
    from scalerl.rollout.vllm_engine import VLLMEngine
    from scalerl.types import SamplingParams

    engine = VLLMEngine(str(nano_dir), dtype="float32", fp32_head=True, version=0, gpu_memory_utilization=0.2,
                        enforce_eager=True)
    old, tokenizer = load_pretrained(str(nano_dir))
    new, _ = load_pretrained(str(nano_dir))
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))

    def swap(eng, step):
        if step == 3:
            eng.update_weights({n: p.detach().cuda() for n, p in new.named_parameters()}, version=1)

    prompt = tokenizer.encode("add 12+7 =")
    (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=0), on_step=swap)
    assert c.versions.tolist() == [0, 0, 0] + [1] * (c.num_tokens - 3)
    old, new = old.cuda(), new.cuda()
    assert torch.allclose(torch.from_numpy(c.logprobs[:3]), _trainer_logprobs(old, prompt, c.tokens[:3].tolist())
                          [:3], atol=1e-3)
    assert torch.allclose(torch.from_numpy(c.logprobs[3:]), _trainer_logprobs(new, prompt, c.tokens.tolist())[3:],
                          atol=1e-3)


def test_three_local_pipeline_steps_with_vllm_generators(nano_dir, tmp_path):
    from scalerl.config import load_config
    from scalerl.metrics import read_records
    from scalerl.pipeline.run import train

    cfg = load_config("scalerl", [f"model.base={nano_dir}", "rollout.engine=vllm", "pipeline.backend=local",
                                  "pipeline.num_generators=1", "train.steps=3", "train.max_minutes=null",
                                  "eval.num_prompts=8", "eval.k=1", "rollout.vllm.gpu_memory_utilization=0.3",
                                  "log.progress=false", "log.tensorboard=false"])
    train(cfg, tmp_path / "run", log=lambda *_: None)
    records = read_records(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(r["staleness_max"] <= cfg.pipeline.k for r in records[1:])
