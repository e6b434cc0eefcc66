"""Work for a served run done in background threads, once per version of its files: reading its
files (``runs.Served.view``), its one ``Forecast``, its law for a study's table.

A page polls every few seconds and a live run's log changes at every step, so each is made at
most once per version of the files (their sizes and modification times), in a few worker
threads, and a request never waits on one for longer than its deadline: while the newest version
is being made, the result for the one before is answered, marked stale; a key seen for the first
time waits up to its own first deadline (``first_wait``), then is answered "being made". A
failure is kept as its one sentence. A huge or slow run is so marked, never waited on past
those, and never delays another run's page or a static file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as Late
from dataclasses import dataclass

__all__ = ["Background", "Forecasts", "Made"]

MAX_KEPT = 4096


@dataclass(frozen=True)
class Made:
    """What a request gets: the forecast (None while none is made), or why not, and whether
    it is of an older version of the log."""

    forecast: object = None
    error: str | None = None
    stale: bool = False
    pending: bool = False


class Background:
    """Results made in the background, one per key and version (module docstring)."""

    def __init__(self, name: str = "forecast", workers: int = 1) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"serve-{name}")
        # a page someone opened waits on its own result: it is made here, never behind a list's queue
        self._urgent = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"serve-{name}-page")
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[tuple, Made]] = {}
        self._running: dict[str, tuple[tuple, Future]] = {}
        self._closed = False

    def get(self, key: str, stamp: tuple, make: Callable[[], object], wait: float = 0.0,
            first_wait: float | None = None, urgent: bool = False) -> Made:
        """The result for ``key`` at ``stamp`` (``make()`` makes it), waiting at most ``wait``
        seconds where an older one can be answered meanwhile, and ``first_wait`` (default
        ``wait``) where none has been made yet. ``urgent`` (a page waiting on it): made in its
        own worker, taken out of the shared queue if it has not started there."""
        with self._lock:
            latest = self._latest.get(key)
            if latest is not None and latest[0] == stamp:
                return latest[1]
            running = self._running.get(key)
            if running is not None and running[1].done():
                latest = self._keep(key, *running)
                del self._running[key]
                running = None
                if latest[0] == stamp:
                    return latest[1]
            if urgent and running is not None and running[0] == stamp and running[1].cancel():
                del self._running[key]  # it was still queued behind others: made at once in the page's worker
                running = None
            if running is None and not self._closed:
                pool = self._urgent if urgent else self._pool
                running = self._running[key] = (stamp, pool.submit(_guarded, make))
        if running is None:
            return Made(error="the server is stopping")
        limit = wait if latest is not None or first_wait is None else first_wait
        try:
            running[1].result(timeout=limit)
        except (Late, CancelledError):  # not made yet (or moved to a page's worker: the next poll has it)
            return Made(pending=True) if latest is None else Made(latest[1].forecast, latest[1].error, stale=True)
        with self._lock:
            if self._running.get(key) is running:
                del self._running[key]
                kept = self._keep(key, *running)
            else:  # another request kept it, and maybe a newer one since: never go back to an older
                kept = self._latest.get(key) or (running[0], running[1].result())
        return kept[1] if kept[0] == stamp else Made(kept[1].forecast, kept[1].error, stale=True)

    def _keep(self, key: str, stamp: tuple, future: Future) -> tuple[tuple, Made]:
        made = future.result()
        if len(self._latest) >= MAX_KEPT:
            self._latest.pop(next(iter(self._latest)))
        self._latest[key] = (stamp, made)
        return self._latest[key]

    def close(self) -> None:
        """Stop the workers and forget every result (the server's shutdown)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._urgent.shutdown(wait=True, cancel_futures=True)
        self._latest.clear()
        self._running.clear()


Forecasts = Background  # the name the forecasts' holder goes by


def _guarded(make: Callable[[], object]) -> Made:
    """``make()`` as a ``Made``; any failure is its one sentence (a forecast is a diagnostic:
    a bad log must not take the page down)."""
    from scalerl.fit.errors import CurveError

    try:
        return Made(make())
    except (CurveError, ValueError) as err:
        return Made(error=str(err).rstrip("."))
    except Exception as err:  # noqa: BLE001 - one run's forecast never breaks the page
        return Made(error=f"{type(err).__name__}: {err}")
