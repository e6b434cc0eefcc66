"""Lean single-token decode step for Llama-family bodies, over a preallocated KV cache.

Why: on small models a decode step through the transformers modules is dominated by Python
overhead (module hooks, per-step mask construction, ``torch.cat`` of the cache per layer).
This path computes the *same* arithmetic as ``LlamaDecoderLayer`` / ``Qwen2DecoderLayer`` in
eval mode, reading the model's own parameters every step (so in-place weight updates are
seen immediately, as in-flight updates need), with:
- a static KV buffer per layer written in place at column ``t`` (no per-step ``cat``);
- one boolean padding mask, sliced per step, instead of a 4-D float mask per forward;
- grouped-query attention through ``scaled_dot_product_attention(enable_gqa=True)``.

The prefill still runs through ``models.forward.forward_hidden`` (transformers), and the
LM head through ``algo.logprobs.lm_head_logits`` like every other path. The test suite checks
this path against the plain ``forward_logits`` + ``DynamicCache`` decoder and against a
one-pass recompute (``tests/rollout/test_fast_decode.py``).

Per layer, with ``x`` the residual stream (``RMSNorm(x) = w · x / sqrt(mean(x²) + ε)``):
``x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))``;
``x += down(act(gate(n2(x))) · up(n2(x)))``; finally ``h = RMSNorm_final(x)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from scalerl.models.forward import body

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


def supports(model: torch.nn.Module) -> bool:
    """True when the lean path reproduces ``model``'s body exactly (else use the plain path)."""
    config = model.config
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    layer = body(model).layers[0]
    attn = layer.self_attn
    return all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) and not hasattr(
        attn, "q_norm"
    )


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    # Same op order and dtypes as LlamaRMSNorm.forward, so results match bit for bit.
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticKV:
    """Per-layer key/value buffers ``(B, H_kv, capacity, D)``; columns ``[0, length)`` are valid."""

    def __init__(self, cache, extra: int):
        """Copy a prefilled transformers ``DynamicCache`` and leave room for ``extra`` tokens."""
        self.keys, self.values = [], []
        for layer in cache.layers:
            b, h, length, d = layer.keys.shape
            k = layer.keys.new_empty((b, h, length + extra, d))
            v = layer.values.new_empty((b, h, length + extra, d))
            k[:, :, :length] = layer.keys
            v[:, :, :length] = layer.values
            self.keys.append(k)
            self.values.append(v)
        self.length = length

    def select(self, rows: torch.Tensor) -> None:  # (B',) indices of the rows kept
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]


class LeanDecoder:
    """``step(tokens, positions, kv, mask) -> hidden``: one decode step of the model body."""

    def __init__(self, model: torch.nn.Module):
        if not supports(model):
            raise TypeError(f"LeanDecoder does not support {type(model).__name__}")
        self.body = body(model)
        attn = self.body.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling

    def step(
        self,
        tokens: torch.Tensor,  # (B,) int64 token fed at this step
        positions: torch.Tensor,  # (B, 1) int64 its position id
        kv: StaticKV,
        mask: torch.Tensor | None,  # (B, capacity) bool, True = attend; None = no padding
    ) -> torch.Tensor:  # (B, 1, H) final normed hidden state
        model = self.body
        x = model.embed_tokens(tokens.unsqueeze(1))  # (B, 1, H)
        cos, sin = model.rotary_emb(x, positions)  # (B, 1, D) each
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # broadcast over heads
        t = kv.length
        attn_mask = mask[:, None, None, : t + 1] if mask is not None else None
        for i, layer in enumerate(model.layers):
            attn = layer.self_attn
            h = _rms_norm(layer.input_layernorm, x)
            q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias)
            k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias)
            v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias)
            b = q.shape[0]
            q = q.view(b, 1, -1, self.head_dim).transpose(1, 2)  # (B, nh, 1, D)
            k = k.view(b, 1, -1, self.head_dim).transpose(1, 2)  # (B, nkv, 1, D)
            v = v.view(b, 1, -1, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            kv.keys[i][:, :, t : t + 1] = k
            kv.values[i][:, :, t : t + 1] = v
            out = F.scaled_dot_product_attention(
                q,
                kv.keys[i][:, :, : t + 1],
                kv.values[i][:, :, : t + 1],
                attn_mask=attn_mask,
                scale=self.scaling,
                enable_gqa=q.shape[1] != k.shape[1],
            )
            out = out.transpose(1, 2).reshape(b, 1, -1)
            x = x + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
            mlp = layer.mlp
            h = _rms_norm(layer.post_attention_layernorm, x)
            gate = F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = F.linear(h, mlp.up_proj.weight, mlp.up_proj.bias)
            x = x + F.linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        kv.length = t + 1
        return _rms_norm(model.norm, x)
