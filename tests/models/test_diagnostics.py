"""Generator-trainer mismatch statistics, on numbers worked out by hand."""

import math

import pytest
import torch

from scalerl.models.diagnostics import mismatch


def test_hand_computed_statistics():
    gen = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, -9.0]])
    train = torch.tensor([[-1.0, -1.9, -3.2], [-0.4, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    m = mismatch(gen, train, mask)
    # train - gen on the 4 kept tokens: 0, +0.1, -0.2, +0.1 -> mean |.| = 0.4 / 4 = 0.1
    assert m.num_tokens == 4
    assert m.mean_abs_diff == pytest.approx(0.1, abs=1e-6)
    assert m.is_ratio_min == pytest.approx(math.exp(-0.2), rel=1e-6)
    assert m.is_ratio_max == pytest.approx(math.exp(0.1), rel=1e-6)
    # Pearson of (-1, -2, -3, -0.5) and (-1, -1.9, -3.2, -0.4):
    # means -1.625, -1.625; centred x = (.625, -.375, -1.375, 1.125), y = (.625, -.275, -1.575, 1.225)
    # sxy = .390625 + .103125 + 2.165625 + 1.378125 = 4.0375
    # sxx = .390625 + .140625 + 1.890625 + 1.265625 = 3.6875
    # syy = .390625 + .075625 + 2.480625 + 1.500625 = 4.4475
    assert m.pearson == pytest.approx(4.0375 / math.sqrt(3.6875 * 4.4475), rel=1e-6)
    assert set(m.to_dict()) == {"mean_abs_diff", "is_ratio_min", "is_ratio_max", "pearson", "num_tokens"}


def test_identical_logprobs_give_ratio_one_and_empty_mask_gives_nan():
    x = torch.randn(2, 5)
    m = mismatch(x, x.clone(), torch.ones(2, 5, dtype=torch.bool))
    assert m.mean_abs_diff == 0 and m.is_ratio_min == 1 and m.is_ratio_max == 1
    assert m.pearson == pytest.approx(1.0)
    empty = mismatch(x, x, torch.zeros(2, 5, dtype=torch.bool))
    assert empty.num_tokens == 0 and math.isnan(empty.mean_abs_diff)


def test_shape_mismatch_is_one_sentence():
    with pytest.raises(ValueError, match="shapes differ"):
        mismatch(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3, dtype=torch.bool))
