"""Evaluations planned for the forecast: which steps a run validates at, so that its first
forecast comes early in its budget, whatever that budget turns out to be.

A forecast needs :data:`~scalerl.fit.forecast.states.MIN_EVALS` evaluations. Every
``eval.every`` steps, the sixth comes at step ``5 * every`` (250 at 50): after a 3-minute run
has ended. The law is in ``log C``, so the plan is **geometric**: step 0, then

    s_1 = first,   s_{i+1} = max(s_i + 1, round(first * ratio^i)),

until the gap would reach ``every``; after that every multiple of ``every`` (more than half a
gap past the last geometric step). A geometric plan is scale-free: for any budget ``S`` at
least ``first * ratio^4 / FIRST_SHARE`` steps its sixth evaluation comes by ``FIRST_SHARE``
of ``S`` (the shares of a run end that a time limit decides are unknown at the start, and this
holds for them too), and some evaluation falls in every ``[x, ratio * x]`` below the cap, so
"not learning", said at the first evaluation past ``train.no_rise_after`` of the budget, comes
by ``ratio`` times that share. ``first`` "auto" is the largest step up to ``FIRST_MAX`` whose
plan has its sixth evaluation by ``FIRST_SHARE`` of ``train.steps``.

``schedule: every`` is the old plan: every ``every`` steps. The run's last step is always
evaluated (``pipeline.steps``), and a study adds its own evaluations in compute
(``eval.every_compute``). The defaults live in the config (``eval.*``); this module is the
one place the plan is computed from them, for the trainer, the forecast's "about step N" and
the start-of-run line alike, and reads a run folder's ``config.yaml`` the same way
(:func:`from_config`; a config written before plans had ``schedule`` has the old one).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from scalerl.fit.forecast.states import MIN_EVALS
from scalerl.runfolder import number, section, setting

__all__ = ["FIRST_MAX", "FIRST_SHARE", "EvalPlan", "from_config"]

FIRST_SHARE = 0.15
"""The share of ``train.steps`` by which "auto" puts the sixth evaluation: below the 20% a
user should have a forecast by, with room for a run that the time limit ends sooner."""
FIRST_MAX = 10
"""The latest first evaluation "auto" picks: the first evaluations before any learning show
little, and a plan for a long run needs no earlier one."""


@dataclass(frozen=True)
class EvalPlan:
    """The steps a run of ``steps`` steps validates at (module docstring)."""

    steps: int
    every: int
    schedule: str  # "geometric" or "every"
    first: int | None  # None: "auto"
    ratio: float

    @cached_property
    def first_step(self) -> int:
        """``first`` resolved: "auto" is the largest step up to ``FIRST_MAX`` whose plan has its
        sixth evaluation by ``FIRST_SHARE`` of the steps (1 where none has)."""
        if self.first is not None:
            return int(self.first)
        for first in range(FIRST_MAX, 0, -1):
            if _geometric(first, self.ratio, self.every, self.steps)[: MIN_EVALS][-1] <= FIRST_SHARE * self.steps:
                return first
        return 1

    @cached_property
    def planned(self) -> np.ndarray:
        """(n,) every planned evaluation step up to ``steps``, 0 and the last step included."""
        if self.schedule == "every":
            out = np.arange(0, self.steps + 1, self.every)
        else:
            out = _geometric(self.first_step, self.ratio, self.every, self.steps)
        return np.unique(np.append(out, self.steps)).astype(int)

    def evaluates(self, step: int) -> bool:
        """Whether ``step`` is a planned evaluation (one past ``steps``, a resume that raised
        them, follows the same rule)."""
        if self.schedule == "every" or step > self.steps:
            return step % self.every == 0 or step == self.steps
        i = int(np.searchsorted(self.planned, step))
        return i < self.planned.size and int(self.planned[i]) == step

    def nth(self, n: int) -> int | None:
        """The step of the ``n``-th evaluation (1: step 0), None past the plan."""
        return int(self.planned[n - 1]) if 1 <= n <= self.planned.size else None

    def first_at_or_after(self, step: float) -> int | None:
        """The first planned evaluation at or after ``step``, None past the plan."""
        i = int(np.searchsorted(self.planned, step - 1e-9))
        return int(self.planned[i]) if i < self.planned.size else None

    @property
    def first_forecast(self) -> int | None:
        """The step whose evaluation is the forecast's ``MIN_EVALS``-th."""
        return self.nth(MIN_EVALS)

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "every": self.every, "first": self.first_step, "ratio": self.ratio,
                "evaluations": int(self.planned.size), "first_forecast_step": self.first_forecast}  # fmt: skip


def _geometric(first: int, ratio: float, every: int, steps: int) -> np.ndarray:
    """Step 0, the geometric steps while their gap stays below ``every``, then the multiples of
    ``every`` more than half a gap past the last of them, up to ``steps``."""
    out, target = [0], float(first)
    while True:
        nxt = max(out[-1] + 1, int(round(target)))
        if nxt - out[-1] >= every or nxt > steps:
            break
        out.append(nxt)
        target *= ratio
    start = (out[-1] + every // 2) // every + 1
    tail = np.arange(start, steps // every + 1) * every
    return np.asarray(out + [int(s) for s in tail if s > out[-1]], dtype=int)


def from_config(config: dict) -> EvalPlan | None:
    """The plan of a run folder's ``config.yaml`` (its ``eval.*`` and ``train.steps``), None
    where it does not say (a log from another trainer)."""
    steps, every = setting(config, "train", "steps"), setting(config, "eval", "every")
    if not isinstance(steps, int | float) or not isinstance(every, int | float) or steps < 1 or every < 1:
        return None
    ev = section(config, "eval")
    schedule = ev.get("schedule", "every")  # written before plans: every eval.every steps
    if schedule == "every":
        return EvalPlan(int(steps), int(every), "every", None, 1.0)
    first, ratio = number(ev, "first"), number(ev, "ratio")
    if schedule != "geometric" or ratio is None or not 1.0 < ratio <= 4.0:
        return None
    return EvalPlan(int(steps), int(every), schedule, None if first is None or first < 1 else int(first), ratio)
