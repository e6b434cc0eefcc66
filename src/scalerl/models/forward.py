"""The one forward pass shared by generator and trainer: model body, then the (FP32) LM head.

Digest §2.4: token probabilities differ between generator and trainer because their kernels
differ, and the mismatch is worst at the LM head, so the head runs in float32 on *both*
sides. Both roles call :func:`forward_logits`; the trainer recomputing a completion in one
pass and the engine decoding it token by token with a KV cache therefore go through the
same head arithmetic ``logits = h @ W^T (+ b)`` (``algo.logprobs.lm_head_logits``).

With ``fp32_head=False`` the head runs in the body's dtype, exactly as the model's own
``forward`` computes its logits.
"""

from __future__ import annotations

import functools
import inspect

import torch

from scalerl.algo.logprobs import FP32_HEAD, lm_head_logits


def body(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack of a causal LM (``LlamaModel`` inside ``LlamaForCausalLM``)."""
    decoder = model.get_decoder()
    if decoder is model:
        raise TypeError(f"{type(model).__name__} has no separate decoder body; pass a *ForCausalLM model")
    return decoder


def head_params(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LM-head ``(weight (V, H), bias (V,) | None)``; with tied embeddings the weight IS the
    input embedding matrix (transformers ties the two parameters), so nothing is copied."""
    head = model.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


@functools.cache
def _cache_kwarg(body_type: type) -> str:
    # transformers 5.x renamed ``past_key_values`` to ``cache`` (old name deprecated until 5.40).
    params = inspect.signature(body_type.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward_hidden(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (N, L) int64
    *,
    attention_mask: torch.Tensor | None = None,  # (N, L_past + L) 1 = real token, 0 = padding
    position_ids: torch.Tensor | None = None,  # (N, L)
    past_key_values=None,
    use_cache: bool = False,
) -> tuple[torch.Tensor, object]:  # (N, L, H) final (normed) hidden states, cache
    """Run the model body only; returns the final hidden states and the (updated) KV cache."""
    decoder = body(model)
    kwargs = {_cache_kwarg(type(decoder)): past_key_values}
    out = decoder(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=use_cache or past_key_values is not None,
        **kwargs,
    )
    past = out.cache if hasattr(out, "cache") else getattr(out, "past_key_values", None)
    return out.last_hidden_state, past


def forward_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (N, L) int64
    *,
    attention_mask: torch.Tensor | None = None,  # (N, L_past + L)
    position_ids: torch.Tensor | None = None,  # (N, L)
    past_key_values=None,
    fp32_head: bool = FP32_HEAD,
    use_cache: bool = False,
    last_only: bool = False,
) -> tuple[torch.Tensor, object]:  # (N, L, V) or (N, 1, V) when last_only; cache
    """``logits = lm_head(body(input_ids))`` with the head in float32 when ``fp32_head``.

    ``last_only`` applies the head to the last position only (what a decoder needs after a
    prefill); the body still runs over all ``L`` positions.
    """
    hidden, past = forward_hidden(
        model,
        input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
    )
    if last_only:
        hidden = hidden[:, -1:]
    weight, bias = head_params(model)
    return lm_head_logits(hidden, weight, bias, fp32=fp32_head), past


class Forward(torch.nn.Module):
    """``Forward(model)(fn, *args)`` is ``fn(model, *args)``, run as this module's forward.

    The trainer's forward goes through the body and then reads the head weight directly (the
    FP32 head above), never through the model's own ``forward``. Wrapping each micro-batch's
    computation in one module call lets FSDP2 (``fully_shard`` on this module, the root) gather
    the head and embeddings for it and reduce their gradients, and DDP hook its reducer, with
    the arithmetic unchanged."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn, *args, **kwargs):
        return fn(self.model, *args, **kwargs)
