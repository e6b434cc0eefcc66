"""The learner role: owns the trainable model, AdamW and the LR schedule; steps on batches.

AdamW with the paper's settings (digest §2.1) adapted by config: constant LR after a linear
warm-up, ``eps = 1e-15``, weight decay 0.01, optional grad-norm clipping. ``version`` counts
optimiser steps; the weights after step ``v`` are policy version ``v``.

Backend-agnostic: the ``local`` backend calls it in the main process, a Ray backend in an
actor (``step(groups)``, ``weights()``, ``state_dict()``).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from scalerl.compute import matmul_peak
from scalerl.models.build import count_parameters
from scalerl.models.lora import is_lora, published_parameters
from scalerl.pipeline.batch import prepare_batch
from scalerl.pipeline.train_step import backward_and_step


def trained_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a checkpoint keeps of the model: every weight, or with LoRA the adapters alone
    (the frozen base is the run's starting model, rebuilt from ``model.base`` on resume)."""
    state = model.state_dict()
    if not is_lora(model):
        return state
    trained = {n for n, _ in published_parameters(model)}
    return {n: t for n, t in state.items() if n in trained}


def warmup_then_constant(warmup_steps: int):
    """LR factor ``min(1, (s + 1) / warmup)``: linear warm-up, then constant."""
    return lambda s: 1.0 if warmup_steps <= 0 else min(1.0, (s + 1) / warmup_steps)


class Learner:
    def __init__(self, model: torch.nn.Module, cfg, pad_id: int) -> None:
        self.model, self.cfg, self.pad_id = model, cfg, pad_id
        o = cfg.optim
        # frozen weights (a LoRA run's base) get no optimiser state
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=o.lr, betas=o.betas, eps=o.eps,
                                           weight_decay=o.weight_decay)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_then_constant(o.warmup_steps))
        # float16 trains float32 master weights under fp16 autocast, with dynamic loss scaling
        # (fp16's 5-bit exponent underflows small gradients); bf16 and fp32 need none
        param = next(model.parameters())
        self.scaler = torch.amp.GradScaler(param.device.type) if cfg.model.dtype == "float16" else None
        self.version = 0
        # learner_mfu = 6·N·trained tokens / busy seconds / the matmul peak measured here,
        # before any generator shares the machine
        self.n_params = count_parameters(model)
        self.device = param.device
        # float16 runs compute under fp16 autocast: their peak is fp16's, not the master weights'
        compute_dtype = torch.float16 if self.scaler is not None else param.dtype
        self.peak_flop_s = matmul_peak(param.device.type, compute_dtype)

    def step(self, groups) -> tuple[dict[str, Any], list[tuple[int, float]]]:
        """One optimiser step on P groups; the policy version advances. Returns the step's
        metrics and each prompt's pass rate on this visit (the driver's curriculum records them)."""
        start, cpu = time.perf_counter(), time.process_time()
        batch = prepare_batch(groups, self.cfg, self.version, self.pad_id)
        metrics = backward_and_step(self.model, self.optimizer, self.schedule, batch, self.cfg, self.pad_id,
                                    self.scaler)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        busy = time.perf_counter() - start
        flops = 6.0 * self.n_params * metrics["trained_tokens"]
        metrics |= {"learner_busy_s": busy, "learner_cpu_s": time.process_time() - cpu,
                    "learner_flop_s": flops / max(busy, 1e-12),
                    "learner_mfu": flops / max(busy, 1e-12) / self.peak_flop_s}
        self.version += 1
        return metrics, batch.pass_rates

    def weights(self) -> dict[str, torch.Tensor]:
        """Detached parameters by name (what generators load)."""
        return {n: p.detach() for n, p in self.model.named_parameters()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": trained_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "version": self.version,
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        result = self.model.load_state_dict(state["model"], strict=not is_lora(self.model))
        trained = {n for n, _ in published_parameters(self.model)}
        lost = sorted(set(result.missing_keys) & trained) + sorted(result.unexpected_keys)
        if lost:  # a LoRA checkpoint holds exactly the adapters: anything else is another model
            raise ValueError(f"the checkpoint's model does not match this run's ({len(lost)} weights differ, "
                             f"e.g. {lost[0]})")
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.version = int(state["version"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
