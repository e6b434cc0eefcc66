"""Graceful stops: SIGTERM and SIGINT end a run at a step boundary, with a checkpoint.

A supervisor's SIGTERM (or Ctrl-C, which SIGINTs the whole process group) should cost no
trained step. :func:`on_signals` installs handlers for the duration of ``train``:

- while the run is being set up (model, SFT warm-up, generators), nothing is trained yet, so
  a signal abandons the set-up at once by raising :class:`Stopped` from the handler;
- once the loop is :meth:`Stopping.arm`-ed, the first signal only sets a flag: the loop
  finishes the step under way (or abandons the wait for its groups, which changes no learner
  state), writes the checkpoint of the last completed step and raises :class:`Stopped`, which
  ``scalerl train`` prints as one sentence with exit code 128 + the signal (143, 130);
- a second signal exits at once (``os._exit``): whoever sends it has stopped waiting. The
  last periodic checkpoint (at most ``train.checkpoint_every`` steps old) is what remains.

The handlers write with ``os.write``, never ``print``: a handler runs between two bytecodes
of the main thread, which may be inside ``print`` itself (a reentrant buffered write raises).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scalerl.runfolder import CHECKPOINT

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """A run ended by a signal; ``str()`` is the sentence to print, ``code`` the exit status.

    A ``BaseException`` (as ``KeyboardInterrupt`` is), so set-up code that turns any
    ``Exception`` into a one-sentence config error does not mistake a stop for bad input.
    """

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def exit_code(signum: int) -> int:
    """The shell's status for a process ended by ``signum`` (143 for SIGTERM, 130 for SIGINT)."""
    return 128 + int(signum)


class Stopping:
    """The stop request of one run: which signal came, and whether the loop has started."""

    def __init__(self, run_dir: Path, resumable: bool) -> None:
        self.run_dir, self.resumable = Path(run_dir), resumable
        self.signum: int | None = None
        self.armed = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def arm(self) -> None:
        """From now on a first signal stops at the end of the step instead of at once."""
        self.armed = True

    def handle(self, signum: int, frame=None) -> None:
        if self.signum is not None:  # the second one: exit now, without waiting for anything
            _say(f"second {signal.Signals(signum).name}: exiting at once; the newest checkpoint in "
                 f"{self.run_dir} is what remains.")
            os._exit(exit_code(signum))
        self.signum = signum
        if not self.armed:
            raise Stopped(self.before_training(), exit_code(signum))
        _say(f"{self.name}: stopping after this step with a checkpoint (send it again to exit at once).")

    def before_training(self) -> str:
        resume = (f"its checkpoint is unchanged; resume with `scalerl train --resume {self.run_dir}`"
                  if self.resumable else "nothing was trained")
        return f"stopped by {self.name} before training began; {resume}."

    def stopped(self, step: int) -> Stopped:
        """The exception that ends a run stopped after ``step``, its checkpoint written."""
        return Stopped(f"stopped by {self.name} at step {step}; checkpoint written to "
                       f"{self.run_dir / CHECKPOINT}; resume with `scalerl train --resume {self.run_dir}`.",
                       exit_code(self.signum or signal.SIGTERM))


def _say(text: str) -> None:
    try:
        os.write(2, f"scalerl train: {text}\n".encode())
    except OSError:  # a closed stderr must not turn a stop into a crash
        pass


@contextmanager
def on_signals(run_dir: Path, resumable) -> Iterator[Stopping]:
    """Handle SIGTERM and SIGINT with a :class:`Stopping` while the block runs (``resumable``:
    truthy where the run has a checkpoint to resume from), then restore
    the previous handlers. Off the main thread (a run driven from a thread) Python cannot
    install handlers: the request then never comes and the run behaves as before."""
    stopping = Stopping(run_dir, bool(resumable))
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return
    previous = {s: signal.signal(s, stopping.handle) for s in SIGNALS}
    try:
        yield stopping
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def children_ignore_stop_signals() -> Iterator[None]:
    """Start processes that inherit ignored SIGINT and SIGTERM (restored here afterwards).

    Ctrl-C reaches every process of the terminal's group, and a cluster scheduler (Slurm)
    sends SIGTERM to every process of the job: a spawned generator that is still importing
    torch would die with a ``KeyboardInterrupt`` traceback, and one killed by SIGTERM would
    take the step under way with it before the driver could checkpoint. With both ignored at
    its start (an ignored disposition survives exec, and Python installs no handler over
    it), the driver alone stops them, after its checkpoint (``LocalBackend.close`` ends
    one that does not stop with SIGKILL, never with the SIGTERM it ignores).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
