"""bench/throughput.py's arithmetic on hand numbers: the 2-core bound, the ratio and MFU
columns, the shape syntax, the table layout. Nothing is run or timed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load_throughput():
    """Import ``bench/throughput.py`` and undo what its imports do to ``sys.path`` and the
    environment (the HF offline switches), so no other test sees them."""
    saved_path, saved_env = list(sys.path), set(os.environ)
    try:
        sys.path.insert(0, str(BENCH))
        import throughput
    finally:
        sys.path[:] = saved_path
        for key in set(os.environ) - saved_env:
            del os.environ[key]
    return throughput


tp = _load_throughput()
Measured, Workload = tp.Measured, tp.Workload


def measured(cps: float, mean_len: float, **role) -> Measured:
    return Measured(cps, cps * mean_len, mean_len, seconds=1.0, steps=4, **role)


@pytest.fixture
def row():
    # P x G = 2 x 8 = 16 completions per step; sync: T_gen 0.3 s + T_learn 0.1 s per step
    sync = measured(40.0, 90.0, learner_busy_s=0.1, learner_wait_s=0.3, learner_mfu=0.30, learner_flop_s=30e9)
    pipe = measured(60.0, 92.0, learner_busy_s=0.25, learner_wait_s=0.01, learner_mfu=0.20, learner_flop_s=20e9)
    trl = measured(30.0, 88.0)
    return tp.Row(Workload("nano", 2, 8, 128), sync, pipe, peak_1core=100e9, trl=trl, trl_threads=2)


def test_two_core_bound_spreads_one_steps_work_over_two_cores():
    # 16 completions / ((0.3 + 0.1) / 2 s) = 16 / 0.2 = 80 completions/s
    assert tp.two_core_bound(16, 0.3, 0.1) == pytest.approx(80.0)
    # balanced roles: the bound is 2x the one-core sync rate 16 / (0.2 + 0.2) = 40
    assert tp.two_core_bound(16, 0.2, 0.2) == pytest.approx(2 * 40.0)


def test_row_columns_from_hand_numbers(row):
    assert (row.t_gen, row.t_learn) == (0.3, 0.1)  # learner_wait_s, learner_busy_s of sync
    assert row.bound == pytest.approx(80.0)
    assert row.bound_tokens == pytest.approx(80.0 * 90.0)  # at sync's mean length
    assert row.pipe_over_bound == pytest.approx(60 / 80)
    assert row.pipe_over_sync == pytest.approx(60 / 40)
    assert row.pipe_over_trl == pytest.approx(60 / 30)
    assert row.mfu_1core(row.sync) == pytest.approx(0.30)  # 30 GFLOP/s over a 100 GFLOP/s core
    assert row.mfu_1core(row.pipeline) == pytest.approx(0.20)


def test_cells_print_the_derived_columns(row):
    got = dict(zip(tp.HEADER, tp.cells(row)))
    assert got == {
        "shape": "nano 2x8@128",
        "len T/s/p": "88/90/92",
        "TRL best c/s / tok/s": "30.0 / 2640 (2 thr)",
        "sync c/s / tok/s": "40.0 / 3600",
        "pipeline-rl c/s / tok/s": "60.0 / 5520",
        "T_gen / T_learn (s)": "0.300 / 0.100",
        "2-core bound c/s / tok/s": "80.0 / 7200",
        "pipe/bound": "75%",
        "pipe/TRL": "2.00x",
        "pipe/sync": "1.50x",
        "MFU sync / pipe": "30% / 20%",
        "MFU 1-core sync / pipe": "30% / 20%",
    }


def test_without_trl_its_columns_are_dashes(row):
    no_trl = tp.Row(row.work, row.sync, row.pipeline, row.peak_1core)
    assert no_trl.pipe_over_trl is None
    got = dict(zip(tp.HEADER, tp.cells(no_trl)))
    assert got["TRL best c/s / tok/s"] == "-" and got["pipe/TRL"] == "-" and got["len T/s/p"] == "-/90/92"


def test_tables_have_one_line_per_row_and_every_column(row):
    md = tp.markdown_table([row, row]).splitlines()
    assert len(md) == 4 and all(line.count("|") == len(tp.HEADER) + 1 for line in md)
    text = tp.text_table([row]).splitlines()
    assert len(text) == 2 and text[1].startswith("nano 2x8@128")


def test_shape_syntax():
    assert tp.parse_shape("2x8@128") == Workload("nano", 2, 8, 128)
    assert tp.parse_shape(" micro:8x8@128 ") == Workload("micro", 8, 8, 128)
    assert [tp.shape_name(tp.parse_shape(s)) for s in tp.DEFAULT_SHAPES.split(",")] == [
        "nano 2x8@128", "nano 8x8@64", "nano 8x16@128", "nano 16x8@256", "micro 8x8@128"]
    for bad in ("2x8", "2*8@128", "0x8@128", "nano:2x8@"):
        with pytest.raises(ValueError, match="shape"):
            tp.parse_shape(bad)
