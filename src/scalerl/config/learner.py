"""The ``learner`` section: how many processes the learner spans and how its weights travel
(``scalerl.pipeline.learner.rank``, ``scalerl.pipeline.learner.group``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scalerl.config.base import Frozen as _Frozen


class LearnerConfig(_Frozen):
    """Data parallelism of the learner role."""

    world_size: int = Field(1, ge=1)
    """Learner ranks. 1: the model lives in the driver process. More: that many processes
    (``local``/``inprocess`` backends) or Ray actors (``ray``), each training every
    ``world_size``-th group of a batch; on a GPU machine each holds one GPU."""
    strategy: Literal["fsdp2", "ddp"] = "fsdp2"
    """With ``world_size > 1``: ``fsdp2`` shards parameters and AdamW state across ranks
    (``fully_shard`` per decoder block, then the root); ``ddp`` replicates them."""
    sync_bucket_mb: int = Field(128, ge=1)
    """Weights go to the generators in buckets of about this many MiB: every rank gathers a
    bucket's full tensors, then rank 0 sends it (on the collective transport, while the next
    bucket is gathered: ``bench/weight_sync.py``)."""
    sync_timeout_s: float = Field(600.0, gt=0)
    """A weight sync that takes longer stops the run with one sentence naming the rank and
    bucket that stalled; the newest checkpoint stays loadable."""
