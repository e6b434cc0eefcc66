"""The overlap monitor, on role times made up by hand (no timing in the test)."""

import pytest

from scalerl.pipeline.overlap import OverlapMonitor


def test_a_healthy_overlap_gives_its_speedup_and_no_warning():
    m = OverlapMonitor(window=4, warmup=0)
    for _ in range(6):  # learner 1 s, generator 0.8 s of CPU, overlapped into 1.05 s of wall
        stats, warning = m.observe(1.05, 1.0, 0.8)
        assert warning is None
    assert stats["overlap_speedup"] == pytest.approx(1.8 / 1.05)
    assert stats["overlap_bound"] == pytest.approx(1.8)


def test_a_collapsed_overlap_is_said_once_per_episode():
    m = OverlapMonitor(window=2, warmup=0)
    warnings = [m.observe(1.9, 1.0, 0.9)[1] for _ in range(5)]  # the roles ran one after the other
    said = [w for w in warnings if w]
    assert len(said) == 1 and "sharing a core: throughput 1.00x sync (overlap could give 1.90x)" in said[0]
    for _ in range(3):  # wobbling just above the collapse line is not a new episode
        assert m.observe(1.9 / (0.75 * 1.9), 1.0, 0.9)[1] is None
    for _ in range(3):  # recovered
        assert m.observe(1.0, 1.0, 0.9)[1] is None
    assert any(m.observe(1.9, 1.0, 0.9)[1] for _ in range(3))  # a new episode is said again


def test_no_warning_where_overlap_cannot_help_or_is_off():
    lopsided = OverlapMonitor(window=2, warmup=0)  # generator 0.1 s: the bound is 1.1, nothing to lose
    assert not any(lopsided.observe(1.1, 1.0, 0.1)[1] for _ in range(5))
    off = OverlapMonitor(window=2, enabled=False, warmup=0)  # in-process or sync runs
    assert not any(off.observe(1.9, 1.0, 0.9)[1] for _ in range(5))


def test_the_start_of_a_run_is_not_measured():
    m = OverlapMonitor(window=2)  # warm-up = window: process start and loading look like a collapse
    assert [m.observe(5.0, 1.0, 0.9) for _ in range(2)] == [({}, None), ({}, None)]
    assert m.observe(1.0, 1.0, 0.9)[0]["overlap_speedup"] == pytest.approx(1.9)
