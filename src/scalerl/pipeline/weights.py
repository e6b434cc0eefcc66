"""Learner -> generator weight channels: the in-flight update path of PipelineRL (digest §2.2).

The learner ``publish``es after a step; a generator ``read``s between decode steps (through
the engine's ``on_step``) and swaps the weights in, keeping its KV cache. Two channels share
one interface:

- :class:`SharedWeights` (the ``local`` backend): one flat float32 tensor in shared memory plus
  a version counter in an ``mp.Value``; the writer holds an ``mp.Lock`` while copying, and a
  reader copies under the same lock, so a reader never sees half of one version.
- :class:`InProcessWeights`: a cloned state dict, for the single-process backend and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch

from scalerl.models.lora import published_parameters


class WeightSource(Protocol):
    def version(self) -> int:
        """The latest published version (-1 before the first publish)."""
        ...

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """``(version, state_dict)`` if a version newer than ``since`` is published, else None."""
        ...


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
    """Flat shared-memory weights + version counter; picklable into spawned processes."""

    def __init__(self, model: torch.nn.Module, ctx) -> None:
        self.layout = WeightLayout(model)
        self.flat = torch.zeros(self.layout.size, dtype=torch.float32).share_memory_()
        self._version = ctx.Value("q", -1, lock=False)
        self._lock = ctx.Lock()

    def publish(self, model: torch.nn.Module, version: int) -> None:
        new = self.layout.flatten(model)
        with self._lock:
            self.flat.copy_(new)
            self._version.value = version

    def version(self) -> int:
        return int(self._version.value)

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self._version.value <= since:
            return None
        with self._lock:
            version = int(self._version.value)
            snapshot = self.flat.clone()
        return version, self.layout.unflatten(snapshot)


class InProcessWeights:
    """Weights handed over inside one process: a detached clone per publish."""

    def __init__(self) -> None:
        self._version = -1
        self._state: Mapping[str, torch.Tensor] = {}

    def publish(self, model: torch.nn.Module, version: int) -> None:
        self._state = {n: p.detach().clone() for n, p in published_parameters(model)}
        self._version = version

    def version(self) -> int:
        return self._version

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self._version <= since:
            return None
        return self._version, dict(self._state)
