"""The sandbox's parent side where no kernel namespace can be made: the Python-only layers.

Without namespaces a program gets no private root and no size-capped tmpfs, so this module
supplies what stands in for them:

- a work folder per run under the temp dir, named after the trainer that made it (PID
  namespace, pid and process start time), so that the folders a ``kill -9``-ed trainer left
  behind are recognised and swept when a sandbox next starts there, and a live trainer's are
  kept (as are those of trainers in other PID namespaces, whose pids mean nothing here);
- the disk cap, as RLIMIT_FSIZE per file times a cap on the new files and folders a program
  may create (the audit hook counts each open or mkdir that makes a new entry; appending to
  or rewriting a file counts nothing, and deleting one gives no slot back):
  ``max_files * file_size <= disk_mb``;
- the set-up between fork and exec: rlimits, as root a private network namespace (best
  effort) and a uid of the program's own (``sandbox.uids``; ``nobody`` where none is
  free), then the parent-death signal, which a uid change would have cleared;
- an interpreter that the dropped user can execute.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import stat
import sys
import tempfile
from pathlib import Path

from scalerl.data.sandbox.ns import NOBODY
from scalerl.data.sandbox.uids import LEASED

CLONE_NEWNET, PR_SET_PDEATHSIG = 0x40000000, 1
PREFIX = "scalerl-sbx-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-(\d+)-")
# Loaded once in the parent: the pre-exec hook must not import (the import lock may be held
# by another thread at fork time).
_LIBC = ctypes.CDLL(None, use_errno=True)
_swept: set[str] = set()


def _start_time(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (None if there is none): with
    the pid it names one process for good, whereas a pid alone is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])  # field 22 of stat(5); fields[0] is field 3


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_tag() -> str:
    """``<pid namespace>-<pid>-<start time>``: this process, as work folder names carry it."""
    return f"{_pid_namespace()}-{os.getpid()}-{_start_time(os.getpid()) or 0}"


def sweep_stale_workdirs(root: str) -> list[str]:
    """Remove the work folders under ``root`` whose trainer is gone; return their paths.

    Only folders of this user and this PID namespace, named by :func:`make_workdir`, are
    considered; one whose trainer (pid and start time) still runs is kept, whoever it is."""
    removed, here = [], _pid_namespace()
    if here == 0:  # no /proc: no trainer can be told alive or gone, so nothing is swept
        return removed
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            owner = _OWNED.match(entry.name)
            if owner is None or int(owner[1]) != here or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                    continue
                if _start_time(int(owner[2])) != int(owner[3]):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(entry.path)
    return removed


def make_workdir() -> str:
    """A fresh folder for one run, named after this process; on first use of a temp dir in
    this process, the folders that dead trainers left there are swept first."""
    root = tempfile.gettempdir()
    if root not in _swept:
        _swept.add(root)
        sweep_stale_workdirs(root)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{owner_tag()}-")


def disk_caps(disk_mb: int, max_output_bytes: int) -> tuple[int, int]:
    """``(file_size_limit, max_files)`` with ``file_size_limit * max_files <= disk_mb`` MiB.

    The file-size rlimit also caps the program's stdout, so it is ``max_output_bytes`` unless
    the disk cap is smaller."""
    disk = disk_mb << 20
    fsize = min(max_output_bytes, disk)
    return fsize, max(1, disk // fsize)


def _world_executable(path: str) -> bool:
    p = Path(path).resolve()
    return all(part.stat().st_mode & stat.S_IXOTH for part in [p, *p.parents]) and bool(
        p.stat().st_mode & stat.S_IROTH)


def fallback_python() -> str:
    """Without namespaces, an interpreter the dropped user can execute."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]
    if os.geteuid() != 0:
        return candidates[0]
    return next((c for c in candidates if c and os.path.exists(c) and _world_executable(c)), candidates[0])


def preexec(rlimits: dict[int, int], workdir: str, root: bool, uid: int = NOBODY):
    """Set-up run in the child between fork and exec (no imports, no allocation).

    The parent-death signal is armed *after* the uid change, because the kernel clears it on
    one (armed before, a root trainer's ``kill -9`` left its program running as ``nobody``);
    the parent is checked once it is armed, since a trainer that died before that sends
    nothing. As root, ``uid`` is the program's own (``sandbox.uids``), or ``nobody``; a
    leased uid is first cleared of any process a former holder left (one that got out of
    its process group past the Python layer), so it starts with its whole process budget."""
    limits = list(rlimits.items())
    parent, leased = os.getpid(), root and uid in LEASED

    def setup() -> None:
        if root:
            _LIBC.unshare(CLONE_NEWNET)  # best effort; the audit hook still blocks sockets
        for key, value in limits:
            resource.setrlimit(key, (value, value))
        if root:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if leased:  # every process of this uid but this one; never nobody's, which others share
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:  # ESRCH: none was left
                pass
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the trainer died before the signal was armed: it never comes
            os._exit(125)
        os.chdir(workdir)

    return setup
