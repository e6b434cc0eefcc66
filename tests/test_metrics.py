"""The JSONL sink: whole lines, truncation on resume, and readable by ``scalerl fit`` as it is."""

from __future__ import annotations

import json

from scalerl.fit.readers import read_curves
from scalerl.metrics import JsonlSink, read_records, truncate_after


def _write_run(path, steps):
    sink = JsonlSink(path)
    for step in steps:
        record = {"step": step, "compute_gpu_hours": 0.001 * (step + 1), "flops": 1e9 * (step + 1),
                  "reward_mean": -0.5, "staleness_hist": {"0": 4}}
        if step % 2 == 0:
            record["val_pass_rate"] = 0.1 + 0.02 * step
        sink.write(record)
    sink.close()


def test_records_are_read_by_fit_io(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write_run(path, range(7))
    curve = read_curves(path)[0]
    # only evaluation records (steps 0, 2, 4, 6) carry the y column
    assert list(curve.compute) == [0.001, 0.003, 0.005, 0.007]
    assert list(curve.reward) == [0.1, 0.14, 0.18, 0.22]


def test_non_finite_values_become_null(tmp_path):
    sink = JsonlSink(tmp_path / "m.jsonl")
    sink.write({"step": 1, "grad_norm": float("nan")})
    sink.close()
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 1, "grad_norm": None}


def test_truncate_after_keeps_steps_up_to_the_checkpoint_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write_run(path, range(6))
    with open(path, "a") as handle:
        handle.write('{"step": 6, "compu')  # a line torn by a crash
    truncate_after(path, 3)
    assert [r["step"] for r in read_records(path)] == [0, 1, 2, 3]
    _write_run(path, range(4, 6))  # the resumed run appends after the cut
    assert [r["step"] for r in read_records(path)] == [0, 1, 2, 3, 4, 5]


def test_tensorboard_events_are_read_back_and_a_full_disk_raises_on_the_callers_thread(tmp_path):
    """A record's scalars are read by ``scalerl fit``'s reader; a write that fails with ENOSPC
    raises in the caller (torch's writer thread printed a traceback of its own first)."""
    import errno
    import threading

    import pytest

    from scalerl.metrics import MetricsLogger, TensorBoardSink

    threads = threading.active_count()
    sink = TensorBoardSink(tmp_path / "tb", 0)
    assert threading.active_count() == threads  # nothing writes behind the run's back
    for step in range(3):
        sink.write({"step": step, "compute_gpu_hours": 0.1 * (step + 1), "val_pass_rate": 0.2 * step, "ok": True})
    sink.close()
    (curve,) = read_curves(tmp_path / "tb")
    assert list(curve.reward) == pytest.approx([0.0, 0.2, 0.4])
    assert list(curve.compute) == pytest.approx([0.1, 0.2, 0.3])

    full = TensorBoardSink(tmp_path / "full", 0)

    def no_space(data):
        raise OSError(errno.ENOSPC, "No space left on device")

    full._file.write = no_space
    closed = []
    logger = MetricsLogger([full, type("Last", (), {"close": lambda self: closed.append(1)})()])
    with pytest.raises(OSError) as err:
        logger.write({"step": 1, "val_pass_rate": 0.5})
    assert err.value.errno == errno.ENOSPC
    logger.close()  # the next sink is closed even after a failed one
    assert closed == [1]
