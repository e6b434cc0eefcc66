"""Lean single-token decode step for Llama-family bodies, over a preallocated KV cache.

Why: on small models a decode step through the transformers modules is dominated by Python
overhead (module hooks, per-step mask construction, ``torch.cat`` of the cache per layer).
This path computes the *same* arithmetic as ``LlamaDecoderLayer`` / ``Qwen2DecoderLayer`` in
eval mode, reading the model's own parameters every step (so in-place weight updates are
seen immediately, as in-flight updates need), with:
- q/k/v and gate/up projections fused into one matmul each (weights concatenated once and
  re-concatenated whenever a source parameter changes: its ``_version`` counter moves on
  every in-place write, e.g. ``load_state_dict`` or an optimizer step, but not writes through
  ``.data``; costs one extra copy of those weights);
- rotary cos/sin looked up in a table built by the model's own rotary module and kept
  (so the values are the module's, bit for bit); ``rotate_half(x) · sin`` computed as
  ``roll(x, D/2) · sin_signed``, the same products;
- a static KV buffer per layer written in place at column ``t`` (no per-step ``cat``);
- one boolean padding mask, sliced per step, instead of a 4-D float mask per forward;
- grouped-query attention for the single query as two batched matmuls on CPU (the query
  heads of a kv group stacked, no k/v repeat), ``scaled_dot_product_attention`` elsewhere;
- float32 RMSNorm through the fused ``F.rms_norm`` (bf16 keeps transformers' exact op order);
- the FP32 head's float32 copy of the (V, H) head matrix made once per weight version
  instead of at every step (the cast is exact, so the logits are unchanged).

The prefill still runs through ``models.forward.forward_hidden`` (transformers), except a
multi-turn prompt's rest after its kept KV (``extend``), and the LM head through ``algo.logprobs.lm_head_logits`` like every other path. The test suite checks
this path against the plain ``forward_logits`` + ``DynamicCache`` decoder and against a
one-pass recompute (``tests/rollout/test_fast_decode.py``).

Per layer, with ``x`` the residual stream (``RMSNorm(x) = w · x / sqrt(mean(x²) + ε)``):
``x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))``;
``x += down(act(gate(n2(x))) · up(n2(x)))``; finally ``h = RMSNorm_final(x)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from scalerl.models.forward import body, head_params

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def supports(model: torch.nn.Module) -> bool:
    """True when the lean path reproduces ``model``'s body exactly (else use the plain path)."""
    config = model.config
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    decoder = body(model)
    if getattr(decoder.rotary_emb, "rope_type", "default") not in STATIC_ROPE_TYPES:
        return False  # e.g. dynamic NTK: cos/sin depend on the current length, no fixed table
    attn = decoder.layers[0].self_attn
    if hasattr(model, "peft_config"):  # LoRA layers: the lean path reads .weight, the base's alone
        return False
    return all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) and not hasattr(
        attn, "q_norm"
    )


def _rms_norm(weight: torch.Tensor, eps: float, x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    # LlamaRMSNorm.forward's op order and dtypes, so bf16 results match it bit for bit.
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _cat_bias(*linears) -> torch.Tensor | None:
    biases = [lin.bias for lin in linears]
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else lin.weight.new_zeros(lin.weight.shape[0]) for b, lin in zip(biases, linears)])


class StaticKV:
    """Per-layer key/value buffers ``(B, H_kv, capacity, D)``; columns ``[0, length)`` are valid."""

    def __init__(self, cache, extra: int, rows: torch.Tensor | None = None):
        """Copy a prefilled transformers ``DynamicCache`` (only ``rows`` of it, in that order,
        repeats allowed, if given) and leave room for ``extra`` tokens."""
        self.keys, self.values = [], []
        for layer in cache.layers:
            keys = layer.keys if rows is None else layer.keys[rows]
            values = layer.values if rows is None else layer.values[rows]
            b, h, length, d = keys.shape
            k = keys.new_empty((b, h, length + extra, d))
            v = values.new_empty((b, h, length + extra, d))
            k[:, :, :length] = keys
            v[:, :, :length] = values
            self.keys.append(k)
            self.values.append(v)
        self.length = length

    @classmethod
    def of(cls, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> StaticKV:
        """Buffers built elsewhere (``prefix_kv.kept_kv``): columns ``[0, length)`` valid."""
        kv = cls.__new__(cls)
        kv.keys, kv.values, kv.length = keys, values, length
        return kv

    def select(self, rows: torch.Tensor) -> None:  # (B',) indices of the rows kept
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]


class LeanDecoder:
    """``step(tokens, positions, kv, mask) -> hidden``: one decode step of the model body."""

    def __init__(self, model: torch.nn.Module):
        if not supports(model):
            raise TypeError(f"LeanDecoder does not support {type(model).__name__}")
        self.model = model
        self.body = body(model)
        attn = self.body.layers[0].self_attn
        config = model.config
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.num_heads = config.num_attention_heads
        self.num_kv = config.num_key_value_heads
        self.eps = self.body.norm.variance_epsilon
        self._stamp = None
        self._rope: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self.refresh()

    def _sources(self) -> list[torch.Tensor]:
        out = [t for t in head_params(self.model) if t is not None]
        for layer in self.body.layers:
            a, m = layer.self_attn, layer.mlp
            for lin in (a.q_proj, a.k_proj, a.v_proj, m.gate_proj, m.up_proj):
                out.append(lin.weight)
                if lin.bias is not None:
                    out.append(lin.bias)
        return out

    @torch.no_grad()
    def refresh(self) -> None:
        """(Re)build the per-layer parameter tuples; cheap no-op when nothing changed."""
        sources = self._sources()
        stamp = tuple((id(t), t._version) for t in sources)
        if stamp == self._stamp:
            return
        self.layers = []
        for layer in self.body.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight,
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                _cat_bias(a.q_proj, a.k_proj, a.v_proj),
                a.o_proj.weight, a.o_proj.bias,
                layer.post_attention_layernorm.weight,
                torch.cat([m.gate_proj.weight, m.up_proj.weight]),
                _cat_bias(m.gate_proj, m.up_proj),
                m.down_proj.weight, m.down_proj.bias,
                m.act_fn,
            ))
        weight, bias = head_params(self.model)
        self.head = (weight, bias)
        # The FP32 head casts the (V, H) matrix every call; cast it once per weight version.
        self.head_fp32 = (weight.float(), bias.float() if bias is not None else None)
        self._tracked = sources
        self._stamp = stamp

    def _check_versions(self) -> None:
        # In-place writes (load_state_dict, optimizer steps) bump _version: re-fuse then.
        if any(t._version != v for t, (_, v) in zip(self._tracked, self._stamp)):
            self.refresh()

    def rope_tables(self, max_position: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin_signed)`` of shape (>= max_position, D) from the model's rotary module;
        kept per dtype and rebuilt only for a longer need (a row's value does not depend on
        the table's length, and multi-turn calls ask for one every turn)."""
        cached = self._rope.get(dtype)
        if cached is None or cached[0].shape[0] < max_position:
            cached = self._rope[dtype] = self._rope_tables(max(max_position, 256), dtype)
        return cached

    def _rope_tables(self, max_position: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(max_position, device=self.body.embed_tokens.weight.device)
        probe = self.body.embed_tokens.weight.new_empty((1, 1, 1), dtype=dtype)
        cos, sin = self.body.rotary_emb(probe, positions.unsqueeze(0))  # (1, P, D)
        half = self.head_dim // 2
        sin_signed = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
        return cos[0], sin_signed

    def step(
        self,
        tokens: torch.Tensor,  # (B,) int64 token fed at this step
        positions: torch.Tensor,  # (B, 1) int64 its position id
        kv: StaticKV,
        mask: torch.Tensor | None,  # (B, capacity) bool, True = attend; None = no padding
        rope: tuple[torch.Tensor, torch.Tensor],  # rope_tables(...)
    ) -> torch.Tensor:  # (B, 1, H) final normed hidden state
        self._check_versions()
        b, nh, nkv, d = tokens.shape[0], self.num_heads, self.num_kv, self.head_dim
        x = self.body.embed_tokens(tokens.unsqueeze(1))  # (B, 1, H)
        # Row lookups through F.embedding: same values as ``rope[0][positions]``, cheaper call.
        cos = F.embedding(positions, rope[0])  # (B, 1, D): broadcasts over the heads of (B, nh + nkv, D)
        sin = F.embedding(positions, rope[1])
        t = kv.length
        attn_mask = mask[:, None, None, : t + 1] if mask is not None else None
        # Small tensors: per-op dispatch dominates, so narrow/select/copy_ instead of ``[...]``.
        for i, (n1, w_qkv, b_qkv, w_o, b_o, n2, w_gu, b_gu, w_down, b_down, act) in enumerate(self.layers):
            qkv = F.linear(_rms_norm(n1, self.eps, x), w_qkv, b_qkv).view(b, nh + 2 * nkv, d)
            qk = qkv.narrow(1, 0, nh + nkv)
            qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin  # RoPE on q and k at once
            keys, values = kv.keys[i], kv.values[i]
            keys.select(2, t).copy_(qk.narrow(1, nh, nkv))
            values.select(2, t).copy_(qkv.narrow(1, nh + nkv, nkv))
            out = self._attend(qk.narrow(1, 0, nh), keys.narrow(2, 0, t + 1), values.narrow(2, 0, t + 1), attn_mask)
            x = x + F.linear(out.reshape(b, 1, nh * d), w_o, b_o)
            gate, up = F.linear(_rms_norm(n2, self.eps, x), w_gu, b_gu).chunk(2, dim=-1)
            x = x + F.linear(act(gate) * up, w_down, b_down)
        kv.length = t + 1
        return _rms_norm(self.body.norm.weight, self.eps, x)

    def extend(
        self,
        tokens: torch.Tensor,  # (B, T) int64, left-padded: the rest of each prompt after its kept KV
        positions: torch.Tensor,  # (B, T) int64 their position ids
        kv: StaticKV,
        mask: torch.Tensor,  # (B, capacity) bool, True = a real column
        rope: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:  # (B, T, H) final normed hidden states
        """``step`` for T tokens a row at once: a multi-turn prompt's observation prefilled
        over the KV kept from the turn before (``prefix_kv``), written at columns
        ``[length, length + T)``. Same per-layer arithmetic; query i of the block sees the
        real kept columns and the block's real columns up to i, and always itself, so a
        padding query's (masked, never read) keys and values stay finite."""
        self._check_versions()
        b, T = tokens.shape
        nh, nkv, d = self.num_heads, self.num_kv, self.head_dim
        x = self.body.embed_tokens(tokens)  # (B, T, H)
        cos = F.embedding(positions, rope[0]).unsqueeze(2)  # (B, T, 1, D)
        sin = F.embedding(positions, rope[1]).unsqueeze(2)
        t = kv.length
        causal = torch.ones((T, T), dtype=torch.bool, device=tokens.device).tril()
        seen = torch.cat([mask[:, None, :t].expand(b, T, t), mask[:, None, t : t + T] & causal], dim=2)
        seen[:, torch.arange(T), t + torch.arange(T)] = True  # (B, T, t + T)
        seen = seen.unsqueeze(1)
        for i, (n1, w_qkv, b_qkv, w_o, b_o, n2, w_gu, b_gu, w_down, b_down, act) in enumerate(self.layers):
            qkv = F.linear(_rms_norm(n1, self.eps, x), w_qkv, b_qkv).view(b, T, nh + 2 * nkv, d)
            qk = qkv.narrow(2, 0, nh + nkv)
            qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin
            keys, values = kv.keys[i], kv.values[i]
            keys.narrow(2, t, T).copy_(qk.narrow(2, nh, nkv).transpose(1, 2))
            values.narrow(2, t, T).copy_(qkv.narrow(2, nh + nkv, nkv).transpose(1, 2))
            out = F.scaled_dot_product_attention(
                qk.narrow(2, 0, nh).transpose(1, 2), keys.narrow(2, 0, t + T), values.narrow(2, 0, t + T),
                attn_mask=seen, scale=self.scaling, enable_gqa=nh != nkv,
            )  # (B, nh, T, D)
            x = x + F.linear(out.transpose(1, 2).reshape(b, T, nh * d), w_o, b_o)
            gate, up = F.linear(_rms_norm(n2, self.eps, x), w_gu, b_gu).chunk(2, dim=-1)
            x = x + F.linear(act(gate) * up, w_down, b_down)
        kv.length = t + T
        return _rms_norm(self.body.norm.weight, self.eps, x)

    def _attend(
        self,
        q: torch.Tensor,  # (B, nh, D) this step's queries
        k: torch.Tensor,  # (B, nkv, T, D) cached keys, this step's included
        v: torch.Tensor,  # (B, nkv, T, D)
        mask: torch.Tensor | None,  # (B, 1, 1, T) bool, True = attend
    ) -> torch.Tensor:  # (B, nh, D) or (B, nh, 1, D)
        """``softmax(q kᵀ · scale + mask) v`` per head, query head ``h`` on kv head ``h // g``.

        On CPU two batched matmuls with the ``g = nh / nkv`` query heads of a kv group stacked
        as rows (no k/v repeat) beat the SDPA kernel for a single query; elsewhere SDPA.
        """
        b, nh, d = q.shape
        nkv = k.shape[1]
        if q.device.type != "cpu":
            return F.scaled_dot_product_attention(
                q.unsqueeze(2), k, v, attn_mask=mask, scale=self.scaling, enable_gqa=nh != nkv
            )
        scores = torch.matmul(q.view(b, nkv, nh // nkv, d), k.transpose(-1, -2)) * self.scaling
        if mask is not None:  # (B, nkv, g, T)
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
        if weights.dtype != q.dtype:
            weights = weights.to(q.dtype)
        return torch.matmul(weights, v)  # (B, nkv, g, D): head order h = kv * g + j
