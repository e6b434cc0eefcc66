"""``serve.forecasts.Background``: one result per key and version, made off the request, and a
page someone opened made at once rather than behind the runs list's queue.

Every wait here is a bound (60 s) that returns as soon as the work is done; no assertion
depends on how fast a thread runs or which of two threads gets somewhere first."""

from __future__ import annotations

import threading

from scalerl.serve.forecasts import Background

BOUND = 60.0


def _blocked(background: Background) -> threading.Event:
    """Occupy the shared worker until the returned event is set."""
    release = threading.Event()
    background.get("blocker", (0,), lambda: release.wait(BOUND) and "released", wait=0.0)
    return release


def test_a_page_waiting_on_its_forecast_is_made_at_once_not_behind_the_lists_queue():
    background = Background("forecast", workers=1)
    release = _blocked(background)
    try:
        queued = background.get("run", (1,), lambda: "the run's forecast", wait=0.0)
        assert queued.pending  # behind the blocker in the shared queue
        page = background.get("run", (1,), lambda: "the run's forecast", first_wait=BOUND, urgent=True)
        assert page.forecast == "the run's forecast" and not page.stale  # the blocker still holds the queue
        assert background.get("run", (1,), lambda: "made again", wait=0.0).forecast == "the run's forecast"
    finally:
        release.set()
        background.close()


def test_a_request_waiting_on_a_job_moved_to_the_pages_worker_gets_an_answer_not_an_error():
    background = Background("forecast", workers=1)
    release = _blocked(background)
    answers: list = []
    try:
        background.get("run", (1,), lambda: "forecast", wait=0.0)  # queued behind the blocker
        waiting = threading.Thread(target=lambda: answers.append(background.get("run", (1,), lambda: "forecast",
                                                                                first_wait=BOUND)))  # fmt: skip
        waiting.start()
        page = background.get("run", (1,), lambda: "forecast", first_wait=BOUND, urgent=True)
        waiting.join(BOUND)
        assert page.forecast == "forecast"
        # whichever came first: it waited on the moved job (cancelled: "being made") or on the new one
        (other,) = answers
        assert other.pending or other.forecast == "forecast"
    finally:
        release.set()
        background.close()
