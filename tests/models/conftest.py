import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # The machine's 2 cores are shared by the whole team.
    torch.set_num_threads(1)
