"""Pipeline test fixtures: one torch thread per test process (the machine has two cores)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
