"""Per-token losses against hand-derived values (torchtune style).

Inputs are built from chosen IS ratios: ``behaviour_logp = logp − log ρ``, so each token's ρ is
the number written in the test. Gradients are taken w.r.t. ``logp``; since ρ = exp(logp − b),
``dρ/dlogp = ρ``.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from scalerl.algo.aggregate import aggregate
from scalerl.algo.losses import LOSSES, LossOutput, get_loss, register_loss

D = torch.float64


def make_inputs(logp, ratio, adv, mask):
    logp = torch.tensor(logp, dtype=D, requires_grad=True)
    ratio = torch.tensor(ratio, dtype=D)
    behaviour = logp.detach() - ratio.log()
    return logp, behaviour, torch.tensor(adv, dtype=D), torch.tensor(mask)


def grad_of_sum(out: LossOutput, logp):
    (g,) = torch.autograd.grad(out.per_token.sum(), logp)
    return g


# --------------------------------------------------------------------------------------------
# Registry


def test_registry_lists_all_losses_and_rejects_unknown_names():
    assert set(LOSSES) == {"cispo", "dapo", "grpo", "gspo", "reinforce"}
    assert get_loss("cispo") is LOSSES["cispo"]
    with pytest.raises(ValueError, match="unknown loss 'ppo'.*cispo, dapo, grpo, gspo, reinforce"):
        get_loss("ppo")


def test_registering_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):
        register_loss("cispo")(lambda *a, **k: None)


def test_each_loss_rejects_another_losses_hyperparameter():
    logp, b, adv, mask = make_inputs([[-1.0]], [[1.0]], [1.0], [[True]])
    with pytest.raises(TypeError):
        get_loss("cispo")(logp, b, adv, mask, eps_high=0.28)


def test_shape_mismatch_is_one_clear_error():
    logp, b, adv, mask = make_inputs([[-1.0, -1.0]], [[1.0, 1.0]], [1.0], [[True, True]])
    with pytest.raises(ValueError, match=r"advantages must have shape \(N,\)"):
        get_loss("cispo")(logp, b, torch.ones(2, dtype=D), mask)


# --------------------------------------------------------------------------------------------
# CISPO

# ρ = [[0.5, 1, 6], [2, 10, 1(masked)]], Â = [2, -1], ε_max = 5
# w = sg(min(ρ, 5)) = [[0.5, 1, 5], [2, 5, ·]]
# ℓ = −w·Â·logp:
#   row 0: −0.5·2·(−1) = 1;  −1·2·(−2) = 4;  −5·2·(−0.5) = 5
#   row 1: −2·(−1)·(−1.5) = −3;  −5·(−1)·(−0.2) = −1;  masked -> 0
# ∂ℓ/∂logp = −w·Â = [[−1, −2, −10], [2, 5, 0]]  (ρ = 6 and 10 are truncated, not zeroed)
CISPO_ARGS = (
    [[-1.0, -2.0, -0.5], [-1.5, -0.2, -3.0]],
    [[0.5, 1.0, 6.0], [2.0, 10.0, 1.0]],
    [2.0, -1.0],
    [[True, True, True], [True, True, False]],
)


def test_cispo_values_and_gradient():
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    out = get_loss("cispo")(logp, b, adv, mask, eps_max=5.0)
    assert_close(out.per_token, torch.tensor([[1.0, 4.0, 5.0], [-3.0, -1.0, 0.0]], dtype=D))
    assert_close(
        grad_of_sum(out, logp), torch.tensor([[-1.0, -2.0, -10.0], [2.0, 5.0, 0.0]], dtype=D)
    )


def test_cispo_gradient_through_token_mean_is_capped_weight_over_normaliser():
    # token aggregation over 5 tokens: grad = −sg(min(ρ, 5))·Â / 5, for ρ > ε_max too
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    out = get_loss("cispo")(logp, b, adv, mask, eps_max=5.0)
    loss = aggregate(out.per_token, mask, torch.tensor([0, 0]), "token")
    (g,) = torch.autograd.grad(loss, logp)
    assert_close(g, torch.tensor([[-1.0, -2.0, -10.0], [2.0, 5.0, 0.0]], dtype=D) / 5)
    assert (g[mask] != 0).all()  # no token zeroed


def test_cispo_metrics():
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    m = get_loss("cispo")(logp, b, adv, mask, eps_max=5.0).metrics
    # masked ratios 0.5, 1, 6, 2, 10: two of five above ε_max
    assert_close(m["clip_frac"], torch.tensor(0.4, dtype=D))
    assert_close(m["is_ratio_min"], torch.tensor(0.5, dtype=D))
    assert_close(m["is_ratio_max"], torch.tensor(10.0, dtype=D))
    assert_close(m["is_ratio_mean"], torch.tensor(19.5 / 5, dtype=D))
    # k3 = ρ − 1 − log ρ: 0.5 -> 0.1931472, 1 -> 0, 6 -> 3.2082405, 2 -> 0.3068528,
    # 10 -> 6.6974149; mean = 10.4056554 / 5
    assert_close(m["approx_kl"], torch.tensor(10.4056554 / 5, dtype=D))
    assert "entropy" not in m


def test_cispo_lower_truncation():
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    out = get_loss("cispo")(logp, b, adv, mask, eps_max=5.0, eps_min=0.8)
    # ρ = 0.5 is raised to 0.8: ∂ℓ/∂logp = −0.8·2 = −1.6; now 3 of 5 tokens truncated
    assert_close(grad_of_sum(out, logp)[0, 0], torch.tensor(-1.6, dtype=D))
    assert_close(out.metrics["clip_frac"], torch.tensor(0.6, dtype=D))


def test_cispo_default_eps_max_is_five():
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    default = get_loss("cispo")(logp, b, adv, mask)
    assert_close(default.per_token, get_loss("cispo")(logp, b, adv, mask, eps_max=5.0).per_token)


# --------------------------------------------------------------------------------------------
# DAPO and GRPO

# ε_low = 0.2, ε_high = 0.28 -> clip range [0.8, 1.28]
# row 0, Â = 1:  ρ = 1.5 > 1.28   -> min(1.5, 1.28) = 1.28, ℓ = −1.28, grad 0 (clipped)
#                ρ = 0.7 < 0.8    -> min(0.7, 0.8) = 0.7,   ℓ = −0.7,  grad −ρÂ = −0.7
#                ρ = 1.1          -> ℓ = −1.1, grad −1.1
# row 1, Â = −2: ρ = 0.5 < 0.8    -> min(−1.0, −1.6) = −1.6, ℓ = 1.6, grad 0 (clipped)
#                ρ = 1.5 > 1.28   -> min(−3.0, −2.56) = −3.0, ℓ = 3.0, grad −ρÂ = 3.0
#                ρ = 1.0          -> ℓ = 2.0, grad 2.0
DAPO_ARGS = (
    [[-1.0, -2.0, -0.5], [-1.5, -0.2, -3.0]],
    [[1.5, 0.7, 1.1], [0.5, 1.5, 1.0]],
    [1.0, -2.0],
    [[True] * 3, [True] * 3],
)


def test_dapo_values_and_exact_zero_gradient_outside_clip():
    logp, b, adv, mask = make_inputs(*DAPO_ARGS)
    out = get_loss("dapo")(logp, b, adv, mask, eps_low=0.2, eps_high=0.28)
    assert_close(out.per_token, torch.tensor([[-1.28, -0.7, -1.1], [1.6, 3.0, 2.0]], dtype=D))
    g = grad_of_sum(out, logp)
    assert_close(g, torch.tensor([[0.0, -0.7, -1.1], [0.0, 3.0, 2.0]], dtype=D))
    assert g[0, 0].item() == 0.0 and g[1, 0].item() == 0.0  # exactly, not approximately
    assert_close(out.metrics["clip_frac"], torch.tensor(2 / 6, dtype=D))


def test_dapo_defaults_are_the_dapo_papers():
    logp, b, adv, mask = make_inputs(*DAPO_ARGS)
    default = get_loss("dapo")(logp, b, adv, mask)
    explicit = get_loss("dapo")(logp, b, adv, mask, eps_low=0.2, eps_high=0.28)
    assert_close(default.per_token, explicit.per_token)


# ε = 0.2 -> [0.8, 1.2]
# row 0, Â = 1:  ρ = 1.25 -> ℓ = −1.2, grad 0;  ρ = 0.9 -> ℓ = −0.9, grad −0.9
# row 1, Â = −1: ρ = 0.75 -> min(−0.75, −0.8) = −0.8, ℓ = 0.8, grad 0;  ρ = 1.1 -> ℓ = 1.1, grad 1.1
def test_grpo_values_and_exact_zero_gradient_outside_clip():
    logp, b, adv, mask = make_inputs(
        [[-1.0, -2.0], [-0.5, -1.0]],
        [[1.25, 0.9], [0.75, 1.1]],
        [1.0, -1.0],
        [[True, True], [True, True]],
    )
    out = get_loss("grpo")(logp, b, adv, mask)
    assert_close(out.per_token, torch.tensor([[-1.2, -0.9], [0.8, 1.1]], dtype=D))
    g = grad_of_sum(out, logp)
    assert_close(g, torch.tensor([[0.0, -0.9], [0.0, 1.1]], dtype=D))
    assert g[0, 0].item() == 0.0 and g[1, 0].item() == 0.0
    same = get_loss("dapo")(logp, b, adv, mask, eps_low=0.2, eps_high=0.2)
    assert_close(out.per_token, same.per_token)


# --------------------------------------------------------------------------------------------
# GSPO

# row 0: log ρ = [0.003, −0.003, 0.006] -> mean 0.002, s0 = e^0.002 = 1.0020020
#        Â = 1, s0 ∈ [0.997, 1.004]: ℓ = −s0 on each token, grad −s0·Â = −1.0020020
# row 1: log ρ = [0.01, 0.0, masked] -> mean over 2 tokens 0.005, s1 = e^0.005 = 1.0050125
#        Â = 2, s1 > 1.004: ℓ = −1.004·2 = −2.008 on both tokens, grad 0 (whole sequence clipped)
# row 2: log ρ = [−0.004, −0.004, −0.004] -> s2 = e^−0.004 = 0.9960080 < 0.997, Â = −1:
#        min(−0.996008, −0.997) = −0.997 -> ℓ = 0.997, grad 0
GSPO_LOGP = [[-1.0, -2.0, -0.5], [-1.5, -0.2, -3.0], [-0.3, -0.4, -0.5]]
GSPO_LOGRATIO = [[0.003, -0.003, 0.006], [0.01, 0.0, 5.0], [-0.004, -0.004, -0.004]]
GSPO_MASK = [[True] * 3, [True, True, False], [True] * 3]


def gspo_inputs():
    ratio = torch.tensor(GSPO_LOGRATIO, dtype=D).exp().tolist()
    return make_inputs(GSPO_LOGP, ratio, [1.0, 2.0, -1.0], GSPO_MASK)


def test_gspo_values_and_sequence_level_clipping():
    logp, b, adv, mask = gspo_inputs()
    out = get_loss("gspo")(logp, b, adv, mask)  # defaults 3e-3 / 4e-3
    s0 = math.exp(0.002)
    expected = torch.tensor([[-s0] * 3, [-2.008, -2.008, 0.0], [0.997] * 3], dtype=D)
    assert_close(out.per_token, expected)
    g = grad_of_sum(out, logp)
    assert_close(g, torch.tensor([[-s0] * 3, [0.0] * 3, [0.0] * 3], dtype=D))
    assert (g[1:] == 0).all()
    # 2 of 3 sequences clipped = 5 of 8 masked tokens
    assert_close(out.metrics["clip_frac"], torch.tensor(5 / 8, dtype=D))
    assert_close(out.metrics["seq_ratio_max"], torch.tensor(math.exp(0.005), dtype=D))
    assert_close(out.metrics["seq_ratio_min"], torch.tensor(math.exp(-0.004), dtype=D))


def test_gspo_token_form_matches_sequence_objective_under_sample_aggregation():
    # Plain reference: J = mean_i min(s_i Â_i, clip(s_i) Â_i) with s_i built with its own grad;
    # with 'sample' aggregation the token form must give the same loss and gradient.
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=gen, dtype=D)).requires_grad_(True)
    b = logp.detach() + 0.004 * torch.randn(4, 6, generator=gen, dtype=D)
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=D)
    mask = torch.rand(4, 6, generator=gen) < 0.7
    mask[:, 0] = True
    out = get_loss("gspo")(logp, b, adv, mask)
    loss = aggregate(out.per_token, mask, torch.arange(4), "sample")
    (g,) = torch.autograd.grad(loss, logp)

    s = (torch.where(mask, logp - b, 0).sum(1) / mask.sum(1)).exp()
    ref = -torch.minimum(s * adv, s.clamp(1 - 3e-3, 1 + 4e-3) * adv).mean()
    (g_ref,) = torch.autograd.grad(ref, logp)
    assert_close(loss, ref)
    assert_close(g, g_ref)


# --------------------------------------------------------------------------------------------
# REINFORCE


def test_reinforce_on_policy_and_truncated_is():
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    out = get_loss("reinforce")(logp, b, adv, mask)
    # ℓ = −Â·logp: row 0: 2·[1, 2, 0.5] = [2, 4, 1]; row 1: −1·[1.5, 0.2, ·] = [−1.5, −0.2, 0]
    assert_close(out.per_token, torch.tensor([[2.0, 4.0, 1.0], [-1.5, -0.2, 0.0]], dtype=D))
    assert_close(
        grad_of_sum(out, logp), torch.tensor([[-2.0, -2.0, -2.0], [1.0, 1.0, 0.0]], dtype=D)
    )
    assert out.metrics["clip_frac"].item() == 0.0
    capped = get_loss("reinforce")(logp, b, adv, mask, tis_cap=5.0)
    assert_close(capped.per_token, get_loss("cispo")(logp, b, adv, mask, eps_max=5.0).per_token)


# --------------------------------------------------------------------------------------------
# Shared metrics and mask handling


@pytest.mark.parametrize("name", ["cispo", "dapo", "grpo", "gspo", "reinforce"])
def test_entropy_metric_over_masked_tokens_only(name):
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    entropy = torch.full((2, 3), math.log(4), dtype=D)  # uniform over 4 tokens
    entropy[1, 2] = 9.0  # masked: ignored
    out = get_loss(name)(logp, b, adv, mask, entropy=entropy)
    assert_close(out.metrics["entropy"], torch.tensor(math.log(4), dtype=D))


@pytest.mark.parametrize("name", ["cispo", "dapo", "grpo", "gspo", "reinforce"])
def test_padding_with_inf_or_nan_gives_zero_loss_and_finite_grad(name):
    logp, b, adv, mask = make_inputs(*CISPO_ARGS)
    with torch.no_grad():
        b[1, 2] = -torch.inf
    logp2 = logp.detach().clone()
    logp2[1, 2] = float("nan")
    logp2.requires_grad_(True)
    out = get_loss(name)(logp2, b, adv, mask)
    assert out.per_token[1, 2].item() == 0.0
    g = grad_of_sum(out, logp2)
    assert torch.isfinite(g).all() and g[1, 2].item() == 0.0
    assert all(torch.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("name", ["cispo", "dapo", "grpo", "gspo", "reinforce"])
def test_empty_mask_gives_neutral_metrics(name):
    logp, b, adv, _ = make_inputs(*CISPO_ARGS)
    out = get_loss(name)(logp, b, adv, torch.zeros(2, 3, dtype=torch.bool))
    assert (out.per_token == 0).all()
    assert out.metrics["is_ratio_min"].item() == 1.0 and out.metrics["is_ratio_max"].item() == 1.0
    assert out.metrics["clip_frac"].item() == 0.0 and out.metrics["approx_kl"].item() == 0.0
