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
namespace, an account owns one), callers get ``None`` and fall back to ``nobody``, the
behaviour before the pool existed.

The pool directory is trusted only if it is a real directory, owned by this (root) trainer,
closed to group and others, in a folder where no other user can rename it away: another
local user who made it first (probe N15) could hold every lock in it. Then the trainer leases
through a private folder instead (:func:`_private_dir`): one it makes itself with an
unguessable name, 0700, named to the generator processes it spawns in the environment
(``PRIVATE_ENV``), so its own programs still never share a uid; only the coordination with
another trainer on the host is lost (both may lease one uid), which :func:`pool_warning` says
in one sentence. Falling back to the shared ``nobody`` instead, as before, let a local user
who squats the folder break every concurrent honest program (reliability probe 3, N15).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import grp
import itertools
import os
import pwd
import shutil
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


PRIVATE_ENV = "SCALERL_SANDBOX_PRIVATE_POOL"
"""The private pool folder of this trainer, inherited by the generator processes it spawns."""


def _private_dir() -> str | None:
    """This trainer's private pool folder: the one its parent made (``PRIVATE_ENV``) if it is
    still this trainer's own, else a new one (``mkdtemp``: unguessable, 0700), named in the
    environment for the processes spawned after; None if even that is refused."""
    inherited = os.environ.get(PRIVATE_ENV)
    if inherited and os.path.isabs(inherited) and _dir_refusal(inherited) is None:
        return inherited
    try:
        path = tempfile.mkdtemp(prefix="scalerl-sandbox-uids-")
    except OSError:
        return None
    if _dir_refusal(path) is not None:  # in a folder others may rename it out of
        return None
    os.environ[PRIVATE_ENV] = path
    atexit.register(shutil.rmtree, path, True)  # the maker outlives the generators it spawned
    return path


@functools.cache
def _pool() -> tuple[str | None, str | None]:
    """(folder to lease through or None, warning): the warning is a sentence for the run log
    when a root trainer, who leases uids, cannot use the shared folder (not root or uids
    unmapped: no pool is expected, no warning)."""
    if os.geteuid() != 0 or not (_mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")):
        return None, None
    if not all(_unowned(uid) for uid in (BASE, BASE + SIZE - 1)):
        return None, (f"code sandbox WARNING: the uid pool is for uids {BASE}..{BASE + SIZE - 1}, one of which an "
                      "account on this host has, so it is not used and every program runs as nobody, sharing one "
                      "process budget with the others")
    why = _dir_refusal(POOL_DIR)
    if why is None:
        return POOL_DIR, None
    private = _private_dir()
    if private is None:
        return None, (f"code sandbox WARNING: the uid pool folder {POOL_DIR} {why}, and no private one can be made, "
                      "so every program runs as nobody, sharing one process budget with the others (remove the "
                      "folder, or set TMPDIR to a root-owned one, and restart)")
    return private, (f"code sandbox WARNING: the uid pool folder {POOL_DIR} {why}, so this trainer leases its "
                     f"programs' uids through a private folder {private} instead: each program still runs as a "
                     "uid of its own, but another trainer on this host may lease the same ones (remove the folder, "
                     "or set TMPDIR to a root-owned one, and restart, to share the pool again)")


def forget() -> None:
    """Decide the pool again on the next lease (tests change the folder or the uid)."""
    _pool.cache_clear()


def pool_usable() -> bool:
    """True when this process can lease uids: root, the pool mapped for users and groups, no
    account in it, and a pool folder that is root's own and private (:func:`_dir_refusal`):
    the shared one, or this trainer's private one where the shared one is refused."""
    return _pool()[0] is not None



def pool_warning() -> str | None:
    """One sentence for the run log when a root trainer cannot lease through the shared
    folder (it leases through a private one, or not at all), else None."""
    return _pool()[1]


def lease_uid() -> tuple[int, int] | None:
    """``(uid, fd)``: a uid no other running program holds, and the fd whose closing gives it
    back (non-inheritable, so the program never holds it). None when the pool is unusable
    or, with ``SIZE`` programs running on this host, full."""
    folder = _pool()[0]
    if folder is None:
        return None
    start = next(_next)
    for k in range(SIZE):
        uid = BASE + (start + k) % SIZE
        fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if _unowned(uid):
            return uid, fd
        os.close(fd)
    return None
