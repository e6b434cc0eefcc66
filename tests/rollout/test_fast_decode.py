"""The lean decode step against the transformers path it replaces (the plain reference)."""

import numpy as np
import pytest
import torch

from scalerl.rollout import fast_decode
from scalerl.rollout.torch_engine import TorchEngine
from scalerl.types import SamplingParams

from .tiny import make_model

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [20], [30, 31, 32, 33]]


def _both(model_factory, tokenizer, params, on_step=None):
    fast = TorchEngine(model_factory(), tokenizer, fast=True)
    plain = TorchEngine(model_factory(), tokenizer, fast=False)
    assert fast.lean is not None and plain.lean is None
    return fast.generate(PROMPTS, params, on_step=on_step), plain.generate(PROMPTS, params, on_step=on_step)


def test_supports_llama_and_qwen2_but_not_dynamic_rope():
    assert fast_decode.supports(make_model(arch="llama"))
    assert fast_decode.supports(make_model(arch="qwen2"))
    model = make_model()
    model.model.rotary_emb.rope_type = "dynamic"
    assert not fast_decode.supports(model)
    assert TorchEngine(model, tokenizer=_Tok()).lean is None


class _Tok:
    eos_token_id, pad_token_id = 1, 0

    def encode(self, text, add_special_tokens=False):
        return [3]


def test_in_place_weight_writes_mid_decode_are_seen(tokenizer):
    """An optimizer-style in-place write (not via update_weights) at step 4 re-fuses the
    lean path's concatenated weights, so it matches the transformers path exactly."""

    def scale(engine, step):
        if step == 4:
            with torch.no_grad():
                for p in engine.model.parameters():
                    p.mul_(1.2)

    fast, plain = _both(make_model, tokenizer, SamplingParams(max_new_tokens=12, seed=3), on_step=scale)
    unscaled = TorchEngine(make_model(), tokenizer).generate(PROMPTS, SamplingParams(max_new_tokens=12, seed=3))
    for a, b, u in zip(fast, plain, unscaled):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        np.testing.assert_array_equal(a.tokens[:4], u.tokens[:4])
        changed = a.num_tokens != u.num_tokens or np.abs(a.logprobs - u.logprobs).max() > 1e-3
        assert changed  # the write really took effect


def test_weights_written_between_calls_are_seen(model, tokenizer):
    engine = TorchEngine(model, tokenizer)
    params = SamplingParams(max_new_tokens=10, seed=0)
    before = engine.generate(PROMPTS, params)
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight.mul_(-1.0)
    after = engine.generate(PROMPTS, params)
    reference = TorchEngine(model, tokenizer, fast=False).generate(PROMPTS, params)
    for a, r in zip(after, reference):
        np.testing.assert_allclose(a.logprobs, r.logprobs, atol=1e-5)
    assert any(np.abs(a.logprobs - b.logprobs).max() > 1e-3 for a, b in zip(after, before))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_bf16_body_stays_close_to_the_transformers_path(tokenizer, arch):
    fast, plain = _both(
        lambda: make_model(arch=arch, dtype=torch.bfloat16), tokenizer, SamplingParams(max_new_tokens=8, seed=1)
    )
    for a, b in zip(fast, plain):  # same kernels up to bf16 rounding: first tokens agree
        assert a.tokens[0] == b.tokens[0]
        assert abs(float(a.logprobs[0] - b.logprobs[0])) < 0.05
