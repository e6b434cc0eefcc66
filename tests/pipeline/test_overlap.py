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


def test_a_collapsed_overlap_is_said_once_with_its_cause():
    m = OverlapMonitor(window=2, warmup=0, load=lambda: 2.2)
    warnings = [m.observe(1.9, 1.0, 0.9)[1] for _ in range(5)]  # the roles ran one after the other
    said = [w for w in warnings if w]
    assert said == ["generator and learner are sharing a core: throughput 1.00x sync (overlap could give 1.90x): "
                    "the load average is 2.2 while this run keeps 1.0 cores busy, about 1.2 cores of other work "
                    "(said again only if that changes)"]


def test_a_collapse_that_comes_back_with_the_same_cause_is_not_said_again():
    """On a loaded machine the overlap swings across any threshold: 10 warnings in 2.5 minutes."""
    load = {"now": 2.2}
    m = OverlapMonitor(window=2, warmup=0, load=lambda: load["now"])
    said = []
    for _ in range(5):  # collapsed, recovered, collapsed again...
        said += [w for w in (m.observe(1.9, 1.0, 0.9)[1] for _ in range(3)) if w]
        assert not any(m.observe(1.0, 1.0, 0.9)[1] for _ in range(3))
    load["now"] = 2.6  # the other work moved by less than a core: the same cause
    said += [w for w in (m.observe(1.9, 1.0, 0.9)[1] for _ in range(3)) if w]
    assert len(said) == 1
    load["now"] = 3.4  # another job started beside the run: a new cause, said
    new = [w for w in (m.observe(1.9, 1.0, 0.9)[1] for _ in range(3)) if w]
    assert len(new) == 1 and "about 2.4 cores of other work" in new[0]


def test_without_a_load_average_it_is_said_once_and_asks():
    m = OverlapMonitor(window=2, warmup=0, load=lambda: None)
    said = []
    for _ in range(3):
        said += [w for w in (m.observe(1.9, 1.0, 0.9)[1] for _ in range(3)) if w]
        m.observe(1.0, 1.0, 0.9)
    assert len(said) == 1 and said[0].endswith("(overlap could give 1.90x); other load on the machine?")
    quiet = OverlapMonitor(window=2, warmup=0, load=lambda: 0.9)  # the run's 1.0 core is the whole load
    assert "little other work, so the run's own roles share the cores" in next(
        w for w in (quiet.observe(1.9, 1.0, 0.9)[1] for _ in range(3)) if w)


def test_no_warning_where_overlap_cannot_help_or_is_off():
    lopsided = OverlapMonitor(window=2, warmup=0)  # generator 0.1 s: the bound is 1.1, nothing to lose
    assert not any(lopsided.observe(1.1, 1.0, 0.1)[1] for _ in range(5))
    off = OverlapMonitor(window=2, enabled=False, warmup=0)  # in-process or sync runs
    assert not any(off.observe(1.9, 1.0, 0.9)[1] for _ in range(5))


def test_the_start_of_a_run_is_not_measured():
    m = OverlapMonitor(window=2)  # warm-up = window: process start and loading look like a collapse
    assert [m.observe(5.0, 1.0, 0.9) for _ in range(2)] == [({}, None), ({}, None)]
    assert m.observe(1.0, 1.0, 0.9)[0]["overlap_speedup"] == pytest.approx(1.9)
