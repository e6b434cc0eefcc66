"""``rollout.prefix_kv``: kept rows are found by exact token prefix, and ``kept_kv`` lays the
rows of several calls (and rows with nothing kept) out left-padded, exactly as a plain
per-row copy would."""

from __future__ import annotations

import torch

from scalerl.rollout.prefix_kv import PrefixKV, RowKV, kept_kv

H, D, LAYERS = 2, 3, 2


def _buffers(batch: int, capacity: int, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return ([torch.randn(batch, H, capacity, D, generator=g) for _ in range(LAYERS)],
            [torch.randn(batch, H, capacity, D, generator=g) for _ in range(LAYERS)])


def test_lookup_takes_the_longest_proper_prefix():
    store = PrefixKV()
    keys, values = _buffers(2, 8, 0)
    short, long = RowKV(keys, values, 0, torch.ones(2, dtype=torch.bool), 0), RowKV(keys, values, 1, torch.ones(3, dtype=torch.bool), 0)
    store.save([5, 6], short)
    store.save([5, 6, 7], long)
    store.commit()
    assert store.lookup([5, 6, 7, 8]) == (3, long)
    assert store.lookup([5, 6, 9]) == (2, short)
    assert store.lookup([5, 6, 7]) == (2, short)  # a proper prefix: one token is left to prefill
    assert store.lookup([4]) == (0, None)
    store.commit()  # a call that kept nothing forgets the last one's rows
    assert store.lookup([5, 6, 7, 8]) == (0, None)


def test_kept_kv_lays_out_rows_of_two_calls_and_a_miss_as_a_plain_copy():
    a_keys, a_values = _buffers(3, 10, 1)  # a call whose rows ended after 6 columns
    b_keys, b_values = _buffers(2, 10, 2)  # one whose rows ended after 4
    real_a = torch.tensor([False, True, True, False, True, True])  # its padding gaps stay masked
    real_b = torch.tensor([True, True, True, True])
    hits = [(4, RowKV(a_keys, a_values, 2, real_a, 0)), (0, None), (4, RowKV(b_keys, b_values, 1, real_b, 0)),
            (4, RowKV(a_keys, a_values, 0, real_a, 0))]
    kv, mask = kept_kv(hits, extra=5, device="cpu")
    assert kv.length == 6 and kv.keys[0].shape == (4, H, 11, D)
    expected_mask = torch.tensor([[False, True, True, False, True, True], [False] * 6,
                                  [False, False, True, True, True, True], [False, True, True, False, True, True]])
    assert torch.equal(mask, expected_mask)
    for i in range(LAYERS):
        for got, a, b in ((kv.keys[i], a_keys[i], b_keys[i]), (kv.values[i], a_values[i], b_values[i])):
            assert torch.equal(got[0, :, :6], a[2, :, :6]) and torch.equal(got[3, :, :6], a[0, :, :6])
            assert torch.equal(got[2, :, 2:6], b[1, :, :4])
            assert torch.equal(got[1, :, :6], torch.zeros(H, 6, D)) and torch.equal(got[2, :, :2], torch.zeros(H, 2, D))
