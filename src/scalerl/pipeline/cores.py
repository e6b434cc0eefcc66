"""How a run splits the machine's cores between its roles, by a rule it prints at start.

With ``local``, the learner is this process and every generator a process of its own. At the
recipe's shape one learner step costs about as much CPU as generating its batch (``sync``
spends 55% of its step in the learner, 45% generating, at P × G = 8 × 8 on ``nano``), and
torch's intra-op threads speed the learner's large matmuls up sublinearly while generator
processes scale almost linearly. So the ``auto`` rule gives half the cores to generator
processes of one thread each and the rest to the learner's threads:

    generators = max(1, cores // 2),  generator threads = 1,
    learner threads = max(1, cores − generators × generator threads)

Two cores give the overlap the pipeline was built for (one learner thread, one generator);
sixteen give eight generators and an eight-thread learner. ``inprocess`` runs both roles in
one process, so its learner takes every core; ``ray`` schedules generators on the cluster,
one thread each unless told otherwise. Any of the three numbers can be set, and the rule
fills in the rest (``train.threads``, ``pipeline.num_generators``,
``pipeline.generator_threads``); ``train.cores`` bounds the whole run (a sweep running
points side by side gives each its share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class CoreSplit:
    cores: int
    generators: int
    generator_threads: int
    learner_threads: int
    rule: str
    """One line: the split, and which parts the rule chose."""


def split_cores(backend: str, cores: int | None = None, generators: int | str = "auto",
                generator_threads: int | str = "auto", learner_threads: int | str = "auto") -> CoreSplit:
    """The ``auto`` rule of the module doc, with any explicit number kept as given."""
    cores = cores or available_cores()
    auto = [name for name, v in (("generators", generators), ("generator threads", generator_threads),
                                 ("learner threads", learner_threads)) if v == "auto"]
    g_threads = 1 if generator_threads == "auto" else int(generator_threads)
    if backend == "inprocess":
        gens = 1 if generators == "auto" else int(generators)
        learner = cores if learner_threads == "auto" else int(learner_threads)
    else:
        gens = (max(1, cores // 2) if backend == "local" else 1) if generators == "auto" else int(generators)
        learner = max(1, cores - gens * g_threads) if learner_threads == "auto" else int(learner_threads)
    how = f"auto: {', '.join(auto)}" if auto else "all set by the config"
    where = "in the learner's process" if backend == "inprocess" else f"{gens} generator(s) x {g_threads} thread(s)"
    rule = f"cores: {cores} -> learner {learner} thread(s) + {where} ({how}; rule: scalerl.pipeline.cores)"
    return CoreSplit(cores, gens, g_threads, learner, rule)
