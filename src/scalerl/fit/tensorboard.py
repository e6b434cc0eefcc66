"""TensorBoard event files as curves (``scalerl.fit.io`` dispatches here).

A file named ``*tfevents*`` or a directory holding them: scalar tags are the columns; the
x tag is joined to the reward tag by step (linear interpolation in step where the x tag was
logged at other steps). TensorBoard's own reader does the parsing, imported lazily.

A file whose last record is cut short (a run killed mid-write, a partial copy) is read up
to its last whole record, with a :class:`~scalerl.fit.errors.CurveWarning` that says so
(the CLI prints it as one line on stderr); TensorBoard's reader would skip the torn tail
silently.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import numpy as np

from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.io import Curve, _build, _choose


def _tb_scalars(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """tag -> (steps, values), merged over every event file of a run directory.

    A restarted run (or an evaluator writing its own file) leaves several event files in
    one directory, whose steps overlap. Files are read one by one in name order (their
    names start with the write time) and merged by step, the later file winning; within a
    file, too, a step logged twice keeps its last value.
    """
    files = sorted(p for p in path.iterdir() if "tfevents" in p.name) if path.is_dir() else [path]
    merged: dict[str, dict[int, float]] = {}
    for file in files:
        for tag, (steps, values) in _tb_file_scalars(file).items():
            merged.setdefault(tag, {}).update(zip(steps.tolist(), values.tolist()))
    out = {}
    for tag, by_step in merged.items():
        steps = np.array(sorted(by_step))
        out[tag] = (steps, np.array([by_step[s] for s in steps.tolist()]))
    return out


def torn_tail(path: Path) -> tuple[int, int]:
    """``(whole records, bytes after them)`` of a TFRecord file, by its framing alone: each
    record is a little-endian u64 length, a u32 CRC, the data and another u32 CRC."""
    size, offset, records = path.stat().st_size, 0, 0
    with path.open("rb") as handle:
        while offset + 12 <= size:
            handle.seek(offset)
            (length,) = struct.unpack("<Q", handle.read(8))
            if offset + 16 + length > size:
                break
            offset += 16 + length
            records += 1
    return records, size - offset


def _warn_if_torn(path: Path) -> None:
    records, torn = torn_tail(path)
    if torn:
        warnings.warn(
            f"{path}: the last {torn} bytes are a record cut short (the file is truncated, or still "
            f"being written); read the {records} whole records before them.",
            CurveWarning,
            stacklevel=2,
        )


def _tb_file_scalars(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """tag -> (steps, values) of one event file (TF1 simple_value and TF2 tensor form)."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as err:  # the library raises assorted errors on corrupt files
        raise CurveError(f"{path} is not a readable TensorBoard event file ({err}).") from None
    _warn_if_torn(path)
    tags = acc.Tags()
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for tag in tags.get("scalars", []):
        events = acc.Scalars(tag)
        out[tag] = (np.array([e.step for e in events]), np.array([e.value for e in events]))
    for tag in tags.get("tensors", []):
        events = acc.Tensors(tag)
        try:
            values = [float(np.asarray(tensor_util.make_ndarray(e.tensor_proto))) for e in events]
        except (TypeError, ValueError):
            continue  # not a scalar tensor
        out.setdefault(tag, (np.array([e.step for e in events]), np.array(values)))
    return out


def read_tensorboard(
    path: Path, *, x=None, y=None, step_to_compute=None, bounded=True
) -> list[Curve]:
    """One curve from an event file or a directory of them (TensorBoard's own reader)."""
    scalars = _tb_scalars(path)
    if not scalars:
        raise CurveError(f"{path} has no scalar summaries.")
    columns = list(scalars) + ["step"]
    choice = _choose(columns, str(path), x, y, step_to_compute)
    y_steps, y_values = scalars[choice.y]
    if choice.x == "step" and choice.x not in scalars:
        x_values = y_steps.astype(float)
    else:
        x_steps, x_raw = scalars[choice.x]
        order = np.argsort(x_steps, kind="stable")
        x_steps, x_raw = x_steps[order], x_raw[order]
        outside = (y_steps < x_steps[0]) | (y_steps > x_steps[-1])
        if outside.any():
            step = int(y_steps[outside][0])
            raise CurveError(
                f"{path} step {step}: '{choice.y}' was logged but '{choice.x}' was not "
                f"logged at or around that step."
            )
        # exact where logged at the same step; linear in step between logged steps otherwise
        x_values = np.interp(y_steps, x_steps, x_raw)
    name = path.parent.name if path.is_file() else path.name
    points = ((str(path), int(s), xv, yv) for s, xv, yv in zip(y_steps, x_values, y_values))
    return [_build(name or str(path), str(path), choice, points, "step", bounded)]
