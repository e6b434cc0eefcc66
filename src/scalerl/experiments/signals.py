"""SIGTERM and SIGINT to a sweep: every point stops at a step boundary with its checkpoint, no
training process outlives the sweep, and the sweep ends with one line and the resume command.

While :func:`stopping` holds, the first signal is forwarded (as SIGTERM) to every point's
``scalerl train`` process that is running (each stops after its step under way and writes its
checkpoint: ``pipeline.stop``), and no point is started after it; the sweep then raises
:class:`SweepStopped`, whose sentence names the signal and the command that resumes the study
(exit code 128 + the signal: 143, 130). A second signal kills the points outright and exits at
once. Points trained in this process (``parallel: 1``) stop through their own handler
(``pipeline.stop.Stopped``), which the command catches the same way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SweepStopped", "requested", "started", "stopping"]

_lock = threading.Lock()
_children: set[subprocess.Popen] = set()
_signum: list[int] = []


class SweepStopped(Exception):
    """A sweep ended by a signal; ``code`` is the exit status (128 + the signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum, self.code = signum, 128 + signum


def requested() -> bool:
    """Whether a stop came: no point may start after it."""
    return bool(_signum)


@contextmanager
def started(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Track a point's process while it runs (a stop forwards to it); one that starts after a
    stop came is stopped at once."""
    with _lock:
        _children.add(proc)
        late = bool(_signum)
    if late:
        proc.send_signal(signal.SIGTERM)
    try:
        yield proc
    finally:
        with _lock:
            _children.discard(proc)


def _forward(sig: int) -> None:
    with _lock:
        for proc in list(_children):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass


def _handle(signum: int, frame=None) -> None:
    if _signum:  # the second one: kill the points and go
        _forward(signal.SIGKILL)
        os._exit(128 + signum)
    _signum.append(signum)
    try:
        os.write(2, f"scalerl sweep: {signal.Signals(signum).name}: stopping every point after its step, with a "
                    "checkpoint (send it again to stop at once).\n".encode())  # fmt: skip
    except OSError:
        pass
    _forward(signal.SIGTERM)


@contextmanager
def stopping() -> Iterator[None]:
    """The module docstring's handlers, for the block; raises :class:`SweepStopped` after it
    when a signal came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _signum.clear()
    previous = {s: signal.signal(s, _handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if _signum:
        raise SweepStopped(_signum[0])
