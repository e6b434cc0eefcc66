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


def _head_case(seed: int = 0, N: int = 3, T: int = 37, H: int = 64, V: int = 1000):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, T, H, generator=g).requires_grad_()  # (N, T, H)
    weight = (torch.randn(V, H, generator=g) / H**0.5).requires_grad_()  # (V, H)
    bias = torch.randn(V, generator=g).requires_grad_()  # (V,)
    tokens = torch.randint(0, V, (N, T), generator=g)  # (N, T)
    upstream = torch.randn(N, T, generator=g, dtype=torch.float64)  # ∂L/∂logp
    return hidden, weight, bias, tokens, upstream


def _scored(hidden, weight, bias, tokens, upstream, tau, chunk):
    from scalerl.algo.logprobs import head_logprobs

    logp, entropy = head_logprobs(hidden, weight, bias, tokens, temperature=tau, chunk=chunk)
    grads = torch.autograd.grad((logp.double() * upstream).sum(), [hidden, weight, bias])
    return logp.detach(), entropy, grads


@pytest.mark.numerics  # a derived bound: once more on another instruction set (tests/README.md)
def test_the_chunked_head_equals_the_whole_one_to_float32_rounding():
    """``head_logprobs`` with ``chunk`` scores each position as the whole head does; only a
    BLAS's blocking and the sum of ∂L/∂W over chunks may round differently. The bounds, from
    ``tests/numerics.py``'s rounding model (``u = 2^-24``, λ its safety factor), two
    implementations each rounding once:
    - a logit, a dot product of length H: ``e_z = λ √H u max|z|``, ``max|z| ≤ (|h|·|W_v| + |b|)/τ``;
    - a log-prob ``z_y − lse(z)``: ``δ = 2 (2 e_z) + 2 λ √V u`` (lse is 1-Lipschitz, its sum of V terms);
    - the entropy ``lse − Σ p z``: ``2 (1 + max|z|) δ`` (p's relative error is at most δ);
    - ∂L/∂h ``= Σ_v dZ_v W_v`` and ∂L/∂W ``= Σ_m dZ_m h_m`` with ``dZ = g (p − 1_y) / τ``: p's error
      ``|g| p δ / τ`` carried through ``|W|`` (resp. ``|h|``), plus ``2 λ √V u`` (resp. ``√M``) of ``|dZ|`` through them."""
    from tests.numerics import LAMBDA, U

    hidden, weight, bias, tokens, upstream = _head_case()
    N, T, H = hidden.shape
    V, M, tau = weight.shape[0], N * T, 0.7
    whole = _scored(hidden, weight, bias, tokens, upstream, tau, None)
    for chunk in (1, 16, 50, M - 1):
        parts = _scored(hidden, weight, bias, tokens, upstream, tau, chunk)
        h64, w64, b64 = hidden.detach().double().reshape(M, H), weight.detach().double(), bias.detach().double()
        z = (h64 @ w64.T + b64) / tau  # (M, V) the exact logits, nearly
        p = torch.softmax(z, dim=-1)
        dz = upstream.reshape(M, 1) * (p - torch.nn.functional.one_hot(tokens.reshape(M), V)) / tau  # (M, V)
        z_max = float((h64.norm(dim=1)[:, None] * w64.norm(dim=1)[None, :] + b64.abs()).max()) / tau
        e_z = LAMBDA * H**0.5 * U * z_max
        delta = 2 * (2 * e_z) + 2 * LAMBDA * V**0.5 * U
        p_err = upstream.abs().reshape(M, 1) * p * delta / tau  # (M, V)
        bounds = [delta, 2 * (1 + z_max) * delta,
                  p_err @ w64.abs() + 2 * LAMBDA * V**0.5 * U * (dz.abs() @ w64.abs()),  # (M, H)
                  p_err.T @ h64.abs() + 2 * LAMBDA * M**0.5 * U * (dz.abs().T @ h64.abs()),  # (V, H)
                  p_err.sum(0) + 2 * LAMBDA * M**0.5 * U * dz.abs().sum(0)]  # (V,)
        got = [parts[0], parts[1], *parts[2]]
        want = [whole[0], whole[1], *whole[2]]
        for name, a, b, bound in zip(["logp", "entropy", "d_hidden", "d_weight", "d_bias"], got, want, bounds):
            diff = (a.double() - b.double()).abs().reshape(-1)
            assert bool((diff <= torch.as_tensor(bound).reshape(-1)).all()), (chunk, name, float(diff.max()))


def test_the_chunked_head_scores_the_temperature_scaled_distribution():
    """By hand: two positions, three tokens, τ = 0.5; a chunk of one."""
    import math

    from scalerl.algo.logprobs import head_logprobs

    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2, 2)
    weight = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])  # (3, 2)
    logp, entropy = head_logprobs(hidden, weight, None, torch.tensor([[0, 1]]), temperature=0.5, chunk=1)
    # position 0: z / τ = (2, 0, 0): log p_0 = 2 − log(e² + 2); position 1: (0, 0, 2), token 1: −log(e² + 2)
    lse = math.log(math.e**2 + 2)
    torch.testing.assert_close(logp, torch.tensor([[2 - lse, -lse]]))
    p = torch.tensor([math.e**2, 1.0, 1.0]) / (math.e**2 + 2)
    torch.testing.assert_close(entropy, torch.full((1, 2), float(-(p * p.log()).sum())))


@pytest.mark.parametrize("chunk", [None, 16])
def test_the_chunked_heads_backward_keeps_one_chunks_logits_at_most(chunk):
    """What autograd keeps for the backward: the whole head keeps the (M, V) float32 logits (or
    their softmax); the chunked one keeps its inputs and recomputes each chunk's in the backward."""
    from scalerl.algo.logprobs import head_logprobs

    hidden, weight, bias, tokens, _ = _head_case()
    M, V = hidden.shape[0] * hidden.shape[1], weight.shape[0]
    kept: list[int] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
        logp, _ = head_logprobs(hidden, weight, bias, tokens, chunk=chunk)
    logp.sum().backward()  # the recomputation runs and gives gradients
    assert hidden.grad is not None and weight.grad is not None
    if chunk is None:
        assert max(kept) >= M * V
    else:
        assert max(kept) <= max(chunk * V, weight.numel())
