"""The sandbox's kernel layer: Linux namespaces set up by util-linux's ``unshare``.

Each sandboxed program runs as PID 1 of its own PID namespace, so every descendant it makes
(a double fork, a ``setsid``, a native extension's threads) dies with it. The command chain is

    setpriv --pdeathsig KILL            a killed trainer takes the whole chain with it
      sh -c PARENT_CHECK                  ... and one killed before that signal was armed
                                          (getppid() is no longer the trainer) stops here
      unshare --pid --fork --kill-child --mount --net --ipc --uts [--user --map-root-user]
        sh -c NS_SETUP                  inside the new mount namespace (never seen outside):
          - a tmpfs root holding read-only binds of /usr, /lib*, /bin, /sbin and the Python
            prefix (no /proc, no /dev, no /etc, no home, no project or data directories);
          - /work, a tmpfs of ``disk_mb`` and ``work_inodes(disk_mb)`` files owned by the
            program's user (nodev, nosuid, noexec: no native code can be loaded from what
            the program writes; the inode cap bounds the kernel memory that empty files
            take, which the size cap does not count);
        chroot ROOT setpriv --reuid U --regid U --clear-groups --inh-caps=-all
                           --bounding-set=-all --no-new-privs --pdeathsig KILL
          prlimit --as --cpu --fsize --nofile --nproc --core   (the rlimit layer)
            python -I -S -B -c BOOT

``U`` is, when the trainer is root, a uid of the program's own (``sandbox.uids``: its process
budget is not shared with other programs; ``nobody`` where no pool uid is free). Without
root, ``--user --map-root-user`` gives an unprivileged user namespace, and the program keeps
the trainer's uid with no capabilities; there ``--keep-groups`` replaces ``--clear-groups``,
because the kernel refuses ``setgroups`` in a user namespace made without privilege (that
refusal used to fail the whole probe: ``setpriv: setgroups failed``), and the user
namespace gives the program a process budget of its own.
The network namespace has only a downed loopback.

:func:`isolation` probes, once per process, whether this chain runs here. Where it does not
(no ``unshare``, user namespaces disabled, a container without ``CAP_SYS_ADMIN``), the
sandbox runs with the Python layers only (audit hook, rlimits, process group, and as root a
private network namespace and ``nobody``), and :func:`isolation` says what is missing.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

NOBODY = 65534
MOUNT_POINT = os.path.join(tempfile.gettempdir(), "scalerl-sandbox-root")
"""An empty directory that each run's private mount namespace covers with its own root."""

NS_SETUP = r"""
set -eu
root=$1 disk=$2 inodes=$3 uid=$4; shift 4
mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev tmpfs "$root"
while [ "$1" != "--" ]; do
  d=$1; shift
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$root$d"; continue; fi
  [ -d "$d" ] || continue
  mkdir -p "$root$d"
  mount --rbind "$d" "$root$d"
  mount -o remount,bind,ro,nosuid,nodev "$root$d"
done
shift
mkdir "$root/work"
mount -t tmpfs -o "size=$disk,nr_inodes=$inodes,mode=0700,uid=$uid,gid=$uid,nosuid,nodev,noexec" tmpfs "$root/work"
mount -o remount,bind,ro "$root"
exec chroot "$root" "$@"
"""


@dataclass(frozen=True)
class Isolation:
    """Which layers this machine gives the sandbox."""

    namespaces: bool
    user_namespace: bool
    """True when the namespaces are created inside an unprivileged user namespace."""
    missing: str = ""
    """Why namespaces are unavailable (empty when they are)."""

    def describe(self) -> str:
        """One line for the run log naming the strongest layer in use."""
        if self.namespaces:
            who = ("the trainer's uid in a user namespace" if self.user_namespace
                   else "a uid of its own (nobody when no pool uid is free)")
            return ("code sandbox: kernel namespaces (pid, mount, net, ipc via util-linux unshare), "
                    f"read-only root, capped tmpfs, running as {who}; audit hook and rlimits inside")
        if os.geteuid() == 0:
            user, reach = ("each as a uid of its own", "read world-readable files, and reach the network "
                           "where no private one could be made")
        else:
            user, reach = ("as the trainer's own user (sharing its process budget)",
                           "read and write all the trainer's files, signal its processes, and reach the network")
        return (f"code sandbox WARNING: no kernel namespaces ({self.missing}); programs run {user} "
                "under the Python audit hook, rlimits and a process group only, so one that gets "
                "past the interpreter (a memory-safety bug in CPython) could leave processes "
                f"behind, {reach}; and disk use is capped per file and by file count, not by a "
                "size-capped filesystem")


def bind_sources() -> list[str]:
    """Directories the program's read-only root shows: the system and this Python's prefix."""
    prefixes = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}
    system = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"]
    return system + sorted(p for p in prefixes if not any(p == s or p.startswith(s + "/") for s in system))


def python_path() -> str:
    """This interpreter's real path, which the namespace root shows under the same name."""
    return os.path.join(os.path.realpath(sys.base_exec_prefix), "bin",
                        os.path.basename(os.path.realpath(sys.executable)))


PARENT_CHECK = '[ "$PPID" = "$1" ] || exit 125; shift; exec "$@"'
"""Run after ``setpriv`` armed the death signal: if the trainer died between the fork and
that moment, the signal can never come, but the shell's parent is no longer the trainer, so
the chain ends here (exit 125) instead of running unwatched. No window is left: a trainer
that dies later sends the signal."""


def work_inodes(disk_mb: int) -> int:
    """Files and folders the program's tmpfs holds: 16 per MiB, at least 64 (an empty file
    costs the kernel about 1 KiB that the size cap does not count)."""
    return max(64, disk_mb * 16)


def ns_argv(*, user_namespace: bool, disk_mb: int, inner: list[str], parent: int | None = None,
            uid: int | None = None) -> list[str]:
    """The command that runs ``inner`` (argv inside the new root) in fresh namespaces, for a
    trainer of pid ``parent`` (this process by default) to start, as ``uid`` (``nobody`` by
    default; always the trainer's own in a user namespace)."""
    uid = 0 if user_namespace else (NOBODY if uid is None else uid)
    parent = os.getpid() if parent is None else parent
    outer = ["setpriv", "--pdeathsig", "KILL", "sh", "-c", PARENT_CHECK, "sh", str(parent),
             "unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc", "--uts"]
    if user_namespace:
        outer += ["--user", "--map-root-user"]
    groups = "--keep-groups" if user_namespace else "--clear-groups"
    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", groups, "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL", "--"]
    return [*outer, "sh", "-c", NS_SETUP, "sh", MOUNT_POINT, f"{disk_mb}m", str(work_inodes(disk_mb)),
            str(uid), *bind_sources(), "--", *drop, *inner]


def _probe(user_namespace: bool) -> str:
    """Empty if the whole chain runs a trivial program here, else what went wrong."""
    argv = ns_argv(user_namespace=user_namespace, disk_mb=1,
                   inner=[python_path(), "-I", "-S", "-c", "import os; print(os.getpid())"])
    try:
        out = subprocess.run(argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL,
                             env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if out.returncode != 0 or out.stdout.strip() != b"1":
        return (out.stderr.decode(errors="replace").strip().splitlines() or [f"exit {out.returncode}"])[-1]
    return ""


@functools.cache
def isolation() -> Isolation:
    """Probe (once per process) for the strongest layer this machine allows."""
    tools = [t for t in ("unshare", "setpriv", "prlimit", "mount", "chroot") if shutil.which(t) is None]
    if tools:
        return Isolation(False, False, f"{', '.join(tools)} not found; install util-linux")
    os.makedirs(MOUNT_POINT, mode=0o755, exist_ok=True)
    if os.geteuid() == 0:
        why = _probe(user_namespace=False)
        if not why:
            return Isolation(True, False)
    why_user = _probe(user_namespace=True)
    if not why_user:
        return Isolation(True, True)
    return Isolation(False, False, f"unshare failed: {why_user}")
