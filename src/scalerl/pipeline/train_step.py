"""One learner step on a batch of P groups × G completions (digest §4.2, §2.10).

The order of operations, each a switch of the config:

0. a completion cut by ``max_new_tokens`` scores as wrong (``length.truncation_is_failure``);
1. curriculum: record every prompt's pass rate; no-positive resampling retires prompts whose
   history reaches the threshold (digest §2.8) — done by the pool, only recorded here;
2. reward shaping: the App. A.10 length penalty on correct traces (``length.control=penalty``,
   the loo-lp alternative to interruptions);
3. truncation rule (``filters.truncation_masks``) and the zero-variance filter (§2.7):
   which completions count in group statistics and which reach the loss;
4. advantages ``Â = r − mean_group(r)`` normalised by batch / prompt / no std (§2.6);
5. loss weights from ``token_weights`` on the FULL batch (prompt / sample / token average,
   §2.5), then micro-batches of the live rows only: trainer log-probs through
   ``forward_logits(..., fp32_head)`` (§2.4), the registered loss (CISPO by default, §2.3)
   with its own hyperparameters, ``Σ w·ℓ`` backpropagated and accumulated. Forced
   interruption tokens are out of the loss through ``Completion.loss_mask``;
6. AdamW step with optional grad-norm clipping; the LR schedule advances. No KL, no entropy.

Layout: row ``i = p·G + g`` is completion ``g`` of prompt ``p`` (prompt-major, as algo expects).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from scalerl.algo.advantages import group_advantages
from scalerl.algo.aggregate import token_weights
from scalerl.algo.logprobs import token_logprobs
from scalerl.algo.losses import get_loss
from scalerl.data.filters import (
    effective_batch,
    length_penalty,
    truncation_masks,
    zero_variance_mask,
)
from scalerl.models.forward import forward_logits
from scalerl.types import Group


def _pad(rows: list[np.ndarray], value, dtype) -> torch.Tensor:  # (N, T_max)
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=dtype)
    return out


def train_step(model, optimizer, lr_schedule, groups: list[Group], cfg, pool,
               learner_version: int, pad_id: int) -> dict[str, Any]:
    """Train on ``groups`` once; returns the step's metrics (floats). See the module doc."""
    P, G = len(groups), len(groups[0].completions)
    completions = [c for g in groups for c in g.completions]
    rewards = torch.tensor(np.stack([g.rewards for g in groups]), dtype=torch.float32)  # (P, G)
    truncated = torch.tensor([[c.finish_reason == "length" for c in g.completions] for g in groups])
    if cfg.length.truncation_is_failure:  # an unfinished answer is a wrong answer
        rewards = torch.where(truncated, rewards.new_tensor(-1.0 if cfg.task.reward == "pm1" else 0.0), rewards)
    correct = rewards > 0  # (P, G): pass/fail in {0,1} and ±1 forms alike

    # 1. curriculum (pass rate of the training rollouts, the prompt's most recent visit), in
    # float64 so that k/G is the exact decimal: float32 9/10 is 0.89999998 and misses 0.9
    for g, passed in zip(groups, correct.double().mean(dim=1).tolist()):
        pool.record(g.prompt_id, passed)

    # 2. reward shaping: length penalty (App. A.10 Eq. 9) instead of interruptions
    lengths = torch.tensor([[c.num_tokens for c in g.completions] for g in groups])  # (P, G)
    if cfg.length.control == "penalty":
        rewards = rewards + length_penalty(lengths, correct, max_len=cfg.length.penalty_max_len,
                                           cache_len=cfg.length.penalty_cache)

    # 3. truncation rule and zero-variance filter
    trunc = truncation_masks(truncated, cfg.length.truncation)
    keep = zero_variance_mask(rewards, trunc.in_stats) if cfg.filters.zero_variance else torch.ones(P, dtype=torch.bool)

    # 4. advantages
    adv = group_advantages(rewards, cfg.advantages.norm, cfg.advantages.eps, keep=keep, valid=trunc.in_stats)
    adv = adv.reshape(-1)  # (N,)

    # 5. loss over the full batch: token mask, weights, live rows
    live_rows = (keep[:, None] & trunc.in_loss).reshape(-1)  # (N,)
    tokens = _pad([c.tokens for c in completions], pad_id, torch.long)  # (N, T)
    behaviour = _pad([c.logprobs for c in completions], 0.0, torch.float32)  # (N, T)
    loss_mask = _pad([c.loss_mask for c in completions], False, torch.bool)  # (N, T)
    mask = loss_mask & live_rows[:, None]  # (N, T)
    group_ids = torch.arange(P).repeat_interleave(G)  # (N,)
    weights = token_weights(mask, group_ids, cfg.loss.aggregation)  # (N, T)
    loss_fn, hparams = get_loss(cfg.loss.name), cfg.loss.hparams()

    model.train()
    optimizer.zero_grad(set_to_none=True)
    rows = torch.nonzero(mask.any(dim=1)).flatten().tolist()
    sums: dict[str, float] = {}
    extrema = {"is_ratio_min": float("inf"), "is_ratio_max": float("-inf")}
    total_loss, trained_tokens, mask_tokens = 0.0, 0, 0
    for start in range(0, len(rows), cfg.optim.micro_batch):
        idx = rows[start : start + cfg.optim.micro_batch]
        seqs = [np.concatenate([completions[i].prompt_tokens, completions[i].tokens]) for i in idx]
        ids = _pad(seqs, pad_id, torch.long)  # (n, L)
        attn = _pad([np.ones(len(s), dtype=np.int64) for s in seqs], 0, torch.long)
        logits, _ = forward_logits(model, ids, attention_mask=attn, fp32_head=cfg.model.fp32_head_trainer)
        # completion token j of row r sits at position p_r + j, predicted by logits at p_r + j − 1
        T = tokens.shape[1]
        starts = torch.tensor([len(completions[i].prompt_tokens) - 1 for i in idx])
        pos = (starts[:, None] + torch.arange(T)[None, :]).clamp(max=ids.shape[1] - 1)  # (n, T)
        comp_logits = torch.gather(logits, 1, pos[..., None].expand(-1, -1, logits.shape[-1]))  # (n, T, V)
        m = mask[idx]
        # the generator records log-probs of softmax(logits / τ): score the same distribution
        logp = token_logprobs(comp_logits, tokens[idx], cfg.sampling.temperature)  # (n, T)
        out = loss_fn(logp, behaviour[idx], adv[idx], m, logits=comp_logits, **hparams)
        loss = torch.where(m, out.per_token * weights[idx], 0.0).sum()
        loss.backward()
        total_loss += float(loss.detach())
        n_tok = int(m.sum())
        mask_tokens += n_tok
        trained_tokens += int(attn.sum())
        for key, value in out.metrics.items():
            if key in extrema:
                pick = min if key == "is_ratio_min" else max
                extrema[key] = pick(extrema[key], float(value))
            else:
                sums[key] = sums.get(key, 0.0) + float(value) * n_tok

    # 6. optimiser
    grad_norm = float("nan")
    if rows:
        params = [p for p in model.parameters() if p.grad is not None]
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        optimizer.step()
        lr_schedule.step()  # the schedule counts optimiser updates, not skipped (all-filtered) steps
    optimizer.zero_grad(set_to_none=True)
    model.eval()

    eff = effective_batch(keep, trunc.in_loss)
    stale = [learner_version - g.min_version for g in groups]
    metrics = {
        "loss": total_loss,
        "grad_norm": grad_norm,
        "lr": optimizer.param_groups[0]["lr"],
        "reward_mean": float(rewards.mean()),
        "pass_rate": float(correct.float().mean()),
        "truncation_rate": float(truncated.float().mean()),
        "interrupted_rate": float(np.mean([c.finish_reason == "interrupted" for c in completions])),
        "completion_len": float(lengths.float().mean()),
        "effective_prompts": eff.kept_prompts,
        "effective_batch": eff.kept_completions / max(1, eff.total_completions),
        "staleness_mean": float(np.mean(stale)),
        "staleness_max": int(max(stale)),
        "staleness_hist": {str(s): stale.count(s) for s in sorted(set(stale))},
        # completions whose tokens came from more than one policy version (in-flight swaps)
        "inflight_frac": float(np.mean([c.num_tokens > 0 and c.versions.max() > c.versions.min()
                                        for c in completions])),
        "trained_tokens": trained_tokens,
        "pool_live": int(pool.live_size),
    }
    metrics.update({k: v / max(1, mask_tokens) for k, v in sums.items()})
    if rows:
        metrics.update(extrema)
    return metrics
