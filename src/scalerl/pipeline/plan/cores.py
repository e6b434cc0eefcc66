"""How a run splits the machine's cores between its roles, by a rule it prints at start
(a helper of the run plan, ``scalerl.pipeline.plan``).

With generator processes (``local``), the learner is this process and every generator a process of its own. At the
recipe's shape one learner step costs about as much CPU as generating its batch (``sync``
spends 55% of its step in the learner, 45% generating, at P × G = 8 × 8 on ``nano``), and
torch's intra-op threads speed the learner's large matmuls up sublinearly while generator
processes scale almost linearly. So the ``auto`` rule gives half the cores to generator
processes of one thread each and the rest to the learner's threads:

    generators = max(1, cores // 2),  generator threads = 1,
    learner threads = max(1, cores − generators × generator threads)

Two cores give the overlap the pipeline was built for (one learner thread, one generator);
sixteen give eight generators and an eight-thread learner. Generators in the learner's
process (``inprocess``) leave every core to the learner; generators on a cluster (``ray``)
reserve their own CPUs there, one generator of one thread unless told otherwise. Generators on a GPU (``train.device=cuda``) or on vLLM
are one by default: each holds a model copy on the device. Any of the three numbers can be set, and the rule
fills in the rest (``train.threads``, ``pipeline.num_generators``,
``pipeline.generator_threads``); ``train.cores`` bounds the whole run (a sweep running
points side by side gives each its share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def available_cores() -> int:
    """The CPUs this process may run on: its affinity mask, bounded by a cgroup CPU quota
    (a container limited with ``--cpus 2`` on a 64-core host gets 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota)) if quota is not None else cores


def _cgroup_quota() -> int | None:
    """CPUs allowed by the cgroup v2 ``cpu.max`` (or v1 ``cfs_quota_us``), None if unlimited."""
    import math
    from pathlib import Path

    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return math.ceil(int(text[0]) / int(text[1]))
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return math.ceil(quota / period) if quota > 0 else None
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class CoreSplit:
    cores: int
    generators: int
    generator_threads: int
    learner_threads: int
    rule: str
    """One line: the split, and which parts the rule chose."""

    def held(self, generators: bool = True) -> int:
        """Cores the roles' threads hold (``generators=False``: the learner's alone, when
        generation shares its process or reserves its own CPUs elsewhere)."""
        return self.learner_threads + (self.generators * self.generator_threads if generators else 0)


def split_cores(where: str, cores: int | None = None, generators: int | str = "auto",
                generator_threads: int | str = "auto", learner_threads: int | str = "auto",
                accelerated: bool = False) -> CoreSplit:
    """The ``auto`` rule of the module doc, with any explicit number kept as given.
    ``where`` the generators run (``backends.Capabilities.generators``: ``in_learner``,
    ``processes`` or ``cluster``). ``accelerated`` (CUDA generators or vLLM): ``auto`` is one
    generator, since each holds a model copy (vLLM reserves most of the GPU's memory)."""
    cores = cores or available_cores()
    auto = [name for name, v in (("generators", generators), ("generator threads", generator_threads),
                                 ("learner threads", learner_threads)) if v == "auto"]
    g_threads = 1 if generator_threads == "auto" else int(generator_threads)
    if where == "in_learner":
        gens = 1 if generators == "auto" else int(generators)
        learner = cores if learner_threads == "auto" else int(learner_threads)
    else:
        per_core = where == "processes" and not accelerated
        gens = (max(1, cores // 2) if per_core else 1) if generators == "auto" else int(generators)
        learner = max(1, cores - gens * g_threads) if learner_threads == "auto" else int(learner_threads)
    how = f"auto: {', '.join(auto)}" if auto else "all set by the config"
    gen = "in the learner's process" if where == "in_learner" else f"{gens} generator(s) x {g_threads} thread(s)"
    rule = f"cores: {cores} -> learner {learner} thread(s) + {gen} ({how}; rule: scalerl.pipeline.plan.cores)"
    return CoreSplit(cores, gens, g_threads, learner, rule)
