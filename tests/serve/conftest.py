"""The serve tests leave no fitting thread or cache behind them."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture(autouse=True)
def _no_fitting_thread_left():
    yield
    from scalerl.serve import runs

    runs.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("serve-fit")]
