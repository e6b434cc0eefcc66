"""The Ray backend: generator roles as Ray actors, weights through the object store.

Same roles, same queue policy as the ``local`` backend (digest §2.2, §4.3); only the transport
changes, so one run scales from ``ray.init()`` on a laptop to a cluster:

- **Generators** are ``GeneratorActor``s, thin ``@ray.remote`` wrappers around
  :class:`~scalerl.pipeline.generators.actor.Actor` (built by ``build_actor`` from the same picklable
  :class:`~scalerl.pipeline.generators.actor.ActorSpec`). ``submit(chunk)`` calls ``run_batch`` on the
  least-loaded actor and keeps the returned ``ObjectRef``; ``collect`` streams back whichever
  chunks have finished (``ray.wait``), in completion order, so the learner starts on the first
  full batch while other chunks are still decoding.
- **Weights** are put in the object store once per publish (one flat float32 array, the
  :class:`~scalerl.pipeline.weights.WeightLayout` of the ``local`` backend) and only the
  ``ObjectRef`` is pushed to every actor. Each actor runs two concurrency groups: ``decode``
  (one ``run_batch`` at a time) and ``weights`` (receives the newest ref while decoding). The
  actor's :class:`_ObjectStoreWeights` is the :class:`WeightSource` its engine polls between
  decode steps: a local version comparison, and a pull (``ray.get``, zero-copy on the same node)
  only when a newer version was pushed. That is PipelineRL's in-flight update.
- **The lag bound k** stays where it is for every backend: the driver's
  :class:`~scalerl.pipeline.scheduler.Scheduler` and
  :class:`~scalerl.pipeline.queues.LagPolicy` decide what is dispatched, published and
  admitted; this module only moves prompts, groups and weights.
- **A dead generator** (its actor died, or ``run_batch`` raised) is replaced by a new actor
  (``pipeline.restarts``): the newest weights ref is pushed to it and every chunk the dead one
  had not returned is submitted again, unchanged. The actor is recreated here rather than by
  Ray's ``max_restarts``, which would rerun the constructor but neither push the weights nor
  resubmit the lost calls.

Placement comes from the run plan (``scalerl.pipeline.plan``): the learner is the driver
process (or ranks on the nodes the plan chose, ``learner.ray_ranks``); each generator actor is pinned
to the node the plan chose for it and reserves ``pipeline.generator_threads`` CPUs and its
share of a GPU there (``plan.gpus_per_generator``). Joining the cluster, and what a lost node
does, is ``ray_cluster``'s.
"""

from __future__ import annotations

import copy
import dataclasses
import threading

import numpy as np
import ray
import torch

from scalerl.pipeline import ray_cluster as cluster
from scalerl.pipeline.backends import Capabilities
from scalerl.pipeline.generators.actor import ActorSpec, build_actor
from scalerl.pipeline.plan import Node, RunPlan
from scalerl.pipeline.restarts import GeneratorDeaths
from scalerl.pipeline.weights import WeightLayout
from scalerl.types import Group, PromptAssignment


class _ObjectStoreWeights:
    """:class:`~scalerl.pipeline.weights.WeightSource` fed by pushed object-store refs."""

    def __init__(self, layout: WeightLayout) -> None:
        self.layout = layout
        self._lock = threading.Lock()
        self._version, self._ref = -1, None

    def push(self, version: int, ref) -> None:
        with self._lock:
            if version > self._version:  # pushes may overtake each other; keep the newest
                self._version, self._ref = version, ref

    def version(self) -> int:
        return self._version

    def read(self, since: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        if self._version <= since:  # the per-decode-step fast path: no I/O
            return None
        with self._lock:
            version, ref = self._version, self._ref
        flat = torch.from_numpy(np.array(ray.get(ref), copy=True))  # (size,) float32
        return version, self.layout.unflatten(flat)


class ObjectStoreSink:
    """The :class:`~scalerl.pipeline.weights.WeightSink` of the Ray backend: a version becomes
    one flat float32 array in the object store, put by whichever process writes it (the driver,
    or learner rank 0 in its actor); the handle is its ref, which the driver announces."""

    crosses_processes = True  # any process of the cluster can put the version

    def __init__(self, layout: WeightLayout) -> None:
        self.layout = layout

    def write(self, version: int, buckets) -> list:
        flat = torch.empty(self.layout.size, dtype=torch.float32)
        self.layout.fill(flat, buckets)  # CUDA tensors are copied to this host buffer
        return [ray.put(flat.numpy())]  # in a list: a bare ref passed on would be resolved


@ray.remote(concurrency_groups={"decode": 1, "weights": 1})
class GeneratorActor:
    """One generator role in a Ray actor: an unchanged :class:`Actor` plus a weight inbox."""

    def __init__(self, spec: ActorSpec, index: int, layout: WeightLayout) -> None:
        torch.set_num_threads(spec.threads)
        self.inbox = _ObjectStoreWeights(layout)
        self.actor = build_actor(spec, self.inbox, index)

    @ray.method(concurrency_group="weights")
    def push_weights(self, version: int, refs: list) -> None:
        """Record the newest published weights (``refs[0]``; a list so Ray does not resolve it)."""
        self.inbox.push(version, refs[0])

    @ray.method(concurrency_group="decode")
    def run_batch(self, chunk: list[PromptAssignment]) -> list[Group]:
        return self.actor.run_batch(chunk)

    @ray.method(concurrency_group="weights")
    def swaps(self) -> int:
        """In-flight weight swaps done so far (inside a ``generate`` call)."""
        return self.actor.swaps

    @ray.method(concurrency_group="weights")
    def where(self) -> dict:
        return cluster.where()


class RayBackend:
    """``plan.generators`` generator actors on the plan's nodes; the caller (driver) is the learner."""

    capabilities = Capabilities(generators="cluster", evaluates=False, ranks="ray", weights=("object_store",))

    @classmethod
    def nodes(cls) -> tuple[Node, ...]:
        """The live nodes of the cluster this run joins (``ray_cluster.connect``)."""
        return cluster.live_nodes()

    def __init__(self, spec: ActorSpec, layout: WeightLayout, plan: RunPlan,
                 deaths: GeneratorDeaths | None = None) -> None:
        """``deaths``: when to stop replacing dead generators (default: the first death stops)."""
        cluster.connect()
        # per actor too: a cluster the caller started has its own job environment
        self._options = {"num_cpus": spec.threads, "num_gpus": plan.gpus_per_generator,
                         "runtime_env": {"env_vars": dict(cluster.WORKER_ENV)}}
        self.layout, self.nodes = layout, plan.generator_nodes or (None,) * plan.generators
        self.spec, self.deaths = spec, deaths or GeneratorDeaths(limit=1, window=1)
        self.actors = [self._start(i) for i in range(plan.generators)]
        self._pending: dict[ray.ObjectRef, tuple[int, list[PromptAssignment]]] = {}  # result -> (actor, chunk)
        self._latest: tuple[int, list] | None = None  # the newest announced (version, handle)
        self._sink = ObjectStoreSink(self.layout)

    def _start(self, index: int):
        """Generator ``index``'s actor; a replacement samples with a fresh seed."""
        spec = dataclasses.replace(self.spec, seed=self.spec.seed + 104729 * self.deaths.restarts)
        options = self._options | cluster.pinned(self.nodes[index])
        return GeneratorActor.options(**options).remote(spec, index, self.layout)

    @property
    def restarts(self) -> int:
        """Generator actors replaced so far (``generator_restarts``)."""
        return self.deaths.restarts

    @property
    def sink(self) -> ObjectStoreSink:
        return self._sink

    def announce(self, version: int, handle: list) -> None:
        self._latest = (version, handle)  # the ref is kept alive here until the next version
        for actor in self.actors:
            actor.push_weights.remote(version, handle)

    def submit(self, chunk: list[PromptAssignment]) -> None:
        load = [0] * len(self.actors)
        for i, _ in self._pending.values():
            load[i] += 1
        i = min(range(len(self.actors)), key=load.__getitem__)
        self._pending[self.actors[i].run_batch.remote(chunk)] = (i, chunk)

    def collect(self, timeout: float) -> list[Group]:
        """Groups of every chunk finished so far (waiting up to ``timeout`` s for the first).

        A generator whose actor died or whose ``run_batch`` raised is replaced on the way
        (``restarts.GeneratorsFailed`` when the window rule says stop).
        """
        if not self._pending:
            return []
        ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=timeout)
        if ready:  # take every other chunk that is also done, without waiting
            ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        out: list[Group] = []
        for ref in ready:
            if ref not in self._pending:  # a chunk of an actor replaced in this loop: sent again
                continue
            try:
                groups = ray.get(ref)
            except ray.exceptions.RayError as err:
                index = self._pending[ref][0]
                # a lost node stops the run; the plan would put the replacement back on it
                cluster.check_node(self.nodes[index], f"generator {index}", 5.0 if "node" in str(err) else 0.0)
                self._replace(index, _cause(err))
                continue
            self._pending.pop(ref)
            # ray.get hands back read-only numpy views of the object store; the learner gets
            # owned, writable arrays, as from the local backend (and the store can free them)
            out.extend(copy.deepcopy(groups))
        return out

    def _replace(self, index: int, cause: str) -> None:
        """A new actor in generator ``index``'s place, given the newest weights and every
        chunk the dead one had not returned."""
        ray.kill(self.actors[index])
        lost = [(ref, chunk) for ref, (i, chunk) in self._pending.items() if i == index]
        for ref, _ in lost:
            self._pending.pop(ref)
        self.deaths.died(f"generator {index}", cause)  # raises when the window rule says stop
        print(f"generator {index} {cause}; replaced, {len(lost)} unfinished chunk(s) sent again "
              f"(restart {self.deaths.restarts})", flush=True)
        self.actors[index] = self._start(index)
        if self._latest is not None:
            self.actors[index].push_weights.remote(*self._latest)
        for _, chunk in lost:
            self.submit(chunk)

    def swaps(self) -> list[int]:
        """Per generator, how many in-flight weight swaps it has done."""
        return ray.get([a.swaps.remote() for a in self.actors])

    def placement(self) -> list[dict]:
        """Each generator actor's node, host, pid and GPUs, as it reports them."""
        return [{"role": f"generator {i}", **w} for i, w in enumerate(ray.get([a.where.remote() for a in self.actors]))]

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors, self._pending = [], {}
        cluster.release()


def _cause(err: Exception) -> str:
    """A generator actor's failure in words: the last line of what ``run_batch`` (or the
    actor's constructor) raised, or of Ray's account of the actor's death."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    last = lines[-1] if lines else type(err).__name__
    died = isinstance(err, ray.exceptions.RayActorError) and not err.actor_init_failed
    return f"{'died' if died else 'failed'}: {last if len(last) <= 200 else last[:197] + '...'}"
