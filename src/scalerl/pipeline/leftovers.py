"""Processes that user code started and left running, stopped when the run ends.

A reward function or an environment is the user's code, and it may fork or start a child
(``os.fork``, ``subprocess.Popen``, ``multiprocessing``) that outlives its call: the reliability
probe (review 3, R16 and R17) found such children still running after ``scalerl train`` had
exited, reparented to init where nothing would ever stop them.

So, on Linux, the driver makes itself a *child subreaper* for the run (``prctl``): a process
of the run whose parent dies (a generator's forked child, once that generator has exited)
is reparented to the driver instead of init. When the run ends, every child of the driver
that was not there when the run started, and everything under it, is killed and reaped; the
multiprocessing resource tracker, which the driver itself started and which must outlive the
run to clean up shared memory, is kept. Processes that existed before the run (a test's
helpers, a Ray cluster started earlier) are never touched, nor is anything under them. One
line says how many were stopped.

A Ray actor's children belong to its raylet, not to the driver: they are Ray's to stop.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
"""``prctl`` options (``linux/prctl.h``)."""


def _prctl(option: int, arg) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, arg, 0, 0, 0)


def _subreaper() -> bool | None:
    """Whether this process is a child subreaper; None where ``prctl`` cannot say."""
    flag = ctypes.c_int(0)
    try:
        return bool(flag.value) if _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) == 0 else None
    except (OSError, AttributeError):  # no libc prctl
        return None


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in ``/proc``."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # after "(comm)", which may hold spaces
        out[int(name)] = int(fields[1])
    return out


def children(pid: int) -> set[int]:
    """The live children of ``pid``."""
    return {child for child, parent in _parents().items() if parent == pid}


def _tree(roots: set[int]) -> list[int]:
    """``roots`` and every process under them."""
    parents, found, todo = _parents(), [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _tracker() -> int | None:
    """The multiprocessing resource tracker's pid in this process, if one runs."""
    from multiprocessing import resource_tracker

    return getattr(resource_tracker._resource_tracker, "_pid", None)


def stop_new_children(before: set[int]) -> int:
    """Kill and reap every child of this process not in ``before`` (nor the resource tracker),
    with everything under it; the number stopped."""
    me = os.getpid()
    new = children(me) - before - {_tracker()}
    doomed = _tree(new)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in doomed:  # ours to reap: the new children, and orphans reparented here (subreaper)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return len(doomed)


@contextmanager
def stopped_at_end(log: Callable[[str], None]) -> Iterator[None]:
    """For the block (a run): orphans of the run come to this process, and whatever the run
    left running is stopped at its end (module doc). Elsewhere than Linux, nothing is done."""
    was = _subreaper() if sys.platform.startswith("linux") else None
    if was is None:
        yield
        return
    before = children(os.getpid())
    if not was:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        try:
            count = stop_new_children(before)
        finally:
            if not was:
                _prctl(PR_SET_CHILD_SUBREAPER, 0)
        if count:
            log(f"stopped {count} process{'es' if count > 1 else ''} that user code (a reward function or an "
                "environment) started and left running at the end of the run; such code must end its children itself.")
