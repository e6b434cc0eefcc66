r"""Learner -> generator weight channels: the in-flight update path of PipelineRL (digest §2.2).

The learner writes a version into a sink after a step; a generator ``read``s between decode steps (through
the engine's ``on_step``) and swaps the weights in, keeping its KV cache. Two channels share
one interface:

- :class:`SharedWeights` (the ``local`` backend): one flat float32 tensor in shared memory plus
  a version counter in an ``mp.Value``, behind a sequence lock: a reader never sees half of one
  version, and a reader that dies mid-copy blocks nobody.
- :class:`InProcessWeights`: a cloned state dict, for the single-process backend and tests.

Both are :class:`WeightSink`\ s, as are the collective group's (``pipeline.collective``) and
the Ray backend's object-store sink: a learner writes a
version into a sink as a stream of buckets (:func:`weight_buckets`, ``learner.sync_bucket_mb``),
so a sharded learner gathers one bucket of full tensors at a time on every rank while rank 0
writes it, and never holds the whole unsharded model.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import torch

from scalerl.models.lora import published_parameters

TRANSPORTS: dict[str, str] = {
    "shm": "shared memory",
    "collective": "a torch.distributed group per generator (gloo on CPUs, NCCL on GPUs)",
    "cuda_ipc": "CUDA IPC handles on the GPU the learner shares",
    "object_store": "the Ray object store",
    "in_process": "a copy in this process",
}
"""How versions travel (``plan.json``'s ``weights``), each with its words for the start-of-run
plan line; ``pipeline.weight_transport`` names the first three (``auto`` lets the plan choose,
``pipeline.plan.weight_transport``), the backends declare which they can do."""


class WeightSource(Protocol):
    def version(self) -> int:
        """The latest published version (-1 before the first publish)."""
        ...

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """``(version, state_dict)`` if a version newer than ``since`` is published, else None."""
        ...


class WeightSink(Protocol):
    crosses_processes: bool  # whether a copy in another process (a learner rank) writes this one

    def write(self, version: int, buckets: Iterable[dict[str, torch.Tensor]]) -> Any:
        """Take every published tensor of ``version`` from ``buckets`` (full tensors by name),
        then make the version visible to generators at once; a handle the backend announces
        (None where the write itself announces)."""
        ...


def _full(t: torch.Tensor) -> torch.Tensor:
    """A parameter's full tensor: FSDP2 shards are gathered (a collective: every rank calls it)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def weight_buckets(named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """Full detached tensors in buckets of about ``bucket_bytes`` (one tensor larger than that
    is a bucket alone), in ``named`` order; each is gathered only when its bucket is drawn."""
    bucket: dict[str, torch.Tensor] = {}
    size = 0
    for name, t in named:
        if bucket and size + t.numel() * t.element_size() > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        full = _full(t.detach())
        bucket[name] = full
        size += full.numel() * full.element_size()
    if bucket:
        yield bucket


def model_buckets(model: torch.nn.Module, bucket_bytes: int = 1 << 62) -> Iterator[dict[str, torch.Tensor]]:
    """The published parameters of an unsharded ``model`` as buckets (one, by default)."""
    return weight_buckets(published_parameters(model), bucket_bytes)


class WeightLayout:
    """Name, shape and dtype of every published parameter, in ``named_parameters`` order
    (tied once): all of them, or the adapters alone with LoRA (``models.lora``)."""

    def __init__(self, model: torch.nn.Module) -> None:
        params = published_parameters(model)
        self.names = [n for n, _ in params]
        self.shapes = [tuple(p.shape) for _, p in params]
        self.dtypes = [p.dtype for _, p in params]
        self.numels = [p.numel() for _, p in params]
        self.size = sum(self.numels)
        self.offsets = dict(zip(self.names, [sum(self.numels[:i]) for i in range(len(self.numels))]))

    def fill(self, flat: torch.Tensor, buckets: Iterable[dict[str, torch.Tensor]]) -> int:
        """Copy every bucket's tensors into ``flat`` (size,) at their offsets; the bytes taken."""
        taken = 0
        for bucket in buckets:
            for name, t in bucket.items():
                start = self.offsets[name]
                flat[start : start + t.numel()].copy_(t.reshape(-1))
                taken += t.numel() * t.element_size()
        return taken

    def flatten(self, model: torch.nn.Module) -> torch.Tensor:  # (size,) float32
        return torch.cat([p.detach().reshape(-1).float() for _, p in published_parameters(model)])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Views into ``flat`` (cast to each parameter's dtype where it differs)."""
        out, offset = {}, 0
        for name, shape, dtype, n in zip(self.names, self.shapes, self.dtypes, self.numels):
            out[name] = flat[offset : offset + n].view(shape).to(dtype)
            offset += n
        return out


class SharedWeights:
    """Flat shared-memory weights + version counter; picklable into spawned processes.

    A sequence lock, not a mutex: the one writer makes the sequence odd, copies, sets the
    version and makes it even again; a reader copies and keeps the copy only when the
    sequence was the same even number before and after. A reader therefore holds nothing a
    writer waits for, so a generator killed while it reads (``kill -9``) cannot stall the
    learner's next publish (``pipeline.restarts``)."""

    crosses_processes = True  # a learner rank spawned with it writes the generators' copy

    def __init__(self, layout: WeightLayout, ctx, device: str = "cpu") -> None:
        """``device="cuda"``: the ``cuda_ipc`` transport, the same lock over one flat tensor on
        the GPU the learner and the generators share, which a spawned process opens through
        its CUDA IPC handle (``torch.multiprocessing``)."""
        self.layout = layout
        self.flat = torch.zeros(self.layout.size, dtype=torch.float32, device=device)
        if device == "cpu":
            self.flat.share_memory_()
        self._version = ctx.Value("q", -1, lock=False)
        self._seq = ctx.Value("q", 0, lock=False)

    def handle(self, index: int) -> SharedWeights:
        """What generator ``index`` is started with: this channel itself (it pickles)."""
        return self

    def source(self) -> SharedWeights:
        """The generator's end, in its process: the same object."""
        return self

    def drop(self, index: int) -> None:
        """Nothing to forget: a dead reader holds no lock (class doc)."""

    def close(self) -> None:
        """Nothing to close: the shared tensor goes with the last process holding it."""

    def write(self, version: int, buckets: Iterable[dict[str, torch.Tensor]]) -> None:
        """Stage the buckets privately, then copy inside the odd sequence: readers retry one
        copy, never wait for a sharded learner's gathers."""
        staging = torch.empty_like(self.flat)
        self.layout.fill(staging, buckets)
        self._seq.value += 1
        self.flat.copy_(staging)
        settle(self.flat)  # readers must see the finished copy
        self._version.value = version
        self._seq.value += 1

    def version(self) -> int:
        return int(self._version.value)

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self._version.value <= since:
            return None
        while True:
            before = int(self._seq.value)
            if before % 2 == 0:
                version = int(self._version.value)
                snapshot = self.flat.clone()
                settle(snapshot)  # the copy is done before the check
                if int(self._seq.value) == before:
                    return version, self.layout.unflatten(snapshot)
            time.sleep(0.001)  # a write is under way


class InProcessWeights:
    """Weights handed over inside one process: a detached clone per publish."""

    crosses_processes = False

    def __init__(self) -> None:
        self._version = -1
        self._state: Mapping[str, torch.Tensor] = {}

    def write(self, version: int, buckets: Iterable[dict[str, torch.Tensor]]) -> None:
        self._state = {n: t.clone() for bucket in buckets for n, t in bucket.items()}
        self._version = version

    def version(self) -> int:
        return self._version

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self._version <= since:
            return None
        return self._version, dict(self._state)


def settle(tensor: torch.Tensor) -> None:
    """Wait for the copies queued on ``tensor``'s device: a GPU copy is asynchronous, a CPU copy
    is done when it returns (``torch.cpu.synchronize`` is a no-op), so one line serves both."""
    torch.get_device_module(tensor.device).synchronize(tensor.device)
