"""Writers for curve files in every format ``scalerl.fit.readers`` reads (shared by fit tests).

TensorBoard files are written with tensorboard's own ``EventFileWriter`` and protos,
so no torch is involved.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np

from scalerl.fit.law import sigmoid

# Table 1 "ScaleRL" row; R0 a post-SFT start
TRUE = {"A": 0.610, "B": 1.92, "C_mid": 2542.0, "R0": 0.30}


def synthetic_curve(
    A=TRUE["A"],
    B=TRUE["B"],
    C_mid=TRUE["C_mid"],
    R0=TRUE["R0"],
    *,
    n=41,
    max_c=16000.0,
    noise=0.003,
    seed=0,
):
    """(compute (n,), reward (n,)) on Eq. 1 with Gaussian noise, step-0 point included."""
    compute = np.linspace(0.0, max_c, n)
    reward = sigmoid(compute, A, B, C_mid, R0)
    reward = reward + np.random.default_rng(seed).normal(0.0, noise, n)
    reward[0] = R0
    return compute, np.clip(reward, 0.0, 1.0)


def write_csv(path: Path, compute, reward, *, x="gpu_hours", y="val_pass_rate") -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", x, y])
        for i, (c, r) in enumerate(zip(compute, reward)):
            writer.writerow([i * 10, repr(float(c)), repr(float(r))])
    return path


def write_jsonl(path: Path, compute, reward) -> Path:
    """The trainer layout: training records between evaluation records."""
    with path.open("w") as handle:
        for i, (c, r) in enumerate(zip(compute, reward)):
            base = {"step": 10 * i, "compute_gpu_hours": float(c), "flops": float(c) * 3.6e18}
            handle.write(json.dumps({**base, "val_pass_rate": float(r)}) + "\n")
            train = {"step": 10 * i + 5, "compute_gpu_hours": float(c) + 1e-3, "loss": 0.1}
            handle.write(json.dumps(train) + "\n")
    return path


def write_tb_events(logdir: Path, events, *, tensor_form=False) -> Path:
    """An event file of ``(step, tag, value)`` scalars.

    ``tensor_form``: scalars as TF2 writes them (a float tensor with the "scalars" plugin
    tag) instead of the TF1 / torch ``simple_value``.
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def value(tag, x):
        if not tensor_form:
            return summary_pb2.Summary.Value(tag=tag, simple_value=float(x))
        plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[float(x)])
        metadata = summary_pb2.SummaryMetadata(plugin_data=plugin)
        return summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)

    writer = EventFileWriter(str(logdir))
    for step, tag, x in events:
        summary = summary_pb2.Summary(value=[value(tag, x)])
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary))
    writer.close()
    return logdir


def write_tensorboard(
    logdir: Path, compute, reward, *, y_tag="val/pass_rate", tensor_form=False
) -> Path:
    """``compute_gpu_hours`` and ``y_tag`` logged together every 10 steps."""
    events = []
    for i, (c, r) in enumerate(zip(compute, reward)):
        events += [(10 * i, "compute_gpu_hours", c), (10 * i, y_tag, r)]
    return write_tb_events(logdir, events, tensor_form=tensor_form)


def write_wandb_csv(
    path: Path, runs: dict[str, tuple[np.ndarray, np.ndarray]], *, metric="val/pass_rate"
):
    """A W&B chart export: ``Step`` plus ``<run> - <metric>`` and ``__MIN``/``__MAX`` columns.

    Runs share the Step column; a run's cells are empty where it has no point.
    """
    steps = sorted({10 * i for _, r in runs.values() for i in range(len(r))})
    header = ["Step"]
    for name in runs:
        header += [f"{name} - {metric}", f"{name} - {metric}__MIN", f"{name} - {metric}__MAX"]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for step in steps:
            row = [step]
            for _, reward in runs.values():
                i = step // 10
                cell = repr(float(reward[i])) if i < len(reward) else ""
                row += [cell, cell, cell]
            writer.writerow(row)
    return path
