import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # ~7 engineers share 2 cores: keep torch from spawning a thread per core.
    torch.set_num_threads(1)
