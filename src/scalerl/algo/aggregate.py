"""Reduce per-token losses to one scalar: sample, prompt or token averaging (digest §2.5, A.9).

The reduction is a fixed weighted sum ``loss = Σ_{i,t} w_{i,t} · ℓ_{i,t}``, with the weights
computed ONCE from the full batch's mask and group ids. Micro-batches then take row slices of
``w`` (and of ``ℓ``), and because the loss is linear in ``ℓ`` the gradients of the
micro-batch losses sum to exactly the full-batch gradient, in every mode. Normalising inside
each micro-batch instead (the common bug) would weight tokens by which micro-batch they land in.

``mean over completions`` and ``mean over prompts`` run over completions / prompts that still
have at least one loss token, so completions dropped by masking their tokens (truncation,
zero-variance filtering) leave the denominators, and an all-masked batch gives weight 0.
"""

from __future__ import annotations

import torch

AGGREGATION_MODES = ("sample", "prompt", "token")


def token_weights(
    mask: torch.Tensor,  # (N, T) bool
    group_ids: torch.Tensor,  # (N,) int: prompt (group) id of each completion
    mode: str,
    *,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:  # (N, T), zero where mask is False
    """Per-token weights ``w`` with ``Σ w ℓ`` the chosen average; compute on the full batch.

    - ``sample`` (GRPO, Eq. 3): ``w_{i,t} = 1 / (|y_i| · N_live)``: mean over each completion's
      tokens, then mean over completions.
      Length bias: every completion weighs the same, so a token of a long completion weighs
      less than a token of a short one; a long wrong answer is penalised less per token and a
      short right answer rewarded more per token (the bias Dr. GRPO points out).
    - ``prompt`` (ScaleRL's choice, §2.10): ``w_{i,t} = 1 / (Σ_{j∈g(i)} |y_j| · P_live)``: per
      prompt, the sum over all its completions' tokens divided by their total length, then mean
      over prompts.
      Length bias: none between completions of one prompt (each token counts the same, so long
      completions weigh more in proportion to their length); between prompts each prompt weighs
      the same, so tokens of prompts with long answers weigh less than tokens of prompts with
      short ones.
    - ``token`` (token-mean, DAPO paper): ``w_{i,t} = 1 / Σ_{all} |y_j|``: one global token mean.
      Length bias: none per token; long completions and prompts with long answers dominate the
      gradient in proportion to their length, and the scale of each prompt's contribution
      depends on what else is in the batch.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(
            f"unknown aggregation mode {mode!r}; valid modes are: {', '.join(AGGREGATION_MODES)}"
        )
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be an (N, T) bool tensor; got {tuple(mask.shape)} {mask.dtype}"
        )
    if group_ids.shape != mask.shape[:1]:
        raise ValueError(
            f"group_ids must have shape (N,) = ({mask.shape[0]},); got {tuple(group_ids.shape)}"
        )
    m = mask.to(dtype)
    lengths = m.sum(dim=1)  # (N,) loss tokens per completion
    if mode == "token":
        return m / lengths.sum().clamp(min=1)
    if mode == "sample":
        live = (lengths > 0).sum().clamp(min=1)
        return m / (lengths.clamp(min=1) * live)[:, None]
    unique_ids, dense = torch.unique(group_ids, return_inverse=True)  # dense: (N,) in 0..P-1
    group_len = torch.zeros(unique_ids.numel(), dtype=dtype, device=m.device)
    group_len = group_len.index_add(0, dense, lengths)  # (P,) loss tokens per prompt
    live = (group_len > 0).sum().clamp(min=1)
    return m / (group_len[dense].clamp(min=1) * live)[:, None]


def aggregate(
    per_token: torch.Tensor,  # (N, T) per-token losses, zero where mask is False
    mask: torch.Tensor,  # (N, T) bool
    group_ids: torch.Tensor,  # (N,) int
    mode: str,
) -> torch.Tensor:  # () scalar loss
    """One-shot ``Σ_{i,t} token_weights(mask, group_ids, mode) · ℓ_{i,t}`` over the whole batch.

    Masked positions are excluded with ``where`` rather than multiplied by a zero weight, so a
    NaN or inf under the mask cannot leak into the loss.
    """
    weights = token_weights(mask, group_ids, mode, dtype=per_token.dtype)
    return torch.where(mask, per_token * weights, 0.0).sum()
