"""Read validation curves (compute -> pass rate) from training logs.

Formats, picked by file name:

- ``*.csv`` (comma-separated) and ``*.tsv`` (tab-separated; ``scalerl.fit.csvlog``): one row per evaluation, a header
  row; leading lines starting with ``#`` are comments. Rows whose reward cell is empty are skipped (sparse logs that mix training
  and evaluation rows). A ``run`` / ``run_name`` column splits the file into one curve per run.
- W&B chart exports (``*.csv`` whose columns look like ``<run> - <metric>``, with
  ``__MIN`` / ``__MAX`` companions): one curve per run; the ``__MIN`` / ``__MAX`` columns
  (W&B's bucketing envelope) are ignored; the x column is the unprefixed one (``Step`` or
  the chart's x metric).
- ``*.jsonl`` / ``*.ndjson``: one JSON object per line, as ``scalerl train`` writes them
  (``{"step": 10, "compute_gpu_hours": 0.01, "flops": ..., "val_pass_rate": 0.31}``).
  Records without the reward field (training-step records) are skipped.
- TensorBoard event files (``scalerl.fit.tensorboard``; a file named ``*tfevents*`` or a
  directory holding them, several files of one run merged by step, the later file winning):
  scalar tags are the columns; the x tag is joined to the reward tag by step (linear
  interpolation in step where the x tag was logged at other steps).

Column choice (``x`` compute, ``y`` reward), matched exactly, then case-insensitively with
``/ - . space`` treated as ``_``:

- ``y`` default: the first of :data:`REWARD_COLUMNS` present.
- ``x`` default: the first of :data:`COMPUTE_COLUMNS` present (GPU-hours, as in the paper
  §1.7); when ``step_to_compute`` is given, the step column (:data:`STEP_COLUMNS`) times it.
- An explicit ``x`` together with ``step_to_compute`` multiplies that column by the factor.

Every problem raises :class:`~scalerl.fit.errors.CurveError` with one sentence naming the
file and the field or line, unreadable files included (binary or not UTF-8, a symbolic link
loop, a CSV cell over ``csv.field_size_limit()``, JSON nested past the parser's depth), and
so is a CSV that would lose data silently: a column named twice in the header, or a row
that does not split into the header's columns (another delimiter, extra cells). Checks done
here need the line: unparsable or NaN/inf values,
negative or non-increasing compute, reward outside [0, 1]. Point-count and flat-curve
checks belong to the fitter (``fit_sigmoid``); callers prefix its message with
:attr:`Curve.source`.
"""

from __future__ import annotations

import glob
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scalerl.fit.errors import CurveError

COMPUTE_COLUMNS = ("compute", "gpu_hours", "compute_gpu_hours", "gpu_hour", "compute_gpu_h")
REWARD_COLUMNS = (
    "val_pass_rate",
    "pass_rate",
    "val_reward",
    "eval_pass_rate",
    "validation_pass_rate",
    "reward",
)
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


def _run_name(path: Path) -> str:
    """The file's stem, or its folder's name for generic log names (``run7/metrics.jsonl``)."""
    generic = path.stem.lower() in GENERIC_STEMS and path.parent.name
    return path.parent.name if generic else path.stem


def _norm(name: str) -> str:
    return re.sub(r"[\s/\-.]+", "_", name.strip()).lower()


def _find_column(columns: Sequence[str], wanted: str | Sequence[str]) -> str | None:
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
class _Choice:
    """Resolved column names for one table."""

    x: str
    y: str
    factor: float  # compute = column value * factor


def _choose(
    columns: Sequence[str], where: str, x: str | None, y: str | None, step_to_compute: float | None
) -> _Choice:
    have = ", ".join(c for c in columns if c) or "(none)"
    y_col = _find_column(columns, y if y is not None else REWARD_COLUMNS)
    if y_col is None:
        wanted = (
            f"reward column '{y}'" if y else "reward column (" + ", ".join(REWARD_COLUMNS) + ")"
        )
        raise CurveError(f"{where} has no {wanted}; its columns are: {have} (choose one with --y).")
    if x is not None:
        x_col = _find_column(columns, x)
        if x_col is None:
            raise CurveError(f"{where} has no compute column '{x}'; its columns are: {have}.")
    elif step_to_compute is not None:
        x_col = _find_column(columns, STEP_COLUMNS)
        if x_col is None:
            raise CurveError(
                f"{where} has no step column ({', '.join(STEP_COLUMNS)}) to scale by "
                f"--step-to-compute; its columns are: {have}."
            )
    else:
        x_col = _find_column(columns, COMPUTE_COLUMNS)
        if x_col is None:
            raise CurveError(
                f"{where} has no compute column ({', '.join(COMPUTE_COLUMNS)}); its columns "
                f"are: {have} (choose one with --x, or convert steps with --step-to-compute)."
            )
    factor = 1.0 if step_to_compute is None else float(step_to_compute)
    if not (math.isfinite(factor) and factor > 0):
        raise CurveError(f"step_to_compute must be a positive number, got {step_to_compute}.")
    return _Choice(x_col, y_col, factor)


def _number(value: object, where: str, column: str) -> float:
    """Parse one cell; NaN, inf and non-numbers are errors naming the line."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CurveError(f"{where}: '{column}' is {value!r}, not a number.") from None
    if not math.isfinite(number):
        raise CurveError(f"{where}: '{column}' is {value!r}; NaN and inf are not allowed.")
    return number


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _build(
    name: str,
    source: str,
    choice: _Choice,
    points: Iterable[tuple[str, int, object, object]],
    line_word: str = "line",
    bounded: bool = True,
) -> Curve:
    """Validate (where, line, x, y) cells into a Curve; ``where`` names the file for messages."""
    compute: list[float] = []
    reward: list[float] = []
    lines: list[int] = []
    for where, line, x_cell, y_cell in points:
        at = f"{where} {line_word} {line}"
        if _empty(y_cell):
            continue
        y_val = _number(y_cell, at, choice.y)
        if _empty(x_cell) and not compute:
            x_cell = 0.0  # the first evaluation, before any compute was counted (step 0)
        if _empty(x_cell):
            raise CurveError(f"{at}: has '{choice.y}' but no '{choice.x}' value.")
        x_val = _number(x_cell, at, choice.x) * choice.factor
        if x_val < 0:
            raise CurveError(f"{at}: compute '{choice.x}' is negative ({x_val:g}).")
        if compute and x_val <= compute[-1]:
            raise CurveError(
                f"{at}: compute '{choice.x}' = {x_val:g} does not increase "
                f"(previous point, {line_word} {lines[-1]}, has {compute[-1]:g})."
            )
        if bounded and not 0.0 <= y_val <= 1.0:
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


# --- text files (the CSV reader, scalerl.fit.csvlog, uses these too) -------------------


def _not_binary(path: Path, head: bytes) -> None:
    if b"\0" in head:
        raise CurveError(f"{path} is not a text log: it holds binary data.")


def _not_utf8(path: Path, line: int, err: UnicodeDecodeError) -> CurveError:
    byte = err.object[err.start]
    return CurveError(f"{path} line {line} is not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8.")


def read_text(path: Path) -> str:
    """The file as text; binary data or bytes that are not UTF-8 are one sentence naming the line."""
    data = path.read_bytes()
    _not_binary(path, data[:8192])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, data[: err.start].count(b"\n") + 1, err) from None


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text with its newline) one line at a time, checked as :func:`read_text`."""
    with path.open("rb") as handle:
        _not_binary(path, handle.read(8192))
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise _not_utf8(path, number, err) from None


# --- JSONL ----------------------------------------------------------------------------


def read_jsonl(path: Path, *, x=None, y=None, step_to_compute=None, bounded=True) -> list[Curve]:
    """One curve per ``run`` value (or one for the file) from JSON-lines records.

    A last line without its newline that does not parse is a record still being written
    by a live run (the file is read while training appends to it): it is skipped.
    """
    records: list[tuple[int, dict]] = []
    for number, text in _text_lines(path):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            if not text.endswith("\n"):  # only the last line can lack it
                break  # a torn last record of a live run
            raise CurveError(f"{path} line {number} is not valid JSON ({err.msg}).") from None
        except RecursionError:
            raise CurveError(f"{path} line {number} is JSON nested too deeply to be a log record.") from None
        if not isinstance(record, dict):
            raise CurveError(f"{path} line {number} is not a JSON object.")
        records.append((number, record))
    if not records:
        raise CurveError(f"{path} is empty.")
    columns = list(dict.fromkeys(k for _, rec in records for k in rec))
    choice = _choose(columns, str(path), x, y, step_to_compute)
    run_col = _find_column(columns, RUN_COLUMNS)
    groups: dict[str, list[tuple[int, dict]]] = {}
    for number, rec in records:
        key = str(rec.get(run_col, _run_name(path))) if run_col else _run_name(path)
        groups.setdefault(key, []).append((number, rec))
    curves = []
    for run, members in groups.items():
        source = f"{path} [{run}]" if run_col else str(path)
        points = ((str(path), n, r.get(choice.x), r.get(choice.y)) for n, r in members)
        try:
            curves.append(_build(run, source, choice, points, bounded=bounded))
        except CurveError:
            if run_col and all(_empty(r.get(choice.y)) for _, r in members):
                continue  # a run (e.g. a trainer-only stream) without evaluations
            raise
    if not curves:
        raise CurveError(f"{path} has no records with a '{choice.y}' value.")
    return curves


# --- entry point ----------------------------------------------------------------------


def _is_tensorboard(path: Path) -> bool:
    if path.is_dir():
        return any("tfevents" in p.name for p in path.iterdir())
    return "tfevents" in path.name


def read_curves(
    path: str | Path, *, x=None, y=None, step_to_compute=None, bounded=True
) -> list[Curve]:
    """All curves in one file (or TensorBoard directory); the format follows the name."""
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise CurveError(f"{path} is a symbolic link that leads nowhere (a loop, or a missing target).")
        raise CurveError(f"{path} does not exist.")
    kwargs = dict(x=x, y=y, step_to_compute=step_to_compute, bounded=bounded)
    if _is_tensorboard(path):
        from scalerl.fit.tensorboard import read_tensorboard  # io's helpers, one way round

        return read_tensorboard(path, **kwargs)
    if path.is_dir():
        raise CurveError(f"{path} is a directory without TensorBoard event files.")
    if path.stat().st_size == 0:
        raise CurveError(f"{path} is empty.")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        from scalerl.fit.csvlog import read_csv  # io's helpers, one way round

        return read_csv(path, **kwargs)
    if suffix in (".jsonl", ".ndjson", ".json"):
        return read_jsonl(path, **kwargs)
    raise CurveError(
        f"{path} has an unknown format; use .csv (plain or W&B export), .jsonl, or a "
        "TensorBoard event file or directory."
    )


def _unique_names(curves: list[Curve]) -> list[Curve]:
    """Equal run names get the shortest folder path that tells them apart
    (``a/x/run.jsonl`` and ``b/x/run.jsonl`` become ``a/x/run`` and ``b/x/run``)."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(curves):
        groups.setdefault(c.name, []).append(i)
    names = [c.name for c in curves]
    for name, members in groups.items():
        if len(members) < 2:
            continue
        folders = [Path(curves[i].source.split(" [")[0]).resolve().parent.parts for i in members]
        for depth in range(1, max(len(f) for f in folders) + 1):
            labels = ["/".join(f[-depth:] + (name,)) for f in folders]
            if len(set(labels)) == len(labels):
                break
        for i, label in zip(members, labels):
            names[i] = label
    return [
        c if n == c.name else Curve(n, c.compute, c.reward, c.source, c.x, c.y, c.lines)
        for c, n in zip(curves, names)
    ]


def expand_paths(paths_or_globs: str | Path | Sequence[str | Path]) -> list[Path]:
    """Paths in the given order; glob patterns expand (sorted); a pattern matching nothing
    fails; a file named twice (say by a glob and by name) is read once."""
    items = [paths_or_globs] if isinstance(paths_or_globs, str | Path) else list(paths_or_globs)
    out: list[Path] = []
    for item in items:
        text = str(item)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise CurveError(f"no file matches {text}.")
            out.extend(Path(m) for m in matches)
        else:
            out.append(Path(text))
    seen: set[Path] = set()
    unique = []
    for path in out:
        try:
            key = path.resolve()
        except (OSError, RuntimeError):  # a symbolic link loop: read_curves names it
            key = path.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def load_runs(
    paths_or_globs: str | Path | Sequence[str | Path],
    *,
    x: str | None = None,
    y: str | None = None,
    step_to_compute: float | None = None,
    bounded: bool = True,
) -> list[Curve]:
    """Every curve in the given files, directories and glob patterns, in order."""
    curves: list[Curve] = []
    for path in expand_paths(paths_or_globs):
        curves.extend(read_curves(path, x=x, y=y, step_to_compute=step_to_compute, bounded=bounded))
    return _unique_names(curves)
