"""The shared forward: body + (FP32) head equals the model's own logits path."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from scalerl.algo.logprobs import lm_head_logits
from scalerl.models.forward import forward_hidden, forward_logits, head_params


def _tiny(dtype=torch.float32, tied=True, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(config).to(dtype).eval()


@torch.no_grad()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_dtype_head_equals_model_logits(dtype):
    model = _tiny(dtype)
    ids = torch.randint(0, 48, (3, 9))
    logits, _ = forward_logits(model, ids, fp32_head=False)
    assert logits.dtype == dtype
    assert torch.equal(logits, model(ids).logits)


@torch.no_grad()
def test_fp32_head_on_bf16_body_is_float32_matmul_of_the_same_hidden():
    model = _tiny(torch.bfloat16)
    ids = torch.randint(0, 48, (2, 7))
    logits, _ = forward_logits(model, ids, fp32_head=True)
    hidden, _ = forward_hidden(model, ids)
    weight = model.model.embed_tokens.weight  # tied: the head IS the embedding matrix
    assert head_params(model)[0] is weight
    assert logits.dtype == torch.float32
    torch.testing.assert_close(logits, hidden.float() @ weight.float().T, rtol=1e-6, atol=1e-6)
    # ... and it differs from the bf16 head, which rounds the product to bf16.
    assert not torch.equal(logits, model(ids).logits.float())


@torch.no_grad()
def test_untied_head_with_bias_is_used():
    model = _tiny(tied=False)
    model.lm_head = torch.nn.Linear(32, 48, bias=True)
    ids = torch.randint(0, 48, (2, 5))
    logits, _ = forward_logits(model, ids, fp32_head=False)
    torch.testing.assert_close(logits, model(ids).logits, rtol=0, atol=0)
    hidden, _ = forward_hidden(model, ids)
    torch.testing.assert_close(logits, lm_head_logits(hidden, model.lm_head.weight, model.lm_head.bias))


@torch.no_grad()
def test_left_padding_with_positions_and_incremental_cache_match_one_pass():
    model = _tiny()
    seq = torch.randint(0, 48, (1, 10))
    reference, _ = forward_logits(model, seq)  # (1, 10, V) one pass, no cache
    # Left-pad the same sequence by 3 inside a batch; positions restart at the first real token.
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), seq], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 10, dtype=torch.long)], 1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, cache = forward_logits(
        model, padded[:, :-2], attention_mask=mask[:, :-2], position_ids=positions[:, :-2], use_cache=True
    )
    torch.testing.assert_close(logits[:, 3:], reference[:, :-2], rtol=1e-5, atol=1e-5)
    # Two more tokens one at a time through the cache.
    for t in (11, 12):
        step, cache = forward_logits(
            model, padded[:, t : t + 1], attention_mask=mask[:, : t + 1],
            position_ids=positions[:, t : t + 1], past_key_values=cache, last_only=True,
        )
        torch.testing.assert_close(step[:, 0], reference[:, t - 3], rtol=1e-5, atol=1e-5)


def test_last_only_and_gradients_flow():
    model = _tiny()
    ids = torch.randint(0, 48, (2, 6))
    last, _ = forward_logits(model, ids, last_only=True)
    full, _ = forward_logits(model, ids)
    assert last.shape == (2, 1, 48)
    torch.testing.assert_close(last[:, 0], full[:, -1])
    full.logsumexp(-1).sum().backward()  # the trainer differentiates through this path
    assert model.model.embed_tokens.weight.grad is not None
