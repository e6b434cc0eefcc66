"""Sweep the POSIX semaphores a killed run leaked into ``/dev/shm``.

``multiprocessing`` (spawn) backs every lock, queue and value with a named semaphore,
``/dev/shm/sem.mp-*``, unlinked at a clean exit by its resource tracker. A ``kill -9`` of
the trainer leaves them behind (seven per run). At the next start they are removed, but only
those no live process has open: glibc maps a named semaphore into every process that opens
it (under a temporary name, so the match is by device and inode, read from each
``/proc/PID/maps``), and creates it already mapped, so an unmapped one is a leftover.

Only our own files are considered. A process whose maps cannot be read (a container's
init, a setuid program) is skipped: such a process is no spawned peer of a run, which runs
as our user and is readable by us.
"""

from __future__ import annotations

import os
from pathlib import Path

PATTERN = "sem.mp-*"


def _mapped(proc: Path) -> set[tuple[int, int]]:
    """(device, inode) of every file mapped by a readable live process."""
    found: set[tuple[int, int]] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "maps").read_text()
        except OSError:
            continue  # exited meanwhile, or not inspectable (see the module doc)
        for line in text.splitlines():
            parts = line.split(None, 5)
            if len(parts) < 5 or parts[4] == "0":
                continue
            major, _, minor = parts[3].partition(":")
            try:
                found.add((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])))
            except ValueError:
                continue
    return found


def sweep_semaphores(shm: Path = Path("/dev/shm"), proc: Path = Path("/proc")) -> list[str]:
    """Remove our ``sem.mp-*`` files in ``shm`` that no live process maps; their names."""
    try:
        candidates = [p for p in shm.glob(PATTERN) if p.is_file() and p.stat().st_uid == os.getuid()]
    except OSError:
        return []
    if not candidates or not proc.is_dir():
        return []
    mapped = _mapped(proc)
    removed = []
    for path in candidates:
        try:
            st = path.stat()
            if (st.st_dev, st.st_ino) in mapped:
                continue
            path.unlink()
        except OSError:
            continue  # gone already, or not ours to remove
        removed.append(path.name)
    return removed
