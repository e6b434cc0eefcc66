"""Batch filters and reward shaping as pure functions on (P, G) tensors (digest §2.7, §2.9).

Layout: ``P`` prompts × ``G`` completions, the trainer's grouping before flattening to ``N``.
Inputs may be torch tensors, numpy arrays or nested lists (anything ``torch.as_tensor``
takes); outputs are torch tensors on the input's device, so the trainer composes them with
``scalerl.algo`` directly.

The rule for truncated completions (finish reason ``"length"``), one of three modes:

- ``drop``: the completion is removed as if it had never been sampled: it leaves its
  group's mean and std, the zero-variance test, the batch std and the loss. This is the
  order of the paper's step (§4.2: drop truncated, then filter zero-variance groups, then
  centre), which speaks of the effective batch "after excluding truncated samples" (A.15).
- ``mask``: its reward still counts in its group's statistics (a truncated answer, scored
  wrong, still lowers the baseline of its siblings), but its tokens get no gradient.
- ``keep``: an ordinary completion.

The truncation rate itself is worth logging: the paper saw 10–15% truncation destabilise
training (A.15).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

TRUNCATION_MODES = ("drop", "mask", "keep")


class TruncationMasks(NamedTuple):
    in_stats: torch.Tensor  # (P, G) bool: counts in group mean/std and the zero-variance test
    in_loss: torch.Tensor  # (P, G) bool: its tokens may enter the loss


class EffectiveBatch(NamedTuple):
    """What is left of a batch for the loss (digest §2.7, "effective batch")."""

    kept_prompts: int
    kept_completions: int
    total_prompts: int
    total_completions: int


def _as_2d(x, name: str) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (P, G); got {tuple(x.shape)}")
    return x


def truncation_masks(
    finish_is_length,  # (P, G) bool: finish reason was "length"
    mode: str,
) -> TruncationMasks:
    """Which completions count in group statistics and which enter the loss; see module doc.

    ``drop``: both ``~finish_is_length``; ``mask``: stats all True, loss ``~finish_is_length``;
    ``keep``: both all True. Pass ``in_stats`` as ``valid`` to ``zero_variance_mask`` and
    ``group_advantages``, and ``in_loss`` into the token mask.
    """
    if mode not in TRUNCATION_MODES:
        raise ValueError(
            f"unknown truncation mode {mode!r}; valid modes are: {', '.join(TRUNCATION_MODES)}"
        )
    truncated = _as_2d(finish_is_length, "finish_is_length").to(torch.bool)
    everyone = torch.ones_like(truncated)
    if mode == "drop":
        return TruncationMasks(~truncated, ~truncated)
    if mode == "mask":
        return TruncationMasks(everyone, ~truncated)
    return TruncationMasks(everyone, everyone)


def zero_variance_mask(
    rewards,  # (P, G)
    valid=None,  # (P, G) bool: completions that count (see truncation_masks); None = all
) -> torch.Tensor:  # (P,) bool, True = keep
    """Keep a prompt only if its (valid) rewards are not all equal (digest §2.7).

    This is the paper's ``0 < mean(r) < 1`` for {0,1} rewards and "not all equal" for ±1; a
    group with fewer than two valid completions has no spread and is dropped too. Dropped
    groups have zero advantage and so no gradient; they are removed from the loss (the
    "effective batch"), not replaced by resampling.
    """
    rewards = _as_2d(rewards, "rewards")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    member = (
        torch.ones_like(rewards, dtype=torch.bool)
        if valid is None
        else _as_2d(valid, "valid").to(torch.bool)
    )
    if member.shape != rewards.shape:
        raise ValueError(
            f"valid must match rewards' shape {tuple(rewards.shape)}; got {tuple(member.shape)}"
        )
    hi = torch.where(member, rewards, -torch.inf).amax(dim=1)
    lo = torch.where(member, rewards, torch.inf).amin(dim=1)
    return hi > lo


def effective_batch(
    keep,  # (P,) bool from zero_variance_mask
    in_loss,  # (P, G) bool from truncation_masks
) -> EffectiveBatch:
    """Counts of prompts and completions that reach the loss: ``keep[p] and in_loss[p, g]``."""
    keep = torch.as_tensor(keep).to(torch.bool)
    if keep.dim() != 1:
        raise ValueError(f"keep must have shape (P,); got {tuple(keep.shape)}")
    in_loss = _as_2d(in_loss, "in_loss").to(torch.bool)
    if in_loss.shape[0] != keep.shape[0]:
        raise ValueError(f"in_loss has {in_loss.shape[0]} prompts but keep has {keep.shape[0]}")
    rows = keep[:, None] & in_loss  # (P, G)
    return EffectiveBatch(
        kept_prompts=int(rows.any(dim=1).sum()),
        kept_completions=int(rows.sum()),
        total_prompts=int(keep.shape[0]),
        total_completions=int(in_loss.numel()),
    )


def length_penalty(
    lengths,  # (...) int: completion lengths |y| in tokens
    correct,  # (...) bool: the completion's answer is correct
    *,
    max_len: int = 14336,
    cache_len: int = 2048,
) -> torch.Tensor:  # (...) float, in [-1, 0]
    """``R_length(y) = clip((L_max − |y|)/L_cache − 1, −1, 0)`` on correct traces, 0 otherwise.

    App. A.10 Eq. 9, the alternative to forced interruptions: add it to the reward. It is 0
    up to ``L_max − L_cache`` tokens and falls linearly to −1 at ``L_max``. Defaults are the
    paper's L_max = 14k (14,336 = 12,288 thinking + 2,048 answer) and L_cache = 2k tokens.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(
            f"length_penalty needs 0 < cache_len <= max_len; got {cache_len}, {max_len}"
        )
    lengths = torch.as_tensor(lengths).to(torch.get_default_dtype())
    correct = torch.as_tensor(correct, device=lengths.device).to(torch.bool)
    penalty = ((max_len - lengths) / cache_len - 1.0).clamp(-1.0, 0.0)
    return torch.where(correct, penalty, 0.0)
