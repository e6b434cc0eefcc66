"""A user id of its own for each sandboxed program running at once (root trainers only).

RLIMIT_NPROC counts every task of a *user*, not of a process tree. With every program run
as ``nobody``, one program holding its 63 threads left a concurrent honest program, and any
other ``nobody`` process on the host, unable to start a thread; and every program could
signal every other. So a root trainer runs each program as a uid leased from a pool of
high uids no account uses: its process budget is its own, and the kernel refuses its
signals to anything but itself.

A lease is an exclusive ``flock`` on ``<pool dir>/<uid>``, held by the trainer process for
the run's lifetime: it works across the trainer's generator processes and across trainers
on one host, and the kernel releases it when the holder dies, so no lease is ever left
stale. Where the pool cannot be used (not root, the uids are not mapped in this user
namespace, an account owns one, the pool directory is not root's own), callers get
``None`` and fall back to ``nobody``, the behaviour before the pool existed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import grp
import itertools
import os
import pwd
import stat
import tempfile

BASE, SIZE = 0x7A000000, 512
"""The pool: uids 2046820352..+511, above systemd's container range (up to 0x6FFFFFFF) and
below the signed 32-bit edge, where no distribution allocates accounts."""
LEASED = range(BASE, BASE + SIZE)
POOL_DIR = os.path.join(tempfile.gettempdir(), "scalerl-sandbox-uids")
_next = itertools.count(os.getpid() * 7)  # processes start at different slots: fewer collisions


def _mapped(path: str) -> bool:
    """``BASE .. BASE+SIZE`` lies within one range of this user namespace's id map."""
    try:
        with open(path) as f:
            ranges = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= BASE and BASE + SIZE <= inside + count for inside, _, count in ranges)


def _unowned(uid: int) -> bool:
    """No account or group has this id."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        with contextlib.suppress(KeyError):
            lookup(uid)
            return False
    return True


@functools.cache
def pool_usable() -> bool:
    """True when this process can lease uids: root, the pool mapped for users and groups, no
    account in it, and a pool directory that is root's own and private."""
    if os.geteuid() != 0 or not (_mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")):
        return False
    with contextlib.suppress(FileExistsError):
        os.mkdir(POOL_DIR, 0o700)
    info = os.lstat(POOL_DIR)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        return False  # someone else made it: their locks could starve us, so it is not used
    return all(_unowned(uid) for uid in (BASE, BASE + SIZE - 1))


def lease_uid() -> tuple[int, int] | None:
    """``(uid, fd)``: a uid no other running program holds, and the fd whose closing gives it
    back (non-inheritable, so the program never holds it). None when the pool is unusable
    or, with ``SIZE`` programs running on this host, full."""
    if not pool_usable():
        return None
    start = next(_next)
    for k in range(SIZE):
        uid = BASE + (start + k) % SIZE
        fd = os.open(os.path.join(POOL_DIR, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if _unowned(uid):
            return uid, fd
        os.close(fd)
    return None
