"""Learner ranks as Ray actors in one placement group (``learner.world_size > 1`` on ``ray``).

The same :class:`~scalerl.pipeline.learner_rank.LearnerRank` as the local processes, behind
the transport interface ``ShardedLearner`` calls (``call``/``gather``/``sync_progress``/
``kill``/``close``). The placement group holds one bundle per rank — its CPUs, and a GPU when
the run trains on CUDA, so ranks may span nodes and Ray knows which GPU each holds; rank 0's
node address is the group's rendezvous. Each actor runs two threads, so the driver can read
how far a sync got while the sync is still under way.
"""

from __future__ import annotations

import dataclasses
import socket
import traceback
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from scalerl.pipeline.learner_rank import LearnerRank, RankSpec

PLACEMENT_TIMEOUT_S = 60.0


@ray.remote(max_concurrency=2)
class _RankActor:
    def __init__(self) -> None:
        self.worker = None

    def address(self) -> tuple[str, int]:
        """This node's address and a free port on it: the rendezvous, asked of rank 0."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, spec: RankSpec, rank: int, sink) -> tuple[str, Any]:
        try:
            self.worker = LearnerRank(spec, rank, sink)
        except BaseException:
            return "error", traceback.format_exc()
        return "ok", None

    def call(self, method: str, args: tuple) -> tuple[str, Any]:
        try:
            return "ok", getattr(self.worker, method)(*args)
        except BaseException:
            return "error", traceback.format_exc()

    def sync_progress(self) -> int:
        return self.worker.sync_progress if self.worker is not None else 0


class RayRanks:
    """``spec.world`` rank actors in a placement group; rank 0 writes ``sink``."""

    def __init__(self, spec: RankSpec, sink) -> None:
        from scalerl.pipeline.learner_group import RankFailed

        bundle = {"CPU": spec.threads, **({"GPU": 1} if spec.device == "cuda" else {})}
        self.group = placement_group([bundle] * spec.world, strategy="PACK")
        ready, _ = ray.wait([self.group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            remove_placement_group(self.group)
            raise RankFailed(f"the Ray cluster cannot place learner.world_size={spec.world} ranks of {bundle} "
                             f"each (it has {ray.available_resources()} free) within {PLACEMENT_TIMEOUT_S:g} s")
        self.actors = [
            _RankActor.options(num_cpus=spec.threads, num_gpus=1 if spec.device == "cuda" else 0,
                               scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i)).remote()
            for i in range(spec.world)]
        host, port = ray.get(self.actors[0].address.remote())
        spec = dataclasses.replace(spec, master_addr=host, master_port=port)
        self._pending = [a.setup.remote(spec, i, sink if i == 0 else None) for i, a in enumerate(self.actors)]
        self.gather(timeout=None)

    def call(self, method: str, *args) -> None:
        self._pending = [a.call.remote(method, args) for a in self.actors]

    def gather(self, timeout: float | None) -> list[Any]:
        from scalerl.pipeline.learner_group import RankFailed

        ready, _ = ray.wait(self._pending, num_returns=len(self._pending), timeout=timeout)
        if len(ready) < len(self._pending):
            raise TimeoutError([i for i, ref in enumerate(self._pending) if ref not in ready])
        out = []
        for rank, ref in enumerate(self._pending):
            try:
                status, value = ray.get(ref)
            except ray.exceptions.RayError as err:
                raise RankFailed(f"learner rank {rank} died ({type(err).__name__})") from None
            if status == "error":
                raise RankFailed(f"learner rank {rank} failed: {value.strip().splitlines()[-1]}")
            out.append(value)
        return out

    def sync_progress(self) -> list[int]:
        return ray.get([a.sync_progress.remote() for a in self.actors], timeout=10)

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.group)
        self.actors = []

    def close(self) -> None:
        if self.actors:
            try:
                ray.get([a.call.remote("close", ()) for a in self.actors], timeout=10)
            except ray.exceptions.RayError:
                pass
            self.kill()
