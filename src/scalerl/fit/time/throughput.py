"""A steady-state throughput model of PipelineRL-k, built from a run's own step records.

A step needs one batch generated and one optimiser step taken. Per step the run measured
(medians over the recent half of its step records, so warm-up is left out):

- ``gen_device_s``: generator-seconds of generation, ``G * dt - stall - idle`` (``G``
  generators over the step's wall time ``dt``, less what they spent waiting for weights or
  for work); ``G'`` generators take ``T_G = gen_device_s / G'``;
- ``learner_device_s``: the learner's busy seconds times its ``L`` devices; ``L'`` devices
  take ``T_L = learner_device_s / L'`` (linear data-parallel scaling);
- ``sync_s``: publishing the weights (constant: one broadcast whatever the split);
- ``eval_s``: what evaluations cost the learner (``learner_eval_s``), averaged over steps.

**Step time.** With ``k >= 2`` generation overlaps training through a queue of up to ``k``
batches, and the slower side sets the pace; with ``k = 1`` the generator may run one version
ahead only, so every step both roles run side by side and then wait for each other; with
``k = 0`` (on-policy, ``sync``) they alternate:

    T = max(T_G, T_L + sync + eval)            (k >= 2)
    T = E[max(T_G,i, T_L,i + sync + eval)]     (k = 1)
    T = T_G + T_L + sync + eval                (k = 0)

The ``k = 1`` expectation treats each step's role times as independent normals, means
``T_G``, ``T_L`` and the standard deviations of the run's per-step generator-seconds and
learner device-seconds divided by ``G'`` and ``L'``, and takes Clark's (1961) expected maximum
``mu_G Phi(d) + mu_L Phi(-d) + theta phi(d)``, ``theta = sqrt(s_G^2 + s_L^2)``, ``d = (mu_G -
mu_L) / theta``: a one-batch buffer cannot absorb the jitter of the two roles, and the loss is
largest where they are balanced (``theta phi(0) = 0.4 theta`` there). Measured on two cores
(``bench/plan_split.py``): k = 1 ran 7-18% slower than k = 2 on balanced runs, which the
deterministic ``max`` did not see. Deeper queues (``k >= 2``) are taken to absorb it.

**Staleness.** In steady state a generator-bound run trains each batch in the step after
the one it was generated under: lag 1. A learner-bound run's generators run ahead until
the k bound stops them, so every batch waits in the queue to lag ``k``. Where ``T_G`` is
close to ``T_L + sync + eval`` the queue fills slowly and both happen; the model
interpolates the share at lag ``k`` linearly in ``rho = T_G / (T_L + sync + eval)``, from 0
at ``rho = 1`` to 1 at ``rho = 1 - 1/k`` (an assumption, not derived: the records' own
``staleness_hist`` is reported beside it). The lag is an integer distribution ``{lag: share}``.

**Other splits.** The same devices split as ``G' + L' = G + L``, another ``k``, or more
devices of the same kind: every split is predicted by the formulas above, and the one with
the most steps per hour (fewest devices, then least staleness, on ties) reaches any target
soonest, because a target is a number of steps: the law's compute maps to steps through the
run's own compute per step, and a split changes the time per step, not what a step learns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from scalerl.fit.errors import CurveError
from scalerl.runfolder import (
    GENERATOR_IDLE,
    GENERATOR_STALL,
    LEARNER_BUSY,
    LEARNER_EVAL,
    PUBLISH,
    STALENESS_HIST,
    STEP,
    SYNC,
    TOTAL_GEN_TOKENS,
    TOTAL_TRAINED_TOKENS,
    WALL,
    old_name,
)

__all__ = ["RoleTimes", "Split", "expected_max", "predict", "recommend", "role_times", "splits"]


@dataclass(frozen=True)
class RoleTimes:
    """Per-step costs of one run (module docstring), measured at ``generators`` +
    ``learner_devices`` and ``k``."""

    gen_device_s: float
    learner_device_s: float
    sync_s: float
    eval_s: float
    generators: int
    learner_devices: int
    k: int
    gen_tokens: float = 0.0  # generated per step
    train_tokens: float = 0.0  # trained per step
    measured_step_s: float = float("nan")  # mean wall seconds per step
    measured_staleness: dict = field(default_factory=dict)  # {lag: share} from the records
    gen_device_sd: float = 0.0  # sd of the per-step generator-seconds
    learner_device_sd: float = 0.0  # sd of the per-step learner device-seconds

    @property
    def devices(self) -> int:
        return self.generators + self.learner_devices

    @property
    def gen_tokens_per_s(self) -> float:
        """Tokens per second of one generator while it generates."""
        return self.gen_tokens / self.gen_device_s if self.gen_device_s > 0 else float("nan")

    @property
    def learner_tokens_per_s(self) -> float:
        """Trained tokens per second of one learner device."""
        return self.train_tokens / self.learner_device_s if self.learner_device_s > 0 else float("nan")

    def to_dict(self) -> dict:
        return {"gen_device_s": self.gen_device_s, "learner_device_s": self.learner_device_s,
                "sync_s": self.sync_s, "eval_s": self.eval_s, "generators": self.generators,
                "learner_devices": self.learner_devices, "k": self.k,
                "gen_tokens_per_s_per_generator": self.gen_tokens_per_s,
                "learner_tokens_per_s_per_device": self.learner_tokens_per_s,
                "measured_step_s": self.measured_step_s, "gen_device_sd": self.gen_device_sd,
                "learner_device_sd": self.learner_device_sd,
                "measured_staleness": {str(k): v for k, v in self.measured_staleness.items()}}  # fmt: skip


@dataclass(frozen=True)
class Split:
    """The model's prediction for ``generators`` + ``learner_devices`` at lag bound ``k``."""

    generators: int
    learner_devices: int
    k: int
    step_s: float
    bottleneck: str  # "generation" or "learner"
    staleness: dict  # {lag: share}

    @property
    def steps_per_hour(self) -> float:
        return 3600.0 / self.step_s

    @property
    def mean_staleness(self) -> float:
        return float(sum(lag * share for lag, share in self.staleness.items()))

    def to_dict(self) -> dict:
        return {"generators": self.generators, "learner_devices": self.learner_devices, "k": self.k,
                "step_s": self.step_s, "steps_per_hour": self.steps_per_hour, "bottleneck": self.bottleneck,
                "staleness": {str(k): v for k, v in self.staleness.items()},
                "mean_staleness": self.mean_staleness}  # fmt: skip


def expected_max(mu_a: float, sd_a: float, mu_b: float, sd_b: float) -> float:
    """``E[max(a, b)]`` of independent normals (Clark 1961; ``max`` of the means without spread)."""
    theta = float(np.hypot(sd_a, sd_b))
    if theta == 0.0:
        return max(mu_a, mu_b)
    d = (mu_a - mu_b) / theta
    return float(mu_a * stats.norm.cdf(d) + mu_b * stats.norm.cdf(-d) + theta * stats.norm.pdf(d))


def predict(times: RoleTimes, generators: int, learner_devices: int, k: int) -> Split:
    """Step time, bottleneck and staleness of one split (module docstring)."""
    if generators < 1 or learner_devices < 1 or k < 0:
        raise CurveError(f"a split needs at least one generator and one learner device and k >= 0, got "
                         f"{generators} + {learner_devices} at k={k}.")  # fmt: skip
    t_gen = times.gen_device_s / generators
    t_learn = times.learner_device_s / learner_devices + times.sync_s + times.eval_s
    bottleneck = "generation" if t_gen >= t_learn else "learner"
    if k == 0:
        return Split(generators, learner_devices, 0, t_gen + t_learn, bottleneck, {0: 1.0})
    if k == 1:
        step = expected_max(t_gen, times.gen_device_sd / generators, t_learn, times.learner_device_sd / learner_devices)
    else:
        step = max(t_gen, t_learn)
    rho = t_gen / t_learn if t_learn > 0 else np.inf
    low = 1.0 - 1.0 / k  # below it the queue fills to k within a step's slack
    share_k = 1.0 if k == 1 else float(np.clip((1.0 - rho) / (1.0 - low), 0.0, 1.0))
    staleness = {1: 1.0} if k == 1 else {lag: s for lag, s in ((1, 1.0 - share_k), (k, share_k)) if s > 0}
    return Split(generators, learner_devices, k, step, bottleneck, staleness)


def splits(times: RoleTimes, devices: int | None = None, k: int | None = None) -> list[Split]:
    """Every split of ``devices`` (default: the run's) into generators and learner devices."""
    devices = times.devices if devices is None else devices
    k = times.k if k is None else k
    if devices < 2:
        raise CurveError(f"a split needs at least 2 devices (a generator and a learner), got {devices}.")
    return [predict(times, g, devices - g, k) for g in range(1, devices)]


def recommend(options: list[Split]) -> Split:
    """The split with the most steps per hour; ties: fewer devices, then less staleness."""
    return min(options, key=lambda s: (round(s.step_s, 12), s.generators + s.learner_devices, s.mean_staleness))


def _total(record: dict, key: str) -> float:
    """A cumulative token count under its current name, or the name runs before issue 29
    wrote (``scalerl.runfolder.RENAMED``: ``fit`` reads logs as written, not through the
    trainer's ``metrics.read_records``)."""
    return float(record.get(key, record.get(old_name(key), 0)) or 0)


def role_times(records: list[dict], *, generators: int, learner_devices: int, k: int, source: str) -> RoleTimes:
    """``RoleTimes`` from a run's metrics records (step records carry ``learner_busy_s``); the
    keys are the trainer's own (``scalerl.runfolder``)."""
    steps = [r for r in records if isinstance(r.get(LEARNER_BUSY), int | float) and isinstance(
        r.get(WALL), int | float)]  # fmt: skip
    if len(steps) < 2:
        raise CurveError(f"{source} has {len(steps)} step records with role times ({LEARNER_BUSY}, {WALL}); "
                         "the throughput model needs at least 2.")  # fmt: skip
    steps = steps[min(len(steps) // 2, len(steps) - 2):]  # the recent half, at least two
    prev = [r for r in records if isinstance(r.get(WALL), int | float)]
    walls = {id(r): i for i, r in enumerate(prev)}
    dt, gen, toks, trained = [], [], [], []
    for r in steps:
        i = walls[id(r)]
        if i == 0:
            continue
        before = prev[i - 1]
        d = float(r[WALL]) - float(before[WALL])
        dt.append(d)
        waiting = float(r.get(GENERATOR_STALL) or 0.0) + float(r.get(GENERATOR_IDLE) or 0.0)
        gen.append(max(generators * d - waiting, 0.0))
        toks.append(_total(r, TOTAL_GEN_TOKENS) - _total(before, TOTAL_GEN_TOKENS))
        trained.append(_total(r, TOTAL_TRAINED_TOKENS) - _total(before, TOTAL_TRAINED_TOKENS))
    hist: dict[int, float] = {}
    for r in steps:
        for lag, n in (r.get(STALENESS_HIST) or {}).items():
            hist[int(lag)] = hist.get(int(lag), 0.0) + float(n)
    total = sum(hist.values())
    evals = sum(float(r.get(LEARNER_EVAL) or 0.0) for r in records if r.get(STEP, 0) >= steps[0].get(STEP, 0))
    busy = [float(r[LEARNER_BUSY]) * learner_devices for r in steps]
    return RoleTimes(
        gen_device_s=float(np.median(gen)),
        learner_device_s=float(np.median([float(r[LEARNER_BUSY]) for r in steps])) * learner_devices,
        sync_s=float(np.median([float(r.get(PUBLISH) or r.get(SYNC) or 0.0) for r in steps])),
        eval_s=evals / len(steps), generators=generators, learner_devices=learner_devices, k=k,
        gen_tokens=float(np.median(toks)), train_tokens=float(np.median(trained)),
        measured_step_s=float(np.mean(dt)),
        measured_staleness={lag: n / total for lag, n in sorted(hist.items())} if total else {},
        gen_device_sd=float(np.std(gen, ddof=1)) if len(gen) > 1 else 0.0,
        learner_device_sd=float(np.std(busy, ddof=1)) if len(busy) > 1 else 0.0,
    )  # fmt: skip
