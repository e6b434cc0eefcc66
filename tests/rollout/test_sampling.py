"""Inverse-CDF sampling with top-p, on distributions small enough to work out by hand."""

import math

import torch

from scalerl.rollout.sampling import row_uniforms, sample_tokens

PROBS = torch.tensor([[0.1, 0.2, 0.7]])
LOGITS = PROBS.log()


def _draw(u: float, **kw) -> int:
    tokens, _ = sample_tokens(LOGITS, torch.tensor([u]), **kw)
    return int(tokens[0])


def test_inverse_cdf_full_support():
    # CDF = (0.1, 0.3, 1.0): the first entry above u picks the token.
    assert [_draw(u, temperature=1.0, top_p=1.0) for u in (0.05, 0.15, 0.29, 0.31, 0.99)] == [0, 1, 1, 2, 2]


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # Sorted (0.7, 0.2, 0.1); mass before each = (0, 0.7, 0.9); p = 0.75 keeps {2, 1} (mass 0.9).
    # u = 0.5 -> target 0.45 < 0.7 -> token 2; u = 0.9 -> 0.81 in (0.7, 0.9] -> token 1.
    assert _draw(0.5, temperature=1.0, top_p=0.75) == 2
    assert _draw(0.9, temperature=1.0, top_p=0.75) == 1
    assert _draw(0.999, temperature=1.0, top_p=0.75) == 1  # token 0 is outside the nucleus
    assert _draw(0.999, temperature=1.0, top_p=0.5) == 2  # only the mode survives


def test_logprobs_are_the_temperature_scaled_full_softmax():
    _, logp = sample_tokens(LOGITS, torch.tensor([0.5]), temperature=0.5, top_p=0.75)
    # τ = 0.5 squares the probabilities before renormalising: p² / Σ p² with Σ p² = 0.54.
    expected = torch.tensor([0.01, 0.04, 0.49]) / 0.54
    torch.testing.assert_close(logp.exp()[0], expected)
    tokens, logp = sample_tokens(LOGITS, torch.tensor([0.99]), temperature=0.0, top_p=1.0)
    assert int(tokens[0]) == 2 and math.isclose(float(logp[0, 2]), math.log(0.7), rel_tol=1e-5)


def test_zero_probability_tokens_are_never_drawn():
    logits = torch.tensor([[0.0, 0.0, -float("inf")]])
    for u in (0.0, 0.5, 0.999999):
        tokens, _ = sample_tokens(logits, torch.tensor([u]), temperature=1.0, top_p=1.0)
        assert int(tokens[0]) in (0, 1)


def test_row_streams_do_not_depend_on_the_batch():
    a, b = row_uniforms(7, 3, 10), row_uniforms(7, 5, 4)
    torch.testing.assert_close(a[:, :4], b[:3], rtol=0, atol=0)
    assert not torch.equal(a[0], a[1]) and not torch.equal(a, row_uniforms(8, 3, 10))
    assert float(a.min()) >= 0 and float(a.max()) < 1
