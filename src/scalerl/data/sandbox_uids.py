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

The pool directory is trusted only if it is a real directory, owned by this (root) trainer,
closed to group and others, in a folder where no other user can rename it away: another
local user who made it first (probe N15) could hold every lock in it, and otherwise silently
sends every program back to the shared ``nobody``. Then :func:`pool_warning` is the one
sentence the run log gets.
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


def _dir_refusal(path: str) -> str | None:
    """Why the pool directory ``path`` (made here, private, if absent) must not be used, or
    None when it is this trainer's own and no other user can write or replace it."""
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.mkdir(path, 0o700)
    try:
        info, parent = os.lstat(path), os.lstat(os.path.dirname(path) or ".")
    except OSError as e:
        return f"cannot be checked ({e.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to this trainer"
    if info.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(info.st_mode):o})"
    if parent.st_uid not in (0, os.geteuid()) or (parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX):
        return "lies in a folder where other users may replace it"
    return None


def _check_pool() -> tuple[bool, str | None]:
    """(usable, warning): the warning is a sentence for the run log when a root trainer, who
    would lease uids, cannot (not root or uids unmapped: no pool is expected, no warning)."""
    if os.geteuid() != 0 or not (_mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")):
        return False, None
    why = _dir_refusal(POOL_DIR)
    if why is None and not all(_unowned(uid) for uid in (BASE, BASE + SIZE - 1)):
        why = f"is for uids {BASE}..{BASE + SIZE - 1}, one of which an account on this host has"
    if why is None:
        return True, None
    return False, (f"code sandbox WARNING: the uid pool folder {POOL_DIR} {why}, so it is not used and "
                   "every program runs as nobody, sharing one process budget with the others "
                   "(remove the folder, or set TMPDIR to a root-owned one, and restart)")


@functools.cache
def pool_usable() -> bool:
    """True when this process can lease uids: root, the pool mapped for users and groups, no
    account in it, and a pool directory that is root's own and private (:func:`_dir_refusal`)."""
    return _check_pool()[0]


def pool_warning() -> str | None:
    """One sentence for the run log when a root trainer's uid pool is refused, else None."""
    return None if pool_usable() else _check_pool()[1]


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
