"""The JSONL sink: whole lines, truncation on resume, and readable by ``scalerl fit`` as it is."""

from __future__ import annotations

import json
import sys

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


def test_an_old_run_s_renamed_keys_are_read_under_their_current_names_and_kept_so_on_resume(tmp_path):
    from scalerl.runfolder import RENAMED

    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in range(3):  # as written before the rename
        sink.write({"step": step, "compute_gpu_hours": 0.1 * (step + 1), "gen_tokens": 10 * step,
                    "train_tokens": 4 * step, "trained_tokens": 4, "padded_tokens": 6, "train_tokens_per_s": 2.0})
    sink.close()
    first = read_records(path)[1]
    assert first == {"step": 1, "compute_gpu_hours": 0.2, "total_gen_tokens": 10, "total_trained_tokens": 4,
                     "step_trained_tokens": 4, "step_padded_tokens": 6, "trained_tokens_per_s": 2.0}
    truncate_after(path, 1)  # a resume continues the file under the current names
    on_disk = [json.loads(line) for line in path.read_text().splitlines()]
    assert not set(RENAMED) & {k for r in on_disk for k in r}


def test_the_glossary_check_fails_on_a_key_without_its_line():
    from glossary import undocumented

    from scalerl.runfolder import RENAMED

    assert undocumented({"step", "val_pass_at_4_stderr", "reward/format", "downstream_len", "new_key"}) == ["new_key"]
    assert undocumented(RENAMED) == sorted(RENAMED)  # the old names are no current key
    assert undocumented(RENAMED.values()) == []


def test_every_key_of_the_run_folder_table_is_a_documented_current_key():
    """``scalerl.runfolder`` is what the trainer writes and ``fit`` reads: each record key
    (the ``forecast_*`` ones included) has its line in ``docs/run-folder.md``, and an old name of
    ``RENAMED`` is none of them."""
    from glossary import undocumented

    from scalerl import runfolder

    files = {v for k, v in vars(runfolder).items() if k.isupper() and isinstance(v, str) and "." in v}
    keys = [v for k, v in vars(runfolder).items() if k.isupper() and isinstance(v, str) and v not in files
            and v not in runfolder.NOT_RUNS]  # fmt: skip (its folders' names are no record key)
    keys += list(runfolder.GENERATOR_TIMES.values()) + list(runfolder.FORECAST_KEYS)
    assert "learner_busy_s" in keys and "generator_stall_s" in keys and "forecast_state" in keys
    assert undocumented(keys) == []
    assert not set(runfolder.RENAMED) & set(keys)
    assert all(runfolder.old_name(new) == old for old, new in runfolder.RENAMED.items())


def test_every_forecast_goes_to_tensorboard_as_an_image(tmp_path):
    """The live forecast's picture is on TensorBoard's Images tab at the step of each record
    that carries a forecast, and only there; the scalars are unchanged."""
    import io

    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from scalerl.metrics import TensorBoardSink

    sink = TensorBoardSink(tmp_path / "tb", 0)
    for step in range(8):
        rec = {"step": step, "compute_gpu_hours": 0.1 * (step + 1), "val_pass_rate": 0.1 + 0.05 * step}
        if step in (6, 7):
            rec |= {"forecast_step": step, "forecast_final": 0.6, "forecast_final_lo": 0.5, "forecast_final_hi": 0.7,
                    "forecast_budget": 1.5, "forecast_A_lo": 0.55, "forecast_A_hi": 0.8}  # fmt: skip
        sink.write(rec)
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    acc.Reload()
    images = acc.Images("forecast")
    assert [i.step for i in images] == [6, 7]
    png = Image.open(io.BytesIO(images[-1].encoded_image_string))
    assert png.size == (images[-1].width, images[-1].height) == (400, 256)
    (curve,) = read_curves(tmp_path / "tb")
    assert len(curve.reward) == 8


def test_the_wandb_sink_logs_every_forecast_as_an_image(tmp_path, monkeypatch):
    """``wandb`` stood in by a module that records what it is given (W&B needs an account)."""
    import sys
    import types

    from scalerl.metrics import WandbSink

    logged = []
    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: types.SimpleNamespace(log=lambda data, step: logged.append((step, data)), finish=lambda: None)
    fake.Image = lambda image: ("image", image.size)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    sink = WandbSink("p", "n", {}, tmp_path)
    sink.write({"step": 1, "compute_gpu_hours": 0.1, "val_pass_rate": 0.2})
    sink.write({"step": 2, "compute_gpu_hours": 0.2, "val_pass_rate": 0.3, "forecast_step": 2, "forecast_final": 0.6,
                "forecast_final_lo": 0.5, "forecast_final_hi": 0.7, "forecast_budget": 1.0})  # fmt: skip
    assert "forecast" not in logged[0][1] and logged[0][1]["val_pass_rate"] == 0.2
    assert logged[1][0] == 2 and logged[1][1]["forecast"] == ("image", (400, 256))


def test_a_forecast_without_matplotlib_is_logged_without_its_picture(monkeypatch):
    """matplotlib is the ``plots`` extra: a run that lacks it keeps training and logging."""
    from scalerl.forecast_figure import ForecastFigure

    figure = ForecastFigure()
    rec = {"compute_gpu_hours": 0.1, "val_pass_rate": 0.3, "forecast_final": 0.6, "forecast_final_lo": 0.5,
           "forecast_final_hi": 0.7, "forecast_budget": 1.5}  # fmt: skip
    assert figure.observe(rec)[:8] == b"\x89PNG\r\n\x1a\n"
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import matplotlib.figure now raises ImportError
    assert figure.observe(rec) is None
