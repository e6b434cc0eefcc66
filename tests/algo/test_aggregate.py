"""Aggregation modes: hand-derived values, gradient accumulation, padding and mask invariance."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from scalerl.algo.aggregate import AGGREGATION_MODES, aggregate, token_weights
from scalerl.algo.logprobs import token_logprobs
from scalerl.algo.losses import LOSSES, get_loss

D = torch.float64
NAN = float("nan")

# 4 completions, 2 prompts with non-contiguous ids 7 and 3; masked entries hold NaN (garbage)
#   row 0 (prompt 7): [1, 2, 3]  len 3, sum 6, mean 2
#   row 1 (prompt 7): [6]        len 1, sum 6, mean 6
#   row 2 (prompt 3): [2, 4]     len 2, sum 6, mean 3
#   row 3 (prompt 3): [1,1,1,1]  len 4, sum 4, mean 1
PER_TOKEN = torch.tensor(
    [[1, 2, 3, NAN], [6, NAN, NAN, NAN], [2, 4, NAN, NAN], [1, 1, 1, 1]], dtype=D
)
MASK = ~PER_TOKEN.isnan()
GROUPS = torch.tensor([7, 7, 3, 3])


def test_sample_mode_value():
    # mean of completion means: (2 + 6 + 3 + 1) / 4 = 3
    assert_close(aggregate(PER_TOKEN, MASK, GROUPS, "sample"), torch.tensor(3.0, dtype=D))


def test_prompt_mode_value():
    # prompt 7: (6 + 6) / (3 + 1) = 3;  prompt 3: (6 + 4) / (2 + 4) = 5/3;  mean = 7/3
    assert_close(aggregate(PER_TOKEN, MASK, GROUPS, "prompt"), torch.tensor(7 / 3, dtype=D))


def test_token_mode_value():
    # (6 + 6 + 6 + 4) / (3 + 1 + 2 + 4) = 22 / 10
    assert_close(aggregate(PER_TOKEN, MASK, GROUPS, "token"), torch.tensor(2.2, dtype=D))


def test_prompt_weights_by_hand():
    # prompt 7 has 4 tokens, 2 live prompts: 1/(4·2) = 1/8; prompt 3 has 6: 1/(6·2) = 1/12
    w = token_weights(MASK, GROUPS, "prompt", dtype=D)
    expected = torch.tensor(
        [[1 / 8] * 3 + [0], [1 / 8, 0, 0, 0], [1 / 12] * 2 + [0, 0], [1 / 12] * 4], dtype=D
    )
    assert_close(w, expected)


def test_fully_masked_completions_and_prompts_leave_the_denominators():
    # add row 4 (new prompt 9) with no loss tokens: every mode gives the same value as before
    per_token = torch.cat([PER_TOKEN, torch.full((1, 4), 100.0, dtype=D)])
    mask = torch.cat([MASK, torch.zeros(1, 4, dtype=torch.bool)])
    groups = torch.cat([GROUPS, torch.tensor([9])])
    for mode, value in [("sample", 3.0), ("prompt", 7 / 3), ("token", 2.2)]:
        assert_close(aggregate(per_token, mask, groups, mode), torch.tensor(value, dtype=D))


def test_all_masked_batch_gives_zero_not_nan():
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for mode in AGGREGATION_MODES:
        w = token_weights(mask, torch.tensor([0, 1]), mode)
        assert (w == 0).all()


def test_unknown_mode_lists_valid_ones():
    with pytest.raises(ValueError, match="valid modes are: sample, prompt, token"):
        token_weights(MASK, GROUPS, "seq-mean")


# --------------------------------------------------------------------------------------------
# Gradient accumulation: weights from the full batch, micro-batches slice rows.


def _batch(seed: int, n: int = 8, t: int = 7, h: int = 5, v: int = 11):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, t, h, generator=gen, dtype=D)
    tokens = torch.randint(0, v, (n, t), generator=gen)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # right padding, lengths vary
    adv = torch.randn(n, generator=gen, dtype=D)
    groups = torch.arange(n) // 3  # prompts of sizes 3, 3, 2
    return x, tokens, mask, adv, groups


def _grads(model, x, tokens, mask, adv, groups, mode, slices, per_micro_normaliser=False):
    model.zero_grad()
    with torch.no_grad():
        behaviour = token_logprobs(model(x), tokens) + 0.1
    weights = token_weights(mask, groups, mode, dtype=D)
    for rows in slices:
        logp = token_logprobs(model(x[rows]), tokens[rows])
        out = get_loss("cispo")(logp, behaviour[rows], adv[rows], mask[rows])
        if per_micro_normaliser:  # the bug the design avoids: normalise inside each micro-batch
            loss = aggregate(out.per_token, mask[rows], groups[rows], mode)
        else:
            loss = (out.per_token * weights[rows]).sum()
        loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_gradient_accumulation_equals_full_batch(mode):
    x, tokens, mask, adv, groups = _batch(seed=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 11).to(D)
    full = _grads(model, x, tokens, mask, adv, groups, mode, [slice(0, 8)])
    micro = [slice(0, 3), slice(3, 5), slice(5, 8)]  # uneven, and cutting prompt 1 in two
    accumulated = _grads(model, x, tokens, mask, adv, groups, mode, micro)
    for g_full, g_acc in zip(full, accumulated, strict=True):
        assert_close(g_acc, g_full)
    # the check has teeth: normalising per micro-batch gives a different gradient
    naive = _grads(model, x, tokens, mask, adv, groups, mode, micro, per_micro_normaliser=True)
    assert not torch.allclose(naive[0], full[0])


def test_one_shot_aggregate_matches_weighted_sum():
    x, tokens, mask, adv, groups = _batch(seed=2)
    per_token = torch.where(mask, torch.randn(mask.shape, dtype=D), 0.0)
    for mode in AGGREGATION_MODES:
        expected = (per_token * token_weights(mask, groups, mode, dtype=D)).sum()
        assert_close(aggregate(per_token, mask, groups, mode), expected)


# --------------------------------------------------------------------------------------------
# Property tests: appending padded columns, or changing values under mask=False, changes
# neither the aggregated loss nor its gradient, for every loss and every mode.


def _loss_and_grad(name, mode, logp, behaviour, adv, mask, groups):
    logp = logp.clone().requires_grad_(True)
    out = get_loss(name)(logp, behaviour, adv, mask)
    loss = aggregate(out.per_token, mask, groups, mode)
    (g,) = torch.autograd.grad(loss, logp)
    return loss.detach(), g


@settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(sorted(LOSSES)),
    mode=st.sampled_from(AGGREGATION_MODES),
    n=st.integers(1, 5),
    t=st.integers(1, 6),
    pad=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    garbage=st.sampled_from([0.0, -1e4, 50.0, float("-inf")]),
)
def test_padding_and_mask_invariance(name, mode, n, t, pad, seed, garbage):
    gen = torch.Generator().manual_seed(seed)
    logp = -3 * torch.rand(n, t, generator=gen, dtype=D)
    behaviour = logp + 0.3 * torch.randn(n, t, generator=gen, dtype=D)
    adv = torch.randn(n, generator=gen, dtype=D)
    mask = torch.rand(n, t, generator=gen) < 0.7
    groups = torch.randint(0, 3, (n,), generator=gen)
    loss, grad = _loss_and_grad(name, mode, logp, behaviour, adv, mask, groups)

    # change every value under mask=False, then append `pad` masked columns of garbage
    noise = torch.randn(n, t, generator=gen, dtype=D)
    logp2 = torch.where(mask, logp, garbage + noise)
    behaviour2 = torch.where(mask, behaviour, garbage - noise)
    filler = torch.full((n, pad), garbage, dtype=D)
    logp2 = torch.cat([logp2, filler], dim=1)
    behaviour2 = torch.cat([behaviour2, filler], dim=1)
    mask2 = torch.cat([mask, torch.zeros(n, pad, dtype=torch.bool)], dim=1)
    loss2, grad2 = _loss_and_grad(name, mode, logp2, behaviour2, adv, mask2, groups)

    assert_close(loss2, loss)
    assert_close(grad2[:, :t], grad)
    assert (grad2[:, t:] == 0).all()
