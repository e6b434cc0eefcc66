"""Leaked ``/dev/shm/sem.mp-*`` semaphores are swept; those a live process has open stay."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from scalerl.pipeline.shm import sweep_semaphores


def _fake_proc(root, pid: int, lines: list[str]):
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "maps").write_text("".join(line + "\n" for line in lines))


def _maps_line(path) -> str:
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    # glibc maps a semaphore under its temporary name: only device and inode match
    return f"7f74ddc3e000-7f74ddc3f000 rw-s 00000000 {dev} {st.st_ino}    /dev/shm/sem.3yR8Jw (deleted)"


def test_only_semaphores_no_process_maps_are_removed(tmp_path):
    shm, proc = tmp_path / "shm", tmp_path / "proc"
    shm.mkdir()
    live, leaked, other = shm / "sem.mp-live", shm / "sem.mp-leaked", shm / "sem.other"
    for path in (live, leaked, other):
        path.write_bytes(b"\0" * 32)
    _fake_proc(proc, 41, [_maps_line(live), "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/python"])
    _fake_proc(proc, 42, ["garbage line"])
    (proc / "self").mkdir()
    assert sweep_semaphores(shm, proc) == ["sem.mp-leaked"]
    assert live.exists() and other.exists() and not leaked.exists()


def test_nothing_to_sweep(tmp_path):
    assert sweep_semaphores(tmp_path / "missing", tmp_path) == []


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.path.isdir("/proc/self"),
                    reason="needs Linux /dev/shm and /proc")
def test_a_live_lock_survives_a_real_sweep():
    before = set(os.listdir("/dev/shm"))
    lock = multiprocessing.get_context("spawn").Lock()  # a named semaphore this process maps
    (mine,) = {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")} - before
    leaked = f"/dev/shm/sem.mp-scalerl-test-{os.getpid()}"
    with open(leaked, "wb") as handle:
        handle.write(b"\0" * 32)
    removed = sweep_semaphores()  # another run's sweep may take the leaked one first: fine
    assert mine not in removed
    assert os.path.exists(f"/dev/shm/{mine}") and not os.path.exists(leaked)
    with lock:
        pass
