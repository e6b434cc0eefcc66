"""Pipeline test fixtures: one torch thread per test process (the machine has two cores); the
shared model fixtures (``warm_model_dir``, ``nano_dir``) are in ``tests/conftest.py``, the
helpers the tests import (``run_overrides``, ``learner_step``, ...) in ``pipeline_helpers.py``
(this folder is on the path for the rooms below it: ``learner/``, ``generators/``, ``plan/``,
``commands/``, as ``src/scalerl/pipeline/`` has them)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
