"""One learner step: :func:`~scalerl.pipeline.batch.prepare_batch`, then :func:`backward_and_step`.

:func:`backward_and_step` runs the live rows of a prepared batch in micro-batches: trainer
log-probs through ``forward_logits(..., fp32_head)`` (§2.4) at the sampling temperature,
the mismatch statistics against the generator's log-probs (``algo.mismatch``), the
registered loss (CISPO by default, §2.3) with its own hyperparameters and optional IS
correction, ``Σ w·ℓ`` backpropagated and accumulated; then the AdamW step with optional
grad-norm clipping (and float16 loss scaling), and the LR schedule advances. No KL, no
entropy. Loss metrics combine across micro-batches as each loss declares
(``LossOutput.reductions``: min, max, or a token-weighted mean).

The forward is ``pipeline.packing``'s by default (``optim.shared_prompt``): each distinct
prompt runs once per micro-batch, on micro-batches ordered to share prompts or to bucket
lengths, whichever forwards fewer tokens; the plain prompt+completion forward (rows in
batch order) stays as the reference. ``trained_tokens`` counts the real (non-padding) positions
the body actually forwarded, so the compute meter's ``6·N·trained_tokens`` is the work done:
on the shared path a prompt counts once per micro-batch it appears in and each completion's
last token (never an input) not at all. ``padded_tokens`` adds the padding: the slots paid for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from scalerl.algo.logprobs import token_logprobs
from scalerl.algo.losses import get_loss
from scalerl.algo.mismatch import corrected_loss, mismatch_metrics, mismatch_sums
from scalerl.models.forward import forward_logits
from scalerl.pipeline.batch import Batch, pad, prepare_batch
from scalerl.pipeline.packing import micro_batches, shared_prompt_logits
from scalerl.types import Group

_PICK = {"min": min, "max": max}


def _micro_batch_logits(model, completions, idx: list[int], T: int, cfg, pad_id: int, device, scaler):
    """(n, T, V) logits predicting each completion token of rows ``idx`` (prompt + completion
    in one right-padded forward), real tokens and token slots forwarded. The plain path
    (``optim.shared_prompt=false``) and the reference the shared-prompt path is tested against."""
    seqs = [np.concatenate([completions[i].prompt_tokens, completions[i].tokens]) for i in idx]
    ids = pad(seqs, pad_id, torch.long).to(device)  # (n, L)
    attn = pad([np.ones(len(s), dtype=np.int64) for s in seqs], 0, torch.long).to(device)
    with torch.autocast(device.type, dtype=torch.float16, enabled=scaler is not None):
        logits, _ = forward_logits(model, ids, attention_mask=attn, fp32_head=cfg.model.fp32_head_trainer)
    # completion token j of row r sits at position p_r + j, predicted by logits at p_r + j − 1
    starts = torch.tensor([len(completions[i].prompt_tokens) - 1 for i in idx], device=device)
    pos = (starts[:, None] + torch.arange(T, device=device)[None, :]).clamp(max=ids.shape[1] - 1)  # (n, T)
    logits = torch.gather(logits, 1, pos[..., None].expand(-1, -1, logits.shape[-1]))
    return logits, int(attn.sum()), ids.numel()


def _micro_batches(batch: Batch, cfg, device) -> list[list[int]]:
    """The live rows in micro-batches: reordered for the shared-prompt path, as they come for the plain one."""
    if cfg.optim.shared_prompt:
        # the token budget keeps CPU activations cache-sized; a GPU wants its micro-batches big
        budget = cfg.optim.micro_batch_tokens if device.type == "cpu" else None
        return micro_batches(batch.completions, batch.rows, cfg.optim.micro_batch, budget)
    return [batch.rows[s : s + cfg.optim.micro_batch] for s in range(0, len(batch.rows), cfg.optim.micro_batch)]


def _micro_batch_forward(model, batch: Batch, idx: list[int], cfg, pad_id: int, device, scaler):
    """``(logits (n, W, V), real tokens, slots)`` of rows ``idx`` by the configured path."""
    if cfg.optim.shared_prompt:
        return shared_prompt_logits(model, batch.completions, idx, fp32_head=cfg.model.fp32_head_trainer,
                                    pad_id=pad_id, device=device, fp16_autocast=scaler is not None)
    return _micro_batch_logits(model, batch.completions, idx, batch.tokens.shape[1], cfg, pad_id, device, scaler)


def _backward(model, batch: Batch, cfg, pad_id: int, scaler) -> dict[str, Any]:
    """Forward, loss and backward of the live rows in micro-batches; gradients accumulate."""
    device = next(model.parameters()).device
    tokens, behaviour, fresh, mask, weights, adv = (
        t.to(device) for t in (batch.tokens, batch.behaviour, batch.fresh, batch.mask, batch.weights,
                               batch.advantages))
    loss_fn, hparams, correction = get_loss(cfg.loss.name), cfg.loss.hparams(), cfg.loss.is_correction
    sums: dict[str, float] = {}
    reduced: dict[str, float] = {}
    acc = {"loss": 0.0, "trained_tokens": 0, "padded_tokens": 0, "mask_tokens": 0, "mismatch": [], "fresh": []}
    for idx in _micro_batches(batch, cfg, device):
        comp_logits, n_real, n_slots = _micro_batch_forward(model, batch, idx, cfg, pad_id, device, scaler)
        W = comp_logits.shape[1]  # columns past the micro-batch's longest completion carry no loss token
        tok, beh, m = tokens[idx, :W], behaviour[idx, :W], mask[idx, :W]
        # the generator records log-probs of softmax(logits / τ): score the same distribution
        logp = token_logprobs(comp_logits, tok, cfg.sampling.temperature)  # (n, W)
        acc["mismatch"].append(mismatch_sums(logp, beh, m))
        acc["fresh"].append(mismatch_sums(logp, beh, m & fresh[idx, :W]))
        out = corrected_loss(loss_fn, logp, beh, adv[idx], m, logits=comp_logits,
                             mode=correction.mode, **correction.band(), **hparams)
        loss = torch.where(m, out.per_token * weights[idx, :W], 0.0).sum()
        (scaler.scale(loss) if scaler is not None else loss).backward()
        acc["loss"] += float(loss.detach())
        n_tok = int(m.sum())
        acc["mask_tokens"] += n_tok
        acc["trained_tokens"] += n_real
        acc["padded_tokens"] += n_slots
        for key, value in out.metrics.items():
            how = out.reductions.get(key)
            if how is None:
                sums[key] = sums.get(key, 0.0) + float(value) * n_tok
            else:
                reduced[key] = _PICK[how](reduced.get(key, float(value)), float(value))
    acc["metrics"] = {k: v / max(1, acc["mask_tokens"]) for k, v in sums.items()} | reduced
    return acc


def _optimiser_step(model, optimizer, lr_schedule, cfg, scaler) -> float:
    """Clip, step (through the loss scaler for float16), advance the schedule; the grad norm."""
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
    return grad_norm


def backward_and_step(model, optimizer, lr_schedule, batch: Batch, cfg, pad_id: int, scaler=None) -> dict[str, Any]:
    """Train on a prepared ``batch`` once; returns the step's metrics (module doc).
    ``scaler``: a ``torch.amp.GradScaler`` for float16 training (loss scaling), else None."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    acc = _backward(model, batch, cfg, pad_id, scaler)
    grad_norm = _optimiser_step(model, optimizer, lr_schedule, cfg, scaler) if batch.rows else float("nan")
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    fresh_tokens = sum(float(p["n"]) for p in acc["fresh"])
    metrics = {
        "loss": acc["loss"],
        "grad_norm": grad_norm,
        "lr": optimizer.param_groups[0]["lr"],
        **batch.metrics,
        "trained_tokens": acc["trained_tokens"],
        "padded_tokens": acc["padded_tokens"],
        **({"loss_scale": float(scaler.get_scale())} if scaler is not None else {}),
        **mismatch_metrics(acc["mismatch"]),
        # the same statistics on tokens sampled with the trainer's current weights only
        "mismatch_fresh_frac": fresh_tokens / max(1, acc["mask_tokens"]),
    }
    if fresh_tokens:
        metrics.update(mismatch_metrics(acc["fresh"], prefix="mismatch_fresh"))
    return metrics | acc["metrics"]


def train_step(model, optimizer, lr_schedule, groups: list[Group], cfg, pool,
               learner_version: int, pad_id: int, scaler=None) -> dict[str, Any]:
    """``prepare_batch`` + ``backward_and_step``, recording the pass rates into ``pool``."""
    batch = prepare_batch(groups, cfg, learner_version, pad_id)
    for prompt_id, rate in batch.pass_rates:
        pool.record(prompt_id, rate)
    return backward_and_step(model, optimizer, lr_schedule, batch, cfg, pad_id, scaler) | {
        "pool_live": int(pool.live_size)}
