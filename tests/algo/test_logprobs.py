"""The FP32 LM head (digest §2.4) under autocast: both operands as the generator's bf16 copy
holds them, multiplied in float32."""

from __future__ import annotations

import torch

from scalerl.algo.logprobs import lm_head_logits


def test_the_fp32_head_under_bf16_autocast_multiplies_bf16_operands_in_float32():
    # 1 + 2^-10 is not a bf16 value (8 significant bits): it rounds to 1 in the generator's copy
    hidden = torch.tensor([[1.0 + 2.0**-10, 3.0]])  # (1, H=2)
    weight = torch.tensor([[1.0 + 2.0**-10, 1.0], [2.0, -1.0]])  # (V=2, H)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        amp = lm_head_logits(hidden, weight)
    assert amp.dtype == torch.float32
    assert amp.tolist() == [[1.0 * 1.0 + 3.0 * 1.0, 1.0 * 2.0 - 3.0]]  # both rounded, then exact
    plain = lm_head_logits(hidden, weight)  # float32 masters outside autocast: no rounding
    assert plain[0, 0].item() == (1.0 + 2.0**-10) ** 2 + 3.0
