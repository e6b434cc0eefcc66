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
from scalerl.models import build_model, build_task_tokenizer, load_pretrained, save_pretrained
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


@pytest.fixture(scope="module")
def nano_dir(tmp_path_factory):
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), tokenizer=tokenizer, seed=0)
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("nano"))


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


def test_local_run_with_the_vllm_engine(standin, nano_dir, tmp_path):
    k = 1
    cfg = load_config("scalerl", [
        f"model.base={nano_dir}", "rollout.engine=vllm", "pipeline.backend=local", "pipeline.mode=pipeline-rl",
        f"pipeline.k={k}", "pipeline.prompts_per_step=2", "pipeline.generations=2", "pipeline.prompts_per_chunk=1",
        "sampling.max_new_tokens=12", "length.control=none", "length.truncation=keep", "filters.zero_variance=false",
        "train.steps=3", "eval.every=100", "eval.num_prompts=2", "eval.k=1", "log.progress=false",
        "log.tensorboard=false", "train.checkpoint_every=100"])
    last = train(cfg, tmp_path / "run", log=lambda *_: None)
    assert last["step"] == 3 and last["version"] == 3
    trained = read_records(tmp_path / "run" / "metrics.jsonl")[1:]
    assert all(r["trained_tokens"] > 0 for r in trained)
    # versions were stamped per token: staleness is measured, and within the lag bound
    assert all(0 <= r["staleness_max"] <= k for r in trained)
    # the stand-in computes in fp32 like the trainer: generator and trainer agree
    assert all(0 <= r["mismatch_kl"] < 1e-6 and r["mismatch_logp_abs_max"] < 1e-3 for r in trained)


def test_choosing_vllm_without_vllm_is_one_sentence(tmp_path):
    run = subprocess.run([sys.executable, "-m", "scalerl", "train", "--set", "rollout.engine=vllm",
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert "needs vLLM, which is not installed" in run.stderr and "scalerl[vllm]" in run.stderr
