"""The serve tests leave no background thread of the server behind them; ``served`` makes one."""

from __future__ import annotations

import threading
import time

import pytest


@pytest.fixture(autouse=True)
def _no_forecast_thread_left():
    yield
    deadline = time.monotonic() + 30  # a closed server's worker ends after its forecast under way
    while [t for t in threading.enumerate() if t.name.startswith("serve-")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name.startswith("serve-")]


@pytest.fixture
def served(tmp_path):
    """``served(*roots)``: a ``Served`` over ``roots`` (default: the test's folder), closed after."""
    from scalerl.serve.runs import Served

    made = []

    def serve(*roots):
        made.append(Served(roots or [tmp_path]))
        return made[-1]

    yield serve
    for s in made:
        s.close()
