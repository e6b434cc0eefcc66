"""Group advantages against hand-derived values; eps=0 where the hand maths is exact."""

import math

import pytest
import torch
from torch.testing import assert_close

from scalerl.algo.advantages import group_advantages

D = torch.float64

# ±1 rewards, G = 4:
#   group 0: [ 1, -1, -1, -1]  mean -0.5  centred [1.5, -0.5, -0.5, -0.5]
#   group 1: [ 1,  1, -1, -1]  mean  0    centred [1, 1, -1, -1]
#   group 2: [ 1,  1,  1,  1]  constant   centred 0
PM1 = torch.tensor([[1, -1, -1, -1], [1, 1, -1, -1], [1, 1, 1, 1]], dtype=D)
CENTRED = torch.tensor([[1.5, -0.5, -0.5, -0.5], [1, 1, -1, -1], [0, 0, 0, 0]], dtype=D)


def test_none_only_centres():
    assert_close(group_advantages(PM1, "none"), CENTRED)


def test_prompt_normalisation():
    # group 0 population std = sqrt((1.5² + 3·0.5²)/4) = sqrt(3/4) = 0.8660254
    #   -> [1.5, -0.5, -0.5, -0.5] / 0.8660254 = [1.7320508, -0.5773503, ...]
    # group 1 std = 1 -> unchanged;  group 2 constant -> exactly 0
    s = math.sqrt(0.75)
    expected = torch.tensor([[1.5 / s] + [-0.5 / s] * 3, [1, 1, -1, -1], [0, 0, 0, 0]], dtype=D)
    assert_close(group_advantages(PM1, "prompt", eps=0.0), expected)


def test_batch_normalisation_over_all_groups():
    # Σ Â² = (2.25 + 3·0.25) + 4 + 0 = 7 over 12 entries; std = sqrt(7/12) = 0.7637626
    assert_close(group_advantages(PM1, "batch", eps=0.0), CENTRED / math.sqrt(7 / 12))


def test_batch_normalisation_over_kept_groups_only():
    # dropping the constant group 2: std = sqrt(7/8) = 0.9354143; group 2 gets 0
    keep = torch.tensor([True, True, False])
    expected = CENTRED / math.sqrt(7 / 8)
    assert_close(group_advantages(PM1, "batch", eps=0.0, keep=keep), expected)
    assert_close(group_advantages(PM1[:2], "batch", eps=0.0), expected[:2])


def test_zero_one_rewards_give_the_same_normalised_advantages():
    # r01 = (r±1 + 1) / 2: centred halves, std halves, so normalised advantages agree
    r01 = (PM1 + 1) / 2
    assert_close(group_advantages(r01, "none"), CENTRED / 2)
    for norm in ("prompt", "batch"):
        assert_close(group_advantages(r01, norm, eps=0.0), group_advantages(PM1, norm, eps=0.0))


def test_eps_is_added_to_the_std():
    # group 1 std = 1: [1, 1, -1, -1] / (1 + 0.5)
    out = group_advantages(PM1[1:2], "prompt", eps=0.5)
    assert_close(out, torch.tensor([[2 / 3, 2 / 3, -2 / 3, -2 / 3]], dtype=D))


def test_invalid_completions_leave_group_statistics():
    # completion 3 invalid: mean of [1, -1, -1] = -1/3 -> centred [4/3, -2/3, -2/3, 0]
    rewards = torch.tensor([[1.0, -1.0, -1.0, 1.0]], dtype=D)
    valid = torch.tensor([[True, True, True, False]])
    assert_close(
        group_advantages(rewards, "none", valid=valid),
        torch.tensor([[4 / 3, -2 / 3, -2 / 3, 0.0]], dtype=D),
    )
    # prompt std over the 3 valid: sqrt((16/9 + 4/9 + 4/9)/3) = sqrt(8/9) = 0.9428090
    s = math.sqrt(8 / 9)
    assert_close(
        group_advantages(rewards, "prompt", eps=0.0, valid=valid),
        torch.tensor([[4 / 3 / s, -2 / 3 / s, -2 / 3 / s, 0.0]], dtype=D),
    )


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
def test_constant_groups_give_exact_zeros_without_nan(norm):
    # 0.1·3 / 3 = 0.10000000000000002 in floats: the guard still returns exact zeros
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0]], dtype=D)
    out = group_advantages(rewards, norm, eps=0.0)
    assert (out == 0).all()
    out = group_advantages(PM1, norm, eps=0.0, keep=torch.zeros(3, dtype=torch.bool))
    assert (out == 0).all()


def test_integer_rewards_are_accepted():
    out = group_advantages(torch.tensor([[1, 0], [0, 0]]), "none")
    assert out.is_floating_point()
    assert_close(out, torch.tensor([[0.5, -0.5], [0.0, 0.0]]))


def test_bad_arguments_are_one_sentence_errors():
    with pytest.raises(ValueError, match="valid ones are: batch, prompt, none"):
        group_advantages(PM1, "group")
    with pytest.raises(ValueError, match=r"shape \(P, G\)"):
        group_advantages(PM1.flatten())


def _reference(rewards, norm, eps, keep, valid):
    """Plain per-group loop: the readable version the vectorised one must equal."""
    out = torch.zeros_like(rewards)
    for p in range(rewards.shape[0]):
        idx = [g for g in range(rewards.shape[1]) if keep[p] and valid[p, g]]
        r = rewards[p, idx]
        if len(idx) and r.max() > r.min():
            out[p, idx] = r - r.mean()
            if norm == "prompt":
                out[p, idx] /= out[p, idx].std(correction=0) + eps
    if norm == "batch":
        kept = torch.cat([out[p, valid[p]] for p in range(len(keep)) if keep[p]])
        out = out / (kept.std(correction=0) + eps)
    return out


@pytest.mark.parametrize("norm", ["batch", "prompt", "none"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_equals_reference_loop(norm, seed):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (6, 5), generator=gen).to(D) * 2 - 1
    keep = torch.rand(6, generator=gen) < 0.8
    keep[0] = True
    valid = torch.rand(6, 5, generator=gen) < 0.8
    out = group_advantages(rewards, norm, 1e-6, keep=keep, valid=valid)
    assert_close(out, _reference(rewards, norm, 1e-6, keep, valid))
