"""The FP32 LM head (digest §2.4) under autocast: both operands as the generator's bf16 copy
holds them, multiplied in float32."""

from __future__ import annotations

import contextlib

import pytest
import torch

from scalerl.algo.logprobs import lm_head_logits


def test_the_fp32_head_under_bf16_autocast_multiplies_bf16_operands_in_float32():
    # 1 + 2^-10 is not a bf16 value (8 significant bits): it rounds to 1 in the generator's copy
    hidden = torch.tensor([[1.0 + 2.0**-10, 3.0]])  # (1, H=2)
    weight = torch.tensor([[1.0 + 2.0**-10, 1.0], [2.0, -1.0]])  # (V=2, H)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = lm_head_logits(hidden, weight)
    assert amp.dtype == torch.float32
    assert amp.tolist() == [[1.0 * 1.0 + 3.0 * 1.0, 1.0 * 2.0 - 3.0]]  # both rounded, then exact
    plain = lm_head_logits(hidden, weight)  # float32 masters outside autocast: no rounding
    assert plain[0, 0].item() == (1.0 + 2.0**-10) ** 2 + 3.0


class _CudaLooking(torch.Tensor):
    """A meta tensor that reports ``cuda:0`` as its device: whatever branch the head would
    take on a GPU, it takes here (no GPU, no memory)."""

    @property
    def device(self):
        return torch.device("cuda", 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_low_precision_step_backpropagates_through_the_fp32_head_on_cuda(monkeypatch, dtype):
    """gpu-review-2 N1: the head's CUDA path for bf16/fp16 operands was
    ``torch.mm(out_dtype=float32)``, which has no derivative in torch 2.13, so every bf16
    learner step on a GPU raised at ``backward()``. Forced onto the CUDA path on meta tensors,
    the head must build a graph whose backward gives grads in the operands' dtype (the old
    code fails here)."""
    # a CPU build has no CUDA autocast state: none is enabled, as in a plain bf16 step
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda *a: False)
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: contextlib.nullcontext())
    hidden = torch.empty(2, 3, 8, dtype=dtype, device="meta").as_subclass(_CudaLooking).requires_grad_()  # (N, T, H)
    weight = torch.empty(5, 8, dtype=dtype, device="meta").as_subclass(_CudaLooking).requires_grad_()  # (V, H)
    logits = lm_head_logits(hidden, weight)
    assert logits.dtype == torch.float32 and logits.shape == (2, 3, 5)
    upstream = torch.empty(2, 3, 5, dtype=torch.float32, device="meta")
    d_hidden, d_weight = torch.autograd.grad(logits, [hidden, weight], grad_outputs=upstream)
    assert d_hidden.dtype == dtype and d_weight.shape == (5, 8)


def test_the_tensor_core_product_has_no_derivative_in_this_torch():
    """Why the head upcasts instead: ``mm(out_dtype)`` is forward-only (the call N1 was)."""
    h = torch.empty(3, 8, dtype=torch.bfloat16, device="meta", requires_grad=True)
    w = torch.empty(5, 8, dtype=torch.bfloat16, device="meta", requires_grad=True)
    with pytest.raises(RuntimeError, match="derivative for aten::mm is not implemented"):
        torch.mm(h, w.t(), out_dtype=torch.float32).sum().backward()


def test_one_fp32_head_default_everywhere():
    """§2.4's FP32 head is every layer's default, written once (``algo.logprobs.FP32_HEAD``);
    the config's two switches say the same, and vLLM's engine no longer says otherwise."""
    import inspect

    from scalerl.algo.logprobs import FP32_HEAD
    from scalerl.config.model import ModelConfig
    from scalerl.models.forward import forward_logits
    from scalerl.pipeline.generators.actor import ActorSpec
    from scalerl.rollout.torch_engine import TorchEngine
    from scalerl.rollout.vllm_engine import VLLMEngine

    fields = ModelConfig.model_fields
    assert fields["fp32_head_trainer"].default is FP32_HEAD and fields["fp32_head_generator"].default is FP32_HEAD
    for fn in (forward_logits, TorchEngine.__init__, VLLMEngine.__init__):
        assert inspect.signature(fn).parameters["fp32_head"].default is FP32_HEAD, fn
    assert ActorSpec.__dataclass_fields__["fp32_head"].default is FP32_HEAD
