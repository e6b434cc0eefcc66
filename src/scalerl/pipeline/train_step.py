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
from scalerl.algo.mismatch import corrected_loss, mismatch_metrics, mismatch_sums
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


def _backward_micro_batches(model, completions, rows: list[int], tokens, behaviour, fresh, mask,
                            weights, adv, cfg, pad_id: int, scaler=None) -> dict[str, Any]:
    """Forward, loss and backward of the live ``rows`` in micro-batches; gradients accumulate.

    ``tokens``/``behaviour``/``mask``/``weights``: (N, T); ``fresh``: (N, T) bool, tokens the
    generator sampled with the weights the trainer holds now (their gap is pure numerics);
    ``adv``: (N,). With a ``scaler`` (``model.dtype=float16``) the body runs under float16
    autocast over float32 master weights and each micro-batch's loss is scaled before its
    backward. Returns the summed loss, token counts, loss metrics and mismatch sums.
    """
    device = next(model.parameters()).device
    tokens, behaviour, fresh, mask, weights, adv = (
        t.to(device) for t in (tokens, behaviour, fresh, mask, weights, adv))
    loss_fn, hparams = get_loss(cfg.loss.name), cfg.loss.hparams()
    correction = cfg.loss.is_correction
    sums: dict[str, float] = {}
    extrema = {"is_ratio_min": float("inf"), "is_ratio_max": float("-inf")}
    acc = {"loss": 0.0, "trained_tokens": 0, "mask_tokens": 0, "mismatch": [], "fresh": []}
    for start in range(0, len(rows), cfg.optim.micro_batch):
        idx = rows[start : start + cfg.optim.micro_batch]
        seqs = [np.concatenate([completions[i].prompt_tokens, completions[i].tokens]) for i in idx]
        ids = _pad(seqs, pad_id, torch.long).to(device)  # (n, L)
        attn = _pad([np.ones(len(s), dtype=np.int64) for s in seqs], 0, torch.long).to(device)
        with torch.autocast(device.type, dtype=torch.float16, enabled=scaler is not None):
            logits, _ = forward_logits(model, ids, attention_mask=attn, fp32_head=cfg.model.fp32_head_trainer)
        # completion token j of row r sits at position p_r + j, predicted by logits at p_r + j − 1
        T = tokens.shape[1]
        starts = torch.tensor([len(completions[i].prompt_tokens) - 1 for i in idx], device=device)
        pos = (starts[:, None] + torch.arange(T, device=device)[None, :]).clamp(max=ids.shape[1] - 1)  # (n, T)
        comp_logits = torch.gather(logits, 1, pos[..., None].expand(-1, -1, logits.shape[-1]))  # (n, T, V)
        m = mask[idx]
        # the generator records log-probs of softmax(logits / τ): score the same distribution
        logp = token_logprobs(comp_logits, tokens[idx], cfg.sampling.temperature)  # (n, T)
        acc["mismatch"].append(mismatch_sums(logp, behaviour[idx], m))
        acc["fresh"].append(mismatch_sums(logp, behaviour[idx], m & fresh[idx]))
        out = corrected_loss(loss_fn, logp, behaviour[idx], adv[idx], m, logits=comp_logits,
                             mode=correction.mode, cap=correction.cap, low=correction.low, **hparams)
        loss = torch.where(m, out.per_token * weights[idx], 0.0).sum()
        (scaler.scale(loss) if scaler is not None else loss).backward()
        acc["loss"] += float(loss.detach())
        n_tok = int(m.sum())
        acc["mask_tokens"] += n_tok
        acc["trained_tokens"] += int(attn.sum())
        for key, value in out.metrics.items():
            if key in extrema:
                pick = min if key == "is_ratio_min" else max
                extrema[key] = pick(extrema[key], float(value))
            else:
                sums[key] = sums.get(key, 0.0) + float(value) * n_tok
    acc["metrics"] = {k: v / max(1, acc["mask_tokens"]) for k, v in sums.items()}
    if rows:
        acc["metrics"].update(extrema)
    return acc


def train_step(model, optimizer, lr_schedule, groups: list[Group], cfg, pool,
               learner_version: int, pad_id: int, scaler=None) -> dict[str, Any]:
    """Train on ``groups`` once; returns the step's metrics (floats). See the module doc.
    ``scaler``: a ``torch.amp.GradScaler`` for float16 training (loss scaling), else None."""
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

    model.train()
    optimizer.zero_grad(set_to_none=True)
    rows = torch.nonzero(mask.any(dim=1)).flatten().tolist()
    versions = _pad([c.versions for c in completions], -1, torch.long)  # (N, T)
    acc = _backward_micro_batches(model, completions, rows, tokens, behaviour, versions == learner_version,
                                  mask, weights, adv, cfg, pad_id, scaler)

    # 6. optimiser
    grad_norm = float("nan")
    if rows:
        params = [p for p in model.parameters() if p.grad is not None]
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
        if scaler is not None:
            scaler.unscale_(optimizer)  # clip and log the true gradient, not the scaled one
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip))
        if scaler is not None:
            scaler.step(optimizer)  # skipped when the scaled gradient overflowed
            scaler.update()
        else:
            optimizer.step()
        lr_schedule.step()  # the schedule counts optimiser updates, not skipped (all-filtered) steps
    optimizer.zero_grad(set_to_none=True)
    model.eval()

    eff = effective_batch(keep, trunc.in_loss)
    stale = [learner_version - g.min_version for g in groups]
    fresh_tokens = sum(float(p["n"]) for p in acc["fresh"])
    metrics = {
        "loss": acc["loss"],
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
        "trained_tokens": acc["trained_tokens"],
        "pool_live": int(pool.live_size),
        **({"loss_scale": float(scaler.get_scale())} if scaler is not None else {}),
        **mismatch_metrics(acc["mismatch"]),
        # the same statistics on tokens sampled with the trainer's current weights only
        "mismatch_fresh_frac": fresh_tokens / max(1, acc["mask_tokens"]),
    }
    if fresh_tokens:
        metrics.update(mismatch_metrics(acc["fresh"], prefix="mismatch_fresh"))
    metrics.update(acc["metrics"])
    return metrics
