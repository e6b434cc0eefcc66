"""From compute to hours: a run's clock, and the time to reach a target.

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
without wall time takes ``s`` (and optionally its sd) from a speeds file; its hours count
from compute 0. Device-hours are ``devices x hours``; a run's devices are its compute per
wall hour (``compute_gpu_hours`` is itself devices x hours, ``scalerl.compute``).

**Time to target.** Each draw ``C*_j`` of the crossing (``scalerl.fit.time.crossing``: the draws
of ``scalerl.fit.predictive``) goes through the clock at its own rate ``s_j`` (the clock's
spread, drawn with a fixed seed): hours are those draws' median and ``(1 -/+ level) / 2``
quantiles (``inf`` when the quantile falls where the target is never reached), device-hours
``devices`` times them. ``p_reach`` is the share of draws within every budget given (hours
and compute), ``p_reach_at_all`` the share within the draws' horizon: the same draws, so
``p_reach <= p_reach_at_all``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalerl.fit.errors import CurveError
from scalerl.fit.time.crossing import Crossing
from scalerl.metric_names import COMPUTE, WALL

__all__ = ["BLOCKS", "Clock", "TimeToTarget", "clock_from_records", "clock_from_speeds", "compute_for_hours",
           "read_records", "time_to_target"]  # fmt: skip

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


def read_records(path: Path) -> list[dict]:
    """Every JSON object of a metrics file (a torn last line of a live run is skipped)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                if text.endswith("\n"):
                    raise CurveError(f"{path} line {number} is not valid JSON.") from None
                break
            if isinstance(record, dict):
                records.append(record)
    return records


def clock_from_records(records: list[dict], source: str, x: str = COMPUTE) -> Clock:
    """The clock of a run from its records' ``wall_s`` and compute column ``x``."""
    timed = [(float(r[x]), float(r[WALL])) for r in records
             if isinstance(r.get(x), int | float) and isinstance(r.get(WALL), int | float)]  # fmt: skip
    if len(timed) < MIN_TIMED + 1:
        raise CurveError(
            f"{source} has {len(timed)} records with both {WALL} and {x}; the time to target needs at "
            f"least {MIN_TIMED + 1} (give a log without timing a speeds file with --speeds)."
        )
    c, t = (np.array(v) for v in zip(*timed))
    recent = slice(len(c) // 2, None) if len(c) >= 2 * (MIN_TIMED + 1) else slice(None)
    rc, rt = c[recent], t[recent]
    if rc[-1] <= rc[0] or rt[-1] <= rt[0]:
        raise CurveError(f"{source}: compute or wall time does not grow over the recent records, so no rate.")
    s = float((rt[-1] - rt[0]) / (rc[-1] - rc[0]))
    edges = np.linspace(0, rc.size - 1, min(BLOCKS, rc.size - 1) + 1).round().astype(int)
    blocks = [(rt[b] - rt[a]) / (rc[b] - rc[a]) for a, b in zip(edges[:-1], edges[1:]) if rc[b] > rc[a]]
    sd = float(np.std(blocks, ddof=1)) if len(blocks) > 1 else 0.0
    return Clock(c, t, s, sd, 3600.0 / s)


def clock_from_speeds(path: Path) -> Clock:
    """A clock from a speeds file: JSON ``{"seconds_per_compute": s, "devices": D}``, optional
    ``"seconds_per_compute_sd"`` (default 0); hours count from compute 0."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CurveError(f"{path} is not valid JSON ({err.msg}).") from None
    if not isinstance(data, dict):
        raise CurveError(f"{path} must hold a JSON object with seconds_per_compute and devices.")
    values = {}
    for name, required in (("seconds_per_compute", True), ("devices", True), ("seconds_per_compute_sd", False)):
        value = data.get(name, None if required else 0.0)
        if value is None:
            raise CurveError(f"{path} has no {name} (seconds of wall time per unit of the log's compute; devices).")
        if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) or value < 0 or (
                required and value == 0):
            raise CurveError(f"{path}: {name} must be a positive number, got {value!r}.")
        values[name] = float(value)
    empty = np.array([], dtype=float)
    return Clock(empty, empty, values["seconds_per_compute"], values["seconds_per_compute_sd"], values["devices"])


@dataclass(frozen=True)
class TimeToTarget:
    """Compute, hours and device-hours to reach ``target``: (median, lo, hi) each."""

    target: float
    level: float
    compute: tuple[float, float, float]
    hours: tuple[float, float, float]
    device_hours: tuple[float, float, float]
    p_reach_at_all: float  # P(reach within the horizon): the draws' share that cross at all
    reachable: bool
    p_reach: float | None = None  # within the budgets given
    budget_hours: float | None = None
    budget_compute: float | None = None
    already: bool = False  # the run's own reads reached the target: the triples are that moment
    horizon: float | None = None  # the compute P(reach at all) is within
    no_rise: str | None = None  # "no rise detected: ...": no crossing time is given

    def to_dict(self) -> dict:
        def triple(v):
            return {k: (float(x) if np.isfinite(x) else None) for k, x in zip(("median", "lo", "hi"), v)}

        out = {"target": self.target, "level": self.level, "reachable": self.reachable, "already": self.already,
               "p_reach_at_all": self.p_reach_at_all, "horizon_compute": self.horizon, "no_rise": self.no_rise,
               "compute": triple(self.compute), "hours": triple(self.hours),
               "device_hours": triple(self.device_hours)}  # fmt: skip
        if self.p_reach is not None:
            out |= {"p_reach": self.p_reach, "budget": {"hours": self.budget_hours, "compute": self.budget_compute}}
        return out


def _quantiles(x: np.ndarray, level: float) -> tuple[float, float, float]:
    tail = (1.0 - level) / 2.0
    # inverted_cdf never interpolates between a finite draw and inf (which gives NaN)
    return tuple(float(v) for v in np.quantile(x, [0.5, tail, 1.0 - tail], method="inverted_cdf"))


def trailing_mean(reward, window: int) -> np.ndarray:
    """Each evaluation's read: the mean of the last ``window`` evaluations (of all there are at
    the start); reward (n,) -> (n,)."""
    r = np.asarray(reward, dtype=float)
    return np.array([r[max(0, i + 1 - window): i + 1].mean() for i in range(r.size)])


def already_reached(target: float, compute: np.ndarray, reward: np.ndarray, clock: Clock, level: float,
                    window: int) -> TimeToTarget | None:
    """The moment the run's own reads (the trailing mean of ``window`` evaluations, or of all
    there are) first reached ``target``, or None: a target behind the run needs no forecast."""
    hit = np.flatnonzero(trailing_mean(reward, window) >= target)
    if not hit.size:
        return None
    c = float(compute[hit[0]])
    h = float(clock.hours(np.array([c]))[0])
    return TimeToTarget(target, level, (c, c, c), (h, h, h), (h * clock.devices,) * 3, 1.0, True, already=True)


def compute_for_hours(clock: Clock, hours: float) -> float:
    """The most compute the run can have spent by ``hours`` since its start, at the fastest
    rate the clock draws (its rate less three sds, at least a tenth of it)."""
    c0, t0 = clock.anchor
    fastest = max(clock.s - 3.0 * clock.s_sd, clock.s / 10.0)
    return c0 + max(hours * 3600.0 - t0, 0.0) / fastest


def time_to_target(
    cross: Crossing, clock: Clock, *, budget_hours: float | None = None, budget_compute: float | None = None,
    seed: int = 0, no_rise: str | None = None,
) -> TimeToTarget:
    """Module docstring: the crossing's draws through the clock, at the crossing's level.
    With ``no_rise`` (the run shows none) the probabilities stand and no time is given."""
    c_star = cross.draws
    rate = clock.s
    if clock.s_sd > 0:
        rng = np.random.default_rng(seed)
        rate = np.maximum(rng.normal(clock.s, clock.s_sd, c_star.size), clock.s / 10.0)
    drawn = clock.hours(c_star, rate)
    p_reach = None
    if budget_hours is not None or budget_compute is not None:
        ok = np.ones(c_star.size, dtype=bool)
        if budget_hours is not None:
            ok &= drawn <= budget_hours
        if budget_compute is not None:
            ok &= c_star <= budget_compute
        p_reach = float(np.mean(ok))
    compute, hours = _quantiles(c_star, cross.level), _quantiles(drawn, cross.level)
    if no_rise is not None:
        compute = hours = (np.inf,) * 3
    device_hours = tuple(h * clock.devices for h in hours)
    return TimeToTarget(
        cross.target, cross.level, compute, hours, device_hours, cross.p_reach, cross.reachable, p_reach,
        budget_hours, budget_compute, horizon=cross.horizon, no_rise=no_rise,
    )  # fmt: skip
