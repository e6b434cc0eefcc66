"""VLLMEngine bookkeeping against a scripted stand-in for vLLM's offline engine.

Real vLLM needs a GPU, so these tests check only OUR logic: the step loop with ``on_step``,
version stamping, the two-phase forced interruption and finish reasons. The fake follows the
shapes of vLLM's ``RequestOutput`` / ``CompletionOutput`` / ``Logprob`` objects.
"""

import sys
import types

import pytest
import torch

from scalerl.types import SamplingParams

from .tiny import make_tokenizer
from .vllm_standin.vllm import (  # the torch-backed stand-in; scripted here
    Engine,
    Logprob,
    sampling_params,
)

EOS, CLOSE, MARK = 1, 3, 20  # MARK in a prompt: the fake closes its thinking at once


class FakeEngine(Engine):
    """One token per request per step. Token rule: ``</think>`` first if the prompt holds
    MARK; EOS once ``</think>`` is in the context and one answer token was written; else
    filler ``40 + step``. Log-prob of every sampled token: ``-weight``; of prompt tokens −2."""

    def _sample(self, r):
        context = r["prompt"] + r["out"]
        if MARK in r["prompt"] and not r["out"] and CLOSE not in context:
            token = CLOSE
        else:
            after = len(context) - 1 - context.index(CLOSE) if CLOSE in context else -1
            token = EOS if after >= 1 else 40 + len(r["out"]) % 10
        return token, -self.llm.weight, [None] + [{t: Logprob(-2.0)} for t in r["prompt"][1:]]

    def _stopped(self, r, token):
        return token == EOS


class FakeLLM:
    def __init__(self, model, dtype, seed, **kwargs):
        self.kwargs, self.weight, self.resets = kwargs, 0.5, 0
        self.llm_engine = FakeEngine(self)
        worker_model = types.SimpleNamespace(load_weights=self._load)
        self.worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=worker_model))
        self.llm_engine.model_executor = types.SimpleNamespace(driver_worker=self.worker)  # in-process

    def _load(self, weights):
        self.weight = float(dict(weights)["w"])

    def get_tokenizer(self):
        return make_tokenizer()

    def collective_rpc(self, fn, args=()):
        return [fn(self.worker, *args)]

    def reset_prefix_cache(self):
        """As vLLM: refused while a request holds KV blocks."""
        if self.llm_engine.requests:
            return False
        self.resets += 1
        return True


@pytest.fixture
def engine(monkeypatch):
    fake = types.ModuleType("vllm")
    fake.__version__ = "0.32.0"
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling_params)
    from scalerl.rollout.vllm_engine import VLLMEngine

    return VLLMEngine("some/model")


def test_logprobs_mode_and_plain_generation(engine):
    assert engine.llm.kwargs["logprobs_mode"] == "processed_logprobs"
    assert engine.llm.kwargs["async_scheduling"] is False  # one engine step per step() call
    (c,) = engine.generate([[5, 6]], SamplingParams(max_new_tokens=6, seed=0))
    assert c.tokens.tolist() == [40, 41, 42, 43, 44, 45] and c.finish_reason == "length"
    assert c.logprobs.tolist() == [-0.5] * 6 and c.loss_mask.all()


def test_weight_swap_from_on_step_stamps_later_tokens(engine):
    def swap(eng, step):
        if step == 2:
            eng.update_weights({"w": torch.tensor(2.0)}, version=9)

    (c,) = engine.generate([[5, 6]], SamplingParams(max_new_tokens=5, seed=0), on_step=swap)
    assert c.versions.tolist() == [0, 0, 9, 9, 9]
    assert c.logprobs.tolist() == [-0.5, -0.5, -2.0, -2.0, -2.0]  # later tokens: new weights


def test_a_prefix_cache_reset_refused_mid_generation_is_retried_before_new_requests(engine):
    def swap(eng, step):
        if step == 2:
            eng.update_weights({"w": torch.tensor(2.0)}, version=1)

    engine.generate([[5, 6]], SamplingParams(max_new_tokens=5, seed=0), on_step=swap)
    assert engine.llm.resets == 0 and engine._prefix_stale  # the request held its blocks
    engine.generate([[5, 6]], SamplingParams(max_new_tokens=2, seed=0))
    assert engine.llm.resets == 1 and not engine._prefix_stale  # reset before the new request


def test_an_engine_core_in_another_process_is_refused(monkeypatch, engine):
    import scalerl.rollout.vllm_engine as ve

    class Multiprocess(FakeLLM):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self.llm_engine.model_executor  # what vLLM's SyncMPClient gives: no executor here

    monkeypatch.setattr(sys.modules["vllm"], "LLM", Multiprocess)
    with pytest.raises(ValueError, match="engine core in another process"):
        ve.VLLMEngine("some/model")
    assert ve.os.environ[ve.IN_PROCESS_ENV] == "0"


def test_two_phase_interruption(engine):
    phrase = engine.tokenizer.encode(SamplingParams().interruption_phrase, add_special_tokens=False)
    params = SamplingParams(max_new_tokens=40, interrupt_range=(4, 4), answer_budget=5, seed=0)
    forced, closed = engine.generate([[5, 6], [MARK, 6]], params)
    # Row 0 never closes: 4 thinking tokens, the phrase (masked, scored by prompt_logprobs),
    # then an answer that ends in EOS -> "interrupted".
    n = len(phrase)
    assert forced.tokens[4 : 4 + n].tolist() == phrase
    assert forced.loss_mask.tolist() == [True] * 4 + [False] * n + [True, True]
    assert forced.logprobs[4 : 4 + n].tolist() == [-2.0] * n
    assert forced.tokens[-1] == EOS and forced.finish_reason == "interrupted"
    # Row 1 closes at once, so it just ends (EOS after one answer token): a normal "stop".
    assert closed.tokens.tolist() == [CLOSE, 41, EOS] and closed.finish_reason == "stop"
    assert closed.loss_mask.all()


def test_interruption_with_no_room_for_the_answer_is_length(engine):
    params = SamplingParams(max_new_tokens=8, interrupt_range=(4, 4), answer_budget=5, seed=0)
    (c,) = engine.generate([[5, 6]], params)
    assert c.num_tokens == 8 and c.finish_reason == "length"
    assert c.loss_mask.tolist() == [True] * 4 + [False] * 4


def test_fp32_head_through_vllms_own_option_or_float32(monkeypatch, engine):
    import scalerl.rollout.vllm_engine as ve

    monkeypatch.setattr(ve, "fp32_head_supported", lambda: False)
    with pytest.raises(ValueError, match=r"vLLM 0.32.0 has no float32 head for generation models"):
        ve.VLLMEngine("some/model", fp32_head=True)
    assert ve.VLLMEngine("some/model", fp32_head=True, dtype="float32").fp32_head
    monkeypatch.setattr(ve, "fp32_head_supported", lambda: True)
    eng = ve.VLLMEngine("some/model", fp32_head=True, hf_overrides={"rope_theta": 1.0})
    assert eng.llm.kwargs["hf_overrides"] == {"rope_theta": 1.0, "head_dtype": "float32"}


def test_missing_or_old_vllm_is_one_sentence(monkeypatch):
    from scalerl.rollout.vllm_engine import VLLMEngine
    from scalerl.rollout.vllm_support import check_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(ImportError, match=r"needs vLLM, which is not installed; .*scalerl\[vllm\]"):
        VLLMEngine("some/model")
    old = types.ModuleType("vllm")
    old.__version__ = "0.9.1"
    monkeypatch.setitem(sys.modules, "vllm", old)
    with pytest.raises(ValueError, match="needs vLLM >= 0.28.0; found 0.9.1"):
        check_vllm()
    old.__version__ = "0.33.0"  # pins torch 2.14
    with pytest.raises(ValueError, match=r"up to 0.33.0 \(exclusive\).*found 0.33.0"):
        check_vllm()
    old.__version__ = "0.30.0"
    old.LLM, old.SamplingParams = type("LLM", (), {"get_tokenizer": None}), object
    with pytest.raises(ValueError, match="vLLM 0.30.0 lacks vllm.LLM.collective_rpc, .reset_prefix_cache"):
        check_vllm()


def test_a_pre_release_suffix_adds_no_digits_to_the_version():
    from scalerl.rollout.vllm_support import MIN_VERSION, _version_tuple

    assert _version_tuple("0.27.1rc3") == (0, 27, 1) < MIN_VERSION  # not 0.27.13
    assert _version_tuple("0.10.2rc1") == _version_tuple("0.10.2.dev3") == (0, 10, 2)
    assert _version_tuple("0.11.0+cu128") == (0, 11, 0) and _version_tuple("dev") == ()


def test_multi_turn_episodes_run_on_the_vllm_engine(engine):
    """The multi-turn rollout drives vLLM as it drives the torch engine: one request per
    turn on the ids so far, the observation appended between turns, masked."""
    from pathlib import Path

    from scalerl.data.tasks.base import Example
    from scalerl.models.chat import ChatFormat
    from scalerl.rollout.env import EnvSpec
    from scalerl.rollout.rollout import build_rollout

    mark = engine.tokenizer.decode([MARK])  # the fake closes its thinking, answers, then EOS
    spec = EnvSpec(f"{Path(__file__).with_name('envs.py')}:Scripted", {"prompt": f"w3 {mark}"}, 4, 64, "sum", "tool")
    [group] = build_rollout(None, engine.tokenizer, ChatFormat("none"), spec).run(
        engine, [Example(0, "p", "1")], 2, SamplingParams(max_new_tokens=8, seed=0))
    for c in group.completions:
        assert [t.role for t in c.turns] == ["model", "env", "model", "env", "model"]
        assert c.tokens[: c.turns[0].end].tolist() == [CLOSE, 41, EOS]
        assert not c.loss_mask[c.turns[1].start : c.turns[1].end].any() and c.loss_mask[: c.turns[0].end].all()
    assert group.rewards.tolist() == [1.5, 1.5]
