"""The run plan: where every role runs, decided once at start from the config and the machine.

:func:`build_plan` is the one place that decides placement. It reads the validated config,
the chosen backend's :class:`~scalerl.pipeline.backends.Capabilities` (never its name) and
what it probes — this machine's cores (``scalerl.pipeline.plan.cores``) and CUDA devices
(``scalerl.pipeline.plan.gpus``), or a Ray cluster's live nodes — and returns a frozen,
picklable :class:`RunPlan`:

- the device (``train.device`` resolved: ``auto`` is ``cuda`` when a GPU is visible);
- the cores of each role (the core split's rule, printed), generator count and threads, the
  learner's ranks and their threads (``learner_threads // world_size``: split, not added);
- the GPUs of the learner ranks and generators on this machine, or each cluster
  generator's share of a GPU (1 when there are enough, an equal share when fewer);
- on a cluster, the node of every generator and learner rank. Learner ranks fill the
  driver's node first (their rendezvous and the driver's copy are there), then the others;
  generators go round-robin over the *other* nodes first (the driver's node keeps its cores
  for the learner), then the driver's. A cluster short of what the plan needs is one
  sentence naming what is missing (:class:`~scalerl.config.ConfigError`);
- where evaluation runs (``eval.on``: ``auto`` is ``generator`` where the backend's
  generators evaluate), and the weight transport;
- ``devices``: what the compute meter counts, each device once (``scalerl.compute``).

The run prints :meth:`RunPlan.lines` at start and writes ``RUN_DIR/plan.json``
(:func:`write_plan`): the plan, and where each role actually ran (host, pid, Ray node id,
devices) once the roles have started.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scalerl.config import Config, ConfigError
from scalerl.pipeline.backends import Capabilities, backend_class
from scalerl.pipeline.plan.cores import split_cores
from scalerl.pipeline.plan.gpus import gpu_plan
from scalerl.pipeline.weights import TRANSPORTS
from scalerl.runfolder import PLACEMENT


@dataclass(frozen=True)
class Node:
    """One live node of a cluster, as the plan sees it."""

    id: str  # Ray's node id
    host: str  # its address
    cpus: float
    gpus: float
    driver: bool  # the node the driver (and a one-process learner) runs on


@dataclass(frozen=True)
class RunPlan:
    """Where everything runs (module doc); JSON-serialisable through :meth:`to_dict`."""

    backend: str
    device: str  # "cpu" | "cuda": the learner's and the torch engine's
    accelerated: bool  # roles compute on a GPU or in vLLM: CPU seconds then mean nothing
    cores: int
    learner_threads: int
    generators: int
    generator_threads: int
    generators_in_learner: bool  # generators share the learner's process (no overlap)
    generator_device: str  # where a torch generator decodes: "cpu" | "cuda"
    learner_ranks: int
    rank_threads: int
    rank_transport: str  # "driver" (one process: the driver's) | "processes" | "ray"
    learner_gpus: tuple[int, ...]  # physical GPU of each learner rank on this machine
    generator_gpus: tuple[int, ...]  # physical GPU of each generator process on this machine
    gpus_per_generator: float  # a cluster generator's GPU reservation
    eval_on: str  # "generator" | "learner"
    weights: str  # the weight transport (pipeline.weights.TRANSPORTS)
    sync_bucket_bytes: int  # learner.sync_bucket_mb: a collective transport's send size
    sync_timeout_s: float  # learner.sync_timeout_s: a send that takes longer stops the run
    host: str  # the driver's host name
    nodes: tuple[Node, ...]  # a cluster's live nodes (empty: this machine alone)
    rank_nodes: tuple[str, ...]  # node id of each learner rank on a cluster
    generator_nodes: tuple[str, ...]  # node id of each generator on a cluster
    rule: str  # the core split, in one line
    devices: int  # devices the compute meter counts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """The plan as the run prints it at start."""
        gens = ("in the learner's process" if self.generators_in_learner else
                f"{self.generators} x {self.generator_threads} thread(s) on {self.generator_device}")
        learner = ("in the driver's process" if self.learner_ranks == 1 else
                   f"{self.learner_ranks} ranks as {self.rank_transport}")
        out = [f"plan: backend {self.backend}, device {self.device}, learner {learner}, generators {gens}, "
               f"evaluation on the {self.eval_on}, weights through {TRANSPORTS[self.weights]}", self.rule]
        if self.learner_gpus or self.generator_gpus:
            out.append(f"GPUs: learner ranks {list(self.learner_gpus)}, generators {list(self.generator_gpus)}")
        if self.nodes:
            names = {n.id: f"{n.host} ({n.id[:8]}{', driver' if n.driver else ''})" for n in self.nodes}
            out.append(f"nodes: generators on {[names[n] for n in self.generator_nodes]}"
                       + (f", learner ranks on {[names[n] for n in self.rank_nodes]}" if self.rank_nodes else ""))
        return out


def resolve_device(setting: str) -> str:
    """``train.device`` resolved: ``auto`` is ``cuda`` when a GPU is visible, else ``cpu``."""
    if setting != "auto":
        return setting
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_plan(cfg: Config, nodes: tuple[Node, ...] | None = None) -> RunPlan:
    """The plan of ``cfg`` on this machine, or on the cluster the backend joins (its live
    ``nodes``, probed here unless given). :class:`ConfigError` when the backend cannot do what
    the config asks or the cluster is short of what the plan needs."""
    name = cfg.pipeline.backend
    try:
        backend = backend_class(name)
    except ImportError as err:
        raise ConfigError(f"pipeline.backend={name} needs {err.name or 'a package'}, which is not installed "
                          f"(pip install 'scalerl[{name}]').") from None
    caps: Capabilities = backend.capabilities
    device = resolve_device(cfg.train.device)
    accelerated = cfg.rollout.engine == "vllm" or device == "cuda"
    split = split_cores(caps.generators, cfg.train.cores, cfg.pipeline.num_generators,
                        cfg.pipeline.generator_threads, cfg.train.threads, accelerated=accelerated)
    world, cluster = cfg.learner.world_size, caps.generators == "cluster"
    ranks_here = world == 1 or caps.ranks == "processes"
    local = _local_gpus(device, world if ranks_here else 0, split.generators if caps.generators == "processes" else 0)
    share = 0.0
    if nodes is None and cluster:
        nodes = backend.nodes()
    nodes = tuple(nodes or ())
    if cluster:
        # a one-process learner holds a GPU of the driver's node that Ray does not book
        share = gpus_per_generator(sum(n.gpus for n in nodes), split.generators, 1 if device == "cuda" and world == 1 else 0)
        if cfg.rollout.engine == "vllm" and 0 < share < 1:
            raise ConfigError(f"the Ray cluster leaves a fraction of a GPU ({share:g}) to each of {split.generators} vLLM "
                              "generators; vLLM needs a whole GPU per generator: lower pipeline.num_generators.")
    rank_threads = max(1, split.learner_threads // world)
    rank_nodes, gen_nodes = (), ()
    if nodes:
        rank_gpus = 1.0 if device == "cuda" else 0.0
        rank_nodes, gen_nodes = place_on_nodes(nodes, 0 if ranks_here else world, rank_threads, rank_gpus,
                                               split.generators if cluster else 0, split.generator_threads, share)
    if device == "cuda" and not cluster:
        devices = len(set(local[0]) | set(local[1]))  # a shared GPU counts once
    elif device == "cuda":
        devices = world + split.generators
    else:
        ranks = split.learner_threads if world == 1 else rank_threads * world
        devices = split.held(generators=caps.generators != "in_learner") - split.learner_threads + ranks
    return RunPlan(
        backend=name, device=device, accelerated=accelerated, cores=split.cores, learner_threads=split.learner_threads,
        generators=split.generators, generator_threads=split.generator_threads,
        generators_in_learner=caps.generators == "in_learner",
        generator_device="cuda" if device == "cuda" or share > 0 else "cpu", learner_ranks=world,
        rank_threads=rank_threads, rank_transport=caps.ranks if world > 1 else "driver", learner_gpus=local[0],
        generator_gpus=local[1], gpus_per_generator=share, eval_on=_eval_on(cfg.eval.on, caps, name),
        weights=weight_transport(cfg.pipeline.weight_transport, caps, name, device, world, *local),
        sync_bucket_bytes=cfg.learner.sync_bucket_mb << 20, sync_timeout_s=cfg.learner.sync_timeout_s,
        host=socket.gethostname(), nodes=nodes, rank_nodes=rank_nodes,
        generator_nodes=gen_nodes, rule=split.rule, devices=devices)


def weight_transport(setting: str, caps: Capabilities, backend: str, device: str, world: int,
                     learner_gpus: tuple[int, ...], generator_gpus: tuple[int, ...]) -> str:
    """``pipeline.weight_transport`` resolved (its doc): ``auto`` is the fastest the roles'
    placement allows; a choice the backend or the placement cannot do is one sentence."""
    shared = bool(generator_gpus) and set(generator_gpus) <= set(learner_gpus)
    own = bool(generator_gpus) and not set(generator_gpus) & set(learner_gpus)
    if setting == "auto":
        if "collective" in caps.weights and device == "cuda" and world == 1 and own:
            return "collective"
        if "cuda_ipc" in caps.weights and device == "cuda" and shared:
            return "cuda_ipc"
        return caps.weights[0]
    if setting not in caps.weights:
        raise ConfigError(f"pipeline.weight_transport={setting} is not one pipeline.backend={backend} can use; it moves "
                          f"weights through {TRANSPORTS[caps.weights[0]]} (pipeline.backend=local has {setting}).")
    if setting == "cuda_ipc" and not shared:
        raise ConfigError("pipeline.weight_transport=cuda_ipc needs every generator on a GPU the learner holds "
                          f"(train.device={device}, generators on GPUs {list(generator_gpus)}, learner on "
                          f"{list(learner_gpus)}); use collective or shm.")
    if setting == "collective" and device == "cuda" and not own:
        raise ConfigError("pipeline.weight_transport=collective on GPUs needs each generator on a GPU of its own "
                          f"(NCCL cannot join one GPU twice; generators on {list(generator_gpus)}, learner on "
                          f"{list(learner_gpus)}); use cuda_ipc.")
    return setting


def _local_gpus(device: str, ranks: int, generators: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(learner rank GPUs, generator GPUs)`` on this machine (``placement.gpu_plan``)."""
    if device != "cuda":
        return (), ()
    import torch

    plan = gpu_plan(max(1, torch.cuda.device_count()), ranks, generators)
    return plan.learner, plan.generators


def _eval_on(setting: str, caps: Capabilities, name: str) -> str:
    """``eval.on`` resolved against what the backend's generators can do."""
    if setting == "generator" and not caps.evaluates:
        raise ConfigError(f"eval.on=generator needs a backend whose generators evaluate, and "
                          f"pipeline.backend={name}'s do not; use eval.on=learner or auto.")
    return "generator" if setting == "generator" or (setting == "auto" and caps.evaluates) else "learner"


def gpus_per_generator(cluster_gpus: float, num_generators: int, learner_gpus: float = 0) -> float:
    """GPUs each cluster generator reserves of those the learner leaves: 1 if there are
    enough, an equal share if fewer, 0 without (then a CUDA generator shares the learner's
    GPU unreserved). ``learner_gpus``: GPUs a learner outside the cluster's books holds."""
    free = cluster_gpus - learner_gpus
    if free <= 0:
        return 0.0
    return min(1.0, free / num_generators)


def place_on_nodes(nodes: tuple[Node, ...], ranks: int, rank_cpus: float, rank_gpus: float, generators: int,
                   gen_cpus: float, gen_gpus: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(node of each learner rank, node of each generator)`` by the module doc's rule;
    :class:`ConfigError` naming what is missing when they do not fit."""
    need_cpus, need_gpus = ranks * rank_cpus + generators * gen_cpus, ranks * rank_gpus + generators * gen_gpus
    have_cpus, have_gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
    what = (f"{generators} generator(s) x {gen_cpus:g} CPU(s)" + (f" and {gen_gpus:g} GPU" if gen_gpus else "")
            + (f" + {ranks} learner rank(s) x {rank_cpus:g} CPU(s)" + (" and 1 GPU" if rank_gpus else "")
               if ranks else ""))
    for kind, need, have in (("CPU", need_cpus, have_cpus), ("GPU", need_gpus, have_gpus)):
        if need > have + 1e-9:
            raise ConfigError(f"the Ray cluster's {len(nodes)} live node(s) have {have:g} {kind}(s) but the run plan "
                              f"needs {need:g} ({what}): {need - have:g} {kind}(s) missing; add a node (ray start "
                              "--address=HEAD:6379) or lower pipeline.num_generators, pipeline.generator_threads "
                              "or learner.world_size.")
    free = {n.id: [n.cpus, n.gpus] for n in nodes}
    driver = [n.id for n in nodes if n.driver]
    others = [n.id for n in nodes if not n.driver]

    def take(role: str, order: list[str], cpus: float, gpus: float) -> str:
        for node in order:
            if free[node][0] + 1e-9 >= cpus and free[node][1] + 1e-9 >= gpus:
                free[node][0] -= cpus
                free[node][1] -= gpus
                return node
        raise ConfigError(f"no node of the Ray cluster has {cpus:g} CPU(s)" + (f" and {gpus:g} GPU(s)" if gpus else "")
                          + f" left for {role} (left per node: "
                          + ", ".join(f"{n[:8]} {c:g} CPU/{g:g} GPU" for n, (c, g) in free.items())
                          + "); add a node or lower pipeline.generator_threads.")

    rank_nodes = tuple(take(f"learner rank {r}", driver + others, rank_cpus, rank_gpus) for r in range(ranks))
    gen_nodes = []
    for i in range(generators):
        k = i % len(others) if others else 0
        gen_nodes.append(take(f"generator {i}", others[k:] + others[:k] + driver, gen_cpus, gen_gpus))
    return rank_nodes, tuple(gen_nodes)


def write_plan(run_dir: Path, plan: RunPlan, ran: dict[str, Any]) -> None:
    """``RUN_DIR/plan.json``: the plan, and where each role actually ran (``ran``: per role
    kind, each process's ``{"role", "host", "pid", "devices"}``; on a cluster a process the
    driver runs, which Ray does not place, is on the driver's node)."""
    from scalerl.checkpoint import atomic_write

    driver = next((n.id for n in plan.nodes if n.driver), None)
    if driver is not None:
        ran = {kind: [{"node": driver} | row for row in rows] for kind, rows in ran.items()}
    text = json.dumps({"plan": plan.to_dict(), "ran": ran}, indent=1, default=str)
    atomic_write(Path(run_dir) / PLACEMENT, text.encode())
