"""Mismatch statistics and the TIS / MIS / sequence-mask corrections, derived by hand."""

import math

import pytest
import torch

from scalerl.algo.losses import get_loss
from scalerl.algo.mismatch import corrected_loss, is_correction, mismatch_metrics, mismatch_sums

# one completion of 3 sampled tokens and a padded slot; log ρ = logp − gen = (ln 2, 0, −ln 4)
LOGP = torch.tensor([[-1.0, -2.0, -0.5, 9.0]])
GEN = LOGP - torch.tensor([[math.log(2.0), 0.0, -math.log(4.0), 0.0]])
MASK = torch.tensor([[True, True, True, False]])


def test_statistics_by_hand():
    m = mismatch_metrics([mismatch_sums(LOGP, GEN, MASK)])
    # k3 = ρ − 1 − log ρ: (2 − 1 − ln 2) + 0 + (1/4 − 1 + ln 4)
    k3 = (1 - math.log(2)) + (-0.75 + math.log(4))
    assert m["mismatch_kl"] == pytest.approx(k3 / 3)
    assert m["mismatch_logp_abs_mean"] == pytest.approx((math.log(2) + math.log(4)) / 3)
    assert m["mismatch_logp_abs_max"] == pytest.approx(math.log(4))
    assert m["mismatch_ratio_out_frac"] == pytest.approx(1 / 3)  # ρ = 2 is inside [0.5, 2], 1/4 is not


def test_k3_keeps_its_sign_near_agreement():
    # float32 log-probs a few ulps apart: ρ − 1 − log ρ computed naively in float32 goes negative
    logp = torch.full((1, 64), -2.0)
    gen = logp + torch.tensor([1e-6, -1e-6] * 32)
    lr = (logp - gen).double()
    m = mismatch_metrics([mismatch_sums(logp, gen, torch.ones_like(logp, dtype=torch.bool))])
    assert m["mismatch_kl"] >= 0
    assert m["mismatch_kl"] == pytest.approx(float((lr ** 2 / 2).mean()), rel=1e-3)


def test_statistics_combine_over_micro_batches_and_are_zero_when_equal():
    halves = [mismatch_sums(LOGP[:, :2], GEN[:, :2], MASK[:, :2]), mismatch_sums(LOGP[:, 2:], GEN[:, 2:], MASK[:, 2:])]
    assert mismatch_metrics(halves) == pytest.approx(mismatch_metrics([mismatch_sums(LOGP, GEN, MASK)]))
    same = mismatch_metrics([mismatch_sums(LOGP, LOGP, MASK)])
    assert same == {"mismatch_tokens": 3, "mismatch_kl": 0.0, "mismatch_logp_abs_mean": 0.0,
                    "mismatch_logp_abs_max": 0.0, "mismatch_ratio_out_frac": 0.0}


def test_no_measured_token_is_nan_not_perfect_agreement():
    m = mismatch_metrics([mismatch_sums(LOGP, GEN, torch.zeros_like(MASK))])
    assert m["mismatch_tokens"] == 0
    assert all(math.isnan(v) for k, v in m.items() if k != "mismatch_tokens")


def test_tis_truncates_the_ratio():
    w, keep = is_correction(LOGP, GEN, MASK, mode="tis", cap=1.5)
    assert w[0, :3].tolist() == pytest.approx([1.5, 1.0, 0.25]) and keep.equal(MASK)


def test_mis_drops_tokens_outside_the_band():
    w, keep = is_correction(LOGP, GEN, MASK, mode="mis", cap=2.0, low=0.5)
    assert keep.tolist() == [[True, True, False, False]]
    assert w[0].tolist() == pytest.approx([2.0, 1.0, 0.0, 0.0])


def test_sequence_mask_on_the_geometric_mean_ratio():
    # s = exp((ln 2 + 0 − ln 4) / 3) = exp(−ln 2 / 3) = 2^(−1/3) ≈ 0.794
    s = 2 ** (-1 / 3)
    w, keep = is_correction(LOGP, GEN, MASK, mode="seq_mask", cap=3.0, low=0.9)
    assert not keep.any() and w.abs().sum() == 0  # 0.794 < 0.9: the whole completion goes
    w, keep = is_correction(LOGP, GEN, MASK, mode="seq_mask", cap=3.0, low=0.5)
    assert keep.equal(MASK) and w[0, :3].tolist() == pytest.approx([s, s, s])


@pytest.mark.parametrize("mode, cap, low, expected_w", [
    ("tis", 1.5, 0.0, [1.5, 1.0, 0.25]),
    ("mis", 2.0, 0.5, [2.0, 1.0, 0.0]),
    ("seq_mask", 3.0, 0.5, [2 ** (-1 / 3)] * 3),
])
@pytest.mark.parametrize("loss", ["cispo", "dapo", "grpo", "gspo", "reinforce"])
def test_corrected_gradient_is_minus_w_times_advantage(mode, cap, low, expected_w, loss):
    # against sg(logp) the loss's own ratio is 1, so ∂ℓ_t/∂logp_t = −w_t·Â for every loss
    logp = LOGP.clone().requires_grad_(True)
    adv = torch.tensor([0.7])
    out = corrected_loss(get_loss(loss), logp, GEN, adv, MASK, mode=mode, cap=cap, low=low)
    out.per_token.sum().backward()
    assert logp.grad[0, :3].tolist() == pytest.approx([-w * 0.7 for w in expected_w])
    assert logp.grad[0, 3] == 0
    assert out.metrics["is_ratio_max"] == pytest.approx(1.0)


@pytest.mark.parametrize("loss, value", [
    # log-prob losses: ℓ_t = −sg(min(ρ, ε))·Â·logp_t with ρ = 1, times w_t
    ("cispo", lambda w, lp: -w * 0.7 * lp), ("reinforce", lambda w, lp: -w * 0.7 * lp),
    # ratio losses: ℓ_t = −min(ρÂ, clip(ρ)Â) = −Â at ρ = 1, times w_t
    ("grpo", lambda w, lp: -w * 0.7), ("dapo", lambda w, lp: -w * 0.7), ("gspo", lambda w, lp: -w * 0.7),
])
def test_corrected_loss_value_is_w_times_the_loss_at_ratio_one(loss, value):
    out = corrected_loss(get_loss(loss), LOGP, GEN, torch.tensor([0.7]), MASK, mode="tis", cap=1.5)
    want = [value(w, lp) for w, lp in zip([1.5, 1.0, 0.25], LOGP[0, :3].tolist())]
    assert out.per_token[0, :3].tolist() == pytest.approx(want)
    assert out.per_token[0, 3] == 0


def test_none_is_the_plain_loss():
    adv = torch.tensor([0.7])
    plain = get_loss("cispo")(LOGP, GEN, adv, MASK)
    same = corrected_loss(get_loss("cispo"), LOGP, GEN, adv, MASK, mode="none", cap=2.0)
    assert same.per_token.equal(plain.per_token)


def test_bad_correction_settings_are_named():
    with pytest.raises(ValueError, match="unknown IS correction 'cap'"):
        is_correction(LOGP, GEN, MASK, mode="cap", cap=2.0)
    with pytest.raises(ValueError, match="0 <= low < cap"):
        is_correction(LOGP, GEN, MASK, mode="tis", cap=0.5, low=0.5)
