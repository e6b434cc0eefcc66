"""The serve tests leave no background thread of the server behind them."""

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
