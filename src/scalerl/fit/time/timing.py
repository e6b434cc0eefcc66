"""From compute to hours: a run's clock (the time to a target reads it: ``forecast.reach``).

**The clock.** A run's records pair compute with wall time (``wall_s``, seconds since the
run's start, resumes included). Hours at a compute the run has passed are read off its own
records (linear interpolation); beyond its last record they are extrapolated at the
*recent* rate, seconds per unit of compute ``s``, measured over the last half of the timed
records (warm-up, compilation and the first weight sync are excluded that way):

    t(C) = t_last + (C - C_last) * s,  C > C_last.

The rate's own variability widens the interval: the recent part is cut into ``BLOCKS``
consecutive blocks, each gives its rate ``s_b``, and the future rate is taken as
``N(s, sd(s_b))`` (truncated at ``s / 10``): the spread *between* blocks, not its standard
error, because a rate that drifted over the recent past may keep drifting. A peer's log
without wall time takes ``s`` (and optionally its sd) from a speeds file (``commands.speeds``);
its hours count from compute 0. Device-hours are ``devices x hours``; a run's devices are its compute per
wall hour (``compute_gpu_hours`` is itself devices x hours, ``scalerl.compute``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.runfolder import COMPUTE, WALL

__all__ = ["BLOCKS", "Clock", "clock_from_points", "clock_from_records", "compute_for_hours"]

BLOCKS = 4
MIN_TIMED = 3  # timed records needed beyond the first: a rate and a spread


@dataclass(frozen=True, eq=False)
class Clock:
    """Wall time as a function of compute (module docstring)."""

    compute: np.ndarray  # (n,) the run's own timed records (may be empty: a speeds file)
    wall_s: np.ndarray  # (n,)
    s: float  # recent seconds per unit of compute
    s_sd: float  # the rate's spread between recent blocks
    devices: float

    @property
    def anchor(self) -> tuple[float, float]:
        """(compute, seconds) from which the rate extrapolates."""
        return (float(self.compute[-1]), float(self.wall_s[-1])) if self.compute.size else (0.0, 0.0)

    def hours(self, C, s=None) -> np.ndarray:
        """Hours since the start at compute ``C`` (at rate ``s``, default the clock's)."""
        C = np.asarray(C, dtype=float)
        s = self.s if s is None else np.asarray(s, dtype=float)
        c0, t0 = self.anchor
        with np.errstate(invalid="ignore"):
            ahead = t0 + (C - c0) * s
        if self.compute.size:
            past = np.interp(C, self.compute, self.wall_s)
            ahead = np.where(C <= c0, past, ahead)
        return np.where(np.isinf(C), np.inf, ahead) / 3600.0

    def to_dict(self) -> dict:
        return {"seconds_per_compute": self.s, "seconds_per_compute_sd": self.s_sd, "devices": self.devices,
                "now_hours": self.anchor[1] / 3600.0, "now_compute": self.anchor[0]}  # fmt: skip


def clock_from_records(records: list[dict], source: str, x: str = COMPUTE) -> Clock:
    """The clock of a run from its records' ``wall_s`` and compute column ``x``."""
    timed = [(float(r[x]), float(r[WALL])) for r in records
             if isinstance(r.get(x), int | float) and isinstance(r.get(WALL), int | float)]  # fmt: skip
    c, t = (np.array(v, dtype=float) for v in zip(*timed)) if timed else (np.empty(0), np.empty(0))
    return clock_from_points(c, t, source, x)


def clock_from_points(c: np.ndarray, t: np.ndarray, source: str, x: str = COMPUTE) -> Clock:
    """The clock of a run from its (compute, wall seconds) pairs, in record order."""
    timed = list(zip(np.asarray(c, float), np.asarray(t, float)))
    if len(timed) < MIN_TIMED + 1:
        raise CurveError(
            f"{source} has {len(timed)} records with both {WALL} and {x}; the time to target needs at "
            f"least {MIN_TIMED + 1} (give a log without timing a speeds file with --speeds)."
        )
    c, t = (np.array(v) for v in zip(*timed))
    order = np.argsort(c, kind="stable")
    c, t = c[order], t[order]
    recent = slice(len(c) // 2, None) if len(c) >= 2 * (MIN_TIMED + 1) else slice(None)
    rc, rt = c[recent], t[recent]
    if rc[-1] <= rc[0] or rt[-1] <= rt[0]:
        raise CurveError(f"{source}: compute or wall time does not grow over the recent records, so no rate.")
    s = float((rt[-1] - rt[0]) / (rc[-1] - rc[0]))
    edges = np.linspace(0, rc.size - 1, min(BLOCKS, rc.size - 1) + 1).round().astype(int)
    blocks = [(rt[b] - rt[a]) / (rc[b] - rc[a]) for a, b in zip(edges[:-1], edges[1:]) if rc[b] > rc[a]]
    sd = float(np.std(blocks, ddof=1)) if len(blocks) > 1 else 0.0
    return Clock(c, t, s, sd, 3600.0 / s)


def compute_for_hours(clock: Clock, hours: float) -> float:
    """The most compute the run can have spent by ``hours`` since its start, at the fastest
    rate the clock draws (its rate less three sds, at least a tenth of it)."""
    c0, t0 = clock.anchor
    fastest = max(clock.s - 3.0 * clock.s_sd, clock.s / 10.0)
    return c0 + max(hours * 3600.0 - t0, 0.0) / fastest
