"""Metric sinks: the JSONL file (always), TensorBoard and W&B (optional); the console's
progress display is ``scalerl.progress``.

``RUN_DIR/metrics.jsonl`` holds one JSON object per optimiser step (step 0 is the evaluation
of the starting policy, R0). Every record carries ``step``, ``compute_gpu_hours`` and
``flops``; evaluation steps add ``val_pass_rate``. ``docs/run-folder.md`` says what every key
counts, in which unit; ``scalerl.runfolder`` is the one table of the keys the trainer
writes and ``fit`` reads. Keys renamed since (``runfolder.RENAMED``) are read under their
current names: ``runfolder.read_records``, the one reader, renames them in the records it returns. ``scalerl fit
RUN_DIR/metrics.jsonl`` reads it as it is (``scalerl.fit.readers`` picks x = ``compute_gpu_hours``, y = ``val_pass_rate``
and skips records without a validation value).

Crash safety: each record is written with a single ``os.write`` on an ``O_APPEND`` descriptor
and fsynced, so a ``kill -9`` leaves whole lines only (a torn last line, should the OS ever
produce one, is dropped on resume). On resume, :func:`truncate_after` rewrites the file
atomically without the records past the checkpoint's step, so steps stay contiguous and unique.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from scalerl.forecast_figure import ForecastFigure, png_size
from scalerl.runfolder import VAL_PASS_RATE, read_records


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class JsonlSink:
    """Line-atomic appends of one JSON record per step."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({k: _clean(v) for k, v in record.items()}, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode())
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_evaluations(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics file that carry a validation pass rate, in order."""
    return [r for r in read_records(path) if r.get(VAL_PASS_RATE) is not None]


def truncate_after(path: Path, step: int) -> None:
    """Atomically keep only the records with ``step <= step`` (the resume point)."""
    path = Path(path)
    if not path.exists():
        return
    kept = [r for r in read_records(path) if int(r.get("step", -1)) <= step]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        handle.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in kept)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class TensorBoardSink:
    """Scalars under ``RUN_DIR/tb``: one event per record, written on the caller's thread.

    torch's ``SummaryWriter`` writes from a thread of its own: on a full disk that thread
    died with a 30-line ``OSError`` traceback before the run's own one-sentence error. Here
    a failed write raises in the run like any other (``scalerl train`` says ENOSPC in one
    sentence). A resumed run's first event is a ``SessionLog.START`` at ``start_step + 1``,
    so TensorBoard drops the events of the steps it writes again (as ``purge_step`` did).
    """

    _serial = itertools.count()  # two sinks opened in one second by one process get two files

    def __init__(self, directory: Path, start_step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.summary.writer.record_writer import RecordWriter

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(self._serial)}"
        self._file = open(directory / name, "wb")  # noqa: SIM115 - closed by close()
        self.figure = ForecastFigure()
        self._records = RecordWriter(self._file)
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if start_step:
            self._write(Event(wall_time=time.time(), step=start_step + 1,
                              session_log=SessionLog(status=SessionLog.START)))

    def write(self, record: dict[str, Any]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=key, simple_value=float(value)) for key, value in record.items()
                  if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)]
        png = self.figure.observe(record)
        if png is not None:  # the live forecast's picture, on the Images tab
            width, height = png_size(png)
            values.append(Summary.Value(tag="forecast", image=Summary.Image(
                height=height, width=width, colorspace=4, encoded_image_string=png)))
        self._write(Event(wall_time=time.time(), step=int(record["step"]), summary=Summary(value=values)))

    def write_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        """The samples as one Markdown text summary (TensorBoard's Text tab)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from torch.utils.tensorboard.summary import (
            text as text_summary,  # tensorboard's own needs tensorflow
        )

        text = "\n\n---\n\n".join(
            f"**reward {s['reward']}** ({s['finish_reason']})\n\n```\n{s['prompt']}{s['completion']}\n```"
            for s in samples)
        self._write(Event(wall_time=time.time(), step=step, summary=text_summary("samples", text)))

    def _write(self, event) -> None:
        self._records.write(event.SerializeToString())
        self._records.flush()

    def close(self) -> None:
        self._file.close()


class WandbSink:
    """Weights & Biases logging; ``wandb`` is imported only when this sink is asked for."""

    def __init__(self, project: str, name: str, config: dict[str, Any], run_dir: Path) -> None:
        try:
            import wandb
        except ImportError as err:
            raise RuntimeError("log.wandb is true but wandb is not installed (pip install 'scalerl[wandb]').") from err
        self.run = wandb.init(project=project, name=name, config=config, dir=str(run_dir), resume="allow")
        self.wandb = wandb
        self.figure = ForecastFigure()

    def write(self, record: dict[str, Any]) -> None:
        logged = {k: v for k, v in record.items() if k != "step"}
        png = self.figure.observe(record)
        if png is not None:  # the live forecast's picture
            from PIL import Image

            logged["forecast"] = self.wandb.Image(Image.open(io.BytesIO(png)))
        self.run.log(logged, step=int(record["step"]))

    def close(self) -> None:
        self.run.finish()


class SamplesSink:
    """``RUN_DIR/samples.jsonl``: what the model was given and what it wrote, a few samples
    per evaluation, one ``{"step", "prompt", "completion", "reward", "finish_reason",
    "evaluator"}`` a line (``prompt`` is the exact rendered text, template included)."""

    def __init__(self, path: Path) -> None:
        self.lines = JsonlSink(path)

    def write(self, record: dict[str, Any]) -> None:
        pass

    def write_samples(self, step: int, samples: list[dict[str, Any]]) -> None:
        for sample in samples:
            self.lines.write({"step": step, **sample})

    def close(self) -> None:
        self.lines.close()


class MetricsLogger:
    """Fans one record per step out to every configured sink; an evaluation's ``samples``
    go to the sinks that keep samples, never into the metrics."""

    def __init__(self, sinks: list) -> None:
        self.sinks = sinks

    def set_deadline(self, deadline: float | None) -> None:
        """Tell the sinks that show an ETA when (``time.monotonic()``) ``train.max_minutes``
        ends the run."""
        for sink in self.sinks:
            if hasattr(sink, "set_deadline"):
                sink.set_deadline(deadline)

    def write(self, record: dict[str, Any]) -> None:
        samples = record.pop("samples", None)
        for sink in self.sinks:
            sink.write(record)
            if samples and hasattr(sink, "write_samples"):
                sink.write_samples(int(record["step"]), samples)

    def close(self) -> None:
        """Close every sink, then raise the first failure (a full disk): one sink's error must
        not leave the next open (a progress bar would keep redrawing)."""
        failure = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as err:  # noqa: BLE001 - re-raised below, once all are closed
                failure = failure or err
        if failure is not None:
            raise failure
