"""The core of the readers: the ``Curve`` every reader returns, the ``Columns`` a caller
asks for, column choice, and the checks every point passes.

Column choice (``x`` compute, ``y`` reward), matched exactly, then case-insensitively with
``/ - . space`` treated as ``_``:

- ``y`` default: the first of :data:`REWARD_COLUMNS` present.
- ``x`` default: the first of :data:`COMPUTE_COLUMNS` present (GPU-hours, as in the paper
  §1.7); when ``step_to_compute`` is given, the step column (:data:`STEP_COLUMNS`) times it.
- An explicit ``x`` together with ``step_to_compute`` multiplies that column by the factor.

Missing values (:data:`MISSING`: a blank, ``NaN``, ``null``) skip the row, in every format.
Checks done here need the line: unparsable or infinite values, negative or non-increasing
compute, reward outside [0, 1]; each is one sentence naming the file and the line.
Point-count and flat-curve checks belong to the fitter (``fit_sigmoid``); callers prefix its
message with :attr:`Curve.source`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scalerl.fit.errors import CurveError

__all__ = ["COMPUTE_COLUMNS", "REWARD_COLUMNS", "RUN_COLUMNS", "STEP_COLUMNS", "TRAIN_REWARD_COLUMNS", "Choice", "Columns", "Curve",
           "build", "empty", "find_column", "run_name"]  # fmt: skip

COMPUTE_COLUMNS = ("compute", "gpu_hours", "compute_gpu_hours", "gpu_hour", "compute_gpu_h")
REWARD_COLUMNS = (
    "val_pass_rate",
    "pass_rate",
    "val_reward",
    "eval_pass_rate",
    "validation_pass_rate",
    "reward",
)
TRAIN_REWARD_COLUMNS = ("train_reward", "reward_mean", "train/reward", "train_reward_mean", "reward")
# (another trainer's own names come first where its log is detected: ``trainers.TRAINERS``)
"""The training reward (the validation curve's companion, ``fit.companion``): the corpus's
and TRL's per-evaluation name, ``scalerl train``'s step records', a TensorBoard tag, and
TRL's own ``reward`` (used only where it is not the validation's column)."""
STEP_COLUMNS = ("step", "global_step", "_step", "steps", "iteration")
RUN_COLUMNS = ("run", "run_name")
GENERIC_STEMS = ("metrics", "log", "logs", "progress", "history", "scalars", "eval")


@dataclass(frozen=True, eq=False)
class Curve:
    """One run's validation curve: reward (pass rate) against training compute."""

    name: str
    compute: np.ndarray  # (N,) strictly increasing, >= 0
    reward: np.ndarray  # (N,) in [0, 1]
    source: str  # file (and run) it came from, for messages
    x: str = "compute"  # column the compute came from (axis label)
    y: str = "reward"  # column the reward came from (axis label)
    lines: tuple[int, ...] = field(default=(), repr=False)  # source line (or step) per point

    def __len__(self) -> int:
        return int(self.compute.shape[0])

    @property
    def log(self) -> Path:
        """The file the curve was read from (``source`` less its `` [run]`` suffix)."""
        return Path(self.source.split(" [")[0])

    def head(self, max_compute: float) -> Curve:
        """The points with compute <= ``max_compute`` (a budget prefix)."""
        keep = self.compute <= max_compute
        return Curve(
            self.name,
            self.compute[keep],
            self.reward[keep],
            self.source,
            self.x,
            self.y,
            tuple(np.asarray(self.lines)[keep].tolist()) if self.lines else (),
        )


def run_name(path: Path) -> str:
    """The file's stem, or its folder's name for generic log names (``run7/metrics.jsonl``)."""
    generic = path.stem.lower() in GENERIC_STEMS and path.parent.name
    return path.parent.name if generic else path.stem


def _norm(name: str) -> str:
    return re.sub(r"[\s/\-.]+", "_", name.strip()).lower()


def find_column(columns: Sequence[str], wanted: str | Sequence[str]) -> str | None:
    """The column matching ``wanted`` (one name or a preference list), or None."""
    names = [wanted] if isinstance(wanted, str) else list(wanted)
    for name in names:
        if name in columns:
            return name
    normed = {_norm(c): c for c in columns}
    for name in names:
        if _norm(name) in normed:
            return normed[_norm(name)]
    return None


@dataclass(frozen=True)
class Columns:
    """Which columns a reader takes, one value instead of four threaded arguments.

    ``x`` compute column (None: the first of ``COMPUTE_COLUMNS``, or the step column when
    ``step_to_compute`` is given); ``y`` reward column (None: the first of ``REWARD_COLUMNS``);
    ``step_to_compute`` multiplies the x column (compute per step); ``bounded``: rewards are
    pass rates in [0, 1].
    """

    x: str | None = None
    y: str | None = None
    step_to_compute: float | None = None
    bounded: bool = True
    trainer: str | None = None  # another trainer's names first (``trainers.TRAINERS``; None: detected)

    def choose(self, columns: Sequence[str], where: str) -> Choice:
        """The columns of one table (``where`` names it in messages)."""
        return _choose(columns, where, self.x, self.y, self.step_to_compute, self.bounded, self.trainer)


@dataclass(frozen=True)
class Choice:
    """Resolved column names for one table."""

    x: str
    y: str
    factor: float  # compute = column value * factor
    bounded: bool = True


def _choose(columns, where, x, y, step_to_compute, bounded, trainer=None) -> Choice:
    from scalerl.fit.readers.trainers import detect, first_match

    have = ", ".join(c for c in columns if c) or "(none)"
    names = detect(columns, trainer)
    y_col = first_match(columns, names.y) if names is not None and y is None else None
    y_col = y_col or find_column(columns, y if y is not None else REWARD_COLUMNS)
    if y_col is None and y is not None:  # a trainer's name pattern (``trainers``), e.g. verl's val-core/<source>/...
        y_col = first_match(columns, [y])
    if y_col is None:
        wanted = (
            f"reward column '{y}'" if y else "reward column (" + ", ".join(REWARD_COLUMNS) + ")"
        )
        raise CurveError(f"{where} has no {wanted}; its columns are: {have} (choose one with --y).")
    if x is not None:
        x_col = find_column(columns, x)
        if x_col is None:
            raise CurveError(f"{where} has no compute column '{x}'; its columns are: {have}.")
    elif step_to_compute is not None:
        x_col = find_column(columns, STEP_COLUMNS)
        if x_col is None:
            raise CurveError(
                f"{where} has no step column ({', '.join(STEP_COLUMNS)}) to scale by "
                f"--step-to-compute; its columns are: {have}."
            )
    else:
        x_col = find_column(columns, COMPUTE_COLUMNS)
        if x_col is None and names is not None:  # another trainer's log: its step is its x
            x_col = find_column(columns, names.step)
        if x_col is None:
            raise CurveError(
                f"{where} has no compute column ({', '.join(COMPUTE_COLUMNS)}); its columns "
                f"are: {have} (choose one with --x, or convert steps with --step-to-compute)."
            )
    factor = 1.0 if step_to_compute is None else float(step_to_compute)
    if not (math.isfinite(factor) and factor > 0):
        raise CurveError(f"step_to_compute must be a positive number, got {step_to_compute}.")
    return Choice(x_col, y_col, factor, bounded)


def _number(value: object, where: str, column: str) -> float:
    """Parse one cell; NaN, inf and non-numbers are errors naming the line."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CurveError(f"{where}: '{column}' is {value!r}, not a number.") from None
    if not math.isfinite(number):
        raise CurveError(f"{where}: '{column}' is {value!r}; NaN and inf are not allowed.")
    return number


MISSING = ("", "nan", "none", "null", "na", "n/a")
"""Cells that mean "no value here", case aside: a blank, and the words pandas, JSON and
spreadsheets write for a missing number. One policy for every format: a row whose reward is
missing is not an evaluation (sparse logs mix training rows in), so it is skipped; an
infinite value, or a word that is no number, is an error naming the line."""


def empty(value: object) -> bool:
    """Whether a cell holds no value (:data:`MISSING`, None, or a float NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return isinstance(value, str) and value.strip().lower() in MISSING


def build(
    name: str,
    source: str,
    choice: Choice,
    points: Iterable[tuple[str, int, object, object]],
    line_word: str = "line",
) -> Curve:
    """Validate (where, line, x, y) cells into a Curve; ``where`` names the file for messages."""
    compute: list[float] = []
    reward: list[float] = []
    lines: list[int] = []
    for where, line, x_cell, y_cell in points:
        if empty(y_cell):
            continue
        at = f"{where} {line_word} {line}"
        y_val = _number(y_cell, at, choice.y)
        if empty(x_cell) and not compute:
            x_cell = 0.0  # the first evaluation, before any compute was counted (step 0)
        if empty(x_cell):
            raise CurveError(f"{at}: has '{choice.y}' but no '{choice.x}' value.")
        x_val = _number(x_cell, at, choice.x) * choice.factor
        if x_val < 0:
            raise CurveError(f"{at}: compute '{choice.x}' is negative ({x_val:g}).")
        if compute and x_val <= compute[-1]:
            raise CurveError(
                f"{at}: compute '{choice.x}' = {x_val:g} does not increase "
                f"(previous point, {line_word} {lines[-1]}, has {compute[-1]:g})."
            )
        if choice.bounded and not 0.0 <= y_val <= 1.0:
            raise CurveError(
                f"{at}: reward '{choice.y}' = {y_val:g} is outside [0, 1], but the sigmoid "
                "law models a pass rate (rescale the reward first)."
            )
        compute.append(x_val)
        reward.append(y_val)
        lines.append(line)
    if not compute:
        raise CurveError(f"{source} has no rows with a '{choice.y}' value.")
    x_label = choice.x if choice.factor == 1.0 else f"{choice.x} x {choice.factor:g}"
    return Curve(name, np.array(compute), np.array(reward), source, x_label, choice.y, tuple(lines))
