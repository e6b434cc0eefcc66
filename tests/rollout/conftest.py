"""Fixtures for the rollout tests: one CPU thread, a tiny tokenizer and model."""

import pytest
import torch

from .tiny import make_model, make_tokenizer


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def tokenizer():
    return make_tokenizer()


@pytest.fixture
def model():
    return make_model()
