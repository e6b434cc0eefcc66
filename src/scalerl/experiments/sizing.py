"""Is an adaptive study big enough to decide? Checked on the first point's first rung, before
the other points train.

A rung decides only where every point has a forecast there, and a forecast needs
``MIN_EVALS`` evaluations. A budget whose first rung is shorter than a few steps and
evaluations cannot hold them: a study at 0.05 core-hours a point, where one step cost 0.03 and
an evaluation of every held-out prompt 0.02, passed three rungs in one step and ended "tied"
on points never forecast. So the first point trains its first rung alone, and its records
give the measured costs (``Costs.of``): a step's compute (the median of its steps'
increments) and an evaluation's (its ``eval_s`` on the run's devices). The budget that
decides is the one whose first rung holds ``CADENCE_EVALS`` evaluations spaced so that
evaluation takes at most ``eval.share`` of the compute:

    gap = max(1, ceil(e (1 - share) / (share s)))   steps between evaluations,
    first rung >= CADENCE_EVALS (gap s + e),          budget = first rung x budget / first rung.

A smaller budget is one sentence with that budget, and exit 2, unless ``--force``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scalerl.config import ConfigError
from scalerl.runfolder import COMPUTE, VAL_PASS_RATE, number

__all__ = ["Costs", "StudyTooSmall", "check_size"]


class StudyTooSmall(ConfigError):
    """An adaptive budget whose rungs cannot hold a forecast (the module docstring)."""


@dataclass(frozen=True)
class Costs:
    """What one step and one evaluation cost in compute, measured on a run's records."""

    step: float
    evaluation: float
    steps: int  # the steps measured
    point: str

    @classmethod
    def of(cls, records: list[dict], devices: float, point: str) -> Costs | None:
        """From a run's records (None with fewer than one step): a step's compute is the
        median increment; an evaluation's, its wall seconds (``eval_s``) on ``devices``."""
        c = [(int(r["step"]), v) for r in records if (v := number(r, COMPUTE)) is not None and "step" in r]
        if len(c) < 2:
            return None
        inc = np.diff([v for _, v in c])
        evals = [s for r in records if r.get(VAL_PASS_RATE) is not None and (s := number(r, "eval_s")) is not None]
        e = float(np.median(evals)) * devices / 3600.0 if evals else 0.0
        return cls(float(np.median(inc)), e, len(c) - 1, point)

    def budget(self, share: float, evals: int, first_share: float) -> float:
        """The smallest budget whose first rung (``first_share`` of it) holds ``evals``
        evaluations at most ``share`` of its compute (the module docstring)."""
        gap = max(1, math.ceil(self.evaluation * (1.0 - share) / (share * self.step))) if self.step > 0 else 1
        return evals * (gap * self.step + self.evaluation) / first_share


def check_size(records: list[dict], devices: float, point: str, *, budget: float, first_rung: float,
               share: float, evals: int, force: bool, log) -> None:
    """Refuse (``StudyTooSmall``) a study whose first rung cannot hold ``evals`` evaluations at
    the costs measured on ``point``'s first rung, unless ``force``; say so either way."""
    costs = Costs.of(records, devices, point)
    if costs is None:
        return
    need = costs.budget(share, evals, first_rung / budget)
    if budget >= need * (1 - 1e-9):
        return
    n = sum(1 for r in records if r.get(VAL_PASS_RATE) is not None)
    text = (f"adaptive.budget = {budget:g} cannot decide here: {point}'s first rung ({first_rung:.4g} compute) "
            f"held {costs.steps} step(s) and {n} evaluation(s), at {costs.step:.3g} compute a step and "
            f"{costs.evaluation:.3g} an evaluation; a rung needs {evals} evaluations for a forecast, so the "
            f"budget must be about {need:.3g} or more (or evaluations cheaper: eval.num_prompts)")  # fmt: skip
    if not force:
        raise StudyTooSmall(text + "; --force runs it anyway.")
    log(f"{text}; running anyway (--force).")
