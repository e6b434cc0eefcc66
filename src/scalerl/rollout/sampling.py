"""Temperature / nucleus (top-p) sampling by inverse CDF, with per-row random streams.

Each row of a ``generate`` call owns a stream of uniforms ``u[row, step]`` drawn up front
from its own generator, seeded from ``(seed, row)``. A row's samples therefore depend only
on the seed, its index in the call and its own logits: not on the other rows, their
padding, or when finished rows are compacted out of the batch. That makes a batched call
reproduce a single-sequence call for row 0 with the same seed.

Behaviour log-prob (what the trainer's IS ratio ``ρ = π_train / π_gen`` divides by, digest
§2.2): ``log softmax(logits / τ)[y]`` under the *temperature-scaled full softmax*, before
top-p truncation. That is the distribution the trainer recomputes with
``algo.logprobs.token_logprobs(logits, tokens, temperature=τ)``; with ``top_p = 1`` and
``τ = 1`` it is exactly the policy. (Top-p truncation makes the true sampling
probability of a kept token larger by ``1 / kept_mass``; we do not record that, so the ratio
stays a ratio of the same two functions of the weights.)
"""

from __future__ import annotations

import torch

_SEED_MIX = 0x9E3779B97F4A7C15  # golden-ratio increment (splitmix64) to decorrelate row seeds


def row_uniforms(seed: int, num_rows: int, num_steps: int) -> torch.Tensor:  # (rows, steps)
    """float32 uniforms in [0, 1): row ``i`` from a generator seeded with ``mix(seed, i)``."""
    out = torch.empty(num_rows, num_steps, dtype=torch.float32)
    gen = torch.Generator()
    for row in range(num_rows):
        gen.manual_seed((seed * _SEED_MIX + row) % (1 << 63))
        torch.rand(num_steps, generator=gen, out=out[row])
    return out


def sample_tokens(
    logits: torch.Tensor,  # (B, V) float32
    uniforms: torch.Tensor,  # (B,) float32 in [0, 1)
    *,
    temperature: float,
    top_p: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # tokens (B,) int64, logp_all (B, V) float32
    """Draw one token per row; return it with the full behaviour log-softmax.

    ``temperature == 0`` is greedy decoding; its log-probs are then those of ``τ = 1``.
    Inverse CDF: ``y = min{v : Σ_{w≤v} p_w > u · Σ_w p_w}`` over the (sorted, truncated)
    distribution, which samples ``p`` exactly for ``u ~ U[0, 1)``.
    """
    if temperature == 0:
        logp_all = torch.log_softmax(logits, dim=-1)
        return logits.argmax(-1), logp_all
    logp_all = torch.log_softmax(logits / temperature if temperature != 1 else logits, dim=-1)
    probs = logp_all.exp()
    order = None
    if top_p < 1:
        probs, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass
        # strictly before it is < top_p, so the most likely token always stays.
        probs = probs * ((probs.cumsum(-1) - probs) < top_p)
    cdf = probs.cumsum(-1)
    target = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    index = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # Float rounding can put the target at the very top of the CDF: fall back to the last
    # token with positive mass rather than a zero-probability one.
    last_positive = (probs > 0).cumsum(-1).argmax(-1)
    index = torch.minimum(index, last_positive)
    tokens = index if order is None else order.gather(-1, index.unsqueeze(-1)).squeeze(-1)
    return tokens, logp_all
