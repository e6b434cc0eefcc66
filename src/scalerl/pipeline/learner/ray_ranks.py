"""Learner ranks as Ray actors on the run plan's nodes (``learner.world_size > 1`` on ``ray``).

The same :class:`~scalerl.pipeline.learner.rank.LearnerRank` as the local processes, behind
the transport interface ``ShardedLearner`` calls (``call``/``gather``/``sync_progress``/
``kill``/``close``). Each rank actor is pinned to the node the plan chose
(``plan.rank_nodes``: the driver's node first) and reserves its CPUs there, and a GPU when the
run trains on CUDA, so ranks may span nodes and Ray knows which GPU each holds; rank 0's node
address is the group's rendezvous. A rank that does not start within
``PLACEMENT_TIMEOUT_S`` is one sentence. Each actor runs two threads, so the driver can read how
far a sync got while the sync is still under way.
"""

from __future__ import annotations

import dataclasses
import socket
import traceback
from typing import Any

import ray

from scalerl.pipeline import ray_cluster as cluster
from scalerl.pipeline.learner.rank import LearnerRank, RankFailed, RankSpec

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

    def where(self) -> dict:
        return cluster.where()


class RayRanks:
    """``spec.world`` rank actors, rank ``r`` on ``nodes[r]``; rank 0 writes ``sink``."""

    def __init__(self, spec: RankSpec, sink, nodes: tuple[str, ...] = ()) -> None:
        cluster.connect()
        self.nodes = tuple(nodes) or (None,) * spec.world
        self.actors = [
            _RankActor.options(num_cpus=spec.threads, num_gpus=1 if spec.device == "cuda" else 0,
                               runtime_env={"env_vars": dict(cluster.WORKER_ENV)}, **cluster.pinned(node)).remote()
            for node in self.nodes]
        try:
            host, port = ray.get(self.actors[0].address.remote(), timeout=PLACEMENT_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            self.kill()
            raise RankFailed(f"learner rank 0 did not start on Ray node {self.nodes[0]} within "
                             f"{PLACEMENT_TIMEOUT_S:g} s (the cluster has {ray.available_resources()} free)") from None
        spec = dataclasses.replace(spec, master_addr=host, master_port=port)
        self._pending = [a.setup.remote(spec, i, sink if i == 0 else None) for i, a in enumerate(self.actors)]
        self.gather(timeout=None)

    def call(self, method: str, *args) -> None:
        self._pending = [a.call.remote(method, args) for a in self.actors]

    def gather(self, timeout: float | None) -> list[Any]:
        ready, _ = ray.wait(self._pending, num_returns=len(self._pending), timeout=timeout)
        if len(ready) < len(self._pending):
            raise TimeoutError([i for i, ref in enumerate(self._pending) if ref not in ready])
        out = []
        for rank, ref in enumerate(self._pending):
            try:
                status, value = ray.get(ref)
            except ray.exceptions.RayError as err:
                cluster.check_node(self.nodes[rank], f"learner rank {rank}", 5.0 if "node" in str(err) else 0.0)
                raise RankFailed(f"learner rank {rank} died ({type(err).__name__})") from None
            if status == "error":
                raise RankFailed(f"learner rank {rank} failed: {value.strip().splitlines()[-1]}")
            out.append(value)
        return out

    def sync_progress(self) -> list[int]:
        return ray.get([a.sync_progress.remote() for a in self.actors], timeout=10)

    def where(self) -> list[dict]:
        return ray.get([a.where.remote() for a in self.actors], timeout=PLACEMENT_TIMEOUT_S)

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []

    def close(self) -> None:
        if self.actors:
            try:
                ray.get([a.call.remote("close", ()) for a in self.actors], timeout=10)
            except ray.exceptions.RayError:
                pass
            self.kill()
