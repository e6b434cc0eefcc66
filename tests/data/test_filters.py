"""Zero-variance and truncation filters, effective batch, and the Eq. 9 length penalty."""

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from scalerl.algo.advantages import group_advantages
from scalerl.data.filters import (
    EffectiveBatch,
    effective_batch,
    length_penalty,
    truncation_masks,
    zero_variance_mask,
)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_zero_variance_pm1_and_01_rewards():
    # all wrong, mixed, all right -> drop, keep, drop; same for {0,1}
    pm1 = torch.tensor([[-1, -1, -1], [1, -1, -1], [1, 1, 1]])
    assert zero_variance_mask(pm1).tolist() == [False, True, False]
    assert zero_variance_mask((pm1 + 1) // 2).tolist() == [False, True, False]


def test_zero_variance_accepts_numpy_and_float_rewards():
    r = np.array([[0.5, 0.5], [0.25, 0.5]])
    assert zero_variance_mask(r).tolist() == [False, True]


def test_zero_variance_counts_only_valid_completions():
    # row 0: valid rewards [1, 1] (the -1 is invalid) -> constant -> drop
    # row 1: only one valid completion -> no spread -> drop
    # row 2: valid [1, -1] -> keep
    rewards = torch.tensor([[1.0, 1.0, -1.0], [1.0, -1.0, -1.0], [1.0, -1.0, 1.0]])
    valid = torch.tensor([[True, True, False], [True, False, False], [True, True, False]])
    assert zero_variance_mask(rewards, valid).tolist() == [False, False, True]


def test_truncation_modes():
    trunc = torch.tensor([[False, True], [False, False]])
    drop = truncation_masks(trunc, "drop")
    assert drop.in_stats.tolist() == [[True, False], [True, True]]
    assert drop.in_loss.tolist() == [[True, False], [True, True]]
    mask = truncation_masks(trunc, "mask")
    assert mask.in_stats.all()
    assert mask.in_loss.tolist() == [[True, False], [True, True]]
    keep = truncation_masks(trunc, "keep")
    assert keep.in_stats.all() and keep.in_loss.all()
    with pytest.raises(ValueError, match="valid modes are: drop, mask, keep"):
        truncation_masks(trunc, "ignore")


def test_drop_and_mask_rules_through_group_advantages():
    # One group, rewards [1, -1, -1, -1], completion 0 truncated (a correct answer cut late).
    rewards = torch.tensor([[1.0, -1.0, -1.0, -1.0]])
    trunc = torch.tensor([[True, False, False, False]])
    # drop: the group is [-1, -1, -1] -> constant -> filtered out, nothing enters the loss
    drop = truncation_masks(trunc, "drop")
    keep = zero_variance_mask(rewards, drop.in_stats)
    assert keep.tolist() == [False]
    assert effective_batch(keep, drop.in_loss) == EffectiveBatch(0, 0, 1, 4)
    # mask: stats see all four (mean -0.5, centred [1.5, -0.5, -0.5, -0.5]), loss sees 3
    mask = truncation_masks(trunc, "mask")
    keep = zero_variance_mask(rewards, mask.in_stats)
    adv = group_advantages(rewards, "none", keep=keep, valid=mask.in_stats)
    assert_close(adv, torch.tensor([[1.5, -0.5, -0.5, -0.5]]))
    assert effective_batch(keep, mask.in_loss) == EffectiveBatch(1, 3, 1, 4)


def test_effective_batch_counts():
    keep = torch.tensor([True, False, True])
    in_loss = torch.tensor([[True, True], [True, True], [False, True]])
    # prompts 0 and 2 kept; completions 2 + 0 + 1
    assert effective_batch(keep, in_loss) == EffectiveBatch(2, 3, 3, 6)
    with pytest.raises(ValueError, match="in_loss has 2 prompts but keep has 3"):
        effective_batch(keep, in_loss[:2])


def test_length_penalty_eq9_by_hand():
    # L_max = 14336, L_cache = 2048: (14336 − |y|)/2048 − 1, clipped to [−1, 0]
    #   |y| = 10000 -> 2.117 − 1 > 0       -> 0
    #   |y| = 12288 -> 1 − 1 = 0           -> 0
    #   |y| = 13312 -> 0.5 − 1             -> −0.5
    #   |y| = 14336 -> 0 − 1               -> −1
    #   |y| = 15000 -> below −1            -> −1
    lengths = torch.tensor([10000, 12288, 13312, 14336, 15000])
    correct = torch.ones(5, dtype=torch.bool)
    assert_close(length_penalty(lengths, correct), torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))


def test_length_penalty_only_on_correct_traces_and_custom_budget():
    # L_max = 40, L_cache = 8: |y| = 36 -> 4/8 − 1 = −0.5 if correct, 0 if wrong
    out = length_penalty([[36, 36]], [[True, False]], max_len=40, cache_len=8)
    assert_close(out, torch.tensor([[-0.5, 0.0]]))
    with pytest.raises(ValueError, match="cache_len <= max_len"):
        length_penalty([1], [True], max_len=4, cache_len=8)


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"rewards must have shape \(P, G\)"):
        zero_variance_mask(torch.ones(3))
    with pytest.raises(ValueError, match="valid must match"):
        zero_variance_mask(torch.ones(2, 3), torch.ones(2, 2, dtype=torch.bool))
