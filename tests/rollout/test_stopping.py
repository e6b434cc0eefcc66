"""Token-id suffix matching for stop strings and </think>."""

import torch

from scalerl.rollout.stopping import SuffixMatcher, encode_strings


def test_multi_and_single_token_patterns_per_row():
    m = SuffixMatcher([[5, 6], [7]], num_rows=2, device="cpu")
    steps = [([5, 6], [False, False]), ([6, 5], [True, False]), ([1, 6], [False, True]), ([7, 7], [True, True])]
    for tokens, expected in steps:
        assert m.push(torch.tensor(tokens)).tolist() == expected


def test_select_keeps_each_rows_history():
    m = SuffixMatcher([[5, 6]], num_rows=3, device="cpu")
    m.push(torch.tensor([5, 1, 5]))
    m.select(torch.tensor([2]))  # keep the third row only
    assert m.push(torch.tensor([6])).tolist() == [True]


def test_no_patterns_never_hit(tokenizer):
    m = SuffixMatcher(encode_strings(tokenizer, ["", ""]), num_rows=2, device="cpu")
    assert m.patterns == [] and m.push(torch.tensor([1, 2])).tolist() == [False, False]
    assert encode_strings(tokenizer, ["w3 w4", "</think>"]) == [tokenizer.encode("w3 w4"), [3]]
