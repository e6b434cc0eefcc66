r"""Weights over a ``torch.distributed`` group: the ``collective`` transport (``pipeline.weight_transport``).

PipelineRL, verl, NeMo-RL and OpenRLHF move each version from the learner to the inference
engines over a collective group (NCCL on GPUs), never through a file. Here each generator
process shares a two-rank group with the learner (rank 0) — gloo on CPUs, NCCL on GPUs — so
one generator's death or replacement never breaks another's group:

- the learner's :class:`CollectiveWeights` (a :class:`~scalerl.pipeline.weights.WeightSink`)
  hosts the rendezvous (a ``TCPStore`` on a free port), keeps the newest version in one flat
  float32 buffer (what a replacement generator is sent first) and, at every write, sends it to
  every connected generator in buckets of ``learner.sync_bucket_mb``;
- each generator's :class:`CollectiveSource` (a :class:`~scalerl.pipeline.weights.WeightSource`)
  receives in a thread of its own, while the engine decodes, into the one of its two buffers
  the engine is not reading; a decode step that finds a newer complete version loads it
  (``Actor.poll_weights``), so only the copy into the engine's weights stops decoding.

Against the shared-memory path (a staging copy and a copy into the shared tensor on the
learner, a copy out of it and the load on the generator, each into freshly allocated pages),
a version costs one copy on each side and the transfer, which overlaps decoding
(``bench/weight_sync.py``). A generator found dead is dropped from the sends (the backend
replaces it, and the replacement's group is sent the newest version as it joins); a send that
runs out of ``learner.sync_timeout_s`` stops the run with one sentence naming the generator.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scalerl.pipeline.weights import WeightLayout, settle

_TAG = 0


class SyncFailed(RuntimeError):
    """A live generator's group stopped taking weights (a send ran out of its time)."""


@dataclass(frozen=True)
class Endpoint:
    """What a generator process needs to join its group with the learner (picklable)."""

    host: str
    port: int
    prefix: str  # this generator incarnation's keys in the learner's store
    timeout_s: float
    bucket_numel: int  # float32 elements per send
    device: str  # "cpu" (gloo) | "cuda" (NCCL)


def _group(store, prefix: str, rank: int, device: str, timeout_s: float):
    """Rank ``rank`` of the two-rank group under ``prefix``; blocks until both have joined."""
    timeout = datetime.timedelta(seconds=timeout_s)
    scoped = dist.PrefixStore(prefix, store)
    if device == "cuda":  # CUDA-only (tests/README.md): NCCL moves device memory directly
        return dist.ProcessGroupNCCL(scoped, rank, 2, dist.ProcessGroupNCCL.Options())
    return dist.ProcessGroupGloo(scoped, rank, 2, timeout)


def _spans(size: int, bucket: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of each bucket of a flat version of ``size`` elements."""
    return [(s, min(size, s + bucket)) for s in range(0, size, bucket)]


def _post(channel: _Channel, tensor: torch.Tensor):
    """``(channel, its send's work)``, or the error where the peer is already gone."""
    try:
        return channel, channel.group.send([tensor], 1, _TAG)
    except RuntimeError as err:
        return channel, err


class _Channel:
    """The learner's end of one generator's group."""

    def __init__(self, index: int, prefix: str, group) -> None:
        self.index, self.prefix, self.group = index, prefix, group
        self.header = torch.zeros(1, dtype=torch.int64)


class CollectiveWeights:
    """The learner's sink (module doc). ``open(index)`` gives each generator incarnation its
    :class:`Endpoint`; its group is joined in a thread, so a starting generator never blocks
    a write."""

    crosses_processes = False  # the store and the groups live in this (the driver's) process

    def __init__(self, layout: WeightLayout, *, bucket_bytes: int, timeout_s: float, device: str = "cpu") -> None:
        self.layout, self.device, self.timeout_s = layout, device, timeout_s
        self.bucket_numel = max(1, bucket_bytes // 4)
        self.flat = torch.zeros(layout.size, dtype=torch.float32, device=device)  # the newest version
        self._version = -1
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        self._channels: dict[str, _Channel] = {}  # by prefix: a replacement's is another
        self._lock = threading.Lock()  # one send at a time: a write, or a joiner's first version
        self._opened = 0

    def open(self, index: int) -> Endpoint:
        """A fresh group for generator ``index`` (a new one for each replacement)."""
        self._opened += 1
        prefix = f"generator{index}.{self._opened}/"
        threading.Thread(target=self._join, args=(index, prefix), daemon=True,
                         name=f"scalerl-weights-join-{index}").start()
        return Endpoint("127.0.0.1", self._store.port, prefix, self.timeout_s, self.bucket_numel, self.device)

    def _join(self, index: int, prefix: str) -> None:
        try:
            group = _group(self._store, prefix, 0, self.device, self.timeout_s)
        except RuntimeError:  # the generator died before it joined: the backend replaces it
            return
        channel = _Channel(index, prefix, group)
        with self._lock:
            if self._version >= 0 and not self._send(channel, self._version):
                return
            self._channels[prefix] = channel

    def handle(self, index: int) -> CollectiveHandle:
        """What generator ``index`` (or its replacement) is started with: a fresh group."""
        return CollectiveHandle(self.layout, self.open(index))

    def drop(self, index: int) -> None:
        """Forget generator ``index``'s group (it died; the backend replaces it)."""
        with self._lock:
            for prefix in [p for p, c in self._channels.items() if c.index == index]:
                self._channels.pop(prefix, None)

    def write(self, version: int, buckets) -> None:
        """Take the version into :attr:`flat` and send it to every connected generator, each
        span as soon as the buckets drawn so far have filled it: the sends (gloo's and NCCL's
        own threads) overlap the copies and an FSDP2 learner's gathers of the next buckets."""
        with self._lock:
            channels = list(self._channels.values())
            sends = [_post(c, self._header(c, version)) for c in channels]
            spans, prefix = _spans(self.layout.size, self.bucket_numel), 0
            for bucket in buckets:
                self.layout.fill(self.flat, [bucket])
                prefix = self._prefix(prefix, bucket)
                while spans and spans[0][1] <= prefix:
                    sends += self._send_span(channels, spans.pop(0))
            for span in spans:  # buckets out of layout order: the rest once all are in
                sends += self._send_span(channels, span)
            self._version = version
            for channel in self._finish(sends):
                self._channels.pop(channel.prefix, None)

    def _prefix(self, prefix: int, bucket: dict[str, torch.Tensor]) -> int:
        """How much of :attr:`flat` from its start is filled once ``bucket`` is in (buckets come
        in layout order; one out of it only delays the spans after the gap to the end)."""
        for name, t in bucket.items():
            if self.layout.offsets[name] != prefix:
                return prefix
            prefix += t.numel()
        return prefix

    @staticmethod
    def _header(channel: _Channel, version: int) -> torch.Tensor:
        channel.header[0] = version
        return channel.header

    def _send_span(self, channels: list[_Channel], span: tuple[int, int]) -> list:
        start, stop = span
        return [_post(c, self.flat[start:stop]) for c in channels]

    def _finish(self, sends: list) -> list[_Channel]:
        """Wait for every send; the channels whose generator is gone (its peer closed)."""
        gone: dict[str, _Channel] = {}
        for channel, work in sends:
            if channel.prefix in gone:
                continue
            try:
                if isinstance(work, RuntimeError):  # the send could not even start
                    raise work
                work.wait()
            except RuntimeError as err:
                if "timed out" in str(err).lower() or "timeout" in str(err).lower():
                    raise SyncFailed(f"the weight sync to generator {channel.index} took longer than "
                                     f"learner.sync_timeout_s={self.timeout_s:g}s; the newest checkpoint stays "
                                     "loadable") from None
                gone[channel.prefix] = channel
        return list(gone.values())

    def _send(self, channel: _Channel, version: int) -> bool:
        """The newest version whole to one (joining) generator; False when it is gone."""
        sends = [_post(channel, self._header(channel, version))]
        for span in _spans(self.layout.size, self.bucket_numel):
            sends += self._send_span([channel], span)
        return not self._finish(sends)

    def version(self) -> int:
        return self._version

    def connected(self) -> int:
        """How many generators have joined (and take each write)."""
        with self._lock:
            return len(self._channels)

    def close(self) -> None:
        self._channels.clear()


class CollectiveSource:
    """A generator's end (module doc): a receiving thread and two buffers. :meth:`read` lends
    the newest complete buffer; it stays unwritten until the next :meth:`read`, by which time
    the engine has copied it (``update_weights`` copies before it returns)."""

    def __init__(self, layout: WeightLayout, endpoint: Endpoint) -> None:
        self.layout, self.endpoint = layout, endpoint
        device = endpoint.device
        self._buffers = [torch.empty(layout.size, dtype=torch.float32, device=device) for _ in range(2)]
        self._latest = -1  # the buffer holding the newest complete version (-1: none yet)
        self._lent = -1  # the buffer the engine was last handed
        self._versions = [-1, -1]
        self._cond = threading.Condition()
        self.error: str | None = None
        store = dist.TCPStore(endpoint.host, endpoint.port, is_master=False,
                              timeout=datetime.timedelta(seconds=endpoint.timeout_s))
        self._group = _group(store, endpoint.prefix, 1, device, endpoint.timeout_s)
        self._thread = threading.Thread(target=self._receive, daemon=True, name="scalerl-weights-receive")
        self._thread.start()

    def _free(self) -> int:
        """The buffer to receive into: never the one lent out. Where the other one holds a
        newer version the engine has not read yet, that version is withdrawn (the lent one is
        the newest complete again) and overwritten: a generator that reads nothing for a
        while (idle, or between chunks) never makes the learner wait."""
        with self._cond:
            target = 1 - self._lent if self._lent >= 0 else (0 if self._latest != 0 else 1)
            if self._latest == target:
                self._latest = self._lent
            return target

    def _receive(self) -> None:
        header = torch.zeros(1, dtype=torch.int64)
        try:
            while True:
                self._group.recv([header], 0, _TAG).wait()
                target = self._free()
                buffer = self._buffers[target]
                for start, stop in _spans(self.layout.size, self.endpoint.bucket_numel):
                    self._group.recv([buffer[start:stop]], 0, _TAG).wait()
                settle(buffer)  # NCCL's receive is asynchronous on the GPU; gloo's is done
                with self._cond:
                    self._versions[target] = int(header[0])
                    self._latest = target
                    self._cond.notify_all()
        except RuntimeError as err:  # the learner closed its end (the run ended) or died
            self.error = str(err)[:200]

    def version(self) -> int:
        with self._cond:
            return self._versions[self._latest] if self._latest >= 0 else -1

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """``(version, views of its buffer)`` when a version newer than ``since`` has arrived
        whole; ``since=-1`` lends the newest again (after an evaluation's snapshot)."""
        with self._cond:
            latest = self._latest
            if latest < 0 or self._versions[latest] <= since:
                return None
            self._lent = latest
            self._cond.notify_all()  # the buffer lent before is free again
            return self._versions[latest], self.layout.unflatten(self._buffers[latest])


@dataclass(frozen=True)
class CollectiveHandle:
    """What a generator process is started with: it joins its group in its own process."""

    layout: WeightLayout
    endpoint: Endpoint

    def source(self) -> CollectiveSource:
        return CollectiveSource(self.layout, self.endpoint)
