"""Reading curves from CSV, JSONL, TensorBoard and W&B exports; one-sentence errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerl.examples import example_files, example_path
from scalerl.fit.errors import CurveError
from scalerl.fit.readers import load_runs, read_curves
from scalerl.fit.readers.tensorboard import written_order

from .._files import (
    synthetic_curve,
    write_csv,
    write_jsonl,
    write_tb_events,
    write_tensorboard,
    write_wandb_csv,
)


@pytest.fixture
def curve():
    return synthetic_curve(n=11)


def test_csv_roundtrip_and_auto_columns(tmp_path, curve):
    (c,) = read_curves(write_csv(tmp_path / "run.csv", *curve))
    assert c.name == "run" and c.x == "gpu_hours" and c.y == "val_pass_rate"
    np.testing.assert_array_equal(c.compute, curve[0])
    np.testing.assert_array_equal(c.reward, curve[1])
    assert c.lines[:2] == (2, 3)  # header is line 1


def test_jsonl_trainer_layout_skips_training_records(tmp_path, curve):
    (c,) = read_curves(write_jsonl(tmp_path / "metrics.jsonl", *curve))
    assert len(c) == 11 and c.x == "compute_gpu_hours"
    np.testing.assert_allclose(c.reward, curve[1])
    assert c.lines[:2] == (1, 3)  # training records sit on the even lines
    (by_flops,) = read_curves(tmp_path / "metrics.jsonl", x="flops")
    np.testing.assert_allclose(by_flops.compute, curve[0] * 3.6e18)


def test_jsonl_torn_last_line_of_a_live_run_is_skipped(tmp_path, curve):
    path = write_jsonl(tmp_path / "metrics.jsonl", *curve)
    with path.open("a") as handle:
        handle.write('{"step": 999, "compute_gpu_hours": 1e5, "val_pa')  # mid-append
    (c,) = read_curves(path)
    assert len(c) == 11
    path.write_text(path.read_text() + "\n")  # a complete but broken line is an error
    with pytest.raises(CurveError, match=r"metrics\.jsonl line 23 is not valid JSON"):
        read_curves(path)


def test_tensorboard_dir_and_file(tmp_path, curve):
    logdir = write_tensorboard(tmp_path / "tb_run", *curve)
    (c,) = read_curves(logdir)
    assert c.name == "tb_run" and c.y == "val/pass_rate" and c.lines[1] == 10
    np.testing.assert_allclose(c.compute, curve[0], rtol=1e-6)  # float32 in the event file
    np.testing.assert_allclose(c.reward, curve[1], rtol=1e-6)
    (event_file,) = logdir.iterdir()
    (same,) = read_curves(event_file)
    np.testing.assert_array_equal(same.reward, c.reward)


def test_a_run_folder_is_read_from_its_metrics_log_and_a_tb_subfolder_alone_is_found(tmp_path, curve):
    """``scalerl fit RUN_DIR`` as ``plan`` reads it: the folder's metrics.jsonl, named after
    the folder, even beside a tb/ of event files; a folder with only tb/ reads tb/."""
    run = tmp_path / "run7"
    run.mkdir()
    write_jsonl(run / "metrics.jsonl", *curve)
    write_tensorboard(run / "tb", curve[0], curve[1] * 0.5)  # would read differently
    (c,) = read_curves(run)
    assert c.name == "run7" and c.y == "val_pass_rate"
    np.testing.assert_allclose(c.reward, curve[1])
    (run / "metrics.jsonl").unlink()
    (only_tb,) = read_curves(run)
    np.testing.assert_allclose(only_tb.reward, curve[1] * 0.5, rtol=1e-6)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CurveError, match=r"empty is a directory without metrics\.jsonl \(a scalerl run folder\)"):
        read_curves(tmp_path / "empty")


def test_tensorboard_tf2_tensor_scalars(tmp_path, curve):
    (c,) = read_curves(write_tensorboard(tmp_path / "tf2", *curve, tensor_form=True))
    np.testing.assert_allclose(c.reward, curve[1], rtol=1e-6)
    np.testing.assert_allclose(c.compute, curve[0], rtol=1e-6)


def test_tensorboard_compute_logged_at_other_steps_is_interpolated(tmp_path):
    # compute every 4 steps (2.5 GPU-h per step), evaluations every 10 steps
    events = [(s, "gpu_hours", 2.5 * s) for s in range(0, 41, 4)]
    events += [(s, "pass_rate", 0.3 + s / 1000) for s in (0, 10, 20, 30, 40)]
    (c,) = read_curves(write_tb_events(tmp_path / "a", events))
    np.testing.assert_allclose(c.compute, [0.0, 25.0, 50.0, 75.0, 100.0])
    late = events + [(50, "pass_rate", 0.36)]  # evaluated after the last compute record
    with pytest.raises(CurveError, match=r"step 50: 'pass_rate' was logged but 'gpu_hours'"):
        read_curves(write_tb_events(tmp_path / "b", late))


def test_tensorboard_steps_times_factor(tmp_path, curve):
    (c,) = read_curves(write_tensorboard(tmp_path / "tb", *curve), step_to_compute=2.0)
    np.testing.assert_array_equal(c.compute, 20.0 * np.arange(11))


def test_wandb_export_one_curve_per_run_min_max_ignored(tmp_path, curve):
    other = synthetic_curve(n=8, seed=1)
    path = write_wandb_csv(tmp_path / "wandb.csv", {"run-a": curve, "run b - x": other})
    a, b = read_curves(path, step_to_compute=160.0)  # 1600 GPU-h per 10 steps
    assert (a.name, b.name) == ("run-a", "run b - x")  # a run name with " - " survives
    np.testing.assert_allclose(a.compute, curve[0])
    assert len(b) == 8  # the empty cells after its last point are skipped
    with pytest.raises(CurveError, match="no compute column"):
        read_curves(path)  # Step only: needs --step-to-compute


def test_wandb_export_with_a_per_run_compute_metric(tmp_path):
    path = tmp_path / "wb.csv"
    path.write_text(
        "Step,a - gpu_hours,a - pass_rate,b - gpu_hours,b - pass_rate,b - loss\n"
        "0,0,0.3,0,0.3,1\n10,5,0.4,6,0.35,1\n20,10,0.5,12,0.4,1\n"
    )
    a, b = read_curves(path)
    assert (a.x, a.y) == ("gpu_hours", "pass_rate")
    np.testing.assert_array_equal(b.compute, [0, 6, 12])
    np.testing.assert_array_equal(b.reward, [0.3, 0.35, 0.4])
    with pytest.raises(CurveError, match=r"W&B export\) has no run with the reward metric 'acc'"):
        read_curves(path, y="acc")


def test_run_column_splits_and_glob_names_are_unique(tmp_path, curve):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        write_jsonl(tmp_path / sub / "metrics.jsonl", *curve)
    runs = load_runs(str(tmp_path / "*" / "metrics.jsonl"))
    assert [r.name for r in runs] == ["a", "b"]  # a generic file name gives its folder's
    for sub in ("a", "b"):
        (tmp_path / sub / "x").mkdir()
        write_jsonl(tmp_path / sub / "x" / "run.jsonl", *curve)
    runs = load_runs(str(tmp_path / "*" / "x" / "run.jsonl"))
    assert [r.name for r in runs] == ["a/x/run", "b/x/run"]  # the folders that tell them apart
    lines = [
        json.dumps({"run": r, "gpu_hours": c, "reward": 0.3 + c / 1e3})
        for r in "xy"
        for c in (1, 2, 3)
    ]
    (tmp_path / "long.jsonl").write_text("\n".join(lines))
    assert [r.name for r in read_curves(tmp_path / "long.jsonl")] == ["x", "y"]


def test_bundled_examples_are_marked_synthetic_and_load():
    files = example_files()
    assert len(files) >= 6 and all(p.name.startswith("synthetic_") for p in files)
    runs = load_runs(files)
    assert all(len(r) > 40 and 0.25 < r.reward[0] < 0.35 for r in runs)
    assert "SYNTHETIC" in example_path("synthetic_scalerl_seed0.csv").read_text().splitlines()[0]


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ("", ".csv", r"x\.csv is empty\."),
        ("step,gpu_hours\n1,2\n", ".csv", r"no reward column .*its columns are: step, gpu_hours"),
        ("gpu_hours,reward\n1,0.3\n2,inf\n", ".csv", r"line 3: 'reward' is 'inf'"),
        ("gpu_hours,reward\n1,0.3\n2,abc\n", ".csv", r"line 3: 'reward' is 'abc', not a number"),
        (
            "gpu_hours,reward\n2,0.3\n2,0.4\n",
            ".csv",
            r"line 3: compute 'gpu_hours' = 2 does not increase",
        ),
        (
            "gpu_hours,reward\n1,0.3\n2,40\n",
            ".csv",
            r"line 3: reward 'reward' = 40 is outside \[0, 1\]",
        ),
        ("gpu_hours,reward\n-1,0.3\n", ".csv", r"line 2: compute 'gpu_hours' is negative"),
        (
            '{"gpu_hours": 1, "reward": 0.3}\n{oops\n',
            ".jsonl",
            r"x\.jsonl line 2 is not valid JSON",
        ),
        ('{"gpu_hours": 1, "reward": NaN}\n', ".jsonl", r"x\.jsonl has no rows with a 'reward' value"),
        ('{"step": 1, "loss": 2}\n', ".jsonl", r"no reward column .*its columns are: step, loss"),
        ("a,b\n", ".txt", r"unknown format"),
    ],
)
def test_bad_input_is_one_sentence_naming_file_and_line(tmp_path, content, suffix, message):
    path = tmp_path / f"x{suffix}"
    path.write_text(content)
    with pytest.raises(CurveError, match=message) as info:
        read_curves(path)
    text = str(info.value)
    assert str(path) in text and text.endswith(".") and "\n" not in text


def test_missing_file_and_empty_glob(tmp_path):
    with pytest.raises(CurveError, match="does not exist"):
        load_runs([tmp_path / "nope.csv"])
    with pytest.raises(CurveError, match="no file matches"):
        load_runs(str(tmp_path / "*.csv"))


def test_event_files_opened_in_one_second_keep_their_counters_order():
    # TensorBoard names a writer's file <seconds>.<host>.<pid>.<counter>; a tenth writer of one
    # process in one second gets counter 10, which sorts before 9 as text
    written = ["events.out.tfevents.0999999999.host.12.11", "events.out.tfevents.1700000000.host.12.9",
               "events.out.tfevents.1700000000.host.12.10", "events.out.tfevents.1700000001.host.12.2"]  # fmt: skip
    assert [p.name for p in sorted(map(Path, reversed(written)), key=written_order)] == written


def test_tensorboard_run_dir_with_several_event_files_is_merged_by_step(tmp_path):
    """A restart writes a second event file whose steps overlap the first: later file wins."""
    run = tmp_path / "restarted"
    first = [(s, "compute_gpu_hours", s / 10) for s in range(0, 60, 10)]
    first += [(s, "val_pass_rate", 0.30 + s / 1000) for s in range(0, 60, 10)]
    write_tb_events(run, first)
    again = [(s, "compute_gpu_hours", s / 10) for s in range(30, 110, 10)]
    again += [(s, "val_pass_rate", 0.40 + s / 1000) for s in range(30, 110, 10)]
    write_tb_events(run, again)
    assert len([p for p in run.iterdir() if "tfevents" in p.name]) == 2
    (c,) = read_curves(run)
    np.testing.assert_allclose(c.compute, np.arange(0, 110, 10) / 10)
    expected = [0.30 + s / 1000 for s in (0, 10, 20)] + [0.40 + s / 1000 for s in range(30, 110, 10)]
    np.testing.assert_allclose(c.reward, expected, rtol=1e-6)


def test_step0_record_without_the_compute_column_starts_at_zero(tmp_path):
    path = tmp_path / "tokens.jsonl"
    rows = [{"step": 0, "pass_rate": 0.3}] + [
        {"step": s, "tokens": 1000 * s, "pass_rate": 0.3 + s / 100} for s in (1, 2, 3)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (c,) = read_curves(path, x="tokens")
    np.testing.assert_allclose(c.compute, [0, 1000, 2000, 3000])
    rows.insert(2, {"step": 2, "pass_rate": 0.31})  # a later row without it is still an error
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CurveError, match="has 'pass_rate' but no 'tokens' value"):
        read_curves(path, x="tokens")


def test_a_tsv_is_split_on_tabs(tmp_path, curve):
    text = write_csv(tmp_path / "run.csv", *curve).read_text().replace(",", "\t")
    (tmp_path / "run.tsv").write_text(text)
    (c,) = read_curves(tmp_path / "run.tsv")
    (expected,) = read_curves(tmp_path / "run.csv")
    assert (c.x, c.y) == ("gpu_hours", "val_pass_rate")
    np.testing.assert_array_equal(c.reward, expected.reward)


@pytest.mark.parametrize(
    ("data", "suffix", "message"),
    [
        (b"\x00\x01\x02garbage", ".csv", r"x\.csv is not a text log: it holds binary data\."),
        ("gpu_hours,reward\n0,0.3\n# é\n".encode("latin-1"), ".csv", r"x\.csv line 3 is not UTF-8 text \(byte 0xe9\)"),
        ('{"reward": 0.3}\n{"n": "é"}\n'.encode("latin-1"), ".jsonl", r"x\.jsonl line 2 is not UTF-8 text"),
        (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"\n", ".jsonl", r"x\.jsonl line 1 is JSON nested too deeply"),
        (b"gpu_hours,reward,n\n0,0.3," + b"x" * 140_000 + b"\n", ".csv", r"x\.csv line 2 is not a table row"),
    ],
)
def test_unreadable_files_are_one_sentence(tmp_path, data, suffix, message):
    path = tmp_path / f"x{suffix}"
    path.write_bytes(data)
    with pytest.raises(CurveError, match=message) as info:
        read_curves(path)
    assert "\n" not in str(info.value)


def test_a_symbolic_link_loop_is_one_sentence(tmp_path):
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    with pytest.raises(CurveError, match=r"a\.csv is a symbolic link that leads nowhere"):
        load_runs([tmp_path / "a.csv", str(tmp_path / "*.csv")])


def test_a_torn_tensorboard_tail_is_read_with_a_warning(tmp_path, curve):
    from scalerl.fit.errors import CurveWarning
    from scalerl.fit.readers.tensorboard import torn_tail

    (event,) = write_tensorboard(tmp_path / "tb", *curve).iterdir()
    data = event.read_bytes()
    records, torn = torn_tail(event)
    assert records == 1 + 2 * len(curve[0]) and torn == 0  # file version + two scalars a step
    event.write_bytes(data[:-5])
    assert torn_tail(event) == (records - 1, 16 + _last_length(data) - 5)
    with pytest.warns(CurveWarning, match=rf"{event.name}: the last \d+ bytes are a record cut short"):
        (c,) = read_curves(event)
    assert len(c) == len(curve[0]) - 1


def _last_length(data: bytes) -> int:
    """Length of the last record's payload (TFRecord framing: u64 len, u32, data, u32)."""
    import struct

    offset = n = 0
    while offset < len(data):
        (n,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 16 + n
    return n


def test_rows_must_split_into_the_header_columns(tmp_path):
    ok = tmp_path / "ok.csv"  # trailing commas, and a header whose unnamed last column rows omit
    ok.write_text("step,gpu_hours,val_pass_rate,\n0,0,0.3,\n1,10,0.4\n2,20,0.45,,\n")
    (c,) = read_curves(ok)
    np.testing.assert_array_equal(c.reward, [0.3, 0.4, 0.45])
    long = tmp_path / "long.csv"  # a fourth cell with data: no column to put it in
    long.write_text("step,gpu_hours,val_pass_rate\n0,0,0.3\n1,10,0.4,7\n")
    with pytest.raises(CurveError, match=r"long\.csv line 3 has 4 cell\(s\), but the header has 3 columns"):
        read_curves(long)
    tabs = tmp_path / "tabs.tsv"  # a comma row in a TSV is named as such
    tabs.write_text("gpu_hours\tval_pass_rate\n0\t0.3\n10,0.4\n")
    with pytest.raises(CurveError, match=r"tabs\.tsv line 3 has 1 cell\(s\).*seems split on ','"):
        read_curves(tabs)


def test_a_column_named_twice_is_an_error_naming_it(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("step,gpu_hours,val_pass_rate,val_pass_rate\n0,0,0.3,0.3\n")
    with pytest.raises(CurveError, match=r"dup\.csv: the header names the column 'val_pass_rate' twice "
                                         r"\(columns 3 and 4\)") as info:
        read_curves(path)
    assert "\n" not in str(info.value)


def test_a_torn_last_csv_row_is_left_out_with_a_warning(tmp_path):
    import warnings as _warnings

    from scalerl.fit.errors import CurveWarning
    from scalerl.fit.readers import read_curves

    path = tmp_path / "live.csv"
    rows = "".join(f"{c},{0.1 + 0.01 * i}\n" for i, c in enumerate(range(100, 1100, 100)))
    path.write_text("gpu_hours,val_pass_rate\n" + rows + "1100")  # the writer is mid-row
    with _warnings.catch_warnings(record=True) as caught:
        _warnings.simplefilter("always")
        curve = read_curves(path)[0]
    assert len(curve.compute) == 10
    assert any(issubclass(w.category, CurveWarning) and "line 12 is cut short" in str(w.message) for w in caught)
    path.write_text("gpu_hours,val_pass_rate\n" + rows + "1100\n")  # a finished short row is an error
    with pytest.raises(Exception, match="line 12 has 1 cell"):
        read_curves(path)


def test_the_suffix_table_names_every_format_the_old_io_read():
    from scalerl.fit.readers import READERS
    from scalerl.fit.readers.csvlog import read_csv
    from scalerl.fit.readers.jsonl import read_jsonl

    assert READERS == {".csv": read_csv, ".tsv": read_csv, ".jsonl": read_jsonl, ".ndjson": read_jsonl,
                       ".json": read_jsonl}  # fmt: skip


def test_every_list_of_formats_is_read_off_the_one_table(tmp_path):
    """``READERS`` is the one list of log formats: the unknown-format sentence, ``scalerl fit``'s
    help, ``--prior-runs``' folder walk and ``scalerl plan``'s step records all follow it."""
    from scalerl.fit.forecast.prior_runs import find_prior_files
    from scalerl.fit.readers import FOLDER_SUFFIXES, FORMATS, READERS, read_jsonl, suffixes

    bad = tmp_path / "x.txt"
    bad.write_text("a,b\n")
    with pytest.raises(CurveError, match="unknown format") as info:
        read_curves(bad)
    assert all(s in str(info.value) for s in READERS) and FORMATS in str(info.value)
    assert set(FOLDER_SUFFIXES) == set(READERS) - {".json"}  # beside a run's logs, .json is no log
    (tmp_path / "empty").mkdir()
    with pytest.raises(CurveError, match="holds no log file") as info:
        find_prior_files(str(tmp_path / "empty"))
    assert all(s in str(info.value) for s in FOLDER_SUFFIXES)
    assert set(suffixes(read_jsonl)) == {".jsonl", ".ndjson", ".json"} and suffixes() == tuple(READERS)


@pytest.mark.parametrize(("content", "suffix"), [
    ("gpu_hours,reward\n1,0.3\n2,nan\n3,0.5\n", ".csv"),
    ("gpu_hours,reward\n1,0.3\n2,\n3,0.5\n", ".csv"),
    ("gpu_hours,reward\n1,0.3\n2,NA\n3,0.5\n", ".csv"),
    ('{"gpu_hours": 1, "reward": 0.3}\n{"gpu_hours": 2, "reward": NaN}\n{"gpu_hours": 3, "reward": 0.5}\n', ".jsonl"),
    ('{"gpu_hours": 1, "reward": 0.3}\n{"gpu_hours": 2, "reward": null}\n{"gpu_hours": 3, "reward": 0.5}\n', ".jsonl"),
])  # fmt: skip
def test_a_missing_number_skips_its_row_in_every_format(tmp_path, content, suffix):
    """One policy (README): blank, NaN, null and NA are "not measured here", never an error."""
    path = tmp_path / f"x{suffix}"
    path.write_text(content)
    (curve,) = read_curves(path)
    assert curve.compute.tolist() == [1.0, 3.0] and curve.reward.tolist() == [0.3, 0.5]
