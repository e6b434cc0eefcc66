"""TensorBoard event files as curves (``read_curves`` sends ``*tfevents*`` files and folders here).

A file named ``*tfevents*`` or a directory holding them: scalar tags are the columns; the
x tag is joined to the reward tag by step (linear interpolation in step where the x tag was
logged at other steps). TensorBoard's own reader does the parsing, imported lazily.

A file whose last record is cut short (a run killed mid-write, a partial copy) is read up
to its last whole record, and a file with corrupt records mid-file (a flipped byte, a
broken length field) is read around them (:mod:`scalerl.fit.readers.tfrecord` resyncs on the next
whole record), each with a :class:`~scalerl.fit.errors.CurveWarning` naming the file, the
byte and the record (the CLI prints it as one line on stderr); TensorBoard's reader would
stop at the first bad record silently, losing every point after it.
"""

from __future__ import annotations

import re
import tempfile
import warnings
from pathlib import Path

import numpy as np

import scalerl.fit.readers.tfrecord as tfrecord
from scalerl.fit.errors import CurveError, CurveWarning
from scalerl.fit.readers.cache import parsed
from scalerl.fit.readers.core import Columns, Curve, build

__all__ = ["read_tensorboard", "torn_tail"]


def _tb_scalars(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """tag -> (steps, values), merged over every event file of a run directory, parsed once
    per version of the folder or file (``cache``)."""
    return parsed(path, "tensorboard", lambda: _parse_tb_scalars(path))


def _parse_tb_scalars(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The scalars of :func:`_tb_scalars`.

    A restarted run (or an evaluator writing its own file) leaves several event files in
    one directory, whose steps overlap. Files are read one by one in the order they were
    written (:func:`written_order`) and merged by step, the later file winning; within a
    file, too, a step logged twice keeps its last value.
    """
    files = sorted((p for p in path.iterdir() if "tfevents" in p.name), key=written_order) if path.is_dir() else [path]
    merged: dict[str, dict[int, float]] = {}
    for file in files:
        for tag, (steps, values) in _tb_file_scalars(file).items():
            merged.setdefault(tag, {}).update(zip(steps.tolist(), values.tolist()))
    out = {}
    for tag, by_step in merged.items():
        steps = np.array(sorted(by_step))
        out[tag] = (steps, np.array([by_step[s] for s in steps.tolist()]))
    return out


def written_order(path: Path) -> list:
    """The sort key of an event file's name, ``events.out.tfevents.<seconds>.<host>.<pid>.<n>``:
    its numbers compared as numbers, so that two files a process opened in the same second
    keep the order of their counter ``n`` (as text, a tenth file's "10" sorts before "9")."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", path.name)]


def torn_tail(path: Path) -> tuple[int, int]:
    """``(whole records, bytes after the last one)`` of a TFRecord file, by its framing."""
    framing = tfrecord.scan(path.read_bytes())
    return len(framing.records), framing.tail


def _damage_warnings(path: Path, framing: tfrecord.Framing, size: int) -> None:
    """One warning per kind of loss, naming the file, the byte and the record."""
    if framing.damage:
        first, skipped = framing.damage[0], sum(d.skipped for d in framing.damage)
        warnings.warn(
            f"{path}: {len(framing.damage)} corrupt stretch(es) fail the CRC check, the first at byte "
            f"{first.offset} where record {first.record} starts; skipped {skipped} bytes in all (at least "
            f"{len(framing.damage)} record(s) lost) and read the {len(framing.records)} whole records "
            "around them.",
            CurveWarning,
            stacklevel=3,
        )
    if framing.torn:
        warnings.warn(
            f"{path}: the last {framing.tail} bytes are a record cut short (the file is truncated, or still "
            f"being written); read the {len(framing.records)} whole records before them.",
            CurveWarning,
            stacklevel=3,
        )
    elif framing.tail:
        record = len(framing.records) + len(framing.damage) + 1
        warnings.warn(
            f"{path}: record {record} at byte {size - framing.tail} is corrupt and no whole record follows "
            f"it; stopped there, so the last {framing.tail} bytes were not read.",
            CurveWarning,
            stacklevel=3,
        )


def _tb_file_scalars(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """tag -> (steps, values) of one event file, its damage warned about (see
    :mod:`scalerl.fit.readers.tfrecord`). TensorBoard's reader stops at the first bad record, so a
    damaged file is read as a copy of its whole records, in a temporary folder."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CurveError(f"{path} cannot be read ({err.strerror or err}).") from None
    framing = tfrecord.scan(data)
    _damage_warnings(path, framing, len(data))
    if not framing.damage:
        return _read_events(path, path)
    with tempfile.TemporaryDirectory(prefix="scalerl-tb-") as folder:
        whole = Path(folder) / path.name  # the name keeps "tfevents": the reader needs it
        whole.write_bytes(b"".join(data[offset : offset + size] for offset, size in framing.records))
        return _read_events(whole, path)


def _read_events(file: Path, path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """tag -> (steps, values) of ``file`` (TF1 simple_value and TF2 tensor form); messages
    name ``path``, the file the user gave."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(file), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        acc.Reload()
    except Exception as err:  # the library raises assorted errors on corrupt files
        raise CurveError(f"{path} is not a readable TensorBoard event file ({err}).") from None
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


def read_tensorboard(path: Path, columns: Columns) -> list[Curve]:
    """One curve from an event file or a directory of them (TensorBoard's own reader)."""
    scalars = _tb_scalars(path)
    if not scalars:
        raise CurveError(f"{path} has no scalar summaries.")
    choice = columns.choose(list(scalars) + ["step"], str(path))
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
    return [build(name or str(path), str(path), choice, points, "step")]
