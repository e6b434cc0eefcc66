"""Calls into user code (``task.reward_fn``, ``env.name``) bounded in time, every exception contained.

A reward function or an environment is the user's code: it may hang (a ``time.sleep``, a
dead socket, a loop that never ends) or raise anything, ``SystemExit`` and
``KeyboardInterrupt`` included. :meth:`UserCalls.call` runs ``fn(*args)`` on a worker thread
and waits at most ``timeout`` seconds:

- a result in time is returned;
- any exception, ``BaseException`` included, is raised again as :class:`UserCodeFailed`
  (an ``Exception``: the caller counts it as this sample's error) with the original as
  ``error`` and ``__cause__``;
- past the deadline the call is abandoned and :class:`CallTimedOut` (a ``UserCodeFailed``)
  is raised. **Python cannot stop a thread: an abandoned call keeps running** until it
  returns by itself (its result is dropped). Each one still running counts as *stuck*; with
  :data:`MAX_STUCK` of them in this process the next call raises :class:`TooManyStuck`, one
  sentence that stops the run, because the process would otherwise fill with busy threads.

Why threads (docs/design/rollout.md, issue 28): a hung call that ignores signals (C code, a bare
``except:`` that swallows an interrupt) still cannot stall the run, and nothing about the
process's signal handlers (SIGTERM/SIGINT stops, ``pipeline.stop``) changes. The price: user
code runs off the main thread, where ``signal.signal`` is refused, so a function that sets
its own alarm (math-verify's default timeouts) fails there; ``timeout: null`` calls it on the
caller's thread instead, without a time limit (exceptions are still contained).

Workers are reused (an idle one takes the next call), so a call costs a thread hand-off, not
a thread start. Calls from one caller run one at a time, as they would inline.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MAX_STUCK = 16
"""Abandoned calls still running in one process beyond which the run stops (a bound, not a
knob: a run with this many hung calls has code to fix, not a limit to raise)."""

_POLL_S = 0.1  # how often a waiting call looks at ``abandon_when``'s stop
_lock = threading.Lock()
_abandon_when: Callable[[], bool] | None = None
_idle: list[_Worker] = []
_stuck = 0  # abandoned calls still running, in this process


CONTAINED = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)
"""What user code may raise and the caller contains. On a worker thread every ``BaseException``
is; on the caller's thread (no time limit) a stop's own ``BaseException``, raised by the
signal handler wherever the main thread is, must go on."""


class UserCodeFailed(Exception):
    """User code raised (anything, ``BaseException`` included) or ran past its time limit."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error


class CallTimedOut(UserCodeFailed):
    """A call abandoned at its deadline (it may still be running: module doc)."""


class TooManyStuck(RuntimeError):
    """So many abandoned calls are still running that the run must stop (one sentence)."""


def stuck() -> int:
    """Abandoned calls still running in this process."""
    return _stuck


@contextmanager
def abandon_when(stop: Callable[[], bool] | None) -> Iterator[None]:
    """While the block runs, a call waiting for user code is abandoned (as at its time limit)
    once ``stop()`` is true: an evaluation on the learner does not hold a stop up for
    ``timeout`` seconds."""
    global _abandon_when
    previous, _abandon_when = _abandon_when, stop
    try:
        yield
    finally:
        _abandon_when = previous


class _Job:
    __slots__ = ("fn", "args", "done", "value", "error", "abandoned")

    def __init__(self, fn: Callable, args: tuple) -> None:
        self.fn, self.args, self.done = fn, args, threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.abandoned = False


class _Worker:
    """A daemon thread running one job at a time (it never keeps the interpreter alive)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.pid = os.getpid()
        threading.Thread(target=self._loop, name="scalerl-user-code", daemon=True).start()

    def _loop(self) -> None:
        global _stuck
        while True:
            job = self.jobs.get()
            try:
                job.value = job.fn(*job.args)
            except BaseException as err:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: the sample's error
                job.error = err
            if os.getpid() != self.pid:
                # the user's code forked and this is the child, returned into our loop with only
                # this thread: nothing waits for it, and it would wait for jobs forever, keeping
                # the run's pipes open (reliability probe 3, R16). It ends here, quietly.
                os._exit(0)
            with _lock:
                job.done.set()
                if job.abandoned:  # its caller moved on: this thread is no longer stuck, and ends
                    _stuck -= 1
                    return
                _idle.append(self)


class UserCalls:
    """Bounded calls of one kind of user code (``what`` names it in the sentences)."""

    def __init__(self, what: str, timeout: float | None, field: str) -> None:
        """``timeout`` in seconds, from the config's ``field``; None calls on the caller's thread."""
        self.what, self.timeout, self.field = what, timeout, field
        self.inline = timeout is None
        """Called on the caller's thread (no limit, or code that sets signal timers: :meth:`call`)."""

    def call(self, fn: Callable, *args) -> Any:
        """``fn(*args)``'s value; :class:`UserCodeFailed` / :class:`CallTimedOut` otherwise.

        Code that sets its own signal timer (math-verify's ``parse``/``verify`` with their default
        timeouts) cannot run off the main thread. When the caller is the main thread, such code is
        called there from then on, bounded by its own timer instead of ours (said once)."""
        if self.timeout is not None and not self.inline:
            try:
                return self._bounded(fn, args)
            except UserCodeFailed as err:
                if not (_sets_signals(err.error) and threading.current_thread() is threading.main_thread()):
                    raise
                self.inline = True
                print(f"{self.what} sets its own signal timer (as math-verify's timeouts do), which only the "
                      f"main thread may: it runs there from now on, bounded by its own timer, not by "
                      f"{self.field}.", file=sys.stderr, flush=True)
        return self._inline(fn, args)

    def _inline(self, fn: Callable, args: tuple) -> Any:
        """On the caller's thread: no time limit, exceptions still contained."""
        try:
            return fn(*args)
        except CONTAINED as err:  # a stop's own exception (``pipeline.stop.Stopped``) goes on
            raise UserCodeFailed(_describe(err), err) from err

    def _bounded(self, fn: Callable, args: tuple) -> Any:
        """On a worker thread, waited for at most ``timeout`` seconds (module doc)."""
        job = self._start(fn, args)
        deadline = time.monotonic() + self.timeout
        while not job.done.wait(max(0.0, min(_POLL_S, deadline - time.monotonic()))):
            stopping = _abandon_when is not None and _abandon_when()
            if not stopping and time.monotonic() < deadline:
                continue
            with _lock:
                if not job.done.is_set():  # else it finished just now: take its result
                    _abandon(job)
                    why = ("was abandoned for a stop" if stopping else
                           f"ran past its time limit of {self.timeout:g} s ({self.field}) and was abandoned")
                    raise CallTimedOut(f"{self.what} {why}; it may still be running")
        if job.error is not None:
            raise UserCodeFailed(_describe(job.error), job.error) from job.error
        return job.value

    def _start(self, fn: Callable, args: tuple) -> _Job:
        with _lock:
            if _stuck >= MAX_STUCK:
                raise TooManyStuck(
                    f"{_stuck} calls of user code ran past their time limit and are still running in "
                    f"this process (the last one {self.what}, {self.field}={self.timeout:g} s); stopping "
                    "rather than piling up more: fix the code that hangs, or raise the time limit.")
            worker = _idle.pop() if _idle else None
        worker = worker or _Worker()
        job = _Job(fn, args)
        worker.jobs.put(job)
        return job


def _abandon(job: _Job) -> None:
    """Mark ``job`` abandoned (under ``_lock``): its worker counts as stuck until it returns."""
    global _stuck
    job.abandoned = True
    _stuck += 1


def _describe(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return text + _hint(err)


def _sets_signals(err: BaseException | None) -> bool:
    """``err`` refuses signals off the main thread: Python's own ``signal.signal`` ("only works in
    main thread") or math-verify's check before it ("doesn't support threaded environment due to
    usage of signal.alarm()")."""
    text = str(err)
    return isinstance(err, ValueError) and "signal" in text and "thread" in text


def _hint(err: BaseException) -> str:
    if _sets_signals(err):
        return (" (user code runs on a worker thread, where signals cannot be set: pass math-verify "
                "parsing_timeout=None / timeout_seconds=None, or set the time limit to null to call it "
                "on the main thread without one)")
    return ""


SHOWN_ENV = "SCALERL_SHOWN_DIR"
"""A folder of markers, one per failure already shown in this run (:func:`first_in_run`)."""


@contextmanager
def shown_once_per_run() -> Iterator[None]:
    """While a run lasts, :func:`first_in_run` answers for every process of it on this machine.

    User code that fails is shown once, but each process that calls it (a generator, and the
    driver's evaluation) used to show its own first failure: "only this first failure is shown"
    twice per run (reliability probe 3). The driver makes a private folder and names it in the
    environment, which the generators it spawns inherit; a marker made there with ``O_EXCL``
    says which process shows a failure, without a race. A Ray worker inherits no environment
    and shows its own, as before."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="scalerl-shown-")
    previous = os.environ.get(SHOWN_ENV)
    os.environ[SHOWN_ENV] = folder
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SHOWN_ENV, None)
        else:
            os.environ[SHOWN_ENV] = previous
        shutil.rmtree(folder, ignore_errors=True)


def first_in_run(key: str) -> bool:
    """Whether this process is the run's first to ask about ``key`` (a failure to show): always
    True outside :func:`shown_once_per_run`, or where its folder cannot be used."""
    import hashlib

    folder = os.environ.get(SHOWN_ENV)
    if not folder:
        return True
    marker = os.path.join(folder, hashlib.sha1(key.encode()).hexdigest()[:20])
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:  # the folder is gone or unwritable: better twice than never
        return True
    return True


def format_failure(err: BaseException) -> str:
    """The text to show once: the user's own traceback for a :class:`UserCodeFailed` (and a hint
    where one helps), the sentence for a timeout, ``err``'s traceback otherwise."""
    import traceback

    if isinstance(err, CallTimedOut) or (isinstance(err, UserCodeFailed) and err.error is None):
        return f"{err}\n"
    inner = err.error if isinstance(err, UserCodeFailed) else err
    text = "".join(traceback.format_exception(type(inner), inner, inner.__traceback__))
    hint = _hint(inner)
    return _capped_lines(text) + (f"{hint.strip(' ()')}\n" if hint else "")


SHOWN_LINE_CHARS = 2000
"""Characters of one line of a user's traceback shown in the run log: a message quoting a
megabyte value (a completion, an observation) is cut, not logged whole."""


def _capped_lines(text: str) -> str:
    return "\n".join(line if len(line) <= SHOWN_LINE_CHARS else
                     f"{line[:SHOWN_LINE_CHARS]}… ({len(line)} characters)" for line in text.split("\n"))
