"""The learner-side sections: advantages (§2.6), filters (§2.7), the curriculum (§2.8) and
the optimiser (digest §2.1)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scalerl.config.base import Frozen as _Frozen


class AdvantageConfig(_Frozen):
    norm: Literal["batch", "prompt", "none"] = "batch"
    """Advantage normalisation (digest §2.6): batch-level std is the recipe."""
    eps: float = 1e-6
    """Added to the std before dividing, so a tiny spread cannot blow up."""


class FilterConfig(_Frozen):
    zero_variance: bool = True
    """Drop prompts whose G rewards are all equal from the loss (digest §2.7)."""


class CurriculumConfig(_Frozen):
    no_positive_resampling: bool = True
    """Retire prompts whose historical pass rate reaches ``retire_threshold`` (digest §2.8);
    False samples all prompts uniformly every epoch (loo-npr)."""
    retire_threshold: float = Field(0.9, gt=0, le=1)
    """Pass rate at or above which a prompt is retired from later epochs."""
    history: Literal["last", "mean"] = "last"
    """Pass-rate history rule: the most recent visit, or the mean over visits."""


class OptimConfig(_Frozen):
    """AdamW (digest §2.1): constant LR after a linear warm-up, tiny eps, wd 0.01, no KL."""

    lr: float = Field(5e-5, gt=0)
    """Peak (constant) learning rate; the paper's 5e-7 is for an 8B model. For the nano model,
    1e-3 and 5e-4 collapsed within ~50 steps; 2e-4 climbed but collapsed by 0.1–0.23 within
    50 steps after its rise (1–3 of 8 prompts survive the zero-variance filter there, so a
    step is a noisy gradient); 1e-4 fell back 2.2–2.4 SE; 5e-5 rose and saturated on every
    seed (``bench/paper_claims/RESULTS.md``, stability)."""
    warmup_steps: int = Field(10, ge=0)
    """Linear warm-up length in optimiser steps (paper: 100)."""
    eps: float = 1e-15
    """Adam epsilon, tiny to avoid the epsilon-underflow effective clipping (paper)."""
    weight_decay: float = 0.01
    """Decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam moment decay rates."""
    grad_clip: float | None = 1.0
    """Max global gradient norm; None disables clipping (the paper gives no value)."""
    micro_batch: int = Field(64, ge=1)
    """Completions per forward/backward micro-batch; gradients accumulate over the batch."""
    micro_batch_tokens: int | None = Field(2048, ge=1)
    """On the CPU with ``shared_prompt``, also cap a micro-batch's forwarded token positions
    (padding included; ``pipeline.learner.packing.forward_slots``), so long completions go in smaller
    micro-batches and activations stay cache-sized (a GPU ignores it); None: rows only."""
    head_chunk_tokens: int | None = Field(1024, ge=1)
    """The trainer's LM head scores this many token positions at a time and recomputes them in
    the backward (``algo.logprobs.head_logprobs``), so a micro-batch's float32 [n, W, V] logits
    are never held whole: at Qwen's V = 151,936 one chunk is 0.6 GB, a 16k-token micro-batch's
    logits 10 GB (``bench/fused_head.py``). None: the whole micro-batch's logits at once."""
    shared_prompt: bool = True
    """Learner forward runs each distinct prompt once per micro-batch (its KV cache shared by
    the completions) on reordered, length-bucketed micro-batches; False: the plain
    prompt+completion forward of every row."""
