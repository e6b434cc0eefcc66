"""Record builders shared by the pipeline tests."""

from __future__ import annotations

import numpy as np

from scalerl.types import Completion, Group


def make_group(prompt_id: int, versions: list[int], rewards: list[float], seq: int | None = None,
               length: int = 3) -> Group:
    """A group whose completion g has all tokens at ``versions[g]``."""
    completions = [
        Completion(
            prompt_tokens=np.array([1, 2], dtype=np.int64),
            tokens=np.full(length, 5, dtype=np.int64),
            logprobs=np.full(length, -1.0, dtype=np.float32),
            versions=np.full(length, v, dtype=np.int64),
            loss_mask=np.ones(length, dtype=bool),
            finish_reason="stop",
        )
        for v in versions
    ]
    return Group(prompt_id, completions, np.array(rewards, dtype=np.float32),
                 seq=prompt_id if seq is None else seq)
