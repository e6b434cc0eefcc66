"""Weight sync in buckets: the sinks receive exactly the published tensors, bucket by bucket."""

from __future__ import annotations

import torch

from scalerl.models import build_model, build_task_tokenizer
from scalerl.pipeline.weights import (
    InProcessWeights,
    SharedWeights,
    WeightLayout,
    model_buckets,
    weight_buckets,
)

TOKENIZER = build_task_tokenizer()


def test_buckets_hold_every_tensor_once_within_the_size_but_for_a_lone_large_one():
    named = [("a", torch.zeros(10)), ("b", torch.zeros(30)), ("c", torch.zeros(5)), ("d", torch.zeros(3))]
    buckets = list(weight_buckets(named, bucket_bytes=4 * 16))  # 16 floats
    assert [list(b) for b in buckets] == [["a"], ["b"], ["c", "d"]]  # b (30 floats) alone


def test_a_bucketed_write_is_the_model_in_either_sink():
    model = build_model("nano", len(TOKENIZER), seed=0, tokenizer=TOKENIZER)
    shared = SharedWeights(WeightLayout(model), torch.multiprocessing.get_context("spawn"))
    local = InProcessWeights()
    for sink in (shared, local):
        sink.write(3, weight_buckets(model.named_parameters(), bucket_bytes=1 << 16))
    version, state = shared.read(-1)
    assert version == 3 and local.version() == 3
    for name, p in model.named_parameters():
        assert torch.equal(state[name], p.detach()) and torch.equal(local.read(-1)[1][name], p.detach())
    assert WeightLayout(model).size == sum(t.numel() for b in model_buckets(model) for t in b.values())
