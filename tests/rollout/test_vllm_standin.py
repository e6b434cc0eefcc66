"""The vLLM stand-in behaves as vLLM 0.32 does where the trainer could go wrong
(``gpu-review.md`` #22): a multiprocess engine core decodes ahead and turns ``collective_rpc``
tensors into lists; the prefix cache refuses to reset while requests hold blocks; prompt
log-probs are raw."""

from __future__ import annotations

import time
import types

import pytest
import torch

from .vllm_standin import vllm


def _params(**kw):
    base = dict(temperature=2.0, max_tokens=6, stop=[], prompt_logprobs=0, seed=1)
    return types.SimpleNamespace(**(base | kw))


def test_the_default_engine_core_decodes_ahead_and_sends_tensors_as_lists(nano_dir, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    llm = vllm.LLM(str(nano_dir))
    assert not hasattr(llm.llm_engine, "model_executor")  # VLLMEngine refuses this mode
    got = llm.collective_rpc(lambda worker, items: items, args=([("w", torch.ones(2))],))[0]
    assert got == [["w", ["float32", [2], torch.ones(2).numpy().tobytes()]]]  # not a tensor: load_weights fails
    llm.llm_engine.add_request("0", {"prompt_token_ids": [5, 6]}, _params(max_tokens=8))
    first = llm.llm_engine.step()
    deadline = time.monotonic() + 300
    while llm.llm_engine.requests and time.monotonic() < deadline:  # the core goes on, unasked
        time.sleep(0.01)
    assert not llm.llm_engine.requests  # finished with one step() called: it decoded ahead
    assert len(first[0].outputs[0].token_ids) >= 1 and llm.llm_engine.outputs.qsize() >= 1


def test_in_process_the_client_steps_the_engine_and_resets_only_when_idle(nano_dir, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    llm = vllm.LLM(str(nano_dir))
    assert hasattr(llm.llm_engine, "model_executor")
    sent = torch.ones(2)
    assert llm.collective_rpc(lambda worker, t: t, args=(sent,))[0] is sent  # live objects
    llm.llm_engine.add_request("0", {"prompt_token_ids": [5, 6, 7]}, _params())
    (out,) = llm.llm_engine.step()
    assert len(out.outputs[0].token_ids) == 1  # exactly one engine step per call
    assert llm.reset_prefix_cache() is False  # a request still holds its blocks
    while llm.llm_engine.has_unfinished_requests():
        llm.llm_engine.step()
    assert llm.reset_prefix_cache() is True
    # prompt log-probs come from the raw logits, not softmax(logits / τ)
    with torch.no_grad():
        logits = llm.model(torch.tensor([[5, 6, 7]])).logits[0].float()
    raw = torch.log_softmax(logits, dim=-1)
    assert out.prompt_logprobs[1][6].logprob == pytest.approx(float(raw[0, 6]), abs=1e-5)
    assert out.prompt_logprobs[2][7].logprob == pytest.approx(float(raw[1, 7]), abs=1e-5)
