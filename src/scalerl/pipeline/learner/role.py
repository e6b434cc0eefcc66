"""The learner role: owns the trainable model, AdamW and the LR schedule; steps on batches.

AdamW with the paper's settings (digest §2.1) adapted by config: constant LR after a linear
warm-up, ``eps = 1e-15``, weight decay 0.01, optional grad-norm clipping. ``version`` counts
optimiser steps; the weights after step ``v`` are policy version ``v``.

The driver (``pipeline/run.py``) sees a learner only through :class:`LearnerRole`: step on
groups, publish a version into a sink, a model to evaluate, the state to checkpoint. Two
implementations: :class:`Learner`, the model in the driver's own process (``learner.world_size
= 1``), and :class:`~scalerl.pipeline.learner.group.ShardedLearner`, ``world_size`` ranks in
other processes or Ray actors (``pipeline.learner.rank``).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Protocol

import torch

from scalerl.checkpoint import to_cpu
from scalerl.compute import matmul_peak
from scalerl.models.build import count_parameters
from scalerl.models.forward import Forward
from scalerl.models.lora import is_lora, published_parameters
from scalerl.pipeline.learner.batch import prepare_batch
from scalerl.pipeline.learner.rules import LearnerRules
from scalerl.pipeline.learner.train_step import step_metrics, train_part
from scalerl.pipeline.weights import WeightLayout, weight_buckets
from scalerl.runfolder import LEARNER_BUSY, LEARNER_WORLD_SIZE


class StepResult(NamedTuple):
    metrics: dict[str, Any]  # the step's record fields
    pass_rates: list[tuple[int, float]]  # (prompt_id, pass rate of this visit), for the curriculum


class Published(NamedTuple):
    handle: Any  # what the sink's write returned, for the backend to announce
    seconds: float  # the sync's wall time
    bytes: int  # bytes written into the sink


class LearnerRole(Protocol):
    """What the driver needs from a learner, however many processes it spans."""

    version: int  # optimiser steps taken: the policy version the weights are
    num_params: int  # distinct parameters (the compute meter's N)
    num_devices: int  # devices (ranks) it computes on
    layout: WeightLayout  # the published weights' names, shapes and dtypes (backends are built from it)

    def start(self, sink) -> None:
        """Begin: ``sink`` (a ``weights.WeightSink``) is where :meth:`publish` writes."""
        ...

    def step(self, groups) -> StepResult:
        """One optimiser step on P groups; the version advances."""
        ...

    def publish(self, sink) -> Published:
        """Write the current version into ``sink`` (a ``weights.WeightSink``)."""
        ...

    def eval_snapshot(self) -> torch.nn.Module:
        """A model holding the current weights, for evaluation and export in the driver."""
        ...

    def placement(self) -> list[dict[str, Any]]:
        """Where it actually runs: per process, ``{"role", "host", "pid", "devices"}``."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def rate_metrics(n_params: int, tokens: int, busy: float, peak_flop_s: float) -> dict[str, float]:
    """``learner_flop_s = 6·N·tokens / busy`` and ``learner_mfu`` over ``peak_flop_s`` (all ranks')."""
    flops = 6.0 * n_params * tokens / max(busy, 1e-12)
    return {"learner_flop_s": flops, "learner_mfu": flops / peak_flop_s}


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
    """The single-process learner (``learner.world_size = 1``): the model lives in the driver."""

    num_devices = 1

    def __init__(self, model: torch.nn.Module, rules: LearnerRules, bucket_bytes: int = 1 << 62) -> None:
        self.model, self.rules, self.bucket_bytes = model, rules, bucket_bytes
        self.layout = WeightLayout(model)
        self.forward = Forward(model)
        o = rules.optim
        # frozen weights (a LoRA run's base) get no optimiser state
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=o.lr, betas=o.betas, eps=o.eps,
                                           weight_decay=o.weight_decay)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_then_constant(o.warmup_steps))
        # float16 trains float32 master weights under fp16 autocast, with dynamic loss scaling
        # (fp16's 5-bit exponent underflows small gradients); bf16 (same masters, bf16
        # autocast) and fp32 need none
        param = next(model.parameters())
        self.scaler = torch.amp.GradScaler(param.device.type) if rules.float16 else None
        self.version = 0
        # learner_mfu = 6·N·trained tokens / busy seconds / the matmul peak measured here,
        # before any generator shares the machine
        self.num_params = count_parameters(model)
        self.device = param.device
        # bf16 and fp16 runs compute under autocast: their peak is that dtype's, not the masters'
        compute_dtype = rules.step.autocast_dtype or param.dtype
        self.peak_flop_s = matmul_peak(param.device.type, compute_dtype)

    def step(self, groups) -> StepResult:
        """One optimiser step on P groups; the policy version advances. Returns the step's
        metrics and each prompt's pass rate on this visit (the driver's curriculum records them)."""
        start, cpu = time.perf_counter(), time.process_time()
        rules = self.rules
        batch = prepare_batch(groups, rules.batch, self.version, rules.pad_id)
        part = train_part(self.forward, self.optimizer, self.schedule, batch, rules.step, rules.pad_id, self.scaler)
        metrics = step_metrics(batch.metrics, [part])
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        busy = time.perf_counter() - start
        metrics |= {LEARNER_BUSY: busy, "learner_cpu_s": time.process_time() - cpu, LEARNER_WORLD_SIZE: 1,
                    **rate_metrics(self.num_params, metrics["step_trained_tokens"], busy, self.peak_flop_s)}
        self.version += 1
        return StepResult(metrics, batch.pass_rates)

    def start(self, sink) -> None:
        """Nothing to start: the model is here."""

    def publish(self, sink) -> Published:
        start = time.perf_counter()
        named = published_parameters(self.model)
        handle = sink.write(self.version, weight_buckets(named, self.bucket_bytes))
        return Published(handle, time.perf_counter() - start, sum(p.numel() * p.element_size() for _, p in named))

    def eval_snapshot(self) -> torch.nn.Module:
        return self.model

    def placement(self) -> list[dict[str, Any]]:
        import os
        import socket

        return [{"role": "learner", "host": socket.gethostname(), "pid": os.getpid(), "devices": [str(self.device)]}]

    def close(self) -> None:
        """Nothing to release: the model is the driver's."""

    def state_dict(self) -> dict[str, Any]:
        """Copies on the CPU (a GPU learner's too), never views of the live tensors."""
        return to_cpu({
            "model": trained_state(self.model),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "version": self.version,
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
        })

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
