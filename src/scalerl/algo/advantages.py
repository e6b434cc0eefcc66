"""Group-centred advantages with prompt, batch or no std normalisation (digest §2.6, A.9).

``Â_i = r_i − mean_{j∈group} r_j`` (the group mean is the baseline), then

- ``prompt`` (GRPO): ``Â_i / (std_group(r) + eps)``;
- ``batch`` (REINFORCE++, Magistral; ScaleRL's choice): ``Â_i / (std_batch(Â) + eps)``, the std
  of all centred advantages of the kept groups;
- ``none`` (Dr. GRPO): ``Â_i`` as is.

Stds are population stds (divide by the count, not count − 1), so a normalised group or batch
has unit RMS; TRL's GRPO uses the Bessel-corrected std, a factor sqrt(G/(G−1)) apart.
The paper states no epsilon for the batch std; the same ``eps`` guards both, and is negligible
next to any real std of ±1 or {0,1} rewards.
"""

from __future__ import annotations

import torch

NORMALISATIONS = ("batch", "prompt", "none")


def group_advantages(
    rewards: torch.Tensor,  # (P, G) rewards of G completions for each of P prompts
    norm: str = "batch",
    eps: float = 1e-6,
    *,
    keep: torch.Tensor | None = None,  # (P,) bool: groups that survive filtering
    valid: torch.Tensor | None = None,  # (P, G) bool: completions that count in group stats
) -> torch.Tensor:  # (P, G)
    """Centre rewards per group and normalise by ``norm``; see the module docstring for formulas.

    ``keep`` drops whole groups (e.g. zero-variance ones): they get Â = 0 and are left out of
    the batch std. ``valid`` drops single completions (e.g. truncated ones under the ``drop``
    rule of ``scalerl.data.filters``): they get Â = 0 and are left out of their group's mean and
    std and of the batch std, as if never sampled. Works for ±1 and {0,1} rewards alike.

    Zero-std guard: a group whose (valid) rewards are all equal gets exactly Â = 0, and every
    division adds ``eps``, so nothing returns NaN or inf, even when every group is constant.
    """
    if norm not in NORMALISATIONS:
        raise ValueError(
            f"unknown advantage normalisation {norm!r}; valid ones are: {', '.join(NORMALISATIONS)}"
        )
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape (P, G); got {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.get_default_dtype())
    member = torch.ones_like(rewards, dtype=torch.bool)  # (P, G)
    if valid is not None:
        member = member & valid.to(torch.bool)
    if keep is not None:
        member = member & keep.to(torch.bool)[:, None]
    m = member.to(rewards.dtype)
    count = m.sum(dim=1, keepdim=True)  # (P, 1)
    mean = (rewards * m).sum(dim=1, keepdim=True) / count.clamp(min=1)
    hi = torch.where(member, rewards, -torch.inf).amax(dim=1, keepdim=True)
    lo = torch.where(member, rewards, torch.inf).amin(dim=1, keepdim=True)
    # Exact zero for constant groups: r − mean can be ~1e-17 instead of 0 for rewards such as
    # 0.1 (float rounding of the mean), which a tiny std would blow up.
    varies = member & (hi > lo)
    centred = torch.where(varies, rewards - mean, 0.0)  # (P, G)
    if norm == "none":
        return centred
    if norm == "prompt":
        std = ((centred**2).sum(dim=1, keepdim=True) / count.clamp(min=1)).sqrt()  # (P, 1)
    else:
        total = m.sum().clamp(min=1)
        batch_mean = centred.sum() / total  # 0 up to rounding: every group is centred
        std = ((torch.where(member, centred - batch_mean, 0.0) ** 2).sum() / total).sqrt()
    # The clamp only matters when std + eps == 0 (eps=0, constant groups), where Â is exactly 0.
    return centred / (std + eps).clamp(min=torch.finfo(rewards.dtype).tiny)
