"""The Ray cluster a run joins: connecting, its live nodes, where a role runs, lost nodes.

``connect()`` calls ``ray.init()`` only if Ray is not running in this process yet. It honours
``RAY_ADDRESS`` (``RAY_ADDRESS=auto`` or ``HOST:6379`` joins a running cluster; on a node of
a cluster started with ``ray start``, a bare ``ray.init()`` finds it too); without a cluster it
starts a local one. A caller who needs more (a ``runtime_env`` shipping the code, a namespace)
calls ``ray.init`` first, and Ray is then left running at the end. Every node must be able
to import ``scalerl`` and read ``model_dir`` (the starting weights; later versions come
through the object store).

Roles are pinned to the node the run plan chose (``NodeAffinitySchedulingStrategy``, not
soft): a role whose node leaves the cluster is never silently moved, the run stops with
:class:`~scalerl.pipeline.restarts.NodeLost` naming the node, and a resume makes a new plan
for the nodes left.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from scalerl.pipeline.plan import Node
from scalerl.pipeline.restarts import NodeLost

WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
"""Environment of every actor. Ray blanks ``CUDA_VISIBLE_DEVICES`` for an actor that
reserves no GPU unless told not to; a generator that shares the learner's only GPU unreserved
(``gpus_per_generator`` = 0 on a one-GPU machine) would then find no CUDA device
(``gpu-review-2.md`` N4)."""

_started_here = False


def connect() -> None:
    """Join the cluster (module doc); remember whether this process started Ray."""
    global _started_here
    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level=logging.WARNING, runtime_env={"env_vars": dict(WORKER_ENV)})
        _started_here = True


def release() -> None:
    """Shut Ray down if :func:`connect` started it (a caller's Ray is left running)."""
    global _started_here
    if _started_here and ray.is_initialized():
        ray.shutdown()
    _started_here = False


def live_nodes() -> tuple[Node, ...]:
    """The cluster's live nodes (connecting first), the driver's first."""
    connect()
    me = ray.get_runtime_context().get_node_id()
    nodes = [Node(n["NodeID"], n.get("NodeManagerAddress", "?"), float(n["Resources"].get("CPU", 0)),
                  float(n["Resources"].get("GPU", 0)), n["NodeID"] == me)
             for n in ray.nodes() if n.get("Alive")]
    return tuple(sorted(nodes, key=lambda n: not n.driver))


def pinned(node: str | None) -> dict:
    """Actor options that keep it on ``node`` (none without a plan's node)."""
    return {} if node is None else {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}


def where() -> dict:
    """Where the calling process runs: its node, host, pid and the GPUs Ray gave it."""
    return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
            "devices": [f"cuda:{int(g)}" for g in ray.get_gpu_ids()] or ["cpu"]}


def check_node(node: str | None, role: str, wait_s: float = 5.0) -> None:
    """:class:`NodeLost` when ``node`` (where ``role`` ran) has left the cluster. Asked after
    ``role`` died; Ray may report the death a moment before it marks the node dead, so a node
    still listed alive is asked again for up to ``wait_s`` s before the death counts as the
    role's own."""
    if node is None:
        return
    deadline = time.monotonic() + wait_s
    while True:
        state = {n["NodeID"]: n for n in ray.nodes()}.get(node)
        if state is None or not state.get("Alive"):
            host = (state or {}).get("NodeManagerAddress", "?")
            raise NodeLost(f"Ray node {node} ({host}) left the cluster with {role} on it, so the run stopped "
                           "(a resume plans again for the nodes left)")
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)
