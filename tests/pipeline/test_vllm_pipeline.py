"""``rollout.engine=vllm`` through the real pipeline, against the torch-backed stand-in for
vLLM's offline API (``tests/rollout/vllm_standin``): real vLLM cannot be installed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from scalerl.config import load_config
from scalerl.metrics import read_records
from scalerl.models import load_pretrained
from scalerl.models.forward import forward_logits
from scalerl.pipeline.run import train
from scalerl.types import SamplingParams

STANDIN = Path(__file__).parents[1] / "rollout" / "vllm_standin"


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))  # spawned generators inherit sys.path
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    yield
    sys.modules.pop("vllm", None)


def _trainer_logprobs(model, prompt, tokens):  # (len(tokens),) under softmax(logits)
    ids = torch.tensor([list(prompt) + list(tokens)])
    logits, _ = forward_logits(model, ids, fp32_head=True)
    logp = torch.log_softmax(logits[0, len(prompt) - 1 : -1].float(), dim=-1)
    return logp.gather(1, torch.tensor(tokens)[:, None])[:, 0]


def test_in_flight_load_switches_the_sampling_weights_mid_completion(standin, nano_dir):
    from scalerl.rollout.vllm_engine import VLLMEngine

    engine = VLLMEngine(str(nano_dir), dtype="float32", fp32_head=True, version=0)
    old, tokenizer = load_pretrained(str(nano_dir))
    new, _ = load_pretrained(str(nano_dir))
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))

    def swap(eng, step):
        if step == 3:
            eng.update_weights(dict(new.named_parameters()), version=1)

    prompt = tokenizer.encode("add 12+7 =")
    (c,) = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=0), on_step=swap)
    assert c.versions.tolist() == [0, 0, 0] + [1] * (c.num_tokens - 3)
    # every token's recorded log-prob is the one the weights of its version give
    want_old = _trainer_logprobs(old, prompt, c.tokens.tolist())[:3]
    want_new = _trainer_logprobs(new, prompt, c.tokens.tolist())[3:]
    assert torch.allclose(torch.from_numpy(c.logprobs[:3]), want_old, atol=1e-5)
    assert torch.allclose(torch.from_numpy(c.logprobs[3:]), want_new, atol=1e-5)


def _vllm_run(model_dir, out, *extra):
    cfg = load_config("scalerl", [
        f"model.base={model_dir}", "rollout.engine=vllm", "pipeline.backend=local", "pipeline.prompts_per_step=4",
        "pipeline.generations=4", "pipeline.prompts_per_chunk=1", "filters.zero_variance=false", "optim.lr=1e-3",
        "train.steps=3", "eval.every=100", "eval.num_prompts=2", "log.progress=false", "log.tensorboard=false",
        "train.checkpoint_every=100", *extra])
    last = train(cfg, out, log=lambda *_: None)
    return last, read_records(out / "metrics.jsonl")[1:]


def test_a_sync_run_samples_every_step_with_the_weights_the_trainer_just_published(standin, warm_model_dir,
                                                                                    tmp_path):
    last, trained = _vllm_run(warm_model_dir, tmp_path / "run", "pipeline.mode=sync", "sampling.max_new_tokens=40",
                              "length.control=none")
    assert last["step"] == 3 and last["version"] == 3
    # the weights do move (lr 1e-3 on a warm model), so a stand-in that kept its old weights,
    # or loaded them under the wrong version, would disagree with the trainer from step 2 on
    # (a stand-in that ignores the loads measures |Δ log p| of 0.8-1.3 here)
    assert any(r["grad_norm"] > 0 for r in trained[:-1])
    assert all(r["mismatch_fresh_frac"] == 1.0 and r["staleness_max"] == 0 for r in trained)
    assert all(r["mismatch_tokens"] > 0 and r["mismatch_logp_abs_max"] < 1e-4 for r in trained)


def test_a_pipeline_run_stamps_versions_and_interrupts_in_two_phases(standin, warm_model_dir, tmp_path):
    k = 1
    last, trained = _vllm_run(warm_model_dir, tmp_path / "run", "pipeline.mode=pipeline-rl", f"pipeline.k={k}",
                              "sampling.max_new_tokens=40", "length.control=interrupt",
                              "length.interrupt_range=[12,16]", "length.answer_budget=16")
    assert last["step"] == 3 and last["version"] == 3
    assert all(r["trained_tokens"] > 0 for r in trained) and any(r["grad_norm"] > 0 for r in trained)
    # versions were stamped per token: staleness is measured, and within the lag bound
    assert all(0 <= r["staleness_max"] <= k for r in trained)
    # tokens stamped with the trainer's own version agree with it (fp32 on both sides); which
    # tokens are stale depends on timing, so only those present are checked
    fresh = [r for r in trained if r["mismatch_fresh_frac"] > 0]
    assert fresh and all(r["mismatch_fresh_logp_abs_max"] < 1e-4 for r in fresh)
    # the warm model thinks past 12-16 tokens: the engine interrupts it, and it answers in a second phase
    assert max(r["interrupted_rate"] for r in trained) > 0


def test_the_config_s_vllm_options_reach_vllm_llm(standin, warm_model_dir):
    from scalerl.pipeline.actor import build_engine
    from scalerl.pipeline.build import actor_spec

    cfg = load_config("scalerl", [f"model.base={warm_model_dir}", "rollout.engine=vllm",
                                  "rollout.vllm.gpu_memory_utilization=0.3", "rollout.vllm.extra={max_model_len: 128}"])
    engine, _ = build_engine(actor_spec(cfg, warm_model_dir, seed=0))
    assert engine.llm.kwargs["gpu_memory_utilization"] == 0.3 and engine.llm.kwargs["max_model_len"] == 128
    assert engine.llm.kwargs["enforce_eager"] is False


def test_choosing_vllm_without_vllm_is_one_sentence(tmp_path):
    run = subprocess.run([sys.executable, "-m", "scalerl", "train", "--set", "rollout.engine=vllm",
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert "needs vLLM, which is not installed" in run.stderr and "scalerl[vllm]" in run.stderr
