"""One rank of a data-parallel learner (``learner.world_size > 1``): its shard of the model,
its optimiser state, its rows of every batch.

Rank ``r`` of ``W`` joins a ``torch.distributed`` group (gloo on CPU, NCCL on CUDA), loads
the run's starting model and wraps it by ``learner.strategy``:

- ``fsdp2``: ``fully_shard`` on every decoder block, then on the root
  (:class:`~scalerl.models.forward.Forward` around the model), over an explicit 1-D device
  mesh; on CUDA a bf16 run's float32 masters are sharded under
  ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``. Each rank holds ``1/W`` of
  the parameters and of AdamW's state.
- ``ddp``: ``DistributedDataParallel``; every rank holds the whole model.

A step (:meth:`LearnerRank.step`): every rank prepares the whole batch (deterministic, so
batch-level statistics see every group), trains its rows (``train_step.rank_rows``) and
joins the collective optimiser step; it returns its :class:`~scalerl.pipeline.learner.train_step.StepPart`.

A publish (:meth:`LearnerRank.publish`): every rank gathers the same bucket of full tensors
(FSDP2's ``full_tensor``, a collective), then rank 0 writes it into the backend's sink — never
rank 0 alone while the others gather (the hang of trl#7103). ``sync_progress`` says how far
the sync got, so a driver whose sync timed out can name the rank and bucket that stalled.

Checkpoints: :meth:`state_dict` gathers the full model and optimiser state (through
``torch.distributed.checkpoint.state_dict``) into the single-process learner's layout, on
rank 0; :meth:`load_state_dict` lays such a state over any world size. So a run saved with
``W`` ranks resumes with any other ``W``, the single-process learner included.
"""

from __future__ import annotations

import datetime
import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from scalerl.models.forward import Forward
from scalerl.models.lora import is_lora, published_parameters
from scalerl.pipeline.learner.batch import prepare_batch
from scalerl.pipeline.learner.rules import LearnerRules
from scalerl.pipeline.learner.train_step import Shard, train_part

STRATEGIES = ("fsdp2", "ddp")
"""Data-parallel strategies (``learner.strategy``)."""

_PREFIX = "model."  # Forward holds the model as ``model``


class SyncTimeout(RuntimeError):
    """A weight sync ran past ``learner.sync_timeout_s``; the message names rank and bucket."""


class RankFailed(RuntimeError):
    """A learner rank raised or died; the message carries its traceback's last line."""


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank needs, picklable: it builds its model and optimiser from this alone."""

    model_dir: str
    rules: LearnerRules
    strategy: str
    world: int
    device: str  # "cpu" | "cuda"
    dtype: str  # the learner's parameter dtype (float32 masters; bf16/fp16 runs compute under autocast)
    lora: Any  # models.lora.LoraSpec | None
    threads: int
    bucket_bytes: int
    master_addr: str
    master_port: int
    seed: int
    timeout_s: float
    faults: Any = None
    """A picklable callable ``faults(rank, phase, version, bucket)`` every rank calls as it
    starts a step (``phase="step"``, ``bucket=0``) and before it gathers each bucket of a sync
    (``"publish"``, 1-based): the seam through which tests inject a stalled or dead rank. None
    (nothing is called) in a real run."""


def _load(spec: RankSpec, device: torch.device) -> torch.nn.Module:
    from scalerl.models import load_pretrained
    from scalerl.models.load import without_dropout

    model, _ = load_pretrained(spec.model_dir, spec.dtype)
    without_dropout(model)  # scored in train mode as the generators sample (models.load)
    if spec.lora is not None:
        from scalerl.models.lora import apply_lora

        model = apply_lora(model, spec.lora)
    return model.to(device)


def _wrap(forward: Forward, spec: RankSpec, device: torch.device) -> torch.nn.Module:
    """``forward`` sharded (fsdp2) or replicated (ddp) across the group."""
    if spec.strategy == "ddp":
        return torch.nn.parallel.DistributedDataParallel(forward, device_ids=[device.index] if device.index is not None
                                                         else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (spec.world,))
    policy = MixedPrecisionPolicy()
    if device.type == "cuda" and spec.rules.step.autocast == "bfloat16":
        forward.float()  # float32 masters; compute and gathers in bf16, reductions in fp32
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in forward.model.get_decoder().layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    return fully_shard(forward, mesh=mesh, mp_policy=policy)


class LearnerRank:
    """Rank ``rank`` of the group (module doc); ``sink`` is used by rank 0 only."""

    def __init__(self, spec: RankSpec, rank: int, sink=None, progress=None) -> None:
        self.spec, self.rank, self.sink = spec, rank, sink
        # how far the sync under way got (``_mark``); ``progress``: a shared array (one slot
        # per rank) a driver reads while the sync runs
        self.sync_progress, self._progress = 0, progress
        torch.set_num_threads(spec.threads)
        torch.manual_seed(spec.seed)
        os.environ.update(MASTER_ADDR=spec.master_addr, MASTER_PORT=str(spec.master_port))
        cuda = spec.device == "cuda"
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=spec.world,
                                timeout=datetime.timedelta(seconds=spec.timeout_s))
        self.model = _load(spec, device)
        self.wrapped = _wrap(Forward(self.model), spec, device)
        o = spec.rules.optim
        trainable = [p for p in self.wrapped.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
        from scalerl.pipeline.learner.role import warmup_then_constant

        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_then_constant(o.warmup_steps))
        self.scaler = torch.amp.GradScaler(device.type) if spec.rules.float16 else None
        self.device = device

    def step(self, groups, version: int) -> dict[str, Any]:
        """Train this rank's rows of the batch; its part, and on rank 0 the batch's statistics."""
        self._fault("step", version, 0)
        start, cpu = time.perf_counter(), time.process_time()
        rules = self.spec.rules
        batch = prepare_batch(groups, rules.batch, version, rules.pad_id)
        shard = Shard(self.rank, self.spec.world, getattr(self.wrapped, "no_sync", None))
        part = train_part(self.wrapped, self.optimizer, self.schedule, batch, rules.step, rules.pad_id,
                          self.scaler, shard)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        first = self.rank == 0
        return {"part": part, "batch_metrics": batch.metrics if first else None,
                "pass_rates": batch.pass_rates if first else None,
                "busy_s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}

    def _fault(self, phase: str, version: int, bucket: int) -> None:
        if self.spec.faults is not None:
            self.spec.faults(self.rank, phase, version, bucket)

    def _mark(self, half_steps: int) -> None:
        """Sync progress in half-steps: ``2i − 1`` while gathering bucket ``i``, ``2i`` once it is
        gathered (so a rank waiting inside a gather reads ahead of one stalled before it)."""
        self.sync_progress = half_steps
        if self._progress is not None:
            self._progress[self.rank] = half_steps

    def _buckets(self, version: int):
        """The published tensors in buckets, gathered here (every rank), progress recorded."""
        from scalerl.pipeline.weights import weight_buckets

        buckets = weight_buckets(published_parameters(self.model), self.spec.bucket_bytes)
        self._mark(0)
        for i in itertools.count(1):
            self._fault("publish", version, i)
            self._mark(2 * i - 1)
            bucket = next(buckets, None)  # gathers it: a collective under fsdp2
            if bucket is None:
                return
            self._mark(2 * i)
            yield bucket

    def publish(self, version: int) -> dict[str, Any]:
        """Gather every bucket on every rank; rank 0 writes them into the sink. Rank 0 returns
        the sink's handle and the bytes sent — or, holding no sink (one that cannot cross
        processes, the ``inprocess`` backend's), the buckets themselves for the driver to write."""
        start = time.perf_counter()
        if self.rank != 0:
            for _ in self._buckets(version):
                pass
            return {"handle": None, "bytes": 0, "s": time.perf_counter() - start}
        counted = _Counted(self._buckets(version))
        if self.sink is None:  # numpy crosses a pipe by value, a tensor by a shared-memory handle
            buckets = [{n: t.detach().cpu().numpy().copy() for n, t in b.items()} for b in counted]
            return {"buckets": buckets, "handle": None, "bytes": counted.bytes, "s": time.perf_counter() - start}
        handle = self.sink.write(version, counted)
        return {"handle": handle, "bytes": counted.bytes, "s": time.perf_counter() - start}

    def state_dict(self) -> dict[str, Any] | None:
        """The full learner state in the single-process learner's layout, on rank 0 (a collective)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_sd, optim_sd = get_state_dict(self.wrapped, self.optimizer, options=options)
        if self.rank != 0:
            return None
        names = self._trainable_names()
        model_sd = {k.removeprefix(_PREFIX): v for k, v in model_sd.items()}
        if is_lora(self.model):  # the adapters alone, as the single-process learner keeps them
            published = {n for n, _ in published_parameters(self.model)}
            model_sd = {k: v for k, v in model_sd.items() if k in published}
        index = {n: i for i, n in enumerate(names)}
        optim = {"state": {index[k.removeprefix(_PREFIX)]: v for k, v in optim_sd["state"].items()},
                 "param_groups": [g | {"params": [index[p.removeprefix(_PREFIX)] for p in g["params"]]}
                                  for g in optim_sd["param_groups"]]}
        return {"model": model_sd, "optimizer": optim, "schedule": self.schedule.state_dict(),
                **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Lay a single-process-layout state (any world size saved it) over this rank's shard."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        names = self._trainable_names()
        optim = state["optimizer"]
        fqn = {i: _PREFIX + n for i, n in enumerate(names)}
        optim_sd = {"state": {fqn[int(i)]: v for i, v in optim["state"].items()},
                    "param_groups": [g | {"params": [fqn[int(p)] for p in g["params"]]} for g in optim["param_groups"]]}
        model_sd = {_PREFIX + k: v for k, v in state["model"].items()}
        options = StateDictOptions(full_state_dict=True, strict=not is_lora(self.model))
        set_state_dict(self.wrapped, self.optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                       options=options)
        self.schedule.load_state_dict(state["schedule"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])

    def _trainable_names(self) -> list[str]:
        """Trainable parameter names in the single-process learner's optimiser order."""
        return [n for n, p in self.model.named_parameters() if p.requires_grad]

    def memory(self) -> dict[str, int]:
        """Bytes of parameters and optimiser state this rank holds (its shards under fsdp2)."""
        def local(t):
            t = t.to_local() if hasattr(t, "to_local") else t
            return t.numel() * t.element_size()

        params = sum(local(p) for p in self.wrapped.parameters())
        optim = sum(local(v) for s in self.optimizer.state.values() for v in s.values() if torch.is_tensor(v))
        return {"param_bytes": params, "optim_bytes": optim}

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class _Counted:
    """Iterates buckets, counting their bytes."""

    def __init__(self, buckets) -> None:
        self.buckets, self.bytes = buckets, 0

    def __iter__(self):
        for bucket in self.buckets:
            self.bytes += sum(t.numel() * t.element_size() for t in bucket.values())
            yield bucket
