"""The rules a learner step follows, frozen once per run: what the step path reads of the config.

:class:`BatchRules` is everything :func:`~scalerl.pipeline.learner.batch.prepare_batch` decides with
(reward form, the failure rule, the pass threshold, length control, filters, advantage normalisation,
aggregation); :class:`StepRules` everything :func:`~scalerl.pipeline.learner.train_step.backward_and_step`
computes with (the loss and its hyperparameters, the IS correction, the sampling temperature,
micro-batching, the FP32 head, clipping). Both are plain picklable values, built by
``pipeline.build`` from the validated config, so a learner rank in another process or on
another node steps by exactly the driver's rules without the config. No field has a default:
the config's are the only ones (``config/``), and ``build.step_rules`` sets every field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BatchRules:
    """From groups to advantages, masks and aggregation weights (``pipeline.learner.batch``)."""

    reward_form: str  # data.tasks.base.REWARD_FORMS: "as_is" | "pm1" (task.reward, auto decided)
    truncation_is_failure: bool  # a completion cut by max_new_tokens trains as a failure (reward 0 as returned)
    pass_threshold: float  # a reward as returned of at least this is a pass (task.pass_threshold)
    length_control: str  # "interrupt" | "penalty" | "none"
    penalty_max_len: int  # App. A.10 Eq. 9 L_max
    penalty_cache: int  # App. A.10 Eq. 9 L_cache
    truncation: str  # filters.truncation_masks rule
    zero_variance: bool  # §2.7: drop groups whose rewards are all equal
    advantage_norm: str  # §2.6: batch | prompt | none
    advantage_eps: float
    aggregation: str  # §2.5: prompt | sample | token average


@dataclass(frozen=True)
class StepRules:
    """Forward, loss and optimiser step of a prepared batch (``pipeline.learner.train_step``)."""

    loss: str  # registered loss name (algo.losses)
    loss_hparams: dict[str, Any] = field(hash=False)  # the selected loss's own keyword arguments
    correction_mode: str  # IS correction (algo.mismatch): none | tis | mis | seq_mask
    correction_band: dict[str, float] = field(hash=False)  # its cap/low/high
    temperature: float  # log-probs of softmax(logits / τ), as the generator sampled
    fp32_head: bool  # §2.4: the trainer's LM head in float32
    micro_batch: int  # completions per forward/backward
    micro_batch_tokens: int | None  # CPU token cap of a shared-prompt micro-batch
    head_chunk: int | None  # token positions the LM head scores at a time; None: all at once
    shared_prompt: bool  # each distinct prompt forwarded once per micro-batch
    grad_clip: float | None  # max global gradient norm; None: no clipping
    autocast: str | None  # "bfloat16" | "float16": the forward's compute dtype over float32 masters

    @property
    def autocast_dtype(self):
        import torch

        return None if self.autocast is None else getattr(torch, self.autocast)


@dataclass(frozen=True)
class OptimRules:
    """AdamW and its schedule (digest §2.1): constant LR after a linear warm-up."""

    lr: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    warmup_steps: int


@dataclass(frozen=True)
class LearnerRules:
    """All a learner (or a learner rank) steps by: the three rule sets, the pad id, and
    whether float16 loss scaling is on (float32 masters under fp16 autocast)."""

    batch: BatchRules
    step: StepRules
    optim: OptimRules
    pad_id: int
    float16: bool = False
