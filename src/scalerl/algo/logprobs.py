"""Logits to token log-probs and entropy, with the FP32 LM-head path.

The FP32 head (digest §2.4) computes ``logits = h @ W^T (+ b)`` in float32 even when the
model body runs in bf16, on both generator and trainer, so the IS ratio
``ρ = π_train / π_gen`` sees the same numbers on both sides. The paper reports it raised
the asymptote from 0.52 to 0.61 (Fig. 5b).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

FP32_HEAD = True
"""§2.4: the LM head in float32, the paper's choice and every layer's default (the trainer's
``forward_logits``, both engines, a generator's spec); the config's ``model.fp32_head_trainer``
and ``model.fp32_head_generator`` say the same (``tests/algo/test_logprobs.py`` holds them
equal), and a run passes the config's value everywhere."""


def lm_head_logits(
    hidden: torch.Tensor,  # (..., H) final hidden states
    weight: torch.Tensor,  # (V, H) LM-head (or tied embedding) matrix
    bias: torch.Tensor | None = None,  # (V,)
    *,
    fp32: bool = FP32_HEAD,
) -> torch.Tensor:  # (..., V)
    """``logits = hidden @ weight.T + bias``, in float32 when ``fp32`` else in hidden's dtype.

    The float32 product is computed with autocast off: under fp16/bf16 autocast (a learner's
    float32 masters computing in bf16/fp16) ``linear`` would otherwise be cast back down. Under
    autocast both operands are first rounded to the autocast dtype, as the generator's bf16
    copy holds them: the head then computes ``h_bf16 @ W_bf16`` in float32 on both sides (the
    products of bf16 values are exact in float32), not the master weights against a rounded copy.

    One path on every device: the operands are upcast and multiplied by ``linear``, which has
    a derivative. ``torch.mm(..., out_dtype=torch.float32)`` (the same values at tensor-core
    speed on CUDA) has none in torch 2.13, so a bf16 learner step raised at ``backward()``
    (``gpu-review-2.md`` N1), and it has no CPU kernel, so no CPU test could take it."""
    if not fp32:
        return torch.nn.functional.linear(hidden, weight.to(hidden.dtype), bias)
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        low = torch.get_autocast_dtype(device)
        hidden, weight = hidden.to(low), weight.to(low)
    with torch.autocast(device_type=device, enabled=False):
        bias = bias.float() if bias is not None else None
        return torch.nn.functional.linear(hidden.float(), weight.float(), bias)


def token_logprobs(
    logits: torch.Tensor,  # (N, T, V)
    tokens: torch.Tensor,  # (N, T) int64
    temperature: float = 1.0,
) -> torch.Tensor:  # (N, T)
    """``log softmax(logits / τ)[tokens]``: log-prob of each chosen token.

    Uses logsumexp rather than a full log_softmax so only one (N, T) gather is materialised
    beside the logits.
    """
    logits = logits.float() if logits.dtype != torch.float64 else logits
    if temperature != 1.0:
        logits = logits / temperature
    chosen = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:  # (N, T, V) -> (N, T)
    """Shannon entropy ``H = -Σ_v p_v log p_v`` of each position's distribution, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _scores(
    hidden: torch.Tensor,  # (M, H)
    weight: torch.Tensor,  # (V, H)
    bias: torch.Tensor | None,  # (V,)
    tokens: torch.Tensor,  # (M,) int64
    temperature: float,
    fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor]:  # (M,) log-probs with grad, (M,) entropy detached
    """One chunk's head: logits, the chosen tokens' log-probs and the entropy of ``softmax(z / τ)``."""
    logits = lm_head_logits(hidden, weight, bias, fp32=fp32)  # (M, V)
    if temperature != 1.0:
        logits = logits / temperature
    with torch.no_grad():
        entropy = token_entropy(logits)
    return token_logprobs(logits, tokens), entropy


def head_logprobs(
    hidden: torch.Tensor,  # (N, T, H) final hidden states
    weight: torch.Tensor,  # (V, H) LM-head (or tied embedding) matrix
    bias: torch.Tensor | None,  # (V,)
    tokens: torch.Tensor,  # (N, T) int64: the token each position predicts
    *,
    temperature: float = 1.0,
    fp32: bool = FP32_HEAD,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # (N, T) log-probs, (N, T) entropy (detached)
    """``log softmax(h W^T / τ)[y]`` and the entropy ``-Σ_v p_v log p_v`` of each position, with
    the [N, T, V] logits never held whole when ``chunk`` is set.

    ``chunk`` positions at a time (of the N·T flattened ones): each chunk's logits are made, read
    and dropped, and under autograd its backward recomputes them (``torch.utils.checkpoint``), so
    the head's peak is one chunk's ``chunk × V`` float32 logits and their gradient instead of the
    whole batch's (TRL's fused head, Liger's fused linear cross-entropy: the same idea). Every
    position's arithmetic is the whole head's: a row of ``h W^T`` depends on that row alone; only
    the order in which a BLAS blocks the product, and ``∂L/∂W``'s sum over the chunks, may
    differ (``tests/algo/test_logprobs.py`` bounds both from float32's rounding).
    ``chunk=None`` is the plain whole-logits path and the reference."""
    N, T, H = hidden.shape
    flat_h, flat_y = hidden.reshape(N * T, H), tokens.reshape(N * T)
    if chunk is None or chunk >= N * T:
        logp, entropy = _scores(flat_h, weight, bias, flat_y, temperature, fp32)
        return logp.view(N, T), entropy.view(N, T)
    taped = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    parts = []
    for start in range(0, N * T, chunk):
        piece = (flat_h[start : start + chunk], weight, bias, flat_y[start : start + chunk], temperature, fp32)
        parts.append(checkpoint(_scores, *piece, use_reentrant=False) if taped else _scores(*piece))
    logp = torch.cat([p[0] for p in parts])
    entropy = torch.cat([p[1] for p in parts])
    return logp.view(N, T), entropy.view(N, T)
