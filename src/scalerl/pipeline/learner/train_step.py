"""One learner step: :func:`~scalerl.pipeline.learner.batch.prepare_batch`, then :func:`backward_and_step`.

:func:`backward_and_step` runs the live rows of a prepared batch in micro-batches: trainer
log-probs through the body and ``algo.logprobs.head_logprobs`` (the FP32 head, §2.4, scored
``optim.head_chunk_tokens`` positions at a time so the [n, W, V] logits are never whole) at the
sampling temperature,
the mismatch statistics against the generator's log-probs (``algo.mismatch``), the
registered loss (CISPO by default, §2.3) with its own hyperparameters and optional IS
correction, ``Σ w·ℓ`` backpropagated and accumulated; then the AdamW step with optional
grad-norm clipping (and float16 loss scaling), and the LR schedule advances. No KL, no
entropy. Loss metrics combine across micro-batches as each loss declares
(``LossOutput.reductions``: min, max, or a token-weighted mean).

The forward is ``pipeline.learner.packing``'s by default (``optim.shared_prompt``): each distinct
prompt runs once per micro-batch, on micro-batches ordered to share prompts or to bucket
lengths, whichever forwards fewer tokens; the plain prompt+completion forward (rows in
batch order) stays as the reference. ``step_trained_tokens`` counts the real (non-padding)
positions the body actually forwarded, so the compute meter's ``6·N·step_trained_tokens`` is the
work done: on the shared path a prompt counts once per micro-batch it appears in and each
completion's last token (never an input) not at all. ``step_padded_tokens`` adds the padding:
the slots paid for.

Data parallelism (``pipeline.learner.rank``): rank ``r`` of ``W`` runs the live rows of every
``W``-th group (:func:`rank_rows`). The aggregation weights were fixed on the full batch, so
the loss is a sum over rows and ``Σ_r ∇L_r = ∇L``; the ranks' gradients are summed (the loss
is scaled by ``W`` because FSDP2 and DDP average). Every rank runs as many micro-batches as
the busiest one — a rank with fewer runs zero-weighted ones — since each forward and backward
is a collective. Each rank returns a :class:`StepPart`; :func:`step_metrics` merges them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from scalerl.algo.logprobs import head_logprobs
from scalerl.algo.losses import get_loss
from scalerl.algo.mismatch import corrected_loss, mismatch_metrics, mismatch_sums
from scalerl.models.forward import Forward, forward_hidden, head_params
from scalerl.pipeline.learner.batch import Batch, pad
from scalerl.pipeline.learner.packing import micro_batches, shared_prompt_hidden
from scalerl.pipeline.learner.rules import StepRules

_PICK = {"min": min, "max": max}


@dataclass(frozen=True)
class Shard:
    """This rank's place in a data-parallel learner; ``no_sync``: DDP's gradient-sync
    suppressor for all but the last micro-batch (None: FSDP2, which reduces per backward)."""

    rank: int = 0
    world: int = 1
    no_sync: Any = None


@dataclass
class StepPart:
    """One rank's share of a step: its sums, for :func:`step_metrics` to merge."""

    loss: float = 0.0
    trained_tokens: int = 0
    padded_tokens: int = 0
    mask_tokens: int = 0
    mismatch: list = field(default_factory=list)  # mismatch_sums per micro-batch
    fresh: list = field(default_factory=list)  # the same on fresh tokens only
    sums: dict[str, float] = field(default_factory=dict)  # token-weighted loss metrics
    reduced: dict[str, tuple[str, float]] = field(default_factory=dict)  # min/max loss metrics: (how, value)
    grad_norm: float = float("nan")
    lr: float = 0.0
    loss_scale: float | None = None


def _micro_batch_hidden(model, completions, idx: list[int], T: int, pad_id: int, device):
    """(n, T, H) hidden states predicting each completion token of rows ``idx`` (prompt +
    completion in one right-padded forward), real tokens and token slots forwarded. The plain
    path (``optim.shared_prompt=false``) and the reference the shared-prompt path is tested against."""
    seqs = [np.concatenate([completions[i].prompt_tokens, completions[i].tokens]) for i in idx]
    ids = pad(seqs, pad_id, torch.long).to(device)  # (n, L)
    attn = pad([np.ones(len(s), dtype=np.int64) for s in seqs], 0, torch.long).to(device)
    hidden, _ = forward_hidden(model, ids, attention_mask=attn)  # (n, L, H)
    # completion token j of row r sits at position p_r + j, predicted by the state at p_r + j − 1
    starts = torch.tensor([len(completions[i].prompt_tokens) - 1 for i in idx], device=device)
    pos = (starts[:, None] + torch.arange(T, device=device)[None, :]).clamp(max=ids.shape[1] - 1)  # (n, T)
    hidden = torch.gather(hidden, 1, pos[..., None].expand(-1, -1, hidden.shape[-1]))
    return hidden, int(attn.sum()), ids.numel()


def scored(model, completions, idx: list[int], tokens: torch.Tensor, rules: StepRules, pad_id: int, device):
    """``(logp (n, W), entropy (n, W), real tokens, slots)`` of rows ``idx`` (``tokens`` (n, ≥W)
    their completion tokens) by the configured path, under the rules' autocast (bf16 or fp16
    compute over float32 masters; the FP32 head stays fp32): the body's hidden states, then the
    head chunk by chunk. Run as the :class:`Forward` module's forward, so FSDP2 gathers the head."""
    amp = rules.autocast_dtype
    with torch.autocast(device.type, dtype=amp or torch.float16, enabled=amp is not None):
        if rules.shared_prompt:
            hidden, real, slots = shared_prompt_hidden(model, completions, idx, pad_id=pad_id, device=device)
        else:
            hidden, real, slots = _micro_batch_hidden(model, completions, idx, tokens.shape[1], pad_id, device)
        weight, bias = head_params(model)
        # the generator records log-probs of softmax(logits / τ): score the same distribution
        logp, entropy = head_logprobs(hidden, weight, bias, tokens[:, : hidden.shape[1]],
                                      temperature=rules.temperature, fp32=rules.fp32_head, chunk=rules.head_chunk)
    return logp, entropy, real, slots


def rank_rows(batch: Batch, rank: int, world: int) -> list[int]:
    """The live rows rank ``rank`` of ``world`` trains: those of every ``world``-th group with
    any (whole groups, so the shared-prompt path still forwards each prompt once)."""
    return [r for rows in batch.group_rows()[rank::world] for r in rows]


def _micro_batches(batch: Batch, rows: list[int], rules: StepRules, device) -> list[list[int]]:
    """``rows`` in micro-batches: reordered for the shared-prompt path, as they come for the plain one."""
    if rules.shared_prompt:
        # the token budget keeps CPU activations cache-sized; a GPU wants its micro-batches big
        budget = rules.micro_batch_tokens if device.type == "cpu" else None
        return micro_batches(batch.completions, rows, rules.micro_batch, budget)
    return [rows[s : s + rules.micro_batch] for s in range(0, len(rows), rules.micro_batch)]


def _plan(batch: Batch, rules: StepRules, shard: Shard, device) -> list[list[int] | None]:
    """This rank's micro-batches, padded with None (a zero-weighted one) to the busiest rank's count."""
    plans = [_micro_batches(batch, rank_rows(batch, r, shard.world), rules, device) for r in range(shard.world)]
    mine = plans[shard.rank]
    return mine + [None] * (max(map(len, plans)) - len(mine))


def _backward(forward: Forward, batch: Batch, rules: StepRules, pad_id: int, scaler, shard: Shard) -> StepPart:
    """Forward, loss and backward of this rank's live rows in micro-batches; gradients accumulate."""
    device = next(forward.parameters()).device
    tokens, behaviour, fresh, mask, weights, adv = (
        t.to(device) for t in (batch.tokens, batch.behaviour, batch.fresh, batch.mask, batch.weights,
                               batch.advantages))
    loss_fn = get_loss(rules.loss)
    part = StepPart()
    plan = _plan(batch, rules, shard, device)
    for i, idx in enumerate(plan):
        dummy = idx is None  # keeps this rank in step with the others' collectives; weight 0
        idx = [batch.rows[0]] if dummy else idx
        last = i == len(plan) - 1
        sync = shard.no_sync() if shard.no_sync is not None and not last else contextlib.nullcontext()
        with sync:
            logp, entropy, n_real, n_slots = forward(scored, batch.completions, idx, tokens[idx], rules, pad_id,
                                                     device)  # (n, W) each
            W = logp.shape[1]  # columns past the micro-batch's longest completion carry no loss token
            beh, m = behaviour[idx, :W], mask[idx, :W]
            out = corrected_loss(loss_fn, logp, beh, adv[idx], m, entropy=entropy, mode=rules.correction_mode,
                                 **rules.correction_band, **rules.loss_hparams)
            loss = torch.where(m, out.per_token * weights[idx, :W], 0.0).sum()
            scaled = loss * (0.0 if dummy else float(shard.world))  # ranks' gradients are averaged
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        if not dummy:
            _accumulate(part, out, loss, logp, beh, m, fresh[idx, :W], n_real, n_slots)
    return part


def _accumulate(part: StepPart, out, loss, logp, beh, m, fresh, n_real: int, n_slots: int) -> None:
    """Add one micro-batch's sums to ``part``."""
    part.mismatch.append(mismatch_sums(logp, beh, m))
    part.fresh.append(mismatch_sums(logp, beh, m & fresh))
    part.loss += float(loss.detach())
    n_tok = int(m.sum())
    part.mask_tokens += n_tok
    part.trained_tokens += n_real
    part.padded_tokens += n_slots
    for key, value in out.metrics.items():
        how = out.reductions.get(key)
        if how is None:
            part.sums[key] = part.sums.get(key, 0.0) + float(value) * n_tok
        else:
            _reduce(part.reduced, key, how, float(value))


def _reduce(into: dict[str, tuple[str, float]], key: str, how: str, value: float) -> None:
    """Combine ``value`` into ``into[key]`` by its loss's declared reduction (min or max)."""
    into[key] = (how, _PICK[how](into[key][1], value) if key in into else value)


def _global_norm(norm) -> float:
    """A ``clip_grad_norm_`` result as a float (FSDP2 returns a DTensor of the global norm)."""
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def _optimiser_step(forward: Forward, optimizer, lr_schedule, rules: StepRules, scaler) -> float:
    """Clip, step (through the loss scaler for float16), advance the schedule; the grad norm."""
    params = [p for p in forward.parameters() if p.grad is not None]
    clip = rules.grad_clip if rules.grad_clip is not None else float("inf")
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip and log the true gradient, not the scaled one
    grad_norm = _global_norm(torch.nn.utils.clip_grad_norm_(params, clip))
    if scaler is not None:
        scaler.step(optimizer)  # skipped when the scaled gradient overflowed
        scaler.update()
    else:
        optimizer.step()
    lr_schedule.step()  # the schedule counts optimiser updates, not skipped (all-filtered) steps
    return grad_norm


def train_part(forward: Forward, optimizer, lr_schedule, batch: Batch, rules: StepRules, pad_id: int,
               scaler=None, shard: Shard = Shard()) -> StepPart:
    """This rank's forward/backward of ``batch`` and the (collective) optimiser step."""
    forward.train()
    optimizer.zero_grad(set_to_none=True)
    part = _backward(forward, batch, rules, pad_id, scaler, shard)
    if batch.rows:  # every rank agrees: all of them prepared the same batch
        part.grad_norm = _optimiser_step(forward, optimizer, lr_schedule, rules, scaler)
    optimizer.zero_grad(set_to_none=True)
    forward.eval()
    part.lr = optimizer.param_groups[0]["lr"]
    part.loss_scale = float(scaler.get_scale()) if scaler is not None else None
    return part


def step_metrics(batch_metrics: dict[str, Any], parts: list[StepPart]) -> dict[str, Any]:
    """The step's metrics from every rank's part (module doc); one part without data parallelism."""
    mask_tokens = sum(p.mask_tokens for p in parts)
    sums: dict[str, float] = {}
    reduced: dict[str, tuple[str, float]] = {}
    for p in parts:
        for k, v in p.sums.items():
            sums[k] = sums.get(k, 0.0) + v
        for k, (how, v) in p.reduced.items():
            _reduce(reduced, k, how, v)
    mismatch = [m for p in parts for m in p.mismatch]
    fresh = [m for p in parts for m in p.fresh]
    fresh_tokens = sum(float(m["n"]) for m in fresh)
    first = parts[0]
    metrics = {
        "loss": sum(p.loss for p in parts),
        "grad_norm": first.grad_norm,
        "lr": first.lr,
        **batch_metrics,
        "step_trained_tokens": sum(p.trained_tokens for p in parts),
        "step_padded_tokens": sum(p.padded_tokens for p in parts),
        **({"loss_scale": first.loss_scale} if first.loss_scale is not None else {}),
        **mismatch_metrics(mismatch),
        # the same statistics on tokens sampled with the trainer's current weights only
        "mismatch_fresh_frac": fresh_tokens / max(1, mask_tokens),
    }
    if fresh_tokens:
        metrics.update(mismatch_metrics(fresh, prefix="mismatch_fresh"))
    return metrics | {k: v / max(1, mask_tokens) for k, v in sums.items()} | {k: v for k, (_, v) in reduced.items()}


def backward_and_step(model, optimizer, lr_schedule, batch: Batch, rules: StepRules, pad_id: int,
                      scaler=None) -> dict[str, Any]:
    """Train on a prepared ``batch`` once in one process; returns the step's metrics (module doc).
    ``model``: the model or its :class:`~scalerl.models.forward.Forward`; ``scaler``: a
    ``torch.amp.GradScaler`` for float16 training (loss scaling), else None."""
    forward = model if isinstance(model, Forward) else Forward(model)
    return step_metrics(batch.metrics, [train_part(forward, optimizer, lr_schedule, batch, rules, pad_id, scaler)])
