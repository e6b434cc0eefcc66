"""Is the pipeline overlapping generation and learning, or have the roles collapsed onto one core?

PipelineRL's speed-up over ``sync`` comes from the generator decoding while the learner trains
(digest §2.2). With the roles' own CPU seconds per step, ``C_learn`` (the learner process) and
``C_gen`` (the generator processes, for the groups trained this step), and the step's wall
time ``W``, over a window of steps:

- ``overlap_speedup = (C_learn + C_gen) / W``: throughput relative to running the two roles
  one after the other (what ``sync`` does), at the machine's uncontended speed;
- ``overlap_bound = (C_learn + C_gen) / max(C_learn, C_gen)``: the best overlap can give.

CPU time, not wall time, measures each role: when another job (or the other role) shares the
core, a role's wall time grows but its CPU time does not, so ``W`` exposes the loss. When the
achieved share ``speedup / bound`` falls below ``COLLAPSED`` while overlap was worth having
(``bound ≥ WORTH``), :meth:`OverlapMonitor.observe` returns a one-line warning. The first
``warmup`` steps (process start, model loading, the first weights) are not measured.

The warning is said once, and again only when its cause changes. It once came again after
every recovery above a second threshold, and a loaded machine, whose overlap swings across
both, said it 10 times in 2.5 minutes beside 6 progress lines. The cause it can measure is the
other work on the machine: the 1-minute load average (``os.getloadavg``) less the cores this
run keeps busy (``(C_learn + C_gen) / W``). The line says both, and comes again only while the
overlap is lost and that other work has changed by ``CAUSE_STEP`` cores or more since it was
last said (a job that started or ended beside the run). Where there is no load average, once.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

COLLAPSED = 0.7
"""Achieved share of the overlap bound below which the overlap counts as lost."""
WORTH = 1.3
"""Overlap bound below which no warning is given: the roles are too unequal to gain much."""
CAUSE_STEP = 1.0
"""Change of the other work on the machine, in cores, that makes the warning worth saying again."""


def load_average() -> float | None:
    """The machine's 1-minute load average, or None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


class OverlapMonitor:
    """Windowed overlap statistics of a multi-process pipeline run (module doc)."""

    def __init__(self, window: int = 8, enabled: bool = True, warmup: int | None = None,
                 load: Callable[[], float | None] = load_average) -> None:
        self.enabled = enabled
        self.steps: deque[tuple[float, float, float]] = deque(maxlen=window)
        self.load = load
        self.said = False
        self.said_other: float | None = None  # the other work (cores) the last warning named
        # the first steps wait on process start, model loading and the first weights, which
        # no role's CPU time shows: they would read as a collapse
        self.warmup = window if warmup is None else warmup
        self.seen = 0

    def observe(self, wall_s: float, learner_cpu_s: float, generator_cpu_s: float) -> tuple[dict[str, float], str | None]:
        """Add one step; returns its metrics and, when the overlap just collapsed, a warning."""
        self.seen += 1
        if self.seen <= self.warmup:
            return {}, None
        self.steps.append((wall_s, learner_cpu_s, generator_cpu_s))
        wall = sum(s[0] for s in self.steps)
        learn = sum(s[1] for s in self.steps)
        gen = sum(s[2] for s in self.steps)
        if wall <= 0 or max(learn, gen) <= 0:
            return {}, None
        speedup, bound = (learn + gen) / wall, (learn + gen) / max(learn, gen)
        metrics = {"overlap_speedup": speedup, "overlap_bound": bound}
        full = len(self.steps) == self.steps.maxlen
        collapsed = self.enabled and full and bound >= WORTH and speedup < COLLAPSED * bound
        return metrics, self._warning(speedup, bound) if collapsed else None

    def _warning(self, speedup: float, bound: float) -> str | None:
        """The line for a lost overlap, unless it was said already for the same cause. The
        speed-up is also the cores this run keeps busy: its CPU seconds per wall second."""
        load = self.load()
        other = None if load is None else max(load - speedup, 0.0)
        if self.said and (other is None or self.said_other is None or abs(other - self.said_other) < CAUSE_STEP):
            return None
        self.said, self.said_other = True, other
        line = (f"generator and learner are sharing a core: throughput {speedup:.2f}x sync "
                f"(overlap could give {bound:.2f}x)")
        if other is None:
            return line + "; other load on the machine?"
        blame = (f"about {other:.1f} cores of other work" if other >= 0.5
                 else "little other work, so the run's own roles share the cores")
        return (line + f": the load average is {load:.1f} while this run keeps {speedup:.1f} cores busy, {blame} "
                "(said again only if that changes)")
