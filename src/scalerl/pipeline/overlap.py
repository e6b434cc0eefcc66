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
(``bound ≥ WORTH``), :meth:`OverlapMonitor.observe` returns a one-line warning, once per
episode: again only after the overlap has recovered to ``RECOVERED`` of the bound. The first ``warmup`` steps (process start,
model loading, the first weights) are not measured.
"""

from __future__ import annotations

from collections import deque

COLLAPSED = 0.7
"""Achieved share of the overlap bound below which the overlap counts as lost."""
RECOVERED = 0.85
"""Share above which a lost overlap counts as back (hysteresis: no warning per wobble)."""
WORTH = 1.3
"""Overlap bound below which no warning is given: the roles are too unequal to gain much."""


class OverlapMonitor:
    """Windowed overlap statistics of a multi-process pipeline run (module doc)."""

    def __init__(self, window: int = 8, enabled: bool = True, warmup: int | None = None) -> None:
        self.enabled = enabled
        self.steps: deque[tuple[float, float, float]] = deque(maxlen=window)
        self.warned = False
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
        warning = None
        if collapsed and not self.warned:
            warning = (f"generator and learner are sharing a core: throughput {speedup:.2f}x sync "
                       f"(overlap could give {bound:.2f}x); other load on the machine?")
        self.warned = collapsed or (self.warned and speedup < RECOVERED * bound)
        return metrics, warning
