"""Tolerances from the arithmetic: how far two float32 implementations of one network may
disagree on a token's log-prob, derived from the model's shape and weights, never tuned on a CPU.

Two engines (vLLM's kernels and the trainer's torch ones) compute the same float32 network,
each rounding in its own order (blocking, vector width, fused multiply-adds: AVX2 and AVX-512
differ). A dot product of length ``n`` rounds with an error of about ``sqrt(n) u |x||y|``
(``u = 2^-24``; Higham and Mary's probabilistic bound, which holds with probability at least
``1 - 2 exp(-lambda^2 / 2)`` for a constant ``lambda``; the worst case ``n u`` is never reached by
independent roundings). To first order the relative errors of the sequential reductions add:
per layer the q/k/v projections (length ``d``), the attention scores (``d_head``), the weighted
sum over the sequence (``T``), the output projection (``d``), the MLP's gate/up (``d``) and
down (``d_ff``) projections; then the head (``d``). A logit ``z`` is off by that relative error
times ``|z|``, bounded from the weights: ``|z| <= sqrt(d) max|g| max_i |W_i|`` (the final RMS norm's
output has RMS ``|g|``, and a row ``W_i`` of the head). The log-softmax adds ``sqrt(V) u``. Two
implementations double it, and ``LAMBDA`` is the stated safety factor.

KL between the two distributions is second order: ``KL <= bound^2 / 2``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

U = 2.0**-24  # float32's unit roundoff
LAMBDA = 4.0  # the safety factor on the probabilistic bound (P(exceeded) per reduction < 7e-4)


def _load(model_dir: str | Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    model_dir = Path(model_dir)
    weights = {}
    for f in model_dir.glob("*.safetensors"):
        weights |= load_file(f)
    return json.loads((model_dir / "config.json").read_text()), weights


def max_logit(cfg: dict, weights: dict) -> float:
    """``sqrt(d) max|g| max_i |W_i|``: no logit of the model can exceed it (module docstring);
    ``weights``: name -> array (a safetensors file's, or a model's ``state_dict`` as numpy)."""
    head = np.asarray(weights.get("lm_head.weight", weights.get("model.embed_tokens.weight")), dtype=np.float64)
    g = float(np.abs(np.asarray(weights["model.norm.weight"])).max())
    return float(np.sqrt(cfg["hidden_size"]) * g * np.linalg.norm(head, axis=1).max())


def fp32_logprob_bound(model_dir: str | Path, seq_len: int, weights: dict | None = None) -> float:
    """How far two float32 implementations may disagree on a token's log-prob (module docstring);
    ``weights``, where given, are the model's own (a perturbed copy of ``model_dir``'s)."""
    cfg, saved = _load(model_dir)
    weights = saved if weights is None else weights
    d, ff, layers, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    d_head = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    per_layer = sum(np.sqrt(n) for n in (d, d_head, seq_len, d, d, ff))
    relative = U * (layers * per_layer + np.sqrt(d))
    return float(LAMBDA * 2.0 * (relative * max_logit(cfg, weights) + U * np.sqrt(vocab)))


def fp32_kl_bound(model_dir: str | Path, seq_len: int) -> float:
    """KL between the two implementations' token distributions: second order in the log-prob error."""
    return fp32_logprob_bound(model_dir, seq_len) ** 2 / 2.0
